// Why this file exists: `chunkgrad train` with bad configs must stop with one error line
// naming the problem and exit code 1 (examples/common/program.h), and a failed resume must
// leave the run directory as it was. These run the built program (tests/CMakeLists.txt
// passes its path) with tiny configs, so each case takes well under a second.
#include "tests/train_program_fixture.h"

namespace {

using train_program_fixture::slurp;
using train_program_fixture::TrainProgram;
using train_program_fixture::TrainRun;

TEST_F(TrainProgram, UnknownFieldIsNamed) {
  expect_error(train("--config " + write("c.json", R"({"drafter": {"blok_size": 8}})")),
               "unknown field 'drafter.blok_size'");
}

TEST_F(TrainProgram, BlockSizeBelowTwoIsRefused) {
  expect_error(train("--config " + write("c.json", R"({"drafter": {"block_size": 1}})")),
               "drafter.block_size: must be >= 2");
}

TEST_F(TrainProgram, AnchorsBeyondTheSequenceAreRefused) {
  expect_error(train("--config " +
                     write("c.json",
                           R"({"drafter": {"max_anchors": 200}, "data": {"max_new_tokens": 64}})")),
               "beyond the sequence");
}

// Without a GPU (this machine, CI), --device cuda stops before any work with one line that
// says why (the CUDA backend's unavailable reason, or that the build has none).
TEST_F(TrainProgram, DeviceCudaWithoutAGpuIsOneErrorLine) {
  if (cg::cuda_available()) GTEST_SKIP() << "a GPU is here: tests/cuda_train_test.cpp trains on it";
  const std::string run = path("run");
  const TrainRun r = train("--config " + write("c.json", tiny(run)) + " --device cuda");
  expect_error(r, "device cuda is not available");
  EXPECT_TRUE(r.err.find("CUDA") != std::string::npos || r.err.find("cuda") != std::string::npos)
      << r.err;
  EXPECT_FALSE(std::filesystem::exists(run + "/target"))
      << "nothing may run before the device check";
  expect_error(train("--config " + write("d.json", R"({"device": "tpu"})")), "device");
}

// --device given on the command line is checked as given and named as the option: an
// empty value was once read as "not given" and the run went on with the config's device.
TEST_F(TrainProgram, ABadOrEmptyDeviceOptionIsNamed) {
  const std::string config = write("c.json", tiny(path("run")));
  expect_error(train("--config " + config + " --print-config --device ''"),
               "--device: bad device string ''");
  expect_error(train("--config " + config + " --print-config --device gpu"),
               "--device: bad device string 'gpu'");
  expect_error(train("--config " + config + " --print-config --device cuda:0x1"), "--device");
  const TrainRun ok = train("--config " + config + " --print-config --device cpu");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find(R"("device": "cpu")"), std::string::npos) << ok.out;
}

