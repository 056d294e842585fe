// Why this file exists: the reading path (docs/README.md) promises "run X, you should see
// Z". These tests run each lesson program and check the numbers its doc quotes, check
// that memory_lesson's sentences follow its own numbers in every case they cover, and run
// every exercise of docs/exercises.md: each ```sh block there is run from a fresh folder
// (with ./build/examples/ pointing at this build), and every `quoted` string of the
// "Check:" line after it must appear in what the commands print.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/allocator_stats.h"
#include "core/error.h"

namespace {

struct LessonRun {
  int exit_code = -1;
  std::string out;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// Runs `script` with bash in a fresh folder; stdout and stderr together.
LessonRun run_in_temp_dir(std::string script) {
  static int counter = 0;
  const std::string dir = ::testing::TempDir() + "chunkgrad_lessons_" + std::to_string(::getpid()) +
                          "_" + std::to_string(counter++);
  std::filesystem::create_directories(dir);
  script = std::regex_replace(script, std::regex(R"(\./build/examples/)"),
                              std::string(CHUNKGRAD_EXAMPLES_DIR) + "/");
  {
    std::ofstream f(dir + "/script.sh");
    f << "set -e\nexport OMP_NUM_THREADS=1 OMP_WAIT_POLICY=passive\n" << script << "\n";
  }
  const std::string cmd = "cd '" + dir + "' && bash script.sh >out 2>&1";
  const int status = std::system(cmd.c_str());
  LessonRun r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(dir + "/out");
  std::filesystem::remove_all(dir);
  return r;
}

void expect_all(const LessonRun& r, const std::vector<std::string>& words) {
  ASSERT_EQ(r.exit_code, 0) << r.out;
  for (const std::string& w : words)
    EXPECT_NE(r.out.find(w), std::string::npos) << w << "\n" << r.out;
}

TEST(Lessons, AllocatorLessonShowsCachingSplitAndMerge) {
  const LessonRun r = run_in_temp_dir("./build/examples/allocator_lesson");
  expect_all(
      r,
      {"1. allocate 1000 B", "allocated 1.00 KiB, reserved 2.00 MiB",
       "800 B now reuses the cached block: same address", "allocated 5.29 MiB, reserved 22.00 MiB",
       "allocated 17.29 MiB, reserved 22.00 MiB", "allocated 33.29 MiB, reserved 38.00 MiB",
       "segment 16.00 MiB (large pool)", "allocated 0 B, reserved 38.00 MiB",
       "allocated 0 B, reserved 0 B, cached but "
       "unallocated 0 B, segments 0"});
}

// docs/img/allocator_state.svg is what `allocator_lesson --svg` draws now, byte for byte.
TEST(Lessons, AllocatorPictureIsWhatTheProgramDrawsNow) {
  const std::string committed =
      slurp(std::string(CHUNKGRAD_SOURCE_DIR) + "/docs/img/allocator_state.svg");
  ASSERT_FALSE(committed.empty()) << "docs/img/allocator_state.svg is missing";
  const LessonRun r = run_in_temp_dir(
      "./build/examples/allocator_lesson --svg state.svg >/dev/null\ncat state.svg");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_EQ(r.out, committed)
      << "the picture differs from what the program draws: run ./build/examples/allocator_lesson "
         "--svg docs/img/allocator_state.svg and commit it";
  for (const char* kind : {"allocated", "inactive split", "cached free", "9. empty_cache()"})
    EXPECT_NE(committed.find(kind), std::string::npos) << kind;
}

// The memory_viz route of docs/1_tensors_and_the_allocator.md: the lesson's trace, its
// peak, the variables as scopes, and the pickle memory_viz opens.
TEST(Lessons, AllocatorTraceBecomesAMemoryVizSnapshot) {
  const LessonRun r = run_in_temp_dir(
      "./build/examples/allocator_lesson --trace alloc_trace.json >/dev/null\n"
      "./build/examples/chunkgrad trace alloc_trace.json --snapshot-dir snaps\n"
      "test -s snaps/alloc_trace.pickle && echo pickle written");
  expect_all(r, {"peak allocated 33.29 MiB", "reserved then 38.00 MiB",
                 "16.00 MiB      1 block   huge", "pickle written"});
}

TEST(Lessons, GraphLessonShowsWhatTheGraphKeeps) {
  const LessonRun r = run_in_temp_dir("./build/examples/graph_lesson");
  expect_all(r, {"the graph keeps 256.00 KiB", "ReluBackward", "after backward: 0 B",
                 "under NoGradGuard: the graph keeps 0 B", "storing the loss: 1.00 MiB",
                 "storing loss.detach(): 2.00 KiB", "h.grad() is [256, 128]"});
  // The one-row narrow's backward made a block of all of h (128 KiB) at least.
  const std::smatch m = [&] {
    std::smatch s;
    std::regex_search(r.out, s, std::regex(R"(peak ([0-9.]+) KiB above the start)"));
    return s;
  }();
  ASSERT_FALSE(m.empty()) << r.out;
  EXPECT_GE(std::stod(m[1]), 128.0) << r.out;
}

TEST(Lessons, FlceMinMatchesTheNaiveLossAndKeepsOnlyDh) {
  const LessonRun r =
      run_in_temp_dir("./build/examples/flce_min --T 256 --D 32 --V 2048 --chunk 64");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  // dh [256, 32] in fp32 is 32 KiB: all the fused graph keeps; naive keeps the logits, 2 MiB.
  EXPECT_NE(r.out.find("graph keeps  32.00 KiB"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("graph keeps   2.00 MiB"), std::string::npos) << r.out;
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      r.out, m, std::regex(R"(\|loss difference\| (\S+), max \|dh difference\| (\S+))")))
      << r.out;
  EXPECT_LT(std::stod(m[1]), 1e-4) << r.out;
  EXPECT_LT(std::stod(m[2]), 1e-6) << r.out;
}

TEST(Lessons, DflashMaskLessonDrawsBothRules) {
  LessonRun r = run_in_temp_dir("./build/examples/dflash_mask_lesson");
  // Block a (anchor 3) sees context keys 0..2 and its own 4 slots, nothing of block b.
  // The header names the anchors' values, not the anchors tensor's shape ("anchors [2]").
  expect_all(r, {"anchors = {3, 6}", "block a slot 0 ###..... #### ....",
                 "block b slot 3 ######.. .... ####"});
  r = run_in_temp_dir("./build/examples/dflash_mask_lesson --window 3");
  // Sliding, W = 3: slot 0 of block b (position 6) sees keys 4, 5; slot 3 (position 9)
  // sees no context (9 - 2 = 7 > 5) and slots 1..3 of its block.
  expect_all(r, {"block b slot 0 ....##.. .... #...", "block b slot 3 ........ .... .###"});
}

// An outside tester: `--anchors ""` drew anchor 0, `--anchors -2` was taken although the
// help said 0..S, and allocator_lesson's --svg and --trace at one path left the trace in
// the SVG's place after a rename error.
TEST(Lessons, LessonsRefuseAnchorsOutsideTheirRangeAndOneFileForTwoOutputs) {
  for (const char* bad : {"''", "-2", "41", "x"}) {
    const LessonRun r =
        run_in_temp_dir(std::string("./build/examples/dflash_mask_lesson --anchors ") + bad);
    EXPECT_EQ(r.exit_code, 1) << r.out;
    EXPECT_NE(r.out.find("chunkgrad dflash_mask_lesson: error: --anchors"), std::string::npos)
        << r.out;
  }
  // -1 is a padded block: its slots see nothing.
  expect_all(run_in_temp_dir("./build/examples/dflash_mask_lesson --anchors 3 -1"),
             {"block b slot 0 ........ .... ...."});
  const LessonRun same = run_in_temp_dir(
      "./build/examples/allocator_lesson --svg same.x --trace same.x; "
      "test ! -e same.x");
  EXPECT_EQ(same.exit_code, 1) << same.out;
  EXPECT_NE(same.out.find("--trace and --svg would both write same.x"), std::string::npos)
      << same.out;
}

// ---- memory_lesson's text follows its own numbers (Note [The lesson's text]) ----

// memory_lesson ARGS, its stdout (the progress lines on stderr are dropped).
LessonRun memory_lesson(const std::string& args) {
  return run_in_temp_dir("./build/examples/memory_lesson " + args + " 2>/dev/null");
}

// A lesson small enough to run in well under a second.
const std::string kTiny = "--T 64 --D 16 --V 512 --repeat 1 ";

// memory_lesson ARGS --repeat 1 --json, parsed; null (and a failure) when it did not run.
nlohmann::json lesson_json(const std::string& args) {
  const LessonRun r = memory_lesson(args + " --repeat 1 --json");
  EXPECT_EQ(r.exit_code, 0) << r.out;
  return r.exit_code == 0 ? nlohmann::json::parse(r.out) : nlohmann::json();
}

// The lesson says `words` (or, with says = false, does not).
void expect_says(const std::string& lesson, const std::string& words, bool says = true) {
  EXPECT_EQ(lesson.find(words) != std::string::npos, says) << words << "\n" << lesson;
}

std::string lesson_text(const nlohmann::json& j) {
  std::string lesson;
  for (const auto& line : j["lesson"]) lesson += line.get<std::string>() + "\n";
  return lesson;
}

TEST(Lessons, LessonTextFollowsTheNumbersWith16BitLogits) {
  const LessonRun r =
      memory_lesson("--T 256 --D 32 --V 4096 --dtype bf16 --chunk-budget-mb 1 --repeat 1 --json");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  const nlohmann::json& naive = j["paths"]["naive"];
  const nlohmann::json& chunked = j["paths"]["chunked"];
  // naive's extra fp32 copy of all of [T, V] is visible: its largest block.
  const int64_t fp32_logits = 4 * 256 * 4096;
  EXPECT_GE(naive["largest_forward_block_bytes"].get<int64_t>(), fp32_logits);
  EXPECT_LT(chunked["largest_forward_block_bytes"].get<int64_t>(), fp32_logits / 2);
  EXPECT_LT(chunked["forward_peak_bytes"].get<int64_t>(),
            naive["forward_peak_bytes"].get<int64_t>() * 9 / 10);
  const std::string lesson = lesson_text(j);
  expect_says(lesson, "fp32 copy of all of [T, V]");
  expect_says(lesson, "chunked's forward peak");
  expect_says(lesson, "is lower than naive's");
  EXPECT_EQ(lesson.find("does not drop"), std::string::npos) << lesson;
}

TEST(Lessons, LessonTextExplainsAFusedPeakAboveNaives) {
  // One chunk holds all 64 rows: fused makes the whole [T, V] too (as at --scale 64).
  const LessonRun r = memory_lesson(kTiny + "--chunk-budget-mb 64");
  ASSERT_EQ(r.exit_code, 0) << r.out;
  EXPECT_NE(r.out.find("one chunk holds all 64 rows"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("largest block"), std::string::npos) << r.out;  // the table's column
}

TEST(Lessons, LessonTextSaysWhenChunkedIsAboveNaive) {
  // D (512) above V (256): each chunk's narrow makes a [T, D] gradient in backward.
  const nlohmann::json j =
      lesson_json("--T 256 --D 512 --V 256 --chunk-rows 64 --paths naive,chunked");
  ASSERT_FALSE(j.is_null());
  const int64_t naive = j["paths"]["naive"]["peak_bytes"],
                chunked = j["paths"]["chunked"]["peak_bytes"];
  ASSERT_GT(chunked, naive * 11 / 10);  // the case exists at this shape
  const std::string lesson = lesson_text(j);
  expect_says(lesson, "chunked's step peak " + cg::format_bytes(chunked) + " is above naive's " +
                          cg::format_bytes(naive));
  expect_says(lesson, "NarrowBackward");
  expect_says(lesson, "is below naive's", false);
}

TEST(Lessons, LessonTextCountsTwoCopiesWithATeacher) {
  const nlohmann::json j =
      lesson_json("--T 256 --D 32 --V 4096 --dtype bf16 --loss kl --chunk-rows 64 --paths naive");
  ASSERT_FALSE(j.is_null());
  // Two bf16 [T, V] kept (student and teacher), two fp32 [T, V] temporaries.
  const int64_t tv = 256 * 4096;
  EXPECT_EQ(j["paths"]["naive"]["retained_by_node"]["RowLossBackward"].get<int64_t>(), 2 * 2 * tv);
  // (peak - kept: a few KiB of the step's small blocks are freed before forward ends)
  EXPECT_GT(j["paths"]["naive"]["forward_temporary_bytes"].get<int64_t>(), 2 * 4 * tv * 99 / 100);
  const std::string lesson = lesson_text(j);
  expect_says(lesson, "two [T, V] logits tensors, the student's and the teacher's");
  expect_says(lesson, "there are two of them");
}

TEST(Lessons, LessonTextSaysRecomputeKeepsNoDh) {
  const nlohmann::json j =
      lesson_json("--T 256 --D 32 --V 4096 --chunk-rows 64 --recompute --paths fused");
  ASSERT_FALSE(j.is_null());
  const int64_t kept = j["paths"]["fused"]["retained_bytes"];
  EXPECT_EQ(kept, 4 * 256);  // the mean's [T] scale, nothing of size D or V
  const std::string lesson = lesson_text(j);
  expect_says(lesson, "keeps no dh: its graph retains " + cg::format_bytes(kept));
  expect_says(lesson, "8TDV FLOPs instead of 6TDV");
  expect_says(lesson, "keeps only dh", false);
}

TEST(Lessons, LessonPrintsTheByteFormulaBesideTheMeasuredPeak) {
  const nlohmann::json j =
      lesson_json("--T 512 --D 64 --V 4096 --chunk-rows 128 --paths naive,fused");
  ASSERT_FALSE(j.is_null());
  // 20 T + 4 T D + 4 C V, each block rounded to 512 B.
  const int64_t predicted = 2048 * 3 + 4096 + 4 * 512 * 64 + 4 * 128 * 4096;
  EXPECT_EQ(j["paths"]["fused"]["forward_peak_bytes"].get<int64_t>(), predicted);
  const std::string lesson = lesson_text(j);
  expect_says(lesson, "(" + std::to_string(predicted) + " B); measured " +
                          cg::format_bytes(predicted) + " (" + std::to_string(predicted) +
                          " B): equal.");
  // The three ratios are stated together, each from the JSON's own numbers.
  const nlohmann::json& p = j["paths"];
  const double fwd = double(p["naive"]["forward_peak_bytes"].get<int64_t>()) /
                     double(p["fused"]["forward_peak_bytes"].get<int64_t>());
  expect_says(lesson, "three ways from one run: forward peaks above the inputs " +
                          cg::detail::concat(std::round(10 * fwd) / 10) + "x");
}

TEST(Lessons, LessonTextDoesNotSayOnlyWhenDhIsAsLargeAsTheLogits) {
  // D (512) above V (256): dh [T, D] is twice the logits [T, V].
  const nlohmann::json j =
      lesson_json("--T 256 --D 512 --V 256 --chunk-rows 64 --paths naive,fused");
  ASSERT_FALSE(j.is_null());
  const int64_t naive = j["paths"]["naive"]["retained_bytes"],
                fused = j["paths"]["fused"]["retained_bytes"];
  ASSERT_GE(fused, naive);  // the case exists at this shape
  const std::string lesson = lesson_text(j);
  expect_says(lesson, "keeps only dh", false);
  expect_says(lesson, "fused's graph keeps dh [T, D] and the mean's [T] scale (" +
                          cg::format_bytes(fused) +
                          ") and no logits -- not less than naive's graph (" +
                          cg::format_bytes(naive) + ")");
}

// An outside tester: the formula "20 T + 4 T D + 4 C V" missed the peak after the chunk
// loop, which is the larger at tiny shapes (4.00 KiB measured, 3.00 KiB predicted).
TEST(Lessons, TheByteFormulaIsExactAtTinyShapesToo) {
  for (const char* shape : {"--T 1 --D 1 --V 1", "--T 10 --D 4 --V 16 --chunk-rows 1000",
                            "--T 512 --D 64 --V 4096 --chunk-rows 128"}) {
    const std::string lesson = lesson_text(lesson_json(std::string(shape) + " --paths fused"));
    expect_says(lesson, "byte formula for fused's forward peak");
    expect_says(lesson, ": equal.");
  }
}

// An outside tester: fused 8.13 MiB against naive 8.01 MiB read "1x"; "naive's backward
// adds a [T, V] gradient that fused never makes" where it made none; "all 1 rows"; dh
// [T, D] said to be 130.00 KiB (128 KiB and the mean's 2 KiB scale).
TEST(Lessons, LessonWordsFitOddShapes) {
  const nlohmann::json j =
      lesson_json("--T 512 --D 64 --V 4096 --chunk-rows 512 --paths naive,fused");
  ASSERT_FALSE(j.is_null());
  const nlohmann::json& p = j["paths"];
  ASSERT_GT(p["fused"]["forward_peak_bytes"].get<int64_t>(),
            p["naive"]["forward_peak_bytes"].get<int64_t>());  // the case exists at this shape
  std::string lesson = lesson_text(j);
  expect_says(lesson, "forward peaks above the inputs 0.99x");
  expect_says(lesson, "gradient that fused never makes");  // its step peak is naive's / 2
  lesson = lesson_text(lesson_json("--T 1 --D 8 --V 64 --paths naive,fused"));
  expect_says(lesson, "all 1 rows", false);
  expect_says(lesson, "one chunk holds the one row");
  expect_says(lesson, "step peaks above the inputs 1x");  // the same bytes: no [T, V] gradient
  expect_says(lesson, "gradient that fused never makes", false);
  lesson = lesson_text(lesson_json("--T 512 --D 64 --V 4096 --chunk-rows 128 --paths fused"));
  expect_says(lesson, "fused's graph keeps only dh [T, D] and the mean's [T] scale (130.00 KiB)");
}

// An outside tester: `--anchors 3 --anchors 6` drew two blocks, merged, where any other
// option given twice is refused; flce_min with its largest sizes filled 4 GiB of h before
// the 64 GiB head failed to allocate.
TEST(Lessons, RepeatedAnchorsAndSizesPastTheMachineAreRefusedAtOnce) {
  const LessonRun twice =
      run_in_temp_dir("./build/examples/dflash_mask_lesson --anchors 3 --anchors 6");
  EXPECT_EQ(twice.exit_code, 1) << twice.out;
  EXPECT_NE(twice.out.find("chunkgrad dflash_mask_lesson: error: --anchors is given 2 times; give "
                           "all its values after one --anchors"),
            std::string::npos)
      << twice.out;
  const LessonRun huge =
      run_in_temp_dir("timeout 20 ./build/examples/flce_min --T 65536 --D 16384 --V 1048576");
  EXPECT_EQ(huge.exit_code, 1) << huge.out;
  EXPECT_NE(huge.out.find("chunkgrad flce_min: error: h [T, D], the head [V, D] and naive's "
                          "[T, V] logits and gradient need 580.00 GiB, more than this machine's"),
            std::string::npos)
      << huge.out;
}

// Every exercise's commands run and print what its Check: line quotes.
TEST(Lessons, EveryExerciseRunsAndPrintsWhatItsCheckQuotes) {
  const std::string doc = slurp(std::string(CHUNKGRAD_SOURCE_DIR) + "/docs/exercises.md");
  ASSERT_FALSE(doc.empty());
  std::istringstream lines(doc);
  std::string line, block;
  bool in_block = false;
  int exercises = 0, headings = 0;
  for (std::string pending; std::getline(lines, line);) {
    if (line.rfind("## ", 0) == 0) ++headings;  // "## 3. Make chunked worse than naive..."
    if (line == "```sh") {
      in_block = true;
      block.clear();
    } else if (in_block && line == "```") {
      in_block = false;
      pending = block;
    } else if (in_block) {
      block += line + "\n";
    } else if (line.rfind("Check:", 0) == 0) {
      ASSERT_FALSE(pending.empty()) << "a Check: line without a ```sh block before it: " << line;
      std::vector<std::string> words;
      const std::regex quoted("`([^`]+)`");
      for (auto it = std::sregex_iterator(line.begin(), line.end(), quoted);
           it != std::sregex_iterator(); ++it)
        words.push_back((*it)[1]);
      ASSERT_FALSE(words.empty()) << line;
      SCOPED_TRACE(pending);
      expect_all(run_in_temp_dir(pending), words);
      pending.clear();
      ++exercises;
    }
  }
  EXPECT_GE(exercises, 8);
  // Every exercise has its Check: line, so none is left unrun.
  EXPECT_EQ(exercises, headings) << "an exercise of docs/exercises.md has no Check: line";
}

}  // namespace
