// Why this file exists: an online `chunkgrad train` whose target comes from target.checkpoint
// (docs/train_config.md: "a safetensors file / folder") -- a folder, a sharded checkpoint's
// index, and a vocabulary larger than the byte tokenizer's -- and what such a run, or any
// online run, must refuse before its run directory is written; and the drafter's steps
// logged up to a loss that is not finite. Each case came from an outside tester (stop 52).
#include <filesystem>
#include <sstream>

#include "tests/train_program_fixture.h"

namespace {

namespace fs = std::filesystem;
using train_program_fixture::slurp;
using train_program_fixture::TrainProgram;
using train_program_fixture::TrainRun;

class TargetCheckpointProgram : public TrainProgram {
 protected:
  // The golden tiny Qwen3 (vocabulary 1024, three shards behind an index), copied under a
  // folder name with a space.
  std::string copy_golden() const {
    const std::string dir = path("tq dir");
    fs::copy(std::string(CHUNKGRAD_SOURCE_DIR) + "/tests/golden/tiny_qwen3", dir,
             fs::copy_options::recursive | fs::copy_options::overwrite_existing);
    return dir;
  }
  // The small run of tiny(), its target read from `checkpoint` with `hf_config`.
  std::string with_checkpoint(const std::string& run, const std::string& checkpoint,
                              const std::string& hf_config) const {
    std::string c = tiny(run);
    const std::string from = R"("target": {)";
    c.replace(c.find(from), from.size(),
              R"("target": {"checkpoint": ")" + checkpoint + R"(", "hf_config": ")" + hf_config +
                  R"(", )");
    const std::string features = R"("num_target_features": 1)";
    c.replace(c.find(features), features.size(), R"("target_layers": [1, 2])");
    return c;
  }
};

// A target with 1024 ids greedily emits ids past the byte tokenizer's 260: the summary's
// text sample failed on them ("ByteTokenizer: id 578 ... is not a token id") after the
// whole run had trained and evaluated, every time it was run. And the folder itself, or
// its index, is a target.checkpoint: the folder was read as one file for its fingerprint.
TEST_F(TargetCheckpointProgram, ATargetCheckpointFolderWithALargerVocabularyTrainsToTheEnd) {
  const std::string dir = copy_golden();
  for (const std::string& checkpoint : {dir, dir + "/model.safetensors.index.json"}) {
    const std::string run = path(checkpoint == dir ? "folder" : "index");
    const TrainRun r = train(
        "--config " + write("c.json", with_checkpoint(run, checkpoint, dir + "/config.json")));
    ASSERT_EQ(r.exit_code, 0) << r.err;
    const nlohmann::json summary = nlohmann::json::parse(slurp(run + "/summary.json"));
    EXPECT_TRUE(summary["sample"]["target_greedy"].is_string()) << summary["sample"];
  }
}

// A target.checkpoint that is missing or not a checkpoint was found after the run directory
// was written (config.json, drafter/, an empty metrics.jsonl), in a message that did not
// name the field.
TEST_F(TargetCheckpointProgram, ABadTargetCheckpointIsNamedBeforeTheRunDirectoryIsWritten) {
  const std::string dir = copy_golden();
  const std::string run = path("run");
  expect_error(train("--config " + write("a.json", with_checkpoint(run, path("none.safetensors"),
                                                                   dir + "/config.json"))),
               "target.checkpoint '" + path("none.safetensors") + "' does not exist");
  write("junk.safetensors", "not a checkpoint at all");
  expect_error(train("--config " + write("b.json", with_checkpoint(run,
                                                                   path("junk.safetensors"),
                                                                   dir + "/config.json"))),
               "target.checkpoint '" + path("junk.safetensors") + "': ");
  EXPECT_FALSE(fs::exists(run)) << "the run directory was written before the check";
}

// A corpus too short for target.seq_len failed in the target's training, after the run
// directory was written, without saying what to change.
TEST_F(TrainProgram, ACorpusTooShortForTheTargetFailsBeforeTheRunDirectory) {
  const std::string run = path("run");
  std::string c = tiny(run);
  const std::string from = R"("lines": 200)";
  c.replace(c.find(from), from.size(), R"("lines": 1)");
  expect_error(train("--config " + write("c.json", c)),
               "fewer than target.seq_len + 2 = 34; give a longer corpus (corpus.lines");
  EXPECT_FALSE(fs::exists(run)) << "the run directory was written before the check";
}

// A drafter loss that is not finite: the steps finished before it were not logged (the
// group read back together was dropped with the bad step), where the curve up to a blow-up
// is what a user needs.
TEST_F(TrainProgram, TheStepsBeforeANonFiniteDrafterLossAreLogged) {
  const std::string run = path("run");
  std::string c = tiny(run);
  const std::string from = R"("optim": {"steps": 2, "batch_size": 2})";
  c.replace(
      c.find(from), from.size(),
      R"("optim": {"steps": 40, "batch_size": 2, "lr": 10, "weight_decay": 10, "grad_clip": 0, "warmup_ratio": 0}, "checkpoint_every": 0)");
  const TrainRun r = train("--config " + write("c.json", c));
  expect_error(r, "the drafter loss is");
  const size_t at = r.err.find(" at step ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const int64_t bad = std::stoll(r.err.substr(at + 9));
  ASSERT_GT(bad, 1) << "the loss must go bad after some steps for this test: " << r.err;
  std::istringstream log(slurp(run + "/metrics.jsonl"));
  int64_t next = 1;
  for (std::string line; std::getline(log, line);) {
    const nlohmann::json j = nlohmann::json::parse(line);
    if (j["phase"] != "drafter") continue;
    EXPECT_EQ(j["step"], next) << line;
    ++next;
  }
  EXPECT_EQ(next, bad) << "steps 1 .. " << bad - 1 << " must each be logged once";
}

}  // namespace
