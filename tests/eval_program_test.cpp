// Why this file exists: `chunkgrad eval` end to end through the built program: a drafter
// trained and exported by `chunkgrad train` + `chunkgrad export` runs on a tiny random
// Hugging Face target written here; the report has a row per dataset and an overall one,
// tau >= 1, per-slot acceptance in [0, 1] and never rising, outputs equal to target-only
// decoding (f32); a drafter that knows the target's output accepts whole blocks; bad
// options and a drafter for another target are one error line and exit 1.
#include <functional>

#include "decode_test_util.h"
#include "eval_test_util.h"
#include "train_program_fixture.h"

namespace {

namespace fs = std::filesystem;
using train_program_fixture::slurp;
using train_program_fixture::TrainRun;

class EvalProgram : public train_program_fixture::TrainProgram {
 protected:
  // The target of the synthetic run's drafter: hidden 32, vocabulary 128, 6 layers.
  cg::nn::Qwen3Config target_config() const {
    cg::nn::Qwen3Config c = cg::testing_decode::tiny_target_config(128);
    c.hidden_size = 32;  // as the drafter's drafter.hidden_size, below
    c.num_layers = 6;
    return c;
  }
  // A 3-step synthetic drafter run exported to `out` (as export_program_test.cpp's).
  void export_drafter(const std::string& out) const {
    const TrainRun t =
        train("--config '" + std::string(CHUNKGRAD_SOURCE_DIR) +
              "/configs/toy.json' --no-progress "
              "--run-dir '" +
              path("run") +
              "' --set features.source=synthetic "
              "--set drafter.hidden_size=32 --set drafter.vocab_size=128 "
              "--set drafter.num_target_layers=6 --set drafter.num_heads=2 "
              "--set drafter.num_kv_heads=1 --set drafter.head_dim=16 --set drafter.block_size=4 "
              "--set drafter.optim.steps=3 --set data.num_sequences=8 --set data.max_new_tokens=32 "
              "--set memory.enabled=false");
    ASSERT_EQ(t.exit_code, 0) << t.err;
    const TrainRun e = run("export --run-dir '" + path("run") + "' --out '" + out + "'");
    ASSERT_EQ(e.exit_code, 0) << e.err;
  }
  // Two datasets: one named in the lines, one by its file's stem.
  std::string data() const {
    std::string named, plain;
    for (int i = 0; i < 3; ++i) {
      named +=
          cg::testing_eval::token_line({1, 5 + i, 9, 11, 40 + i, 7}, {0, 0, 0, 0, 1, 1}, "chat");
      plain += cg::testing_eval::token_line({2, 3 + i, 60, 61 + i});
    }
    return " --data '" + write("named.jsonl", named) + "' --data '" + write("plain.jsonl", plain) +
           "'";
  }
};

TEST_F(EvalProgram, AnExportedDrafterOnAHuggingFaceTarget) {
  cg::testing_eval::write_hf_target(path("target"), target_config(), 5, 127);
  export_drafter(path("pub"));
  const TrainRun r =
      run("eval --target '" + path("target") + "' --drafter '" + path("pub") + "'" + data() +
          " --max-new-tokens 12 --json '" + path("r.json") + "' --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(r.err.empty()) << r.err;
  for (const char* row : {"\n  chat ", "\n  plain ", "\n  all ", "per-slot acceptance",
                          "all 6 prompts equal target-only decoding token for token"})
    EXPECT_NE(r.out.find(row), std::string::npos) << row << " in:\n" << r.out;
  EXPECT_EQ(r.out.find("NOT LOSSLESS"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(slurp(path("r.json")));
  EXPECT_EQ(j["block_size"], 4);
  EXPECT_EQ(j["eos_ids"], nlohmann::json::array({127}));
  ASSERT_EQ(j["datasets"].size(), 2u);
  EXPECT_EQ(j["datasets"][0]["dataset"], "chat");
  EXPECT_EQ(j["datasets"][1]["dataset"], "plain");
  EXPECT_EQ(j["datasets"][0]["num_prompts"], 3);
  EXPECT_GE(j["tau"].get<double>(), 1.0);
  EXPECT_TRUE(j["identical"].get<bool>());
  EXPECT_EQ(j["mismatched_prompts"], 0);
  const auto slots = j["slot_acceptance"].get<std::vector<double>>();
  ASSERT_EQ(slots.size(), 3u);
  for (size_t k = 0; k < slots.size(); ++k) {
    EXPECT_GE(slots[k], 0.0);
    EXPECT_LE(slots[k], 1.0);
    if (k > 0) EXPECT_LE(slots[k], slots[k - 1]);
  }
  // --limit 1: one prompt per dataset.
  const TrainRun l = run("eval --target '" + path("target") + "' --drafter '" + path("pub") + "'" +
                         data() + " --max-new-tokens 4 --limit 1 --no-progress");
  ASSERT_EQ(l.exit_code, 0) << l.err;
  EXPECT_NE(l.out.find("all 2 prompts equal"), std::string::npos) << l.out;
}

// Target and drafter emit token 0 whatever they see (zero final norms): whole blocks.
TEST_F(EvalProgram, ADrafterThatKnowsTheOutputAcceptsWholeBlocks) {
  const cg::nn::Qwen3Config c = target_config();
  cg::testing_eval::write_hf_target(path("target"), c, 5, 127, true);
  cg::testing_eval::write_public_drafter_for(path("pub"), c, {1, 3}, 4, 126, 6, true);
  const TrainRun r =
      run("eval --target '" + path("target") + "' --drafter '" + path("pub") + "'" + data() +
          " --max-new-tokens 13 --json '" + path("r.json") + "' --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto j = nlohmann::json::parse(slurp(path("r.json")));
  EXPECT_DOUBLE_EQ(j["tau"].get<double>(), 4.0);
  EXPECT_EQ(j["slot_acceptance"], nlohmann::json({1.0, 1.0, 1.0}));
}

TEST_F(EvalProgram, BadOptionsAndAMismatchedDrafterAreOneErrorLine) {
  const cg::nn::Qwen3Config c = target_config();
  cg::testing_eval::write_hf_target(path("target"), c, 5, 127);
  cg::testing_eval::write_public_drafter_for(path("pub"), c, {1, 3}, 4, 126, 6);
  const std::string base = "eval --target '" + path("target") + "' --drafter '" + path("pub") +
                           "'" + data() + " --no-progress";
  expect_error(run("eval --target '" + path("target") + "'" + data()), "--drafter", "eval");
  expect_error(run(base + " --dtype f16"), "--dtype", "eval");
  expect_error(run(base + " --max-new-tokens 0"), "--max-new-tokens", "eval");
  expect_error(run(base + " --limit 0"), "--limit", "eval");
  expect_error(run(base + " --device nodevice"), "--device", "eval");
  expect_error(run(base + " --tie-tolerance 2"), "--tie-tolerance", "eval");
  expect_error(run(base + " --eos-id 128"), "--eos-id 128 is outside", "eval");
  expect_error(run(base + " --data '" + path("nowhere.jsonl") + "'"), "nowhere.jsonl", "eval");
  expect_error(run(base + " --json ''"), "--json", "eval");
  // A drafter made for a wider target, and one reading a layer the target lacks.
  cg::nn::Qwen3Config wide = c;
  wide.hidden_size = 48;
  cg::testing_eval::write_public_drafter_for(path("wide"), wide, {1, 3}, 4, 126, 6);
  expect_error(run("eval --target '" + path("target") + "' --drafter '" + path("wide") + "'" +
                   data() + " --no-progress"),
               "hidden_size 48 in the drafter's config.json, 32 in the target", "eval");
  cg::testing_eval::write_public_drafter_for(path("deep"), c, {1, 6}, 4, 126, 6);
  expect_error(run("eval --target '" + path("target") + "' --drafter '" + path("deep") + "'" +
                   data() + " --no-progress"),
               "target_layer_ids holds 6, beyond the target's 6 decoder layers", "eval");
  // An outside tester: a block_size of 100000 made every proposal hang; a layer listed twice
  // and a top-level block_size that disagrees with dflash_config's were taken.
  auto edited = [&](const std::string& name, const std::function<void(nlohmann::json&)>& edit) {
    cg::testing_eval::write_public_drafter_for(path(name), c, {1, 3}, 4, 126, 6);
    nlohmann::json j = nlohmann::json::parse(slurp(path(name) + "/config.json"));
    edit(j);
    std::ofstream(path(name) + "/config.json") << j.dump(2);
    return run("eval --target '" + path("target") + "' --drafter '" + path(name) + "'" + data() +
               " --no-progress");
  };
  expect_error(edited("huge",
                      [](nlohmann::json& j) {
                        j["block_size"] = 100000;
                        j["dflash_config"]["block_size"] = 100000;
                      }),
               "block_size is 100000", "eval");
  expect_error(edited("twice",
                      [](nlohmann::json& j) {
                        j["dflash_config"]["target_layer_ids"] = {1, 1};
                      }),
               "target_layer_ids lists layer 1 twice", "eval");
  expect_error(edited("disagree", [](nlohmann::json& j) { j["block_size"] = 8; }),
               "block_size is 8 at the top level but 4 in dflash_config", "eval");
  EXPECT_FALSE(fs::exists(path("r.json")));
}

}  // namespace