// A diverging target (lr 10, weight decay 10: the weights grow 99x a step) once trained on
// with a null loss logged for every step, was cached, and the run then failed in the
// drafter's first step with "lower drafter.optim.lr". The target's own check names it and
// the step (losses are read every 10 steps, Note [Steps that do not wait], but each is
// checked with its own step number), and nothing is cached.
TEST_F(TrainProgram, ADivergingTargetStopsNamingTheTargetAndTheStep) {
  const std::string run = path("run");
  std::string config = tiny(run);
  const std::string from = R"("optim": {"steps": 3, "batch_size": 2})";
  config.replace(
      config.find(from), from.size(),
      R"("optim": {"steps": 40, "batch_size": 2, "lr": 10, "weight_decay": 10, "grad_clip": 0, "warmup_ratio": 0})");
  const TrainRun r = train("--config " + write("c.json", config));
  expect_error(r, "the target loss became");
  EXPECT_NE(r.err.find("lower target.optim.lr"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("drafter"), std::string::npos) << r.err;
  EXPECT_FALSE(std::filesystem::exists(run + "/target/model.safetensors"))
      << "a diverged target was cached";
  // Every step before the bad one is logged once, with a number.
  std::istringstream log(slurp(run + "/metrics.jsonl"));
  int64_t lines = 0;
  for (std::string line; std::getline(log, line); ++lines) {
    EXPECT_NE(line.find("\"step\":" + std::to_string(lines + 1) + "}"), std::string::npos) << line;
    EXPECT_EQ(line.find("null"), std::string::npos) << line;
  }
  EXPECT_NE(r.err.find("at step " + std::to_string(lines + 1) + ";"), std::string::npos)
      << r.err << lines;
}

TEST_F(TrainProgram, MissingConfigFileIsNamed) {
  expect_error(train("--config " + path("nope.json")), "nope.json");
}

TEST_F(TrainProgram, MalformedJsonIsAnError) {
  expect_error(train("--config " + write("c.json", "{\"seed\": ")), "c.json");
}

TEST_F(TrainProgram, MissingCorpusFileIsNamed) {
  const std::string run = path("run");
  expect_error(train("--config " + write("c.json", tiny(run, "/nonexistent/corpus.txt"))),
               "/nonexistent/corpus.txt");
}

TEST_F(TrainProgram, CorruptCheckpointFailsAndLeavesTheRunDirectoryIntact) {
  const std::string run = path("run");
  const std::string config = write("c.json", tiny(run));
  const TrainRun ok = train("--config " + config);
  ASSERT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("tau"), std::string::npos) << ok.out;
  const std::string ckpt = run + "/drafter/step_00000002.safetensors";
  ASSERT_TRUE(std::filesystem::exists(ckpt));
  std::ofstream(ckpt, std::ios::trunc) << "garbage";
  std::map<std::string, std::string> before, after;
  for (const auto& e : std::filesystem::recursive_directory_iterator(run)) {
    if (e.is_regular_file()) before[e.path().string()] = slurp(e.path().string());
  }
  expect_error(train("--config " + config), "step_00000002.safetensors");
  for (const auto& e : std::filesystem::recursive_directory_iterator(run)) {
    if (e.is_regular_file()) after[e.path().string()] = slurp(e.path().string());
  }
  EXPECT_EQ(before, after);
  // --fresh starts over instead.
  EXPECT_EQ(train("--config " + config + " --fresh").exit_code, 0);
}

TEST_F(TrainProgram, AFreshRunLeavesNoStaleCheckpointForTheNextResume) {
  const std::string run = path("run");
  const std::string config = write("c.json", tiny(run));
  ASSERT_EQ(train("--config " + config).exit_code, 0);
  // As if an earlier run had trained 9 steps: the next resume would load it, not this run's.
  std::filesystem::copy_file(run + "/drafter/step_00000002.safetensors",
                             run + "/drafter/step_00000009.safetensors");
  ASSERT_EQ(train("--config " + config + " --fresh").exit_code, 0);
  EXPECT_FALSE(std::filesystem::exists(run + "/drafter/step_00000009.safetensors"));
  EXPECT_TRUE(std::filesystem::exists(run + "/drafter/step_00000002.safetensors"));
  // A resume at the last step trains nothing, and says so instead of "0 label tokens/s".
  const TrainRun again = train("--config " + config);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.out.find("drafter training: none (resumed at step 2, the last)"),
            std::string::npos)
      << again.out;
  EXPECT_EQ(again.out.find("0 label tokens/s"), std::string::npos) << again.out;
  // metrics.jsonl: three runs, yet each drafter step and the summary once (a killed run's
  // steps after its checkpoint, or an earlier run's, were kept beside the new ones).
  std::istringstream log(slurp(run + "/metrics.jsonl"));
  int drafter_records = 0, summaries = 0;
  for (std::string line; std::getline(log, line);) {
    drafter_records += line.find(R"("phase":"drafter")") != std::string::npos;
    summaries += line.find(R"("phase":"summary")") != std::string::npos;
  }
  EXPECT_EQ(drafter_records, 2);
  EXPECT_EQ(summaries, 1);
}

TEST_F(TrainProgram, ABadHfConfigIsNamedByItsPath) {
  const std::string run = path("run");
  const std::string hf = write("hf.json", R"({"hidden_size": 16})");
  std::string config = tiny(run);
  config.replace(config.find(R"("target": {)"), 11,
                 R"("target": {"checkpoint": ")" + path("none.safetensors") +
                     R"(", "hf_config": ")" + hf + R"(", )");
  expect_error(train("--config " + write("c.json", config)), "target.hf_config '" + hf + "': ");
}

