// Why this file exists: the programs (examples/) are what a new user runs first, and what
// they do with bad input is part of chunkgrad: validate every option up front, fail with
// ONE line "chunkgrad <program>: error: ..." and exit code 1 -- never an abort, never a
// silent success (examples/common/program.h). These tests run the built programs
// (tests/CMakeLists.txt passes their paths) with each bad input that once broke them.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "core/allocator_stats.h"
#include "core/backend.h"
#include "core/error.h"
#include "nn/config.h"

namespace {

struct ProgramRun {
  int exit_code = -1;
  std::string out, err;
};

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::string temp_dir() {
  static int counter = 0;
  const std::string dir = ::testing::TempDir() + "chunkgrad_programs_" +
                          std::to_string(::getpid()) + "_" + std::to_string(counter++);
  std::filesystem::create_directories(dir);
  return dir;
}

// Runs `env program args` (one thread, so that runs stay quick on a loaded machine).
ProgramRun run_program(const std::string& program, const std::string& args,
                       const std::string& env = "") {
  const std::string dir = temp_dir();
  const std::string cmd = "OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive " + env + " '" + program +
                          "' " + args + " >'" + dir + "/out' 2>'" + dir + "/err'";
  const int status = std::system(cmd.c_str());
  ProgramRun r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = read_file(dir + "/out");
  r.err = read_file(dir + "/err");
  std::filesystem::remove_all(dir);
  return r;
}

ProgramRun mlp_demo(const std::string& args) { return run_program(CHUNKGRAD_MLP_DEMO, args); }
ProgramRun memory_lesson(const std::string& args) {
  return run_program(CHUNKGRAD_MEMORY_LESSON, args);
}

// A lesson small enough to run in well under a second.
const std::string kTiny = "--T 64 --D 16 --V 512 --repeat 1 ";

// The program failed the way every program must: exit code 1, one error line on stderr
// that starts with "chunkgrad <program>: error: " and contains each of `words`, no abort,
// no build path.
void expect_clean_failure(const ProgramRun& r, const std::string& program,
                          const std::vector<std::string>& words) {
  SCOPED_TRACE("stderr: " + r.err + "\nstdout: " + r.out);
  EXPECT_EQ(r.exit_code, 1);
  const std::string prefix = "chunkgrad " + program + ": error: ";
  const size_t at = r.err.find(prefix);
  ASSERT_NE(at, std::string::npos);
  const std::string line = r.err.substr(at);
  EXPECT_EQ(line.find('\n'), line.size() - 1) << "the error is not one line ending the output";
  for (const std::string& w : words) EXPECT_NE(line.find(w), std::string::npos) << "missing: " << w;
  EXPECT_EQ(r.err.find("terminate called"), std::string::npos);
  EXPECT_EQ(line.find("(at /"), std::string::npos) << "an absolute build path";
  EXPECT_EQ(line.find("(at ../"), std::string::npos) << "a build-folder path";
  EXPECT_LT(line.size(), 600u) << "not a readable line";
}

// ---- item 9: outputs that cannot be written fail before the work, loudly ----

// Issue 18 item 24: every program says its version and what the build holds; `chunkgrad
// trace --help` names the files `chunkgrad train` writes.
TEST(Programs, VersionAndTraceHelpNameWhatAUserNeeds) {
  for (const std::string& program :
       {std::string(CHUNKGRAD_MLP_DEMO), std::string(CHUNKGRAD_MEMORY_LESSON),
        std::string(CHUNKGRAD_CLI)}) {
    const ProgramRun r = run_program(program, "--version");
    SCOPED_TRACE(program + ": " + r.out + r.err);
    EXPECT_EQ(r.exit_code, 0);
    EXPECT_TRUE(std::regex_search(r.out, std::regex(R"((^|\()chunkgrad \d+\.\d+\.\d+)")));
    EXPECT_NE(r.out.find("devices built in: cpu (1 present)"), std::string::npos);
  }
  const ProgramRun help = run_program(CHUNKGRAD_CLI, "trace --help");
  EXPECT_EQ(help.exit_code, 0);
  EXPECT_NE(help.out.find("traces/trace_<config>_<path>.json"), std::string::npos) << help.out;
}

TEST(Programs, MlpDemoUnwritableTraceFailsBeforeTraining) {
  // As /nonexistent/dir/trace.json: a directory that does not exist.
  const std::string dir = temp_dir();
  const ProgramRun r =
      mlp_demo("--steps 5 --batch 8 --hidden 8 --trace '" + dir + "/missing/trace.json'");
  std::filesystem::remove_all(dir);
  expect_clean_failure(r, "mlp_demo",
                       {"--trace", "/missing/trace.json", "cannot open", "No such file"});
  EXPECT_EQ(r.out.find("step"), std::string::npos) << "training ran before the path was checked";
  EXPECT_EQ(r.out.find("memory trace:"), std::string::npos);
}

TEST(Programs, MlpDemoDeviceCudaWithoutAGpuIsOneErrorLine) {
  if (cg::cuda_available()) GTEST_SKIP() << "a GPU is here";
  expect_clean_failure(mlp_demo("--steps 3 --batch 8 --hidden 8 --device cuda"), "mlp_demo",
                       {"--device cuda is not available"});
  expect_clean_failure(mlp_demo("--steps 3 --device gpu0"), "mlp_demo", {"--device gpu0"});
}

// --memory-limit-mb caps the host allocator only: with --device cuda it once was accepted
// and capped nothing of the model, its grads or its activations. Refused whether or not a
// GPU is here (without one, the device check refuses it first).
TEST(Programs, MlpDemoMemoryLimitWithAGpuDeviceIsRefused) {
  const ProgramRun r =
      mlp_demo("--steps 3 --batch 8 --hidden 8 --device cuda --memory-limit-mb 64");
  if (cg::cuda_available()) {
    expect_clean_failure(r, "mlp_demo", {"--memory-limit-mb", "--device cuda", "own memory"});
  } else {
    expect_clean_failure(r, "mlp_demo", {"--device cuda is not available"});
  }
  const ProgramRun ok =
      mlp_demo("--steps 3 --batch 8 --hidden 8 --device cpu --memory-limit-mb 64");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
}

// Issue 18 item 15: each option was in range alone, their product was not checked, and
// the run ground for minutes.
TEST(Programs, MlpDemoChecksTheSizeOfItsTensorsNotOnlyEachOption) {
  ProgramRun r = mlp_demo("--steps 3 --batch 16777216 --hidden 16777216");
  expect_clean_failure(r, "mlp_demo",
                       {"--batch 16777216 x --hidden 16777216", "lower --batch or --hidden"});
  EXPECT_EQ(r.out.find("MLP demo"), std::string::npos) << "it started: " << r.out;
  expect_clean_failure(mlp_demo("--steps 3 --batch 65536 --in 65536 --hidden 8"), "mlp_demo",
                       {"--batch 65536 x --in 65536"});
  expect_clean_failure(mlp_demo("--steps 3 --batch 8 --in 1048576 --hidden 1048576"), "mlp_demo",
                       {"--in 1048576 x --hidden"});
}

TEST(Programs, MlpDemoWritesItsTrace) {
  const std::string dir = temp_dir();
  const ProgramRun r = mlp_demo("--steps 3 --batch 8 --hidden 8 --trace '" + dir + "/trace.json'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json trace = nlohmann::json::parse(read_file(dir + "/trace.json"));
  EXPECT_GT(trace["events"].size(), 0u);
  std::filesystem::remove_all(dir);
}

TEST(Programs, MemoryLessonUnwritableTraceDirFails) {
  expect_clean_failure(memory_lesson(kTiny + "--trace-dir /proc/x"), "memory_lesson",
                       {"--trace-dir", "/proc/x"});
  // A directory below a regular file cannot be made (even by root, which /proc/x does not stop).
  const std::string dir = temp_dir();
  std::ofstream(dir + "/file") << "x";
  expect_clean_failure(memory_lesson(kTiny + "--trace-dir '" + dir + "/file/traces'"),
                       "memory_lesson", {"--trace-dir", "/file is a file, not a folder"});
  std::filesystem::remove_all(dir);
}

TEST(Programs, MemoryLessonWritesOneTracePerPath) {
  const std::string dir = temp_dir();
  const ProgramRun r =
      memory_lesson(kTiny + "--paths naive,fused --trace-dir '" + dir + "/traces'");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* path : {"naive", "fused"}) {
    const nlohmann::json trace =
        nlohmann::json::parse(read_file(dir + "/traces/trace_" + path + ".json"));
    EXPECT_GT(trace["events"].size(), 0u) << path;
  }
  std::filesystem::remove_all(dir);
}

// ---- item 10: bad values and failures end in one line, never an abort ----

// --device is checked before any work: without a GPU (CI), or in a CPU-only build, asking
// for cuda is one error line naming the option, not a crash in the first allocation.
TEST(Programs, MemoryLessonDeviceIsCheckedUpFront) {
  // A value that is no device name is named as the option, as in mlp_demo and train.
  expect_clean_failure(memory_lesson(kTiny + "--device tpu"), "memory_lesson",
                       {"--device tpu", "bad device string"});
  expect_clean_failure(memory_lesson(kTiny + "--device ''"), "memory_lesson",
                       {"--device ", "bad device string ''"});
  if (cg::cuda_available()) GTEST_SKIP() << "a GPU is present: --device cuda would run";
  expect_clean_failure(memory_lesson(kTiny + "--device cuda"), "memory_lesson", {"--device cuda"});
  expect_clean_failure(memory_lesson(kTiny + "--device cuda:1"), "memory_lesson",
                       {"--device cuda:1"});
}

// On a GPU the lesson runs with head_loss's own chunk budget (a --chunk-budget-mb of 0
// once became a budget of 0 bytes there).
TEST(Programs, MemoryLessonRunsOnTheGpu) {
  if (!cg::cuda_available()) GTEST_SKIP() << "no CUDA device";
  const ProgramRun r =
      memory_lesson(kTiny + "--device cuda --loss kl --ce-weight 0.1 --dtype bf16");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("on cuda:0"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("fused"), std::string::npos) << r.out;
}

TEST(Programs, MemoryLessonCeWeightNeedsATeacherLoss) {
  expect_clean_failure(memory_lesson(kTiny + "--ce-weight 0.5"), "memory_lesson", {"--ce-weight"});
  expect_clean_failure(memory_lesson(kTiny + "--loss kl --ce-weight 2"), "memory_lesson",
                       {"--ce-weight"});
}

TEST(Programs, NegativeAndHugeSizesAreRefused) {
  expect_clean_failure(memory_lesson("--T -5"), "memory_lesson",
                       {"--T", "must be an integer from 1 to", "-5"});
  expect_clean_failure(mlp_demo("--batch 4611686018427387904"), "mlp_demo",
                       {"--batch", "4611686018427387904"});
  expect_clean_failure(memory_lesson("--T 5 --D 4 --scale 300000"), "memory_lesson",
                       {"--scale", "300000"});
}

TEST(Programs, OutOfMemoryWhileMakingTheInputsIsOneLine) {
  // [2^24, 2^24] f32 hidden states: 1 PiB, more than any machine has. (Under ASan the
  // host allocation must return null, as it does without, instead of aborting.)
  const ProgramRun r =
      run_program(CHUNKGRAD_MEMORY_LESSON, "--T 16777216 --D 16777216 --V 8 --repeat 1",
                  "ASAN_OPTIONS=allocator_may_return_null=1");
  expect_clean_failure(r, "memory_lesson", {"out of memory", "inputs"});
}

// ---- item 11: bad values are refused, not silently replaced ----

TEST(Programs, BadValuesAreRefusedWithTheOptionsName) {
  expect_clean_failure(mlp_demo("--memory-limit-mb -5"), "mlp_demo", {"--memory-limit-mb", "-5"});
  expect_clean_failure(memory_lesson("--memory-limit-mb -5"), "memory_lesson",
                       {"--memory-limit-mb", "-5"});
  expect_clean_failure(memory_lesson("--repeat 0"), "memory_lesson", {"--repeat", "from 1 to"});
  expect_clean_failure(memory_lesson("--chunk-budget-mb -1"), "memory_lesson",
                       {"--chunk-budget-mb", "-1"});
  expect_clean_failure(memory_lesson("--chunk-budget-mb nan"), "memory_lesson",
                       {"--chunk-budget-mb", "finite"});
  expect_clean_failure(memory_lesson("--T 0"), "memory_lesson", {"--T", "got 0"});
  expect_clean_failure(memory_lesson("--paths naive,naive"), "memory_lesson", {"--paths", "twice"});
  expect_clean_failure(memory_lesson("--paths naive,fast"), "memory_lesson", {"--paths", "fast"});
  expect_clean_failure(memory_lesson("--loss mse"), "memory_lesson",
                       {"--loss", "ce, kl, rkl, soft_ce"});
  expect_clean_failure(mlp_demo("--lr nan"), "mlp_demo", {"--lr", "finite", "nan"});
  expect_clean_failure(mlp_demo("--lr inf"), "mlp_demo", {"--lr"});
  expect_clean_failure(mlp_demo("--lr 0"), "mlp_demo", {"--lr", "greater than 0"});
  expect_clean_failure(mlp_demo("--seed -1"), "mlp_demo", {"--seed"});
}

TEST(Programs, ALossThatDivergesStopsTheRunNamingTheStep) {
  const ProgramRun r = mlp_demo("--steps 200 --batch 16 --hidden 16 --lr 100000");
  expect_clean_failure(r, "mlp_demo", {"the loss became", "at step", "--lr"});
}

// ---- item 12: readable ranges; sources relative to the project ----

TEST(Programs, RangeErrorsAreReadable) {
  ProgramRun r = mlp_demo("--steps 0");
  expect_clean_failure(r, "mlp_demo", {"--steps: must be an integer from 1 to 1000000000, got 0"});
  EXPECT_LT(r.err.size(), 200u) << r.err;
  r = mlp_demo("--steps abc");
  expect_clean_failure(r, "mlp_demo", {"--steps", "got abc"});
  EXPECT_LT(r.err.size(), 200u) << r.err;
  expect_clean_failure(mlp_demo("--steps 1.5"), "mlp_demo", {"--steps", "got 1.5"});
}

TEST(Programs, LibraryErrorsNameTheirSourceRelativeToTheProject) {
  // Not even one row fits a budget of one byte: a cg::Error, with its location.
  const ProgramRun r = memory_lesson(kTiny + "--paths chunked --chunk-budget-mb 0.000001");
  expect_clean_failure(r, "memory_lesson", {"(at examples/memory_lesson.cpp:"});
}

// ---- item 13: the memory limit covers everything, the inputs included ----

TEST(Programs, MemoryLimitCoversTheInputs) {
  // The default lesson's inputs are about 21 MiB: they cannot fit in a 1 MiB "card".
  const ProgramRun r = memory_lesson("--memory-limit-mb 1 --paths fused --repeat 1");
  expect_clean_failure(r, "memory_lesson", {"inputs", "--memory-limit-mb 1", "out of memory"});
}

// ---- item 14 and issue 23: the lesson's text against its numbers: tests/lessons_program_test.cpp ----

// ---- item 17: the small ones ----

TEST(Programs, OutOfMemoryRowsSayItOnce) {
  // naive needs a 4 MiB logits block (a 20 MiB segment); fused fits in small segments.
  const ProgramRun r =
      memory_lesson("--T 256 --D 32 --V 4096 --chunk-budget-mb 0.5 --repeat 1 --memory-limit-mb 6");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("naive    out of memory"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("out of memory: out of memory"), std::string::npos) << r.out;
}

TEST(Programs, MlpDemoPrintsRetainedBytesReadablyAndIndented) {
  const ProgramRun r = mlp_demo("--steps 2 --batch 8 --hidden 8");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(r.out.find("\ngraph retains"), std::string::npos) << r.out;  // the raw, unindented line
  EXPECT_EQ(r.out.find(" B in saved tensors"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\n      MatmulBackward x2"), std::string::npos) << r.out;
}

TEST(Programs, KlInputsLineNamesTheTeacher) {
  const ProgramRun r = memory_lesson(kTiny + "--loss kl");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("teacher hidden"), std::string::npos) << r.out;
}

TEST(Programs, JsonKeepsTheShapeApartFromThePaths) {
  const ProgramRun r = memory_lesson(kTiny + "--json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["shape"]["T"], 64);
  ASSERT_TRUE(j.contains("paths"));
  for (const auto& [name, path] : j["paths"].items()) {
    EXPECT_TRUE(name == "naive" || name == "chunked" || name == "fused") << name;
    EXPECT_TRUE(path.contains("forward_peak_bytes")) << name;
  }
}

TEST(Programs, TooSmallChunkBudgetFailsBeforeAnyPathRuns) {
  const ProgramRun r = memory_lesson(kTiny + "--chunk-budget-mb 0.001");
  expect_clean_failure(r, "memory_lesson", {"--chunk-budget-mb", "too small"});
  EXPECT_EQ(r.err.find("step 1 of 1"), std::string::npos) << "a path ran before the check";
}

TEST(Programs, ABadThreadCountFailsEvenWhenNoKernelWouldStartThePool) {
  const ProgramRun r = run_program(CHUNKGRAD_MLP_DEMO, "--steps 2 --batch 4 --hidden 4",
                                   "CHUNKGRAD_NUM_THREADS=abc");
  expect_clean_failure(r, "mlp_demo", {"CHUNKGRAD_NUM_THREADS", "abc"});
  const ProgramRun split = run_program(CHUNKGRAD_MLP_DEMO, "--steps 2 --batch 4 --hidden 4",
                                       "CHUNKGRAD_MAX_SPLIT_MB=0.5");
  expect_clean_failure(split, "mlp_demo", {"CHUNKGRAD_MAX_SPLIT_MB", "0.5", "from 21"});
}

TEST(Programs, AFailedWriteToStdoutIsAFailedRun) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  const std::string err = ::testing::TempDir() + "chunkgrad_devfull_err";
  const std::string cmd =
      std::string("'") + CHUNKGRAD_MLP_DEMO + "' --steps 2 >/dev/full 2>'" + err + "'";
  const int status = std::system(cmd.c_str());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 1) << status;
  EXPECT_NE(read_file(err).find("standard output failed"), std::string::npos) << read_file(err);
  std::filesystem::remove(err);
}

// The line of `help` that describes `option` ("" when none does).
std::string help_line(const std::string& help, const std::string& option) {
  std::istringstream lines(help);
  for (std::string line; std::getline(lines, line);) {
    if (line.find(option + " ") != std::string::npos ||
        line.find(option + "=") != std::string::npos)
      return line;
  }
  return "";
}

TEST(Programs, HelpShowsDefaults) {
  // CLI11 2.1 prints "--steps INT:<range>=300", 2.4 "--steps INT:<range> [300]": look for
  // the value on the option's line either way.
  ProgramRun r = mlp_demo("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(help_line(r.out, "--steps").find("300"), std::string::npos) << r.out;
  EXPECT_NE(help_line(r.out, "--lr").find("0.01"), std::string::npos) << r.out;
  r = memory_lesson("--help");
  EXPECT_EQ(r.exit_code, 0);
  EXPECT_NE(help_line(r.out, "--scale").find("16"), std::string::npos) << r.out;
  EXPECT_NE(help_line(r.out, "--T").find("24576 / scale"), std::string::npos) << r.out;
}

TEST(Programs, LessonReportsProgressOnStderr) {
  const ProgramRun r = memory_lesson(kTiny + "--json");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("chunkgrad memory_lesson: naive: step 1 of 1"), std::string::npos) << r.err;
  EXPECT_NO_THROW(static_cast<void>(nlohmann::json::parse(r.out).size()))
      << "progress leaked into the JSON on stdout";
}

}  // namespace

