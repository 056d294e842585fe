// Why this file exists: `mpirun -np 2 chunkgrad train` must train exactly what one process
// trains with the same config (docs/data_parallel.md): these tests run the built program
// on a synthetic toy config (no target, a fraction of a second per run) on 1 process and
// on 2 ranks, and compare the loss curve and every tensor of the final checkpoint within
// fp32 summation tolerance; they resume a 2-rank checkpoint on 1 process and the other way
// round, check weak scaling against the one-process step of twice the batch, and end a
// job whose rank 1 throws. Skipped when mpirun is not installed or the build has no MPI
// (all but the one that names the rank on errors met before the ranks connect).
#include <cmath>
#include <cstdlib>

#include "dist/communicator.h"
#include "tests/train_program_fixture.h"

namespace {

using train_program_fixture::slurp;
using train_program_fixture::TrainProgram;
using train_program_fixture::TrainRun;

class DataParallelProgram : public TrainProgram {
 protected:
  void SetUp() override {
    TrainProgram::SetUp();
    if (!cg::dist::built_with_mpi()) GTEST_SKIP() << "this build has no MPI (CHUNKGRAD_MPI)";
    if (std::system("command -v mpirun >/dev/null 2>&1") != 0) GTEST_SKIP() << "no mpirun";
  }
  // The toy config at a CI size, features.source synthetic, 4 steps of 2 micro-batches of
  // 4 sequences, a checkpoint every 2 steps (all kept), plus `extra` options.
  std::string args(const std::string& run_dir, const std::string& extra = "") const {
    return "train --config '" + std::string(CHUNKGRAD_SOURCE_DIR) +
           "/configs/toy.json' --no-progress --run-dir '" + path(run_dir) +
           "' --set features.source=synthetic --set drafter.hidden_size=32 "
           "--set drafter.vocab_size=128 --set drafter.num_target_layers=6 "
           "--set drafter.num_heads=2 --set drafter.num_kv_heads=1 --set drafter.head_dim=16 "
           "--set drafter.optim.steps=4 --set drafter.optim.batch_size=4 "
           "--set drafter.optim.grad_accum=2 --set drafter.max_anchors=4 "
           "--set drafter.checkpoint_every=2 --set drafter.keep_checkpoints=0 "
           "--set data.num_sequences=8 --set data.max_new_tokens=32 "
           "--set eval.accuracy_sequences=2 --set memory.enabled=false --set dist.bucket_mb=0.01 " +
           extra;
  }
  TrainRun one(const std::string& run_dir, const std::string& extra = "") const {
    return run(args(run_dir, extra));
  }
  // `mpirun -np NP chunkgrad ...` with the environment `env` ("-x NAME=VALUE ..."). Under
  // AddressSanitizer the ranks run without leak checking: Open MPI leaks from plugins it has
  // unloaded, which no suppression can name (Note [MPI under the sanitizers]).
  TrainRun ranks(const std::string& run_dir, const std::string& extra = "",
                 const std::string& env = "", int np = 2) const {
    return run(args(run_dir, extra),
               "mpirun -np " + std::to_string(np) +
                   " --oversubscribe --allow-run-as-root -x CHUNKGRAD_NUM_THREADS=1 -x "
                   "ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:check_initialization_order=1 " +
                   env + " ");
  }
  // ranks() started in the background; the PID of its mpirun.
  pid_t start_ranks(const std::string& run_dir, const std::string& extra,
                    const std::string& env) const {
    const std::string cmd =
        "exec mpirun -np 2 --oversubscribe --allow-run-as-root -x CHUNKGRAD_NUM_THREADS=1 " + env +
        " '" + CHUNKGRAD_CLI + "' " + args(run_dir, extra) + " >'" + path("out") + "' 2>'" +
        path("err") + "'";
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::execl("/bin/sh", "sh", "-c", cmd.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    return pid;
  }
  // Waits for a background job (up to `seconds`, then kills it); its exit code and output.
  TrainRun wait_job(pid_t pid, int seconds = 120) const {
    int status = 0;
    for (int i = 0; i < seconds * 20 && ::waitpid(pid, &status, WNOHANG) == 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (::waitpid(pid, &status, WNOHANG) == 0) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
    }
    return collected(status);
  }
  // The drafter's metrics lines of a run, by step.
  std::map<int64_t, nlohmann::json> metrics(const std::string& run_dir) const {
    std::map<int64_t, nlohmann::json> m;
    std::istringstream log(slurp(path(run_dir) + "/metrics.jsonl"));
    for (std::string line; std::getline(log, line);) {
      const auto j = nlohmann::json::parse(line);
      if (j["phase"] == "drafter") m[j["step"].get<int64_t>()] = j;
    }
    return m;
  }
  // Losses and gradient norms of two runs within fp32 summation tolerance, step by step.
  void expect_same_curve(const std::string& a, const std::string& b, double tol = 1e-5) const {
    const auto ma = metrics(a), mb = metrics(b);
    ASSERT_EQ(ma.size(), mb.size());
    for (const auto& [step, ja] : ma) {
      const auto& jb = mb.at(step);
      for (const char* key : {"loss", "grad_norm"}) {
        const double x = ja[key].get<double>(), y = jb[key].get<double>();
        EXPECT_NEAR(x, y, tol * std::max(1.0, std::fabs(x))) << key << " at step " << step;
      }
      EXPECT_EQ(ja["label_tokens"], jb["label_tokens"]) << "step " << step;
      if (tol <= 1e-5)
        EXPECT_NEAR(ja["slot1_accuracy"].get<double>(), jb["slot1_accuracy"].get<double>(), 1e-9);
    }
  }
  // Every tensor of two checkpoints (parameters and AdamW state) within fp32 tolerance.
  static void expect_same_checkpoint(const std::string& a, const std::string& b,
                                     double tol = 1e-3) {
    const auto ra = cg::safetensors::open(a), rb = cg::safetensors::open(b);
    ASSERT_EQ(ra->names(), rb->names());
    for (const std::string& name : ra->names()) {
      const std::vector<double> x = ra->load(name).to_vector(), y = rb->load(name).to_vector();
      ASSERT_EQ(x.size(), y.size()) << name;
      double worst = 0;
      for (size_t i = 0; i < x.size(); ++i)
        worst = std::max(worst, std::fabs(x[i] - y[i]) / (1e-3 + std::fabs(x[i])));
      EXPECT_LT(worst, tol) << name << " differs between " << a << " and " << b;
    }
  }
  std::string step_file(const std::string& run_dir, int step) const {
    char name[64];
    std::snprintf(name, sizeof name, "/drafter/step_%08d.safetensors", step);
    return path(run_dir) + name;
  }
};

// One process vs 2 ranks (same_batch): the loss curve and the final checkpoint; then the
// 2-rank checkpoint of step 2 resumed on 1 process, and the 1-process one on 2 ranks, both
// end at the one-process run's step 4.
TEST_F(DataParallelProgram, TwoRanksTrainWhatOneProcessTrainsAndResumeAcross) {
  const TrainRun a = one("one");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const TrainRun b = ranks("two");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  EXPECT_NE(b.out.find("summary:"), std::string::npos) << b.out;  // rank 0 prints, once
  EXPECT_EQ(b.out.find("summary:"), b.out.rfind("summary:")) << b.out;
  expect_same_curve("one", "two");
  expect_same_checkpoint(step_file("one", 4), step_file("two", 4));
  const TrainRun c = one("two_then_one", "--resume-from '" + step_file("two", 2) + "'");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  expect_same_checkpoint(step_file("one", 4), step_file("two_then_one", 4));
  const TrainRun d = ranks("one_then_two", "--resume-from '" + step_file("one", 2) + "'");
  ASSERT_EQ(d.exit_code, 0) << d.err;
  expect_same_checkpoint(step_file("one", 4), step_file("one_then_two", 4));
}

// dist.mode weak on 2 ranks of batch_size 2 is the one-process step of batch_size 4.
TEST_F(DataParallelProgram, WeakScalingIsTheStepOfTheBiggerBatch) {
  const TrainRun a = one("one");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const TrainRun b = ranks(
      "weak", "--set dist.mode=weak --set drafter.optim.batch_size=2 --set dist.check_every=1");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  expect_same_curve("one", "weak");
}

// ZeRO-1 (optimizer state sharded) trains what plain data parallel and one process train,
// and its checkpoint (the shards gathered) is a plain one. In bf16 each rank rounds its
// own gradient to bf16 before the sum, which AdamW's sign-like steps turn into visible
// differences of small weights after a few steps; so the bf16 masters are checked on one
// rank (sharded over 1: the flat fp32 path against AdamW's per-parameter one), and the
// 2-rank bf16 run must resume on 1 process.
TEST_F(DataParallelProgram, ZeroOneEqualsPlainDataParallel) {
  const TrainRun a = one("one");
  ASSERT_EQ(a.exit_code, 0) << a.err;
  const TrainRun b = ranks("zero1", "--set dist.zero1=true");
  ASSERT_EQ(b.exit_code, 0) << b.err;
  expect_same_curve("one", "zero1");
  expect_same_checkpoint(step_file("one", 4), step_file("zero1", 4));
  const TrainRun c = one("one_bf16", "--set drafter.dtype=bf16");
  ASSERT_EQ(c.exit_code, 0) << c.err;
  const TrainRun d =
      ranks("zero1_bf16_np1", "--set dist.zero1=true --set drafter.dtype=bf16", "", 1);
  ASSERT_EQ(d.exit_code, 0) << d.err;
  expect_same_curve("one_bf16", "zero1_bf16_np1");
  expect_same_checkpoint(step_file("one_bf16", 4), step_file("zero1_bf16_np1", 4));
  const TrainRun e = ranks("zero1_bf16", "--set dist.zero1=true --set drafter.dtype=bf16");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  const auto saved = cg::safetensors::open(step_file("zero1_bf16", 2));
  EXPECT_TRUE(saved->contains("optim.master.0"));  // the gathered fp32 masters
  const TrainRun f = one("zero1_bf16_then_one", "--set drafter.dtype=bf16 --resume-from '" +
                                                    step_file("zero1_bf16", 2) + "'");
  ASSERT_EQ(f.exit_code, 0) << f.err;
}

TEST_F(DataParallelProgram, ABatchTheRanksCannotSplitIsRefusedNamingBothNumbers) {
  const TrainRun r = ranks("odd", "--set drafter.optim.batch_size=3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("batch_size 3 cannot be split over 2 ranks"), std::string::npos) << r.err;
  // Refused before the run directory is made or changed, as a one-process run's checks are.
  EXPECT_FALSE(std::filesystem::exists(path("odd"))) << r.err;
  const TrainRun done = ranks("done");
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const auto before = files_of(path("done"));
  const TrainRun again = ranks("done", "--set drafter.optim.batch_size=3");
  EXPECT_NE(again.exit_code, 0);
  EXPECT_EQ(files_of(path("done")), before) << again.err;
}

// A tester's finding: under mpirun every rank prints the config errors it meets before the
// ranks connect, and those lines did not say whose they were, as the lines of a rank that
// fails later do ("rank 1: ..."). mpirun's launch variables alone make it a rank (nothing
// connects before these errors), so this runs without MPI; a plain run keeps its line.
TEST_F(TrainProgram, ErrorsBeforeTheRanksConnectSayWhichRank) {
  const std::string rank1 =
      "OMPI_COMM_WORLD_SIZE=2 OMPI_COMM_WORLD_RANK=1 OMPI_COMM_WORLD_LOCAL_RANK=1 "
      "OMPI_COMM_WORLD_LOCAL_SIZE=2 ";
  const std::string bad_config = "train --print-config --config '" +
                                 std::string(CHUNKGRAD_SOURCE_DIR) +
                                 "/configs/toy.json' --set drafter.optim.steps=-1";
  for (const std::string& args : {bad_config, std::string("train --print-config --bogus")}) {
    const TrainRun ranked = run(args, rank1);
    EXPECT_EQ(ranked.exit_code, 1) << ranked.err;
    EXPECT_EQ(ranked.err.rfind("rank 1: chunkgrad train: error: ", 0), 0u) << ranked.err;
    const TrainRun plain = run(args);
    EXPECT_EQ(plain.exit_code, 1) << plain.err;
    EXPECT_EQ(plain.err.rfind("chunkgrad train: error: ", 0), 0u) << plain.err;
  }
}

// A rank that throws mid-run ends the whole job, non-zero, with that rank's message.
TEST_F(DataParallelProgram, ARankThatFailsEndsTheJobWithItsMessage) {
  const TrainRun r =
      ranks("dies", "", "-x CHUNKGRAD_DEBUG_FAIL_RANK=1 -x CHUNKGRAD_DEBUG_FAIL_STEP=3");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("rank 1"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("fails at step 3"), std::string::npos) << r.err;
  // mpirun's SIGTERM to rank 0 is no stop: its line must not promise a checkpoint.
  EXPECT_EQ(r.err.find("training saves a checkpoint first"), std::string::npos) << r.err;
}

// Note [Saving together], drafter_trainer.h: a stop signal to rank 0 stops both ranks
// after the same step; rank 1 waits for rank 0's checkpoint (its write slowed by a second
// here) instead of ending the job under it, and the job exits 130 with the checkpoint of
// that step complete, no temporary and the run lock released.
TEST_F(DataParallelProgram, AStopSavesTheCheckpointBeforeTheJobEnds) {
  const pid_t job =
      start_ranks("stop", "--set drafter.optim.steps=1000000 --set drafter.checkpoint_every=0",
                  "-x CHUNKGRAD_DEBUG_SAVE_DELAY_MS=1000");
  ASSERT_TRUE(wait_for(path("stop") + "/metrics.jsonl", "\"phase\":\"drafter\""))
      << wait_job(job, 1).err;
  const long rank0 = std::stol(slurp(path("stop") + "/.lock"));
  ASSERT_GT(rank0, 0);
  ::kill(static_cast<pid_t>(rank0), SIGTERM);
  const TrainRun r = wait_job(job);
  EXPECT_EQ(r.exit_code, 130) << r.err;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(r.err, m, std::regex("interrupted at step ([0-9]+)"))) << r.err;
  const std::string saved = step_file("stop", std::stoi(m[1]));
  ASSERT_TRUE(std::filesystem::exists(saved)) << r.err;
  EXPECT_NO_THROW(cg::safetensors::open(saved)->load("drafter.fc.weight")) << r.err;
  for (const auto& e : std::filesystem::directory_iterator(path("stop") + "/drafter"))
    EXPECT_FALSE(e.path().string().ends_with(".tmp")) << e.path();
  EXPECT_FALSE(std::filesystem::exists(path("stop") + "/.lock")) << r.err;
}

// Note [Ranks started alike], data_parallel.h: ranks started with another --set (mpirun's
// `-np 1 A : -np 1 B`) or resuming from other steps are refused before training, with one
// line naming the field and both values, and the run directory is left as it was.
TEST_F(DataParallelProgram, RanksStartedUnlikeAreRefusedNamingTheField) {
  const std::string launch =
      "mpirun --oversubscribe --allow-run-as-root -x CHUNKGRAD_NUM_THREADS=1 ";
  const std::string cli = std::string("'") + CHUNKGRAD_CLI + "' ";
  const TrainRun lr = run(args("lr", "--set drafter.optim.lr=0.002"),
                          launch + "-np 1 " + cli + args("lr") + " : -np 1 ");
  EXPECT_EQ(lr.exit_code, 1) << lr.err;
  EXPECT_NE(lr.err.find("drafter.optim.lr is 0.002 on rank 1 and 0.003 on rank 0"),
            std::string::npos)
      << lr.err;
  EXPECT_EQ(lr.err.find("chunkgrad train: error:"), lr.err.rfind("chunkgrad train: error:"))
      << lr.err;  // one line, rank 0's, for every rank: no "rank 0: " in front of it
  EXPECT_EQ(lr.err.find("rank 0: chunkgrad"), std::string::npos) << lr.err;
  EXPECT_FALSE(std::filesystem::exists(path("lr"))) << lr.err;  // the folder rank 0 made
  const TrainRun done = ranks("steps");
  ASSERT_EQ(done.exit_code, 0) << done.err;
  const auto before = files_of(path("steps"));
  const TrainRun steps =
      run(args("steps"), launch + "-np 1 " + cli +
                             args("steps", "--resume-from '" + step_file("steps", 2) + "'") +
                             " : -np 1 ");
  EXPECT_EQ(steps.exit_code, 1) << steps.err;
  EXPECT_NE(steps.err.find("resume from different steps (4 on rank 1 and 2 on rank 0)"),
            std::string::npos)
      << steps.err;
  EXPECT_EQ(files_of(path("steps")), before);
  // A second tester: with a checkpoint there, rank 1 alone refused the resume (another lr
  // than the checkpoint's) and ended the job, leaving rank 0's lock and a message about the
  // checkpoint. Now the configs are compared first (Note [Failing together]).
  const TrainRun late =
      run(args("steps", "--set drafter.optim.steps=6 --set drafter.optim.lr=0.002"),
          launch + "-np 1 " + cli + args("steps", "--set drafter.optim.steps=6") + " : -np 1 ");
  EXPECT_EQ(late.exit_code, 1) << late.err;
  EXPECT_NE(late.err.find("drafter.optim.lr is 0.002 on rank 1"), std::string::npos) << late.err;
  EXPECT_EQ(files_of(path("steps")), before);  // (.lock included)
}

// A checkpoint temporary a cut-off save left (a step this run never saves, so no save of
// its own replaces it) is removed once rank 0 holds the lock, with a note.
TEST_F(DataParallelProgram, ALeftoverCheckpointTemporaryIsRemoved) {
  std::filesystem::create_directories(path("tmp") + "/drafter");
  const std::string left = write("tmp/drafter/step_00000007.safetensors.tmp", "half a save");
  const TrainRun r = ranks("tmp");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_FALSE(std::filesystem::exists(left));
  EXPECT_NE(r.err.find("removed " + left), std::string::npos) << r.err;
}

// A metrics log whose last line a kill cut off is whole again after a resume: the cut
// line is dropped with a warning, not kept for the next records to follow.
TEST_F(DataParallelProgram, AMetricsLogCutOffMidLineIsWholeAfterResume) {
  ASSERT_EQ(one("cut").exit_code, 0);
  const std::string log = slurp(path("cut") + "/metrics.jsonl");
  write("cut/metrics.jsonl", log.substr(0, log.size() - 10));
  const TrainRun r = ranks("cut", "--set drafter.optim.steps=6");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("dropped its last line"), std::string::npos) << r.err;
  std::istringstream lines(slurp(path("cut") + "/metrics.jsonl"));
  for (std::string line; std::getline(lines, line);)
    EXPECT_FALSE(nlohmann::json::parse(line, nullptr, false).is_discarded()) << line;
  EXPECT_EQ(metrics("cut").size(), 6u);
}

}  // namespace