TEST_F(TrainProgram, AnUnusableTraceDirFailsBeforeTraining) {
  const std::string run = path("run");
  std::string config = tiny(run);
  config.replace(config.find(R"("memory": {"enabled": false})"), 28,
                 R"("memory": {"enabled": true})");
  std::filesystem::create_directories(run);
  std::ofstream(run + "/traces") << "a file where the trace folder goes";
  const TrainRun r = train("--config " + write("c.json", config));
  expect_error(r, "memory.trace_dir: cannot create the directory");
  EXPECT_FALSE(std::filesystem::exists(run + "/target")) << "it trained first";
}

TEST_F(TrainProgram, AResumeWithAnotherConfigNamesTheField) {
  const std::string run = path("run");
  ASSERT_EQ(train("--config " + write("c.json", tiny(run))).exit_code, 0);
  std::string changed = tiny(run);
  changed.replace(changed.find(R"("block_size": 4)"), 15, R"("block_size": 4, "gamma": 2)");
  const TrainRun r = train("--config " + write("d.json", changed));
  expect_error(r, "another config (drafter.gamma: 4.0 then, 2.0 now;");
  // The checkpoint's own reading error inside the line keeps one location, not two.
  std::ofstream(run + "/drafter/step_00000002.safetensors", std::ios::trunc) << "garbage";
  const TrainRun bad = train("--config " + path("c.json"));
  expect_error(bad, "is unreadable");
  EXPECT_EQ(bad.err.find("(at "), bad.err.rfind("(at ")) << bad.err;
}

// ---- issue 18, data loss and false statements ----

// Item 2: a resume refused for a changed target field had already retrained and replaced
// the cached target and appended to metrics.jsonl, then said "the run directory is
// unchanged".
TEST_F(TrainProgram, AResumeRefusedForATargetFieldLeavesTheRunDirectoryUnchanged) {
  const std::string run = path("run");
  ASSERT_EQ(train("--config " + write("c.json", tiny(run))).exit_code, 0);
  const auto before = files_of(run);
  const std::string changed = replaced(tiny(run), R"("hidden_size": 16)", R"("hidden_size": 24)");
  const TrainRun r = train("--config " + write("d.json", changed));
  expect_error(r, "target.hidden_size: 16 then, 24 now");
  EXPECT_NE(r.err.find("the run directory is unchanged"), std::string::npos) << r.err;
  EXPECT_EQ(files_of(run), before);
}

// Item 3: two runs on one run_dir both exited 0 and lost each other's records.
TEST_F(TrainProgram, ALockedRunDirectoryIsRefusedNamingTheHolder) {
  const std::string run = path("run");
  std::filesystem::create_directories(run);
  {
    cg::train::RunLock held(run);  // this test process is the other run
    expect_error(train("--config " + write("c.json", tiny(run))),
                 "pid " + std::to_string(::getpid()));
    EXPECT_FALSE(std::filesystem::exists(run + "/metrics.jsonl")) << "the refused run wrote";
  }
  // A lock left by a run that died is taken over.
  const pid_t dead = ::fork();
  if (dead == 0) ::_exit(0);
  ::waitpid(dead, nullptr, 0);
  std::ofstream(run + "/.lock") << dead << "\n";
  const TrainRun r = train("--config " + path("c.json"));
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(std::filesystem::exists(run + "/.lock"));
}