// ---- chunkgrad trace: the memory lesson's traces read back ----

ProgramRun chunkgrad(const std::string& args) { return run_program(CHUNKGRAD_CLI, args); }

TEST(Programs, ChunkgradTraceHelpShowsItsOptions) {
  const ProgramRun r = chunkgrad("trace --help");
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* option :
       {"--html", "--svg-dir", "--snapshot-dir", "--perfetto-dir", "--names", "--top"}) {
    EXPECT_NE(r.out.find(option), std::string::npos) << option;
  }
}

// An outside tester's report: --help said "a Hugging Face Qwen3 folder" where the commands
// load every family nn::Qwen3Config reads (Qwen3.5, its MoE form). Each command that takes a
// target lists the model_types from that one list.
TEST(Programs, ChunkgradTargetHelpListsTheFamiliesItReads) {
  for (const char* command : {"features", "eval", "regenerate", "train"}) {
    const ProgramRun r = chunkgrad(std::string(command) + " --help");
    EXPECT_EQ(r.exit_code, 0) << command << ": " << r.err;
    EXPECT_EQ(r.out.find("Qwen3 folder"), std::string::npos) << command << ": " << r.out;
    for (const std::string& type : cg::nn::Qwen3Config::hf_model_types())
      EXPECT_NE(r.out.find(type), std::string::npos)
          << command << " lacks " << type << ": " << r.out;
  }
}

