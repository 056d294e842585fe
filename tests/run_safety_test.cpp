// Why this file exists: the shared mechanisms that keep a run's files safe (issue 18's
// data-loss items), each checked on its own: atomic writes (core/atomic_file.h), the run
// lock (train/run_lock.h), the stop flag (train/stop_signal.h), content fingerprints
// (train/fingerprint.h), and the summary saying exactly what the lossless check found.
// The programs that use them are checked in tests/train_program_test.cpp.
#include <gtest/gtest.h>

#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/factories.h"
#include "nn/safetensors.h"
#include "train/corpus.h"
#include "train/fingerprint.h"
#include "train/pipeline.h"
#include "train/run_lock.h"
#include "train/stop_signal.h"
#include "train/target_lm.h"
#include "train/tokenizer.h"
#include "train_test_util.h"

namespace cg {
namespace {

class RunSafety : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("chunkgrad_run_safety_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }
  static std::string slurp(const std::string& p) {
    std::ifstream in(p, std::ios::binary);
    std::stringstream s;
    s << in.rdbuf();
    return s.str();
  }
  // Names of the files in the test folder that look like temporaries.
  std::vector<std::string> temporaries() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::recursive_directory_iterator(dir_)) {
      if (e.path().filename().string().find(".tmp") != std::string::npos)
        out.push_back(e.path().string());
    }
    return out;
  }
  std::filesystem::path dir_;
};

// Note [Outputs that are not files]: an outside tester's `chunkgrad trace ... --html
// /dev/null`, as root, renamed a regular file over /dev/null. A pipe stands in for the
// device here (no root needed, nothing of the machine at stake): it is written through
// and stays a pipe. A symlink to a file keeps being a symlink; its target is replaced.
TEST_F(RunSafety, AnAtomicFileWritesThroughPipesAndKeepsSymlinks) {
  const std::string fifo = path("pipe");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  std::string got;
  std::thread reader([&] { got = slurp(fifo); });
  {
    AtomicFile f(fifo, "the test output");
    EXPECT_EQ(f.temp_path(), "");
    f.write("through the pipe");
    f.commit();
  }
  reader.join();
  EXPECT_EQ(got, "through the pipe");
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  std::ofstream(path("real.txt")) << "old";
  std::filesystem::create_symlink(path("real.txt"), path("link.txt"));
  {
    AtomicFile f(path("link.txt"), "the test output");
    f.write("new");
    f.commit();
  }
  EXPECT_TRUE(std::filesystem::is_symlink(path("link.txt")));
  EXPECT_EQ(slurp(path("real.txt")), "new");
  EXPECT_TRUE(temporaries().empty());
}

TEST_F(RunSafety, AnAtomicFileReplacesTheTargetOnlyWhenCommitted) {
  std::ofstream(path("out.txt")) << "old";
  {
    AtomicFile f(path("out.txt"), "the test output");
    EXPECT_EQ(f.temp_path(), path("out.txt") + ".tmp");
    f.write("new contents");
    EXPECT_EQ(slurp(path("out.txt")), "old") << "the target changed before commit";
    f.commit();
  }
  EXPECT_EQ(slurp(path("out.txt")), "new contents");
  {
    AtomicFile f(path("out.txt"), "the test output");
    f.write("abandoned");
  }  // destroyed without commit: an exception on the way
  EXPECT_EQ(slurp(path("out.txt")), "new contents");
  EXPECT_TRUE(temporaries().empty());
}