// Item 5: SIGINT killed the run at once: no message, no checkpoint.
TEST_F(TrainProgram, AnInterruptedDrafterSavesItsStepAndResumesFromIt) {
  const std::string run = path("run");
  const std::string config = write(
      "c.json", replaced(tiny(run), R"("optim": {"steps": 2, "batch_size": 2})",
                         R"("optim": {"steps": 100000, "batch_size": 2}, "checkpoint_every": 0)"));
  const pid_t pid = start_train("--config " + config);
  ASSERT_TRUE(wait_for(run + "/metrics.jsonl", R"("phase":"drafter")")) << slurp(path("err"));
  const TrainRun r = stop(pid, SIGINT);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  const size_t at = r.err.find("drafter training: interrupted at step ");
  ASSERT_NE(at, std::string::npos) << r.err;
  const int64_t step = std::stoll(r.err.substr(at + 38));
  EXPECT_NE(r.err.find("; run the same command to resume"), std::string::npos) << r.err;
  // The signal is answered when it comes, not only at the step boundary.
  EXPECT_NE(r.err.find("chunkgrad: stopping at the next step boundary"), std::string::npos)
      << r.err;
  char name[64];
  std::snprintf(name, sizeof name, "/drafter/step_%08lld.safetensors",
                static_cast<long long>(step));
  EXPECT_TRUE(std::filesystem::exists(run + name)) << r.err;
  EXPECT_FALSE(std::filesystem::exists(run + "/.lock"));
  // The same command goes on from that step (stopped again at once: the test does not
  // train 100000 steps).
  const pid_t again = start_train("--config " + config);
  bool resumed = false;
  for (int i = 0; i < 1200 && !resumed; ++i) {
    resumed = steps_logged(run, "drafter").count(step + 1) > 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const TrainRun r2 = stop(again, SIGTERM);
  ASSERT_TRUE(resumed) << r2.err;
  EXPECT_EQ(r2.exit_code, 130) << r2.err;
  for (const auto& [s, n] : steps_logged(run, "drafter")) EXPECT_EQ(n, 1) << "drafter step " << s;
}

// Items 5 and 6: an interrupted target training lost everything, and a repeated one left
// its steps twice in metrics.jsonl.
TEST_F(TrainProgram, AnInterruptedTargetSavesItsStateAndLogsEachStepOnce) {
  const std::string run = path("run");
  const std::string config =
      write("c.json", replaced(tiny(run), R"("optim": {"steps": 3, "batch_size": 2})",
                               R"("optim": {"steps": 100000, "batch_size": 2})"));
  int64_t last = 0;
  for (int round = 0; round < 2; ++round) {
    const pid_t pid = start_train("--config " + config);
    ASSERT_TRUE(wait_for(run + "/metrics.jsonl", R"("step":)" + std::to_string(last + 10) + "}"))
        << slurp(path("err"));
    const TrainRun r = stop(pid, SIGINT);
    EXPECT_EQ(r.exit_code, 130) << r.err;
    const size_t at = r.err.find("target training: interrupted at step ");
    ASSERT_NE(at, std::string::npos) << r.err;
    const int64_t step = std::stoll(r.err.substr(at + 37));
    EXPECT_GT(step, last) << "round " << round << " did not go on from the saved step";
    last = step;
    EXPECT_TRUE(std::filesystem::exists(run + "/target/interrupted.safetensors"));
  }
  const auto steps = steps_logged(run, "target");
  EXPECT_EQ(static_cast<int64_t>(steps.size()), last);
  for (const auto& [s, n] : steps) EXPECT_EQ(n, 1) << "target step " << s;
}

// Item 7: a full disk left step_N.safetensors.tmp.tmp and metrics.jsonl.tmp behind.
// Simulated with a file-size limit (root obeys it too), SIGXFSZ ignored.
TEST_F(TrainProgram, AFullDiskLeavesNoTemporaries) {
  const std::string run = path("run");
  const std::string config = write("c.json", tiny(run));
  const std::string cmd = "trap '' XFSZ; ulimit -f 8; CHUNKGRAD_NUM_THREADS=1 exec '" +
                          std::string(CHUNKGRAD_CLI) + "' train --config '" + config + "' >'" +
                          path("out") + "' 2>'" + path("err") + "'";
  const int status = std::system(("bash -c \"" + cmd + "\"").c_str());
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 1) << slurp(path("err"));
  EXPECT_NE(slurp(path("err")).find("File too large"), std::string::npos) << slurp(path("err"));
  for (const auto& [file, bytes] : files_of(run))
    EXPECT_EQ(file.find(".tmp"), std::string::npos) << file;
  EXPECT_EQ(train("--config " + config).exit_code, 0) << "the retry failed";
}