// An outside tester: `chunkgrad features --help` showed "--batch-tokens INT:from 0 to
// 1073741824=-1", a default outside the range it names. Every command's shown defaults lie
// in their ranges.
TEST(Programs, ChunkgradHelpShowsNoDefaultOutsideItsRange) {
  const std::regex shown(R"((--[a-z-]+) [A-Z]+:from (-?[0-9]+) to (-?[0-9]+)=(-?[0-9]+))");
  for (const char* command :
       {"train", "features", "eval", "regenerate", "export", "tokenize", "trace"}) {
    const ProgramRun r = chunkgrad(std::string(command) + " --help");
    ASSERT_EQ(r.exit_code, 0) << command << ": " << r.err;
    for (std::sregex_iterator m(r.out.begin(), r.out.end(), shown), end; m != end; ++m) {
      const long long lo = std::stoll((*m)[2]), hi = std::stoll((*m)[3]),
                      value = std::stoll((*m)[4]);
      EXPECT_TRUE(lo <= value && value <= hi) << command << " " << m->str();
    }
  }
  const ProgramRun features = chunkgrad("features --help");
  EXPECT_NE(features.out.find("=16384 on a GPU, 0 on the CPU"), std::string::npos) << features.out;
}

TEST(Programs, ChunkgradTraceRefusesBadFilesInOneLine) {
  const std::string dir = temp_dir();
  expect_clean_failure(chunkgrad("trace '" + dir + "/missing.json'"), "trace", {"missing.json"});
  std::ofstream(dir + "/empty.json") << "";
  expect_clean_failure(chunkgrad("trace '" + dir + "/empty.json'"), "trace",
                       {"empty.json", "is empty"});
  std::ofstream(dir + "/cut.json") << R"({"events":[{"action":"alloc","time_us":1,)";
  expect_clean_failure(chunkgrad("trace '" + dir + "/cut.json'"), "trace",
                       {"cut.json", "truncated"});
  std::ofstream(dir + "/other.json") << R"({"traceEvents":[]})";
  expect_clean_failure(chunkgrad("trace '" + dir + "/other.json'"), "trace",
                       {"not a chunkgrad memory trace"});
  expect_clean_failure(chunkgrad("trace"), "trace", {"files"});
  std::filesystem::remove_all(dir);
}