TEST_F(RunSafety, AnUnwritablePlaceFailsUpFrontNamingWhat) {
  try {
    AtomicFile f(path("no/such/folder/out.txt"), "--html");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--html"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("No such file or directory"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(check_writable_dir(path("missing"), "traces"), Error);
  EXPECT_NO_THROW(check_writable_dir(dir_.string(), "traces"));
  EXPECT_TRUE(temporaries().empty());
}

// A full disk, simulated with a file-size limit (which root obeys too): the write fails,
// the old file stays, and no temporary is left for the retry to trip on.
TEST_F(RunSafety, AFailedWriteLeavesTheOldFileAndNoTemporary) {
  std::ofstream(path("big.bin")) << "old";
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    std::signal(SIGXFSZ, SIG_IGN);
    struct rlimit limit {
      4096, 4096
    };
    ::setrlimit(RLIMIT_FSIZE, &limit);
    try {
      write_file_atomically(path("big.bin"), std::string(1 << 16, 'x'), "the test output");
    } catch (const Error&) { ::_exit(3); }
    ::_exit(0);
  }
  int status = 0;
  ::waitpid(child, &status, 0);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 3) << "the failed write was not reported";
  EXPECT_EQ(slurp(path("big.bin")), "old");
  EXPECT_TRUE(temporaries().empty());
}

TEST_F(RunSafety, TheRunLockNamesItsHolderAndIsTakenOverWhenTheHolderIsDead) {
  {
    train::RunLock held(dir_.string());
    try {
      train::RunLock second(dir_.string());
      FAIL() << "two locks on one run directory";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("pid " + std::to_string(::getpid())), std::string::npos)
          << e.what();
    }
  }
  EXPECT_FALSE(std::filesystem::exists(path(".lock"))) << "a released lock leaves its file";
  // A lock file left by a process that died: its PID is no longer running.
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) ::_exit(0);
  ::waitpid(child, nullptr, 0);
  std::ofstream(path(".lock")) << child << "\n";
  train::RunLock taken(dir_.string());
  EXPECT_EQ(taken.stale_pid(), child);
}

TEST_F(RunSafety, AStopSignalOnlySetsTheFlag) {
  struct sigaction before {};
  sigaction(SIGTERM, nullptr, &before);
  {
    train::StopSignals signals;
    EXPECT_FALSE(train::stop_requested());
    ::raise(SIGTERM);  // without the handler this would end the test binary
    EXPECT_TRUE(train::stop_requested());
    EXPECT_TRUE(train::stop_agreed());
    train::StopSignals nested;  // a second run in the process: its own handlers, flag down
    EXPECT_FALSE(train::stop_requested());
  }
  struct sigaction after {};
  sigaction(SIGTERM, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler) << "the handlers before the run did not come back";
  EXPECT_FALSE(train::stop_requested());
  const train::Interrupted stopped("drafter", 7);
  EXPECT_NE(
      std::string(stopped.what()).find("interrupted at step 7; run the same command to resume"),
      std::string::npos)
      << stopped.what();
}

TEST_F(RunSafety, FingerprintsFollowTheBytesNotThePath) {
  EXPECT_EQ(content_hash("abc"), content_hash("abc"));
  EXPECT_NE(content_hash("abc"), content_hash("abd"));
  EXPECT_EQ(content_hash("abc").size(), 32u);
  std::ofstream(path("a.txt")) << "abc";
  EXPECT_EQ(file_content_hash(path("a.txt"), "x"), content_hash("abc"));
  train::TrainConfig c;
  const nlohmann::json before = train::data_fingerprint(c, "corpus one");
  EXPECT_NE(before, train::data_fingerprint(c, "corpus two"));
  std::filesystem::create_directories(path("ckpt"));
  const std::string file = path("ckpt/model.safetensors");
  safetensors::save_file({{"w", from_vector({1, 2, 3}, {3})}}, file);
  c.target.checkpoint = file;
  const nlohmann::json with_target = train::data_fingerprint(c, "corpus one");
  // The same file named by its folder is the same checkpoint (an outside tester's resume
  // was refused as "changed"), and a file beside it that the load does not read takes no
  // part.
  c.target.checkpoint = path("ckpt");
  std::ofstream(path("ckpt/other.index.json")) << "{}";
  EXPECT_EQ(with_target, train::data_fingerprint(c, "corpus one"));
  safetensors::save_file({{"w", from_vector({1, 2, 4}, {3})}}, file);
  EXPECT_NE(with_target, train::data_fingerprint(c, "corpus one"))
      << "an edited target.checkpoint went unnoticed";
}