// Item 10: a --fresh run that failed left the old summary.json beside its new config.json,
// and --fresh deleted the old checkpoints before a new one existed.
TEST_F(TrainProgram, AFailedFreshRunLeavesNoOldSummaryAndKeepsOldCheckpoints) {
  const std::string run = path("run");
  ASSERT_EQ(train("--config " + write("c.json", tiny(run))).exit_code, 0);
  ASSERT_TRUE(std::filesystem::exists(run + "/summary.json"));
  const std::string diverging = replaced(
      tiny(run), R"("optim": {"steps": 2, "batch_size": 2})",
      R"("optim": {"steps": 40, "batch_size": 2, "lr": 10, "weight_decay": 10, "grad_clip": 0, "warmup_ratio": 0}, "checkpoint_every": 0)");
  expect_error(train("--config " + write("d.json", diverging) + " --fresh"), "the drafter loss is");
  EXPECT_FALSE(std::filesystem::exists(run + "/summary.json"))
      << "the earlier run's summary survived a failed run";
  EXPECT_TRUE(std::filesystem::exists(run + "/drafter/step_00000002.safetensors"))
      << "the earlier run's checkpoint went before this run saved one";
}

// ---- issue 18, late failures: everything checked before the first expensive stage ----

// Item 11: an unwritable target/, drafter/ or traces/ folder was found after training
// ("cannot open ...tmp.tmp for writing", no reason).
TEST_F(TrainProgram, UnwritableOutputFoldersFailBeforeTraining) {
  for (const std::string sub : {"target", "drafter", "traces"}) {
    SCOPED_TRACE(sub);
    const std::string run = path("run_" + sub);
    std::filesystem::create_directories(run);
    if (!make_unwritable_dir(run + "/" + sub)) {
      GTEST_SKIP() << "no way to make an unwritable folder here (root without /sys): not tested";
    }
    const std::string config = write(
        "c_" + sub + ".json",
        replaced(tiny(run), R"("memory": {"enabled": false})", R"("memory": {"enabled": true})"));
    const TrainRun r = train("--config " + config);
    expect_error(r, "cannot create files in " + run + "/" + sub);
    EXPECT_TRUE(r.err.find("Permission denied") != std::string::npos ||
                r.err.find("Read-only file system") != std::string::npos)
        << r.err;
    EXPECT_EQ(steps_logged(run, "target").size(), 0u) << "the target trained first";
  }
}

// Item 12: eval.block_size had no upper bound (INT64_MAX overflowed the cache size, 1e8 ran
// out of memory after training), and a size other than the drafter's was not mentioned.
TEST_F(TrainProgram, EvalBlockSizeIsBoundedAndAnotherSizeThanTheDrafterIsWarned) {
  const std::string run = path("run");
  for (const std::string big : {"9223372036854775807", "100000000", "4097"}) {
    expect_error(
        train("--config " +
              write("c.json", replaced(tiny(run), R"("accuracy_sequences": 1)",
                                       R"("accuracy_sequences": 1, "block_size": )" + big))),
        "eval.block_size: must be 0 (drafter.block_size) or from 2 to 4096, got " + big);
  }
  EXPECT_FALSE(std::filesystem::exists(run + "/target"));
  const TrainRun r =
      train("--config " + write("d.json", replaced(tiny(run), R"("accuracy_sequences": 1)",
                                                   R"("accuracy_sequences": 1, "block_size": 6)")));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: eval.block_size 6 differs from drafter.block_size 4"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.out.find("(block 6, trained on blocks of 4)"), std::string::npos) << r.out;
}

// Item 13: a corpus with no line of 2 bytes or more was found only after target training.
TEST_F(TrainProgram, ACorpusWithoutPromptsFailsBeforeTraining) {
  const std::string run = path("run");
  std::string text;
  for (int i = 0; i < 200; ++i) text += "a\n";
  const TrainRun r = train("--config " + write("c.json", tiny(run, write("corpus.txt", text))));
  expect_error(r, "corpus: no line of at least 2 bytes");
  EXPECT_EQ(steps_logged(run, "target").size(), 0u) << "the target trained first";
}