// Issue 18 item 22: "parse error at byte 14 of 13", a negative fragmentation printed as a
// bare "-512 B", and the trace's largest holder next to chunkgrad train's without saying
// how each counts.
TEST(Programs, ChunkgradTraceSaysWhatItsNumbersMean) {
  const std::string dir = temp_dir();
  std::ofstream(dir + "/cut.json") << R"({"format": "x)";
  ProgramRun r = chunkgrad("trace '" + dir + "/cut.json'");
  expect_clean_failure(r, "trace", {"ends in the middle of its JSON after 13 bytes"});
  EXPECT_EQ(r.err.find("byte 14"), std::string::npos) << r.err;
  std::ofstream(dir + "/tail.json") << R"({"a": 1} x)";
  expect_clean_failure(chunkgrad("trace '" + dir + "/tail.json'"), "trace",
                       {"is not JSON", "at byte 10 of 10"});
  // One block allocated in no segment the trace knows: reserved 0, allocated 512. (Without
  // an end state: with one, such a block is left out, Note [Inconsistent events].)
  std::ofstream(dir + "/neg.json")
      << R"({"format": "chunkgrad.memory_trace", "version": 1, "capacity": 8, "dropped": 0,
    "events": [{"action": "alloc", "addr": 4096, "category": "activation", "device": "cpu",
    "requested": 512, "scope": "", "size": 512, "stream": 0, "time_us": 10}]})";
  r = chunkgrad("trace '" + dir + "/neg.json' '" + dir + "/neg.json' --names a,b");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("-512 B (NEGATIVE: reserved is below allocated; see the note)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("NOTE: at the peak reserved (0 B) is below allocated (512 B)"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("-512 B (!)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("each counted once for the first node that saved it (chunkgrad train's "
                       "\"largest graph node\""),
            std::string::npos)
      << r.out;
  std::filesystem::remove_all(dir);
}

