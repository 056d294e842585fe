// Why this file exists: an online `chunkgrad train` whose target comes from target.checkpoint
// (docs/train_config.md: "a safetensors file / folder") -- a folder, a sharded checkpoint's
// index, and a vocabulary larger than the byte tokenizer's -- and what such a run, or any
// online run, must refuse before its run directory is written; and the drafter's steps
// logged up to a loss that is not finite; a stop signal while the drafter's data is made or
// while the trained drafter is evaluated. Most cases came from outside testers (stop 52);
// the first two (a checkpoint's bytes fingerprinted, not its path; a NaN in one named) came
// from tests/train_program_test.cpp, which had grown past 600 lines.
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

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
    const std::string c = replaced(tiny(run), R"("target": {)",
                                   R"("target": {"checkpoint": ")" + checkpoint +
                                       R"(", "hf_config": ")" + hf_config + R"(", )");
    return replaced(c, R"("num_target_features": 1)", R"("target_layers": [1, 2])");
  }
};

// Item 4: the cached target and the drafter checkpoints were keyed by the corpus's path:
// an edited corpus loaded the target trained on the old text and resumed the drafter.
TEST_F(TrainProgram, AnEditedCorpusRetrainsTheTargetAndRefusesTheResume) {
  const std::string run = path("run");
  std::string text = question_corpus();
  const std::string corpus = write("corpus.txt", text);
  const std::string config = write("c.json", tiny(run, corpus));
  ASSERT_EQ(train("--config " + config).exit_code, 0);
  text[text.size() - 2] =
      text[text.size() - 2] == '1' ? '2' : '1';  // same size, same path, other bytes
  write("corpus.txt", text);
  const TrainRun refused = train("--config " + config);
  expect_error(refused, "was trained on other data");
  EXPECT_NE(refused.err.find("corpus_xxh3"), std::string::npos) << refused.err;
  const TrainRun fresh = train("--config " + config + " --fresh --json");
  ASSERT_EQ(fresh.exit_code, 0) << fresh.err;
  EXPECT_EQ(nlohmann::json::parse(fresh.out)["target_source"], "trained")
      << "the old text's target was reused";
  // The file behind target.checkpoint is fingerprinted the same way.
  const std::string target = path("target.safetensors");
  std::filesystem::copy_file(run + "/target/model.safetensors", target);
  const std::string run2 = path("run2");
  const std::string with_target =
      write("t.json", replaced(tiny(run2, corpus), R"("target": {)",
                               R"("target": {"checkpoint": ")" + target + R"(", )"));
  ASSERT_EQ(train("--config " + with_target).exit_code, 0) << slurp(path("err"));
  {  // one byte of the last tensor's data changed (the file still opens: the tensor's own
     // checksum is checked when it is loaded, after the fingerprints are compared)
    std::fstream f(target, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(-1, std::ios::end);
    const char last = static_cast<char>(f.get());
    f.seekp(-1, std::ios::end);
    f.put(static_cast<char>(last ^ 1));
  }
  expect_error(train("--config " + with_target), "target_checkpoint_xxh3");
}

// Item 14: a target.checkpoint with NaN bytes loaded silently, and the drafter's first loss
// then blamed drafter.optim.lr.
TEST_F(TrainProgram, ANonFiniteTargetCheckpointNamesTheTensorAndTheFile) {
  const std::string run = path("run");
  ASSERT_EQ(train("--config " + write("c.json", tiny(run))).exit_code, 0);
  const std::string target = path("target.safetensors");
  std::ofstream(target, std::ios::binary) << with_nan(run + "/target/model.safetensors", 8);
  const TrainRun r = train(
      "--config " + write("t.json", replaced(tiny(path("run2")), R"("target": {)",
                                             R"("target": {"checkpoint": ")" + target + R"(", )")));
  expect_error(r, "checkpoint '" + target + "': tensor '");
  EXPECT_NE(r.err.find("holds nan at element 2"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("lr"), std::string::npos) << r.err;
}

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
  expect_error(train("--config " + write("b.json", with_checkpoint(run, path("junk.safetensors"),
                                                                   dir + "/config.json"))),
               "target.checkpoint '" + path("junk.safetensors") + "': ");
  // A shard the index names, missing; a layer past the checkpoint's depth (4 layers; the
  // config's own target.num_layers says 1): both failed after the run directory was written
  // (a second tester).
  fs::copy(dir, path("c3"), fs::copy_options::recursive);
  fs::remove(path("c3/model-00003-of-00003.safetensors"));
  const TrainRun missing =
      train("--config " + write("c.json", with_checkpoint(run, path("c3"), dir + "/config.json")));
  expect_error(missing, "model-00003-of-00003.safetensors");
  EXPECT_NE(missing.err.find("target.checkpoint"), std::string::npos) << missing.err;
  const std::string past =
      replaced(with_checkpoint(run, dir, dir + "/config.json"), "[1, 2]", "[1, 4]");
  expect_error(train("--config " + write("d.json", past)),
               "drafter.target_layers: layer 4 is not a layer of the target (0..3)");
  EXPECT_FALSE(fs::exists(run)) << "the run directory was written before the check";
}

// A corpus too short for target.seq_len failed in the target's training, after the run
// directory was written, without saying what to change.
TEST_F(TrainProgram, ACorpusTooShortForTheTargetFailsBeforeTheRunDirectory) {
  const std::string run = path("run");
  const std::string c = replaced(tiny(run), R"("lines": 200)", R"("lines": 1)");
  expect_error(train("--config " + write("c.json", c)),
               "fewer than target.seq_len + 2 = 34; give a longer corpus (corpus.lines");
  EXPECT_FALSE(fs::exists(run)) << "the run directory was written before the check";
}

// A drafter loss that is not finite: the steps finished before it were not logged (the
// group read back together was dropped with the bad step), where the curve up to a blow-up
// is what a user needs.
TEST_F(TrainProgram, TheStepsBeforeANonFiniteDrafterLossAreLogged) {
  const std::string run = path("run");
  const std::string c = replaced(
      tiny(run), R"("optim": {"steps": 2, "batch_size": 2})",
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

class StopProgram : public TrainProgram {
 protected:
  // Whether `phase`'s step `step` is logged in run's metrics.jsonl within a minute.
  static bool wait_for_step(const std::string& run, const std::string& phase, int64_t step) {
    for (int i = 0; i < 3000; ++i) {
      if (steps_logged(run, phase).count(step) > 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
};

// A stop signal while the drafter was evaluated let the evaluation run to its end, then
// said "drafter training: interrupted at step 2" of 2 and wrote nothing; and while the
// drafter's data was made, every sequence was still made before the run stopped.
TEST_F(StopProgram, AStopOutsideTheTrainingLoopsEndsItsStageAndSaysWhatIsKept) {
  const std::string run = path("run");
  const std::string lines = R"("lines": 200)";
  const std::string c =
      replaced(replaced(tiny(run), lines, R"("lines": 4000)"),
               R"("prompts": 1, "max_new_tokens": 8)", R"("prompts": 3000, "max_new_tokens": 24)");
  const std::string config = write("c.json", c);
  pid_t pid = start_train("--config " + config);
  ASSERT_TRUE(wait_for_step(run, "drafter", 2)) << slurp(path("err"));
  TrainRun r = stop(pid, SIGTERM);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_NE(r.err.find("interrupted in the evaluation stage; the drafter's training is complete "
                       "(step 2, saved): run the same command to evaluate it"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(run + "/summary.json"));
  // The same command (here with a shorter evaluation) trains no step again.
  const TrainRun done = train("--config " + config + " --set eval.prompts=1");
  ASSERT_EQ(done.exit_code, 0) << done.err;
  EXPECT_TRUE(fs::exists(run + "/summary.json"));
  for (const auto& [step, n] : steps_logged(run, "drafter")) EXPECT_EQ(n, 1) << "step " << step;

  const std::string data_run = path("data");
  const std::string d = replaced(replaced(tiny(data_run), lines, R"("lines": 4000)"),
                                 R"("num_sequences": 2, "max_new_tokens": 12)",
                                 R"("num_sequences": 3000, "max_new_tokens": 24)");
  pid = start_train("--config " + write("d.json", d));
  ASSERT_TRUE(wait_for_step(data_run, "target", 3)) << slurp(path("err"));
  r = stop(pid, SIGTERM);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  EXPECT_NE(r.err.find("interrupted while making the drafter's data"), std::string::npos) << r.err;
  EXPECT_EQ(steps_logged(data_run, "drafter").size(), 0u) << "a step was trained after the stop";
}

}  // namespace
