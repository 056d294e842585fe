// Why this file exists: an outside tester pointed outputs at inputs and the programs wrote
// over them: `eval --json` onto its --data file or into the drafter's folder, `train
// --run-dir` onto the Hugging Face target's folder (its config.json replaced by the train
// config), `regenerate --out` onto --data. Each is now refused before any work
// (program::check_output_not_input), the input left byte for byte as it was.
#include "train_program_fixture.h"

namespace {

namespace fs = std::filesystem;
using train_program_fixture::slurp;
using train_program_fixture::TrainRun;

class OutputsNotInputs : public train_program_fixture::TrainProgram {
 protected:
  // A copy of the tiny Hugging Face target, so that a failure here cannot damage the
  // source tree's.
  std::string target_copy() const {
    const std::string dir = path("target");
    fs::copy(std::string(CHUNKGRAD_SOURCE_DIR) + "/tests/data/qwen3_tiny_untied", dir,
             fs::copy_options::recursive);
    return dir;
  }
  std::string samples() const {
    return write("samples.jsonl",
                 "{\"input_ids\": [10, 20, 30, 40, 50, 60, 70, 80], "
                 "\"loss_mask\": [0, 0, 1, 1, 1, 1, 1, 1]}\n");
  }
};

TEST_F(OutputsNotInputs, EvalJsonOntoItsDataFile) {
  const std::string target = target_copy(), data = samples();
  fs::create_directories(path("drafter"));
  const std::string before = slurp(data);
  // (spelt another way: through the folder's parent)
  const std::string same = path("target") + "/../samples.jsonl";
  expect_error(run("eval --target '" + target + "' --drafter '" + path("drafter") + "' --data '" +
                   data + "' --json '" + same + "' --no-progress"),
               "is the input --data", "eval");
  EXPECT_EQ(slurp(data), before);
}

TEST_F(OutputsNotInputs, EvalJsonIntoTheDrafterFolder) {
  const std::string target = target_copy(), data = samples();
  fs::create_directories(path("drafter"));
  const std::string config = write("drafter/config.json", "{\"keep\": true}\n");
  expect_error(run("eval --target '" + target + "' --drafter '" + path("drafter") + "' --data '" +
                   data + "' --json '" + config + "' --no-progress"),
               "is inside --drafter", "eval");
  EXPECT_EQ(slurp(config), "{\"keep\": true}\n");
}

TEST_F(OutputsNotInputs, TrainRunDirOntoTheTarget) {
  const std::string target = target_copy(), data = samples();
  const std::string before = slurp(target + "/config.json");
  expect_error(train("--no-progress --run-dir '" + target + "' --target '" + target + "' --data '" +
                     data + "' --set drafter.mask_token_id=255"),
               "is the input features.target");
  EXPECT_EQ(slurp(target + "/config.json"), before);
  EXPECT_FALSE(fs::exists(target + "/metrics.jsonl"));
  expect_error(train("--no-progress --run-dir '" + target + "/run' --target '" + target +
                     "' --data '" + data + "' --set drafter.mask_token_id=255"),
               "is inside features.target");
  EXPECT_FALSE(fs::exists(target + "/run"));
}

TEST_F(OutputsNotInputs, RegenerateOutThroughASymlinkToData) {
  const std::string target = target_copy(), data = samples();
  fs::create_symlink(data, path("link.jsonl"));
  const std::string before = slurp(data);
  expect_error(run("regenerate --target '" + target + "' --data '" + data + "' --out '" +
                   path("link.jsonl") + "' --no-progress"),
               "is the input --data", "regenerate");
  EXPECT_EQ(slurp(data), before);
}

TEST_F(OutputsNotInputs, FeaturesOutInsideTheTarget) {
  const std::string target = target_copy(), data = samples();
  expect_error(run("features --target '" + target + "' --data '" + data + "' --out '" + target +
                   "/feats' --no-progress"),
               "is inside --target", "features");
  EXPECT_FALSE(fs::exists(target + "/feats"));
}

// A second tester's ways around the check. The target an offline run's features were
// written from is read too (its embedding and lm_head): train wrote its config.json there.
TEST_F(OutputsNotInputs, TrainRunDirOntoTheTargetOfItsFeatures) {
  const std::string target = target_copy(), data = samples();
  const TrainRun f = run("features --target '" + target + "' --data '" + data + "' --out '" +
                         path("feats") + "' --layers 0,1 --no-progress");
  ASSERT_EQ(f.exit_code, 0) << f.err;
  const std::string before = slurp(target + "/config.json");
  expect_error(train("--no-progress --run-dir '" + target + "' --features '" + path("feats") +
                     "' --set drafter.mask_token_id=255"),
               "is the input the target features.dir was written from");
  EXPECT_EQ(slurp(target + "/config.json"), before);
}

// The files read beside a --tokenizer outside the target (its chat template).
TEST_F(OutputsNotInputs, EvalJsonOntoTheTokenizersTemplate) {
  const std::string target = target_copy(), data = samples();
  fs::create_directories(path("drafter"));
  fs::create_directories(path("tok"));
  write("tok/tokenizer.json", "{}");  // (refused before it is read)
  const std::string jinja = write("tok/chat_template.jinja", "{{ mine }}");
  expect_error(run("eval --target '" + target + "' --drafter '" + path("drafter") + "' --data '" +
                   data + "' --tokenizer '" + path("tok/tokenizer.json") + "' --json '" + jinja +
                   "' --no-progress"),
               "is the input --tokenizer's chat_template.jinja", "eval");
  EXPECT_EQ(slurp(jinja), "{{ mine }}");
}

// features --fresh clears feature files from --out: an input kept there is refused.
TEST_F(OutputsNotInputs, FeaturesDataInsideOut) {
  const std::string target = target_copy();
  fs::create_directories(path("feats"));
  const std::string data = write("feats/index.partial.json", slurp(samples()));
  expect_error(run("features --target '" + target + "' --data '" + data + "' --out '" +
                   path("feats") + "' --layers 0,1 --fresh --no-progress"),
               "is inside --out", "features");
  EXPECT_TRUE(fs::exists(data));
}

// A chunkgrad run folder as --target is read from its target/ and config.json only: a
// report written beside them is not refused (a false positive the second tester found).
TEST_F(OutputsNotInputs, OutputsBesideARunsCachedTargetAreFine) {
  fs::create_directories(path("run/target"));
  write("run/config.json", "{\"target\": {}, \"drafter\": {}}");
  fs::create_directories(path("drafter"));
  const TrainRun r =
      run("eval --target '" + path("run") + "' --drafter '" + path("drafter") + "' --data '" +
          samples() + "' --json '" + path("run/eval.json") + "' --no-progress");
  EXPECT_EQ(r.err.find("is inside"), std::string::npos) << r.err;
  expect_error(
      run("eval --target '" + path("run") + "' --drafter '" + path("drafter") + "' --data '" +
          samples() + "' --json '" + path("run/config.json") + "' --no-progress"),
      "is the input --target's config.json", "eval");
}

// A third tester: a chunkgrad run whose features an offline run trains from, given as that
// run's run_dir: its config.json was replaced. Its target/ and config.json are inputs.
TEST_F(OutputsNotInputs, TrainRunDirOntoTheRunItsFeaturesCameFrom) {
  fs::create_directories(path("A/target"));
  const std::string config = write("A/config.json", "{\"target\": {}, \"drafter\": {}}");
  // (real features, their index then naming run A as the target they came from)
  const TrainRun f = run("features --target '" + target_copy() + "' --data '" + samples() +
                         "' --out '" + path("feats") + "' --layers 0,1 --no-progress");
  ASSERT_EQ(f.exit_code, 0) << f.err;
  auto index = nlohmann::json::parse(slurp(path("feats/index.json")));
  index["target"] = path("A");
  write("feats/index.json", index.dump());
  const TrainRun r =
      train("--no-progress --run-dir '" + path("A") + "' --features '" + path("feats") + "'");
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("is inside run_dir"), std::string::npos) << r.err;
  EXPECT_EQ(slurp(config), "{\"target\": {}, \"drafter\": {}}");
}

}  // namespace
