// Why this file exists: `chunkgrad export` and `drafter.init_from` end to end through the
// built program: a 3-step synthetic run is exported, a second run starts from the folder
// (its first loss is lower than a random start's), and bad options and a mismatched
// folder are one error line and exit 1. Runs at CI sizes, about a second in all.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

namespace fs = std::filesystem;

struct CliRun {
  int exit_code = -1;
  std::string out, err;
};

std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class ExportProgram : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() / ("chunkgrad_export_program_" + std::to_string(::getpid()));
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string at(const std::string& name) const { return (root_ / name).string(); }
  CliRun cli(const std::string& args) const {
    const std::string cmd = std::string("CHUNKGRAD_NUM_THREADS=1 '") + CHUNKGRAD_CLI + "' " + args +
                            " >'" + at("out") + "' 2>'" + at("err") + "'";
    const int status = std::system(cmd.c_str());
    CliRun r;
    r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    r.out = slurp(at("out"));
    r.err = slurp(at("err"));
    return r;
  }
  // A synthetic drafter run of 3 steps (no target model), plus `extra` options.
  CliRun train(const std::string& run_dir, const std::string& extra = "") const {
    return cli("train --config '" + std::string(CHUNKGRAD_SOURCE_DIR) +
               "/configs/toy.json' --no-progress --run-dir '" + at(run_dir) +
               "' --set features.source=synthetic --set drafter.hidden_size=32 "
               "--set drafter.vocab_size=128 --set drafter.num_target_layers=6 "
               "--set drafter.num_heads=2 --set drafter.num_kv_heads=1 --set drafter.head_dim=16 "
               "--set drafter.optim.steps=3 --set data.num_sequences=8 "
               "--set data.max_new_tokens=32 --set memory.enabled=false " +
               extra);
  }
  double first_loss(const std::string& run_dir) const {
    std::ifstream in(at(run_dir) + "/metrics.jsonl");
    std::string line;
    std::getline(in, line);
    return nlohmann::json::parse(line)["loss"].get<double>();
  }
  // One error line "chunkgrad <command>: error: ..." holding each word, exit 1.
  static void expect_one_error_line(const CliRun& r, const std::string& command,
                                    std::initializer_list<const char*> words) {
    SCOPED_TRACE("stderr: " + r.err);
    EXPECT_EQ(r.exit_code, 1);
    const size_t at = r.err.find("chunkgrad " + command + ": error: ");
    ASSERT_NE(at, std::string::npos);
    const std::string line = r.err.substr(at);
    EXPECT_EQ(line.find('\n'), line.size() - 1) << "not one line";
    for (const char* w : words) EXPECT_NE(line.find(w), std::string::npos) << w;
  }

  fs::path root_;
};

TEST_F(ExportProgram, ExportThenTrainFromTheFolder) {
  ASSERT_EQ(train("a").exit_code, 0);
  const CliRun e = cli("export --run-dir '" + at("a") + "' --out '" + at("pub") + "'");
  ASSERT_EQ(e.exit_code, 0) << e.err;
  EXPECT_NE(e.out.find("step 3"), std::string::npos) << e.out;
  const auto c = nlohmann::json::parse(slurp(at("pub/config.json")));
  EXPECT_EQ(c["architectures"][0], "DFlashDraftModel");
  EXPECT_EQ(c["num_target_layers"], 6);
  EXPECT_TRUE(fs::exists(at("pub/model.safetensors")));
  // A second run from the exported weights starts where the first one ended, not at random.
  ASSERT_EQ(train("b", "--set drafter.init_from='" + at("pub") + "'").exit_code, 0);
  EXPECT_LT(first_loss("b"), first_loss("a"));
  // Another drafter shape: refused before training, each field named.
  expect_one_error_line(
      train("c", "--set drafter.num_layers=2 --set drafter.init_from='" + at("pub") + "'"), "train",
      {"drafter.init_from", "num_hidden_layers: 1 in config.json, 2 here (drafter.num_layers)"});
  // The same folder again: export never overwrites.
  expect_one_error_line(cli("export --run-dir '" + at("a") + "' --out '" + at("pub") + "'"),
                        "export", {"already holds config.json"});
}

TEST_F(ExportProgram, BadOptionsAreOneErrorLine) {
  expect_one_error_line(cli("export --out '" + at("x") + "'"), "export",
                        {"--run-dir", "--checkpoint"});
  fs::create_directories(at("empty_run"));
  expect_one_error_line(cli("export --run-dir '" + at("empty_run") + "' --out '" + at("x") + "'"),
                        "export", {"no drafter checkpoint"});
  expect_one_error_line(cli("export --run-dir '" + at("missing") + "' --out '" + at("x") + "'"),
                        "export", {"--run-dir"});
}

}  // namespace
