// Why this file exists: what `memory_lesson --trace-dir` and `chunkgrad trace` leave on
// disk is part of their answer. An outside tester found a path that ran out of memory
// leaving an old run's trace in place (then compared with this run's, without a word),
// folders made and left empty by a failed run, an output file at an output folder's path
// failing only after the work, and names taken from file names that no --names could
// give. Each case, run through the built programs.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

struct ProgramRun {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class TraceOutputs : public ::testing::Test {
 protected:
  void SetUp() override {
    static int counter = 0;
    dir_ = ::testing::TempDir() + "chunkgrad_trace_outputs_" + std::to_string(::getpid()) + "_" +
           std::to_string(counter++);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string at(const std::string& name) const { return dir_ + "/" + name; }
  // `program args` in the test's folder (one thread: quick on a loaded machine).
  ProgramRun run(const std::string& program, const std::string& args) const {
    const std::string cmd = "cd '" + dir_ + "' && OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive '" +
                            program + "' " + args + " >out.txt 2>err.txt";
    const int status = std::system(cmd.c_str());
    ProgramRun r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(at("out.txt"));
    r.err = slurp(at("err.txt"));
    fs::remove(at("out.txt"));
    fs::remove(at("err.txt"));
    return r;
  }
  ProgramRun lesson(const std::string& args) const { return run(CHUNKGRAD_MEMORY_LESSON, args); }
  ProgramRun trace(const std::string& args) const { return run(CHUNKGRAD_CLI, "trace " + args); }
  // A small trace of the fused path, at at("trace_fused.json").
  void make_trace() const {
    ASSERT_EQ(lesson("--T 64 --D 16 --V 512 --repeat 1 --paths fused --trace-dir .").exit_code, 0);
  }

  std::string dir_;
};

void expect_error(const ProgramRun& r, const std::string& program, const std::string& words) {
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("chunkgrad " + program + ": error: "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find(words), std::string::npos) << r.err;
}

// naive needs a 4 MiB logits block (a 20 MiB segment) that a 6 MiB limit refuses; fused fits.
const std::string kOom = "--T 256 --D 32 --V 4096 --chunk-budget-mb 0.5 --repeat 1 ";

TEST_F(TraceOutputs, APathThatRunsOutOfMemoryWritesItsTraceUpToTheError) {
  ASSERT_EQ(lesson(kOom + "--paths naive,fused --trace-dir stale").exit_code, 0);
  const std::string old_trace = slurp(at("stale/trace_naive.json"));
  const ProgramRun r = lesson(kOom + "--paths naive,fused --memory-limit-mb 6 --trace-dir stale");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("naive    out of memory"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("(its trace stale/trace_naive.json ends at this error"), std::string::npos)
      << r.out;
  // This run's trace, not the old one: it ends with the out-of-memory error.
  const std::string text = slurp(at("stale/trace_naive.json"));
  EXPECT_NE(text, old_trace);
  int ooms = 0;
  const nlohmann::json file = nlohmann::json::parse(text);
  for (const auto& e : file["events"]) ooms += e["action"] == "oom";
  EXPECT_EQ(ooms, 1);
  const ProgramRun report = trace("stale/trace_naive.json stale/trace_fused.json");
  ASSERT_EQ(report.exit_code, 0) << report.err;
  EXPECT_NE(report.out.find("out of memory at"), std::string::npos) << report.out;
  EXPECT_EQ(report.out.find("NOTE"), std::string::npos) << report.out;  // a consistent trace
  // In a fresh folder the file was missing.
  ASSERT_EQ(lesson(kOom + "--paths naive --memory-limit-mb 6 --json --trace-dir fresh").exit_code,
            0);
  EXPECT_TRUE(fs::exists(at("fresh/trace_naive.json")));
}

TEST_F(TraceOutputs, FoldersAFailedRunMadeAreRemoved) {
  make_trace();
  const std::string half = slurp(at("trace_fused.json")).substr(0, 300);
  std::ofstream(at("trunc.json")) << half;
  fs::create_directories(at("kept"));
  expect_error(trace("trunc.json --snapshot-dir snaps --perfetto-dir new/perf --svg-dir svgs "
                     "--html deep/er/r.html"),
               "trace", "trunc.json ends in the middle");
  for (const char* made : {"snaps", "new", "svgs", "deep"})
    EXPECT_FALSE(fs::exists(at(made))) << made;
  expect_error(trace("trunc.json --svg-dir kept"), "trace", "trunc.json");
  EXPECT_TRUE(fs::is_directory(at("kept")));  // it was there before
  // The lesson's inputs do not fit: no trace was written into the folder it made.
  expect_error(lesson("--T 256 --D 32 --V 4096 --memory-limit-mb 1 --trace-dir newtd/sub"),
               "memory_lesson", "do not fit");
  EXPECT_FALSE(fs::exists(at("newtd")));
}

TEST_F(TraceOutputs, AnOutputFileAtAnOutputFoldersPathIsRefusedBeforeAnyWork) {
  make_trace();
  for (const char* option : {"--svg-dir", "--snapshot-dir", "--perfetto-dir"}) {
    const ProgramRun r = trace(std::string("trace_fused.json --html same ") + option + " same");
    expect_error(r, "trace", std::string("--html and ") + option + " would both write same");
    EXPECT_EQ(r.out, "") << "the report ran before the outputs were checked";
    EXPECT_FALSE(fs::exists(at("same")));
  }
  // --html makes its folder, as the folder options do.
  const ProgramRun r = trace("trace_fused.json --html made/for/r.html");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::is_regular_file(at("made/for/r.html")));
}

TEST_F(TraceOutputs, NamesFromFileNamesFollowTheNamesRule) {
  make_trace();
  fs::copy_file(at("trace_fused.json"), at("trace_<b>x\".json"));
  fs::copy_file(at("trace_fused.json"), at(".json"));
  const ProgramRun r = trace("'trace_<b>x\".json' .json --snapshot-dir snaps");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(fs::exists(at("snaps/_b_x_.pickle")));
  EXPECT_TRUE(fs::exists(at("snaps/json.pickle")));
  EXPECT_FALSE(fs::exists(at("snaps/.json.json")));
  for (const char* bad : {"'<b>'", ".hidden", "a/b", "'a b'"}) {
    expect_error(trace(std::string("trace_fused.json --names ") + bad), "trace",
                 "cannot name output files");
  }
}

TEST_F(TraceOutputs, SmallWordsAreRight) {
  std::ofstream(at("one.json"))
      << R"({"events":[{"action":"alloc","time_us":0,"addr":4096,"size":512}]})";
  const ProgramRun r = trace("one.json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("one (one.json): 1 event over"), std::string::npos) << r.out;
  const ProgramRun twice = trace("one.json --html a.html --html b.html");
  expect_error(twice, "trace", "--html is given 2 times; give it once");
  EXPECT_EQ(twice.err.find("At Most"), std::string::npos) << twice.err;
}

}  // namespace