// Note [Ranks started alike], data_parallel.h: the same config whose paths hold other bytes
// on another rank (machines without a shared filesystem, or a relative features.data under
// another working directory: mpirun's -wdir here) trained each rank on its own samples,
// exit 0. Now the data's fingerprint is compared with the config, before anything trains.
TEST_F(DataParallelProgram, RanksThatReadOtherBytesAreRefusedBeforeTraining) {
  for (const char* rank : {"a", "b"}) {
    std::filesystem::create_directories(path(rank));
    std::string samples;
    for (int i = 0; i < 12; ++i) {
      samples += "{\"input_ids\": [" + std::to_string(3 + i) + ", 7, 9, " +
                 std::to_string(rank[0] == 'a' ? 11 + i : 12 + i) +
                 ", 5, 6], \"loss_mask\": [0, 0, 1, 1, 1, 1]}\n";
    }
    write(std::string(rank) + "/samples.jsonl", samples);
  }
  const std::string cmd = "train --config '" + std::string(CHUNKGRAD_SOURCE_DIR) +
                          "/configs/toy.json' --no-progress --run-dir '" + path("run") +
                          "' --set features.source=target --set features.target='" +
                          CHUNKGRAD_SOURCE_DIR +
                          "/tests/golden/tiny_qwen3' --set "
                          "'features.data=[\"samples.jsonl\"]' --set 'drafter.target_layers=[0,1]' "
                          "--set drafter.mask_token_id=255 --set eval.accuracy_sequences=2 "
                          "--set drafter.optim.steps=2 --set memory.enabled=false";
  const std::string cli = std::string("'") + CHUNKGRAD_CLI + "' ";
  // (leak checking off in both ranks, as ranks() has it: Note [MPI under the sanitizers];
  // with one -x before the first program, under ASan this job still ended in a leak
  // report, so mpirun's environment and each program get it)
  const std::string asan =
      "ASAN_OPTIONS=detect_leaks=0:halt_on_error=1:check_initialization_order=1";
  const std::string launch = asan + " mpirun --oversubscribe --allow-run-as-root -np 1 -x " + asan +
                             " -wdir '" + path("a") + "' " + cli + cmd + " : -np 1 -x " + asan +
                             " -wdir '" + path("b") + "' ";
  const TrainRun r = run(cmd, launch);
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("the ranks read different data (data_bytes.target_features_xxh3 is "),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("on rank 1 and "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("chunkgrad train: error:"), r.err.rfind("chunkgrad train: error:"))
      << r.err;  // one line, rank 0's
  EXPECT_FALSE(std::filesystem::exists(path("run") + "/metrics.jsonl")) << r.err;  // no step
  // The same bytes on both ranks train (both working directories hold a's samples).
  std::filesystem::copy_file(path("a/samples.jsonl"), path("b/samples.jsonl"),
                             std::filesystem::copy_options::overwrite_existing);
  const TrainRun same = run(cmd, launch);
  EXPECT_EQ(same.exit_code, 0) << same.err;
}