// Item 13: a prompt of 200 KB (the text before ": ") made the drafter-data stage seem to
// hang. It is cut to its last kMaxPromptBytes bytes, and the run says so.
TEST_F(TrainProgram, ALongPromptIsCutAndTheRunSaysSo) {
  const std::string run = path("run");
  std::string text;
  for (int i = 0; i < 3; ++i)
    text += std::string(3000, static_cast<char>('a' + i)) + ": answer " + std::to_string(i) + "\n";
  const TrainRun r = train("--config " + write("c.json", tiny(run, write("corpus.txt", text))));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: corpus: 4 of 4 prompts (the text before a line's first \": \") "
                       "were longer than "
                       "1024 bytes and were cut to their last 1024 bytes"),
            std::string::npos)
      << r.err;
}

// Items 13 and 14: a drafter checkpoint whose tensors do not fit this drafter, or hold NaN,
// was found only after the target and the drafter data were made (the NaN one then blamed
// the learning rate). Both are refused up front, the run directory unchanged.
TEST_F(TrainProgram, AMismatchedOrNonFiniteDrafterCheckpointIsRefusedBeforeAnyStage) {
  const std::string run = path("run"), other = path("other");
  const std::string config = write("c.json", tiny(run));
  ASSERT_EQ(train("--config " + config).exit_code, 0);
  ASSERT_EQ(train("--config " + write("o.json", replaced(tiny(other), R"("hidden_size": 16)",
                                                         R"("hidden_size": 24)")))
                .exit_code,
            0);
  const std::string mine = run + "/drafter/step_00000002.safetensors";
  const std::string newest = run + "/drafter/step_00000003.safetensors";
  // The other run's tensors under this run's metadata: the header checks all pass.
  {
    const auto reader = cg::safetensors::open(other + "/drafter/step_00000002.safetensors");
    const auto tensors = reader->load_all();
    cg::safetensors::save_file({tensors.begin(), tensors.end()}, newest,
                               cg::safetensors::open(mine)->metadata());
  }
  auto before = files_of(run);
  TrainRun r = train("--config " + config);
  expect_error(r, "step_00000003.safetensors' does not fit this drafter");
  EXPECT_NE(r.err.find("the run directory is unchanged"), std::string::npos) << r.err;
  EXPECT_EQ(files_of(run), before);
  // NaN bytes in the first tensor of an otherwise intact checkpoint.
  std::filesystem::remove(newest);
  const std::string poisoned = with_nan(mine, 0);
  std::ofstream(mine, std::ios::binary | std::ios::trunc) << poisoned;
  before = files_of(run);
  r = train("--config " + config);
  expect_error(r, "step_00000002.safetensors' is damaged");
  EXPECT_NE(r.err.find("holds nan at element 0"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("the run directory is unchanged"), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("lr"), std::string::npos) << r.err;
  EXPECT_EQ(files_of(run), before);
}

// ---- issue 18, confusing output ----

// Item 16: the error line was glued to the progress bar's ("... ETA 0:01 chunkgrad train:
// error: ...").
TEST_F(TrainProgram, TheErrorLineStartsItsOwnLineAfterAProgressBar) {
  const std::string run = path("run");
  std::string config = replaced(tiny(run), R"("progress": false)", R"("progress": true)");
  config = replaced(
      config, R"("optim": {"steps": 3, "batch_size": 2})",
      R"("optim": {"steps": 40, "batch_size": 2, "lr": 10, "weight_decay": 10, "grad_clip": 0, "warmup_ratio": 0})");
  const TrainRun r = train("--config " + write("c.json", config));
  EXPECT_EQ(r.exit_code, 1) << r.err;
  ASSERT_NE(r.err.find("ETA"), std::string::npos) << "no progress bar was drawn: " << r.err;
  const size_t at = r.err.find("chunkgrad train: error: the target loss became");
  ASSERT_NE(at, std::string::npos) << r.err;
  EXPECT_TRUE(at == 0 || r.err[at - 1] == '\n') << r.err;
}

// Item 17: memory.enabled=false printed the memory table's heading over an empty table.
TEST_F(TrainProgram, AMemoryStageThatIsOffSaysSo) {
  const TrainRun r = train("--config " + write("c.json", tiny(path("run"))));
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(
      r.out.find("memory of one drafter training step: not measured (memory.enabled is false)"),
      std::string::npos)
      << r.out;
  EXPECT_EQ(r.out.find("(caching allocator):"), std::string::npos) << r.out;
}

// Item 21: config reading that fell back silently or said the wrong thing.
TEST_F(TrainProgram, ConfigMistakesAreNamedNotIgnored) {
  expect_error(train("--config " + dir_.string()), "is a directory; give a file");
  expect_error(
      train("--config " + write("a.json", R"({"seed": 1, "drafter": {"gamma": 4, "gamma": 7}})")),
      "has the key \"drafter.gamma\" twice");
  expect_error(train("--config " + write("b.json", R"({"drafter": {"target_layers": [0, 0]}})")),
               "drafter.target_layers: layer 0 is listed twice");
  // An array's bad element is named (an outside tester read "got an array of 5 values").
  expect_error(
      train("--print-config --config " +
            write("f.json", R"({"drafter": {"target_layers": [1.5, 2, 4, 5, 6]}})")),
      "drafter.target_layers: must be an array of integers, got an array whose element 0 is 1.5");
  expect_error(
      train("--print-config --config " +
            write("g.json", R"({"drafter": {"layer_types": ["full_attention", 3]}})")),
      "drafter.layer_types: must be an array of strings without NUL characters, got an array "
      "whose element 1 is 3");
  expect_error(train("--config ''"), "--config: must not be empty");
  expect_error(train("--run-dir '' --print-config"), "--run-dir: must not be empty");
  expect_error(train("--config " + write("c.json", R"({"drafter": {"num_layers": 1e23}})")),
               "drafter.num_layers: must be an integer, got 1e+23");
  const TrainRun extra = train("--print-config --aa 1 --bb --cc");
  expect_error(extra, "not expected: --aa 1 --bb --cc");
  // A folder name with two dots in it is a name, not a way out of run_dir.
  const TrainRun dots =
      train("--print-config --config " + write("d.json", R"({"memory": {"trace_dir": "a..b"}})"));
  EXPECT_EQ(dots.exit_code, 0) << dots.err;
  expect_error(train("--config " + write("e.json", R"({"memory": {"trace_dir": "a/../../b"}})")),
               "memory.trace_dir");
}

// Item 20: a resume was refused when run_dir was spelled differently (./runs/x, absolute)
// or the folder had moved: run_dir was compared as part of the training config.
TEST_F(TrainProgram, ARunResumesWhereverItsFolderIsAndHoweverItIsSpelled) {
  const std::string run = path("run");
  const std::string corpus = write("corpus.txt", question_corpus());
  const std::string config = write("c.json", tiny(run, corpus));
  ASSERT_EQ(train("--config " + config).exit_code, 0);
  const std::string moved = path("moved");
  std::filesystem::rename(run, moved);
  std::filesystem::rename(corpus, path("corpus2.txt"));  // the corpus moved too: same bytes
  const std::string moved_config = write("m.json", tiny(moved, path("corpus2.txt")));
  for (const std::string spelled :
       {moved, dir_.string() + "/./moved", "'" + dir_.string() + "/x/../moved'"}) {
    const TrainRun r = train("--config " + moved_config + " --run-dir " + spelled);
    ASSERT_EQ(r.exit_code, 0) << spelled << ": " << r.err;
    EXPECT_NE(r.out.find("drafter training: none (resumed at step 2, the last)"), std::string::npos)
        << r.out;
  }
}

// Item 23: a resume with nothing to train left a stray " 0:00" line, and stage times were
// raw doubles ("12.345678 s").
TEST_F(TrainProgram, StageLinesAreReadableAndAnEmptyStageDrawsNothing) {
  const std::string run = path("run");
  const std::string config =
      write("c.json", replaced(tiny(run), R"("progress": false)", R"("progress": true)"));
  const TrainRun first = train("--config " + config);
  ASSERT_EQ(first.exit_code, 0) << first.err;
  for (const char* stage : {"chunkgrad train: target: trained (",
                            "chunkgrad train: drafter data: 2 target generations, "}) {
    const size_t at = first.err.find(stage);
    ASSERT_NE(at, std::string::npos) << stage << "\n" << first.err;
    const std::string line = first.err.substr(at, first.err.find('\n', at) - at);
    // "12.3 s" or "3:05", not std::to_string's "12.345678 s".
    EXPECT_TRUE(std::regex_search(line, std::regex(R"((, | \()(\d+\.\d s|\d+:\d\d)\)?$)"))) << line;
  }
  EXPECT_NE(first.err.find("chunkgrad train: drafter data: the target continues 2 prompts"),
            std::string::npos)
      << first.err;
  EXPECT_NE(first.err.find("chunkgrad train: evaluation: "), std::string::npos) << first.err;
  // The drafter-data and evaluation stages draw bars too (prompts done, tokens/s, ETA).
  for (const char* bar : {"data     [", "held-out [", "decoding ["})
    EXPECT_NE(first.err.find(std::string("\r") + bar), std::string::npos) << bar << first.err;
  const TrainRun again = train("--config " + config);
  ASSERT_EQ(again.exit_code, 0) << again.err;
  EXPECT_NE(again.err.find("nothing to train"), std::string::npos) << again.err;
  std::istringstream lines(again.err);
  for (std::string line; std::getline(lines, line);) EXPECT_NE(line, " 0:00") << again.err;
}

}  // namespace