TEST(Programs, ChunkgradTraceNeverWritesOverItsInput) {
  const std::string dir = temp_dir();
  ASSERT_EQ(memory_lesson(kTiny + "--paths fused --trace-dir '" + dir + "'").exit_code, 0);
  const std::string trace = dir + "/trace_fused.json";
  const std::string before = read_file(trace);
  ASSERT_GT(before.size(), 100u);
  // Opening the output truncated the trace, which then read as "empty".
  expect_clean_failure(chunkgrad("trace '" + trace + "' --html '" + trace + "'"), "trace",
                       {"--html", "is the input trace", "Give another output path"});
  // <dir>/<name>.json from --snapshot-dir, with the trace named after its own file.
  expect_clean_failure(
      chunkgrad("trace '" + trace + "' --names trace_fused --snapshot-dir '" + dir + "'"), "trace",
      {"--snapshot-dir", "is the input trace"});
  EXPECT_EQ(read_file(trace), before);
  std::filesystem::remove_all(dir);
}

// An outside tester: `--html` inside `--svg-dir` under an SVG's name ran the whole report,
// then failed to rename and left the HTML in the SVG's place; a pickle snapshot read as
// "not JSON ... byte 1"; a first trace that peaks at 0 B gave "0.00x" for the others;
// `--html ""` wrote nothing and said nothing.
TEST(Programs, ChunkgradTraceRefusesOutputsAtOnePathAndNamesPickles) {
  const std::string dir = temp_dir();
  ASSERT_EQ(memory_lesson(kTiny + "--paths fused --trace-dir '" + dir + "'").exit_code, 0);
  const std::string trace = "'" + dir + "/trace_fused.json'";
  std::filesystem::create_directories(dir + "/out");
  const ProgramRun both = chunkgrad("trace " + trace + " --svg-dir '" + dir + "/out' --html '" +
                                    dir + "/out/memory_fused.svg'");
  expect_clean_failure(both, "trace",
                       {"--svg-dir and --html would both write", "memory_fused.svg"});
  EXPECT_EQ(both.out, "") << "the report ran before the outputs were checked";
  EXPECT_FALSE(std::filesystem::exists(dir + "/out/memory_fused.svg"));
  expect_clean_failure(chunkgrad("trace " + trace + " --snapshot-dir '" + dir + "/out' --html '" +
                                 dir + "/out/../out/fused.json'"),
                       "trace", {"would both write"});
  for (const char* option : {"--html", "--svg-dir", "--snapshot-dir", "--perfetto-dir", "--names"})
    expect_clean_failure(chunkgrad("trace " + trace + " " + option + " ''"), "trace",
                         {option, "must not be empty"});
  // The snapshot chunkgrad itself writes, read back as if it were a trace.
  ASSERT_EQ(chunkgrad("trace " + trace + " --snapshot-dir '" + dir + "/snap'").exit_code, 0);
  expect_clean_failure(chunkgrad("trace '" + dir + "/snap/fused.pickle'"), "trace",
                       {"fused.pickle", "is a Python pickle", "pytorch.org/memory_viz"});
  std::ofstream(dir + "/zero.json")
      << R"({"format":"chunkgrad.memory_trace","version":1,"events":[]})";
  const ProgramRun zero = chunkgrad("trace '" + dir + "/zero.json' " + trace);
  ASSERT_EQ(zero.exit_code, 0) << zero.err;
  EXPECT_EQ(zero.out.find("0.00x"), std::string::npos) << zero.out;
  EXPECT_NE(zero.out.find("the first peaks at 0 B"), std::string::npos) << zero.out;
  // (read until memory ran out, at 470 MB/s)
  expect_clean_failure(chunkgrad("trace /dev/zero"), "trace", {"/dev/zero", "is a device"});
  expect_clean_failure(memory_lesson(kTiny + "--trace-dir ''"), "memory_lesson",
                       {"--trace-dir", "must not be empty"});
  expect_clean_failure(mlp_demo("--steps 1 --trace ''"), "mlp_demo",
                       {"--trace", "must not be empty"});
  std::filesystem::remove_all(dir);
}

