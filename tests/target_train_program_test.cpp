// Why this file exists: `chunkgrad train --target DIR --data FILE` (features.source
// "target", train/target_features.h) end to end through the built program: a Hugging Face
// Qwen3 folder (tests/data/qwen3_tiny_untied, made by transformers) trains a drafter from
// features computed each step, the run exports to the public layout, and the options that
// cannot work together are one error line. About a second at these sizes.
#include "core/factories.h"
#include "train_program_fixture.h"

namespace {

namespace fs = std::filesystem;
using train_program_fixture::slurp;
using train_program_fixture::TrainRun;

class TargetTrainProgram : public train_program_fixture::TrainProgram {
 protected:
  std::string target() const {
    return std::string(CHUNKGRAD_SOURCE_DIR) + "/tests/data/qwen3_tiny_untied";
  }
  std::string samples(int count) const {
    std::string text;
    for (int i = 0; i < count; ++i) {
      text += "{\"input_ids\": [" + std::to_string(10 + i) + ", 20, 30, 40, 50, 60, " +
              std::to_string(70 + i) + ", 80], \"loss_mask\": [0, 0, 1, 1, 1, 1, 1, 1]}\n";
    }
    return write("samples.jsonl", text);
  }
  std::string options(const std::string& run_dir) const {
    return "--no-progress --run-dir '" + path(run_dir) + "' --target '" + target() + "' --data '" +
           samples(12) +
           "' --set drafter.num_layers=1 --set drafter.intermediate_size=32 "
           "--set drafter.target_layers=[0,1] --set drafter.block_size=4 "
           "--set drafter.max_anchors=2 --set drafter.optim.steps=3 "
           "--set drafter.optim.batch_size=2 --set eval.accuracy_sequences=2 "
           "--set memory.enabled=false";
  }
};

TEST_F(TargetTrainProgram, TrainsFromAHuggingFaceTargetAndExports) {
  const TrainRun r = train(options("run") + " --set drafter.mask_token_id=255 --json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto summary = nlohmann::json::parse(slurp(path("run/summary.json")));
  EXPECT_NE(summary.dump().find("chunkgrad eval"), std::string::npos) << summary.dump(2);
  const TrainRun e = run("export --run-dir '" + path("run") + "' --out '" + path("pub") + "'");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const auto c = nlohmann::json::parse(slurp(path("pub/config.json")));
  EXPECT_EQ(c["dflash_config"]["mask_token_id"], 255);
  EXPECT_EQ(c["dflash_config"]["target_layer_ids"], nlohmann::json::parse("[0, 1]"));
  EXPECT_EQ(c["hidden_size"], 32);
  EXPECT_EQ(c["num_target_layers"], 2);
}

TEST_F(TargetTrainProgram, MissingMaskIdIsOneLine) {
  expect_error(train(options("run")), "drafter.mask_token_id");
  EXPECT_FALSE(fs::exists(path("run/config.json")));  // refused before the run dir is written
}

// An outside tester: a MASK id the data holds was taken (block slots would read a real
// token and a masked slot as the same).
TEST_F(TargetTrainProgram, AMaskIdTheDataHoldsIsRefused) {
  expect_error(train(options("run") + " --set drafter.mask_token_id=30"),
               "sample 0 holds drafter.mask_token_id 30 at token 2");
  EXPECT_FALSE(fs::exists(path("run")));
}

TEST_F(TargetTrainProgram, DataWithoutTargetIsRefused) {
  const TrainRun r =
      train("--no-progress --run-dir '" + path("run") + "' --data '" + samples(2) + "'");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("--target"), std::string::npos) << r.err;
}

TEST_F(TargetTrainProgram, TargetAndFeaturesExcludeEachOther) {
  const TrainRun r = train(options("run") + " --features '" + path("") + "'");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("--features"), std::string::npos) << r.err;
}

}  // namespace

// An outside tester: export run from another folder (the run's relative --target no longer
// found) fell back to the toy target's description and wrote a config.json with the toy's
// rope_theta, vocabulary and depth, exit 0. Now it names the file it looked for.
TEST_F(TargetTrainProgram, ExportWithTheTargetGoneIsRefused) {
  fs::copy(target(), path("target"), fs::copy_options::recursive);
  const std::string opts = options("run");
  const std::string moved = opts.substr(0, opts.find(" --target '")) + " --target '" +
                            path("target") + opts.substr(opts.find("' --data '"));
  const TrainRun r = train(moved + " --set drafter.mask_token_id=255");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  fs::rename(path("target"), path("elsewhere"));
  expect_error(run("export --run-dir '" + path("run") + "' --out '" + path("pub") + "'"),
               "features.target " + path("target") + " has no config.json", "export");
  EXPECT_FALSE(fs::exists(path("pub")));
  fs::rename(path("elsewhere"), path("target"));
  const TrainRun e = run("export --run-dir '" + path("run") + "' --out '" + path("pub") + "'");
  ASSERT_EQ(e.exit_code, 0) << e.err;
}