// An unknown or missing subcommand is named, with the list of subcommands.
TEST_F(TrainProgram, UnknownSubcommandIsNamed) {
  auto top_level_error = [](const TrainRun& r, const std::string& what) {
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_EQ(r.err.rfind("chunkgrad: error: ", 0), 0u) << r.err;
    EXPECT_NE(r.err.find(what), std::string::npos) << r.err;
  };
  top_level_error(run("bogus"), "unknown subcommand 'bogus'; the subcommands are: train, trace");
  top_level_error(run(""), "a subcommand is required, one of: train, trace");
  // A missing option of a real subcommand still says which option.
  expect_error(run("export"), "--out is required", "export");
}

// An outside tester: drafter.num_kv_heads 3 (for 2 heads), a MASK id outside the
// vocabulary or a byte of the data, and the 27B layout's hidden size on the toy target all
// failed only after the target had trained (51 s to minutes), naming no field; a NUL in
// run_dir became the folder "nul"; /dev/zero as the config was read until memory ran out.
TEST_F(TrainProgram, WhatTheConfigAloneDecidesFailsBeforeTheTargetTrains) {
  const std::string run = path("never");
  const std::string config = "--config " + write("c.json", tiny(run));
  for (const auto& [set, what] : std::vector<std::pair<std::string, std::string>>{
           {"drafter.num_kv_heads=3", "drafter.num_kv_heads 3"},
           {"drafter.mask_token_id=100000",
            "drafter.mask_token_id 100000 is not in the target's vocabulary"},
           {"drafter.mask_token_id=32", "drafter.mask_token_id is 32, a token of the toy"},
           {"drafter.mask_token_id=256", "drafter.mask_token_id is 256, a token of the toy"},
           {"drafter.hidden_size=5120", "drafter.hidden_size is 5120 but the target's is 16"}}) {
    SCOPED_TRACE(set);
    const TrainRun r = train(config + " --set " + set);
    expect_error(r, what);
    EXPECT_NE(r.err.find("train config:"), std::string::npos) << r.err;
    EXPECT_FALSE(std::filesystem::exists(run)) << "the run directory was made";
  }
  expect_error(train(config + R"( --set 'run_dir="nul\u0000x"')"),
               "run_dir: must not contain a NUL character");
  EXPECT_FALSE(std::filesystem::exists(path("nul")));
  expect_error(train("--config /dev/zero --print-config"), "is a device, not a file");
  // A run directory that is a file, or a symlink to nothing: said in words, not the
  // system's "Not a directory" and "File exists".
  expect_error(train(config + " --run-dir " + write("afile", "x")),
               "afile is a file, not a folder");
  std::filesystem::create_symlink(path("nowhere"), path("dangling"));
  expect_error(train(config + " --run-dir " + path("dangling")),
               "is a symlink to " + path("nowhere") + ", which does not exist");
  expect_error(train("--print-config --config " + write("k.json", R"({"n\u0000ame": 1})")),
               "unknown field 'n?ame'");
}
