// Why this file exists: `chunkgrad export` and `drafter.init_from` end to end through the
// built program: a 3-step synthetic run is exported, a second run starts from the folder
// (its first loss is lower than a random start's), and bad options and a mismatched
// folder are one error line and exit 1, as is a damaged checkpoint or folder. Runs at CI
// sizes, about a second in all.
#include "train_program_fixture.h"

namespace {

namespace fs = std::filesystem;
using train_program_fixture::slurp;
using train_program_fixture::TrainRun;

class ExportProgram : public train_program_fixture::TrainProgram {
 protected:
  // A synthetic drafter run of 3 steps (no target model), plus `extra` options.
  TrainRun synthetic_run(const std::string& run_dir, const std::string& extra = "") const {
    return train("--config '" + std::string(CHUNKGRAD_SOURCE_DIR) +
                 "/configs/toy.json' --no-progress --run-dir '" + path(run_dir) +
                 "' --set features.source=synthetic --set drafter.hidden_size=32 "
                 "--set drafter.vocab_size=128 --set drafter.num_target_layers=6 "
                 "--set drafter.num_heads=2 --set drafter.num_kv_heads=1 --set drafter.head_dim=16 "
                 "--set drafter.optim.steps=3 --set data.num_sequences=8 "
                 "--set data.max_new_tokens=32 --set memory.enabled=false " +
                 extra);
  }
  double first_loss(const std::string& run_dir) const {
    std::ifstream in(path(run_dir) + "/metrics.jsonl");
    std::string line;
    std::getline(in, line);
    return nlohmann::json::parse(line)["loss"].get<double>();
  }
};

TEST_F(ExportProgram, ExportThenTrainFromTheFolder) {
  ASSERT_EQ(synthetic_run("a").exit_code, 0);
  const TrainRun e = run("export --run-dir '" + path("a") + "' --out '" + path("pub") + "'");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NE(e.out.find("step 3"), std::string::npos) << e.out;
  const auto c = nlohmann::json::parse(slurp(path("pub/config.json")));
  EXPECT_EQ(c["architectures"][0], "DFlashDraftModel");
  EXPECT_EQ(c["num_target_layers"], 6);
  EXPECT_TRUE(fs::exists(path("pub/model.safetensors")));
  // A second run from the exported weights starts where the first one ended, not at random.
  ASSERT_EQ(synthetic_run("b", "--set drafter.init_from='" + path("pub") + "'").exit_code, 0);
  EXPECT_LT(first_loss("b"), first_loss("a"));
  // Another drafter shape: refused before training, each field named.
  expect_error(synthetic_run(
                   "c", "--set drafter.num_layers=2 --set drafter.init_from='" + path("pub") + "'"),
               "num_hidden_layers: 1 in config.json, 2 here (drafter.num_layers)");
  // The same folder again: export never overwrites.
  expect_error(run("export --run-dir '" + path("a") + "' --out '" + path("pub") + "'"),
               "already holds config.json", "export");
}

// An outside tester: drafter.init_from took folders eval refuses (two block_sizes that
// disagree, model_type "llama"). Now it reads the folder as eval does.
TEST_F(ExportProgram, InitFromRefusesWhatEvalRefuses) {
  ASSERT_EQ(synthetic_run("a").exit_code, 0);
  ASSERT_EQ(run("export --run-dir '" + path("a") + "' --out '" + path("pub") + "'").exit_code, 0);
  auto c = nlohmann::json::parse(slurp(path("pub/config.json")));
  auto rewrite = [&](const nlohmann::json& j) {
    std::ofstream(path("pub/config.json")) << j.dump();
  };
  nlohmann::json disagree = c;
  disagree["block_size"] = c["dflash_config"]["block_size"].get<int64_t>() + 4;
  rewrite(disagree);
  expect_error(synthetic_run("b", "--set drafter.init_from='" + path("pub") + "'"),
               "make them agree");
  nlohmann::json llama = c;
  llama["model_type"] = "llama";
  rewrite(llama);
  expect_error(synthetic_run("b", "--set drafter.init_from='" + path("pub") + "'"),
               "model_type is \"llama\"");
  EXPECT_FALSE(fs::exists(path("b/metrics.jsonl")));
}

TEST_F(ExportProgram, AMissingInitFolderIsRefusedBeforeTheTargetStage) {
  // The toy run trains its target first (minutes at full size): a wrong drafter.init_from
  // must fail before that, with nothing written.
  const TrainRun r = train("--config '" + std::string(CHUNKGRAD_SOURCE_DIR) +
                           "/configs/toy.json' --no-progress --run-dir '" + path("late") +
                           "' --set drafter.init_from='" + path("nowhere") + "'");
  expect_error(r, "drafter.init_from '" + path("nowhere") + "': not a folder");
  EXPECT_FALSE(fs::exists(path("late/target"))) << "the target stage ran first";
  fs::create_directories(path("half"));
  expect_error(synthetic_run("d", "--set drafter.init_from='" + path("half") + "'"),
               "no config.json");
}

TEST_F(ExportProgram, BadOptionsAreOneErrorLine) {
  expect_error(run("export --out '" + path("x") + "'"), "--run-dir DIR", "export");
  fs::create_directories(path("empty_run"));
  expect_error(run("export --run-dir '" + path("empty_run") + "' --out '" + path("x") + "'"),
               "no drafter checkpoint", "export");
  expect_error(run("export --run-dir '" + path("missing") + "' --out '" + path("x") + "'"),
               "--run-dir", "export");
  // (an outside tester gave a model's own shard: "an unknown format 'pt'" said too little)
  expect_error(run("export --checkpoint '" + std::string(CHUNKGRAD_SOURCE_DIR) +
                   "/tests/data/qwen3_tiny_untied/model.safetensors' --out '" + path("x") + "'"),
               "format metadata 'pt': not a chunkgrad drafter checkpoint", "export");
}

}  // namespace

// An outside tester: a checkpoint (or an exported folder) whose bytes fail their checksum
// was refused by the reader's own line, without the "export: FILE:" every other damage
// gets, and behind a run on feature folders with a hint about the target's shapes. Now the
// file is named first and the shapes are left out of it.
TEST_F(ExportProgram, ADamagedFileIsNamedFirst) {
  ASSERT_EQ(synthetic_run("a").exit_code, 0);
  const std::string ckpt = path("a") + "/drafter/step_00000003.safetensors";
  ASSERT_TRUE(fs::exists(ckpt));
  ASSERT_EQ(run("export --run-dir '" + path("a") + "' --out '" + path("pub") + "'").exit_code, 0);
  const std::string flipped = with_flipped_bit(ckpt, 3, 6);  // (read before the truncation)
  std::ofstream(ckpt, std::ios::binary | std::ios::trunc) << flipped;
  expect_error(run("export --checkpoint '" + ckpt + "' --out '" + path("pub2") + "'"),
               "export: " + ckpt + ": safetensors: tensor 'drafter.fc.weight'", "export");
  EXPECT_FALSE(fs::exists(path("pub2")));
  const std::string weights = path("pub/model.safetensors");
  const std::string flipped_weights = with_flipped_bit(weights, 3, 6);
  std::ofstream(weights, std::ios::binary | std::ios::trunc) << flipped_weights;
  const TrainRun init = synthetic_run("b", "--set drafter.init_from='" + path("pub") + "'");
  expect_error(init, "'" + path("pub") + "': model.safetensors: safetensors: tensor '");
  EXPECT_NE(init.err.find("does not match the checksum written with it"), std::string::npos)
      << init.err;
}