// An outside tester: export rebuilt target_layer_ids, num_target_layers and rope_theta
// from whatever config.json sat at the run's --target, so an edited one gave a config.json
// for another target, exit 0 (Note [Export uses what training used]). Now the checkpoint
// records them, and export refuses a change, naming each field with both values.
TEST_F(TargetTrainProgram, ExportRefusesATargetThatChangedSinceTraining) {
  fs::copy(target(), path("target"), fs::copy_options::recursive);
  const std::string opts = options("run");
  const std::string moved = opts.substr(0, opts.find(" --target '")) + " --target '" +
                            path("target") + opts.substr(opts.find("' --data '"));
  ASSERT_EQ(train(moved + " --set drafter.mask_token_id=255").exit_code, 0);
  const std::string original = slurp(path("target/config.json"));
  auto edited = nlohmann::json::parse(original);
  edited["num_hidden_layers"] = 3;
  edited["layer_types"].push_back("full_attention");
  edited["rope_parameters"]["rope_theta"] = 10000.0;
  write("target/config.json", edited.dump(2));
  expect_error(run("export --run-dir '" + path("run") + "' --out '" + path("pub") + "'"),
               "the run's target changed since training", "export");
  const TrainRun r = run("export --run-dir '" + path("run") + "' --out '" + path("pub") + "'");
  EXPECT_NE(r.err.find("num_target_layers: 2 when trained, 3 now"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("rope_theta: 1000000.0 when trained, 10000.0 now"), std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(path("pub")));
  // A config.json that is there but cannot be read as a target: the hint is about its
  // content, not about the folder export runs in (a third tester's hidden_act "gelu").
  auto unreadable = nlohmann::json::parse(original);
  unreadable["hidden_act"] = "gelu";
  write("target/config.json", unreadable.dump(2));
  const TrainRun bad = run("export --run-dir '" + path("run") + "' --out '" + path("pub") + "'");
  EXPECT_NE(bad.exit_code, 0);
  EXPECT_NE(bad.err.find("if it was edited since training, put the one the run trained with back"),
            std::string::npos)
      << bad.err;
  EXPECT_EQ(bad.err.find("run export from the folder"), std::string::npos) << bad.err;
  // The file put back, the same checkpoint exports.
  write("target/config.json", original);
  const TrainRun e = run("export --run-dir '" + path("run") + "' --out '" + path("pub") + "'");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_EQ(nlohmann::json::parse(slurp(path("pub/config.json")))["num_target_layers"], 2);
}

// An outside tester: a resume refused on a --target run blamed "the corpus or
// target.checkpoint", which such a run does not have. It names what the run used.
TEST_F(TargetTrainProgram, AResumeOnOtherDataNamesWhatTheRunRead) {
  const std::string command = options("run") + " --set drafter.mask_token_id=255";
  ASSERT_EQ(train(command).exit_code, 0);
  std::string text = slurp(path("samples.jsonl"));
  text.replace(text.find("20, 30"), 6, "21, 30");
  write("samples.jsonl", text);
  expect_error(train(command),
               "was trained on other data: the content of features.data, of the "
               "target features.target");
}

// An outside tester: a target whose forward overflows (finite weights of 3e38 in
// embed_tokens and every down_proj) gave all-inf/NaN features, exit 0; only train noticed.
// Now features names the sample and the layer, and leaves no feature set behind (Note
// [Finite features]).
TEST_F(TargetTrainProgram, FeaturesOfAnOverflowingTargetAreRefused) {
  fs::copy(target(), path("huge"), fs::copy_options::recursive);
  cg::safetensors::NamedTensors tensors;
  for (auto& [name, t] : cg::safetensors::open(target() + "/model.safetensors")->load_all()) {
    const bool huge = name == "model.embed_tokens.weight" || name.ends_with("mlp.down_proj.weight");
    tensors.emplace_back(name, huge ? cg::full(t.shape(), 3e38, {.dtype = t.dtype()}) : t);
  }
  fs::remove(path("huge/model.safetensors"));
  cg::safetensors::save_file(tensors, path("huge/model.safetensors"), {{"format", "pt"}});
  const std::string command = "features --target '" + path("huge") + "' --data '" + samples(3) +
                              "' --layers 1,0 --no-progress --shard-mb 1 --out ";
  const TrainRun r = run(command + "'" + path("feats") + "'");
  expect_error(r, "sample 0: the target's output is not finite (layer 0's output", "features");
  EXPECT_NE(r.err.find("no feature set was written"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(path("feats")));  // made by the run, and taken away again
  // A folder that was there stays, empty.
  fs::create_directories(path("mine"));
  expect_error(run(command + "'" + path("mine") + "'"), "the target's output is not finite",
               "features");
  EXPECT_TRUE(fs::is_empty(path("mine")));
}

// An outside tester: nothing said when a sample ran past the target's
// max_position_embeddings (64 here); now one warning line does, and the run goes on.
TEST_F(TargetTrainProgram, PastTheTargetsContextIsAWarning) {
  std::string ids = "10";
  for (int i = 1; i < 70; ++i) ids += ", 20";
  const std::string data = write("long.jsonl", "{\"input_ids\": [" + ids + "]}\n");
  const TrainRun r = run("features --target '" + target() + "' --data '" + data + "' --out '" +
                         path("feats") + "' --layers 0,1 --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: --data's longest sample reaches 70 positions, past the target's "
                       "max_position_embeddings (64"),
            std::string::npos)
      << r.err;
}
