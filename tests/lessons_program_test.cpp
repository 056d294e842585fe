// Why this file exists: the reading path (docs/README.md) promises "run X, you should see
// Z". These tests run each lesson program and check the numbers its doc quotes, and run
// every exercise of docs/exercises.md: each ```sh block there is run from a fresh folder
// (with ./build/examples/ pointing at this build), and every `quoted` string of the
// "Check:" line after it must appear in what the commands print.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

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
  expect_all(r, {"block a slot 0 ###..... #### ....", "block b slot 3 ######.. .... ####"});
  r = run_in_temp_dir("./build/examples/dflash_mask_lesson --window 3");
  // Sliding, W = 3: slot 0 of block b (position 6) sees keys 4, 5; slot 3 (position 9)
  // sees no context (9 - 2 = 7 > 5) and slots 1..3 of its block.
  expect_all(r, {"block b slot 0 ....##.. .... #...", "block b slot 3 ........ .... .###"});
}

// Every exercise's commands run and print what its Check: line quotes.
TEST(Lessons, EveryExerciseRunsAndPrintsWhatItsCheckQuotes) {
  const std::string doc = slurp(std::string(CHUNKGRAD_SOURCE_DIR) + "/docs/exercises.md");
  ASSERT_FALSE(doc.empty());
  std::istringstream lines(doc);
  std::string line, block;
  bool in_block = false;
  int exercises = 0;
  for (std::string pending; std::getline(lines, line);) {
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
}

}  // namespace