TEST(Programs, ChunkgradTraceComparesTracesOfTheSameName) {
  const std::string dir = temp_dir();
  for (const char* run : {"/a", "/b"}) {
    ASSERT_EQ(memory_lesson(kTiny + "--paths fused --trace-dir '" + dir + run + "'").exit_code, 0);
  }
  // Two runs' trace_fused.json: fused and fused_2, not "give --names".
  const ProgramRun r = chunkgrad("trace '" + dir + "/a/trace_fused.json' '" + dir +
                                 "/b/trace_fused.json' --svg-dir '" + dir + "/svg'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("fused_2 ("), std::string::npos) << r.out;
  EXPECT_TRUE(std::filesystem::exists(dir + "/svg/memory_fused_2.svg"));
  // Names given twice on purpose are still refused (their files would collide).
  expect_clean_failure(chunkgrad("trace '" + dir + "/a/trace_fused.json' '" + dir +
                                 "/b/trace_fused.json' --names x,x"),
                       "trace", {"both called \"x\""});
  std::filesystem::remove_all(dir);
}

TEST(Programs, ChunkgradTraceNamesTheHoldersAtThePeak) {
  const std::string dir = temp_dir();
  ASSERT_EQ(memory_lesson(kTiny + "--chunk-rows 16 --trace-dir '" + dir + "'").exit_code, 0);
  const std::string traces = "'" + dir + "/trace_naive.json' '" + dir + "/trace_chunked.json' '" +
                             dir + "/trace_fused.json'";
  // An unwritable output fails before any trace is read.
  expect_clean_failure(chunkgrad("trace " + traces + " --html /proc/x/report.html"), "trace",
                       {"--html", "/proc/x"});
  expect_clean_failure(chunkgrad("trace " + traces + " --device cuda:0"), "trace",
                       {"--device cuda:0", "has no events on it", "it has: cpu"});
  const ProgramRun r =
      chunkgrad("trace " + traces + " --html '" + dir + "/report.html' --svg-dir '" + dir +
                "/svg' --snapshot-dir '" + dir + "/snap' --perfetto-dir '" + dir + "/perfetto'");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  SCOPED_TRACE(r.out);
  for (const char* words :
       {"naive (", "chunked (", "fused (", "peak allocated", "cached but unallocated",
        "RowLossBackward:logits", "FusedHeadRowsBackward:dh", "side by side", "(phase "}) {
    EXPECT_NE(r.out.find(words), std::string::npos) << words;
  }
  // The comparison's holder row names the logits for naive and chunked, dh for fused.
  const size_t row = r.out.find("largest autograd holder");
  ASSERT_NE(row, std::string::npos);
  const std::string line = r.out.substr(row, r.out.find('\n', row) - row);
  EXPECT_NE(line.find("RowLossBackward:logits"), std::string::npos) << line;
  EXPECT_NE(line.find("FusedHeadRowsBackward:dh"), std::string::npos) << line;
  for (const char* file :
       {"/report.html", "/svg/memory_naive.svg", "/svg/memory_fused.svg", "/snap/chunked.pickle",
        "/snap/chunked.json", "/perfetto/fused.perfetto.json"}) {
    EXPECT_GT(std::filesystem::file_size(dir + file), 100u) << file;
  }
  std::filesystem::remove_all(dir);
}

// ---- issue 18 item 1: a failed run leaves the outputs of the last good one as they were ----

// The outputs were opened (truncated) before the input was read: a broken trace left the
// old report and timelines at 0 bytes.
TEST(Programs, ChunkgradTraceKeepsOldOutputsWhenAnInputIsBroken) {
  const std::string dir = temp_dir();
  std::filesystem::create_directories(dir + "/svg");
  std::ofstream(dir + "/old.html") << "OLD REPORT";
  std::ofstream(dir + "/svg/memory_broken.svg") << "OLD SVG";
  std::ofstream(dir + "/broken.json") << "{not json at all";
  expect_clean_failure(chunkgrad("trace '" + dir + "/broken.json' --html '" + dir +
                                 "/old.html' --svg-dir '" + dir + "/svg'"),
                       "trace", {"broken.json", "not JSON"});
  EXPECT_EQ(read_file(dir + "/old.html"), "OLD REPORT");
  EXPECT_EQ(read_file(dir + "/svg/memory_broken.svg"), "OLD SVG");
  EXPECT_FALSE(std::filesystem::exists(dir + "/old.html.tmp")) << "a temporary was left behind";
  EXPECT_FALSE(std::filesystem::exists(dir + "/svg/memory_broken.svg.tmp"))
      << "a temporary was left behind";
  std::filesystem::remove_all(dir);
}

TEST(Programs, MemoryLessonKeepsOldTracesWhenARunIsRefused) {
  const std::string dir = temp_dir();
  std::ofstream(dir + "/trace_naive.json") << "OLD TRACE";
  expect_clean_failure(
      memory_lesson(kTiny + "--paths naive --chunk-budget-mb 0.000001 --trace-dir '" + dir + "'"),
      "memory_lesson", {"--chunk-budget-mb"});
  EXPECT_EQ(read_file(dir + "/trace_naive.json"), "OLD TRACE");
  EXPECT_FALSE(std::filesystem::exists(dir + "/trace_naive.json.tmp"));
  std::filesystem::remove_all(dir);
}

// ---- issue 18 item 9: hostile nesting is one short error line, not a stack overflow ----

TEST(Programs, ChunkgradTraceRefusesDeepNestingInOneShortLine) {
  const std::string dir = temp_dir();
  for (const char* key : {"time_us", "format"}) {
    const int depth = 100000;
    std::ofstream(dir + "/deep.json")
        << R"({"format": )"
        << (std::string(key) == "format"
                ? ""
                : "\"chunkgrad.memory_trace\", \"events\": [{\"action\": \"alloc\", \"time_us\": ")
        << std::string(depth, '[') << std::string(depth, ']')
        << (std::string(key) == "format" ? ", \"events\": []}" : "}]}");
    const ProgramRun r = chunkgrad("trace '" + dir + "/deep.json'");
    expect_clean_failure(r, "trace", {"deep.json", "nests"});
  }
  std::filesystem::remove_all(dir);
}

#ifdef CHUNKGRAD_HEAD_LOSS_CPU_BENCH
// An outside tester: the CPU benchmark ran the GEMM and naive rows before `--chunks abc`
// failed with "stoll", took `--chunks ""` as no fused rows and `--threads -1` as the
// default, and left CLI11's own exit codes (104, 105, 109) and its 300-digit range.
TEST(Programs, HeadLossCpuBenchChecksEveryOptionBeforeAnyRow) {
  const std::string tiny = "--T 64 --D 16 --V 100 --repeats 1 ";
  const std::vector<std::pair<std::string, std::vector<std::string>>> cases = {
      {"--chunks abc", {"--chunks", "'abc' is not"}},
      {"--chunks 8,,8", {"--chunks", "an empty entry"}},
      {"--chunks -4", {"--chunks", "'-4' is not"}},
      {"--chunks 99999999999999999999", {"--chunks"}},
      {"--chunks ''", {"--chunks", "comma-separated"}},
      {"--threads -1", {"--threads", "from 0 to"}},
      {"--T 0", {"--T", "from 1 to 16777216"}},
      {"--dtype f8", {"--dtype", "f32, bf16, f16, f64"}},
      {"--V nan", {"--V"}},
      {"--bogus", {"--bogus"}},
  };
  for (const auto& [args, words] : cases) {
    SCOPED_TRACE(args);
    const ProgramRun r = run_program(CHUNKGRAD_HEAD_LOSS_CPU_BENCH, tiny + args);
    expect_clean_failure(r, "head_loss_cpu_bench", words);
    EXPECT_EQ(r.out, "") << "a row ran before the option was refused";
  }
  const ProgramRun ok = run_program(CHUNKGRAD_HEAD_LOSS_CPU_BENCH, tiny + "--chunks 16,32");
  EXPECT_EQ(ok.exit_code, 0) << ok.err;
  EXPECT_NE(ok.out.find("fused/16"), std::string::npos) << ok.out;
  EXPECT_NE(ok.out.find("fused/32"), std::string::npos) << ok.out;
}
#endif