// "lossless: identical tokens" was printed whenever lossless was true, also when outputs
// diverged at near ties.
TEST_F(RunSafety, TheSummarySaysWhetherTokensWereIdenticalOrTiedOnly) {
  nlohmann::json s = testing_train::summary_example();
  std::string text = train::summary_text(s);
  EXPECT_EQ(text.find("identical tokens"), std::string::npos) << text;
  EXPECT_NE(text.find("2 prompts diverged"), std::string::npos) << text;
  s["identical"] = true;
  s["tie_divergences"] = 0;
  text = train::summary_text(s);
  EXPECT_NE(text.find("lossless: identical tokens"), std::string::npos) << text;
  s["lossless"] = false;
  s["identical"] = false;
  EXPECT_NE(train::summary_text(s).find("NOT LOSSLESS"), std::string::npos);
  // Issue 18 item 19: tau and the two acceptance lengths side by side, each said what it counts.
  text = train::summary_text(s);
  EXPECT_NE(text.find("expected acceptance length 1.50 (1 + the sum over k of the product of the "
                      "slot 1..k accuracies"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("measured per block 1.50 (1 + each block's correct prefix"),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("tau above is what decoding achieved"), std::string::npos) << text;
  // Issue 18 items 17 and 22: no memory stage is said in words; a memory table says how
  // its "largest graph node" counts (the traces' "largest autograd holder" counts otherwise).
  s["memory"] = nlohmann::json::array();
  EXPECT_NE(train::summary_text(s).find("not measured (memory.enabled is false)"),
            std::string::npos);
  s["memory"] = {{{"report", ""}}};
  s["memory_table"] = "the table\n";
  text = train::summary_text(s);
  EXPECT_NE(
      text.find(
          "the table\n  (largest graph node: a node name's saved tensors once the forward is done"),
      std::string::npos)
      << text;
}

// An interrupted target training goes on from its saved step with the very steps an
// uninterrupted one takes: the same losses (weights, optimiser state and the generator's
// position all come back).
TEST_F(RunSafety, AnInterruptedTargetTrainingResumesExactly) {
  train::StopSignals signals;  // clears the stop flag now and when the test ends
  train::TargetConfig t = testing_train::ci_train_config(path("run")).target;
  t.optim.steps = 20;
  const std::vector<int64_t> tokens =
      train::ByteTokenizer().encode(train::corpus_text(train::generate_corpus_lines(1, 100)));
  auto fresh_lm = [&] {
    Generator init(5);
    return std::make_unique<nn::Qwen3ForCausalLM>(
        train::target_model_config(t, train::ByteTokenizer::kVocabSize),
        nn::InitOptions{.generator = &init});
  };
  std::map<int64_t, double> straight, resumed;
  {
    auto lm = fresh_lm();
    train::train_target(*lm, tokens, t, 3, {.on_step = [&](int64_t s, int64_t, double l, int64_t) {
      straight[s] = l;
    }});
  }
  const std::string state = path("interrupted.safetensors");
  int64_t stopped_at = 0;
  {
    auto lm = fresh_lm();
    auto on_step = [&](int64_t s, int64_t, double l, int64_t) {
      resumed[s] = l;
      if (s == 10) train::request_stop();
    };
    try {
      train::train_target(*lm, tokens, t, 3,
                          {.on_step = on_step, .resume_file = state, .fingerprint = "f"});
      FAIL() << "the stop was not taken";
    } catch (const train::Interrupted& e) { stopped_at = e.step(); }
  }
  ASSERT_GT(stopped_at, 10);
  ASSERT_TRUE(std::filesystem::exists(state));
  {
    train::StopSignals clear;  // the flag down again
    auto lm = fresh_lm();
    int64_t first = -1;
    train::train_target(*lm, tokens, t, 3,
                        {.on_step = [&](int64_t s, int64_t, double l, int64_t) { resumed[s] = l; },
                         .on_start = [&](int64_t f) { first = f; },
                         .resume_file = state,
                         .fingerprint = "f"});
    EXPECT_EQ(first, stopped_at);
  }
  ASSERT_EQ(resumed.size(), straight.size());
  for (const auto& [s, l] : straight) EXPECT_EQ(resumed[s], l) << "step " << s;
}

}  // namespace
}  // namespace cg
