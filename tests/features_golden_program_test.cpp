// Why this file exists: `chunkgrad features` on a folder transformers wrote (issue 20,
// golden tests): run as a user runs it, on tests/golden/tiny_qwen3 (sharded safetensors,
// transformers 5's config.json), the features it stores for layer id l are transformers'
// hidden_states[l + 1] and its last_hidden is hidden_states[L] (the normed output), for
// each golden sequence (tests/golden/make_qwen3_golden.py). hf_target_golden_test.cpp
// checks the same in the library; this is the program's path, file format included.
#include <gtest/gtest.h>

#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/backend.h"
#include "nn/safetensors.h"
#include "tests/golden_test_util.h"
#include "train_program_fixture.h"

namespace {

namespace fs = std::filesystem;
using cg::testing_golden::rel_diff;
using train_program_fixture::slurp;

const std::string kGolden = std::string(CHUNKGRAD_SOURCE_DIR) + "/tests/golden";

// `chunkgrad features --device DEVICE` on the golden target, compared at `tol`.
void check_features(const std::string& device, double tol) {
  const std::string target = kGolden + "/tiny_qwen3";
  const std::string hidden = kGolden + "/tiny_qwen3_hidden.safetensors";
  if (!fs::exists(target + "/config.json") || !fs::exists(hidden))
    GTEST_SKIP() << "no " << target << " (python3 tests/golden/make_qwen3_golden.py)";
  const fs::path root =
      fs::temp_directory_path() / ("chunkgrad_features_golden_" + std::to_string(::getpid()));
  fs::remove_all(root);
  fs::create_directories(root);
  const auto golden = cg::safetensors::open(hidden);
  const std::vector<int64_t> lengths = {7, 33};  // a sample needs at least 2 tokens
  {
    std::ofstream data(root / "ids.jsonl");
    for (int64_t n : lengths) {
      const std::vector<double> ids = golden->load("ids." + std::to_string(n)).to_vector();
      nlohmann::json j = {{"input_ids", nlohmann::json::array()}};
      for (double id : ids) j["input_ids"].push_back(static_cast<int64_t>(id));
      data << j.dump() << "\n";
    }
  }
  const std::string cmd = std::string("CHUNKGRAD_NUM_THREADS=1 '") + CHUNKGRAD_CLI +
                          "' features --target '" + target + "' --data '" +
                          (root / "ids.jsonl").string() + "' --out '" + (root / "f").string() +
                          "' --layers 2,0,1 --dtype f32 --no-progress --device " + device + " >'" +
                          (root / "out").string() + "' 2>'" + (root / "err").string() + "'";
  const int status = std::system(cmd.c_str());
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << slurp((root / "err").string());
  std::vector<std::unique_ptr<cg::safetensors::Reader>> shards;
  for (const auto& e : fs::directory_iterator(root / "f"))
    if (e.path().extension() == ".safetensors") shards.push_back(cg::safetensors::open(e.path()));
  ASSERT_FALSE(shards.empty());
  auto load = [&](const std::string& name) {
    for (const auto& r : shards)
      if (r->contains(name)) return r->load(name).to_vector();
    ADD_FAILURE() << "no " << name << " in the feature shards";
    return std::vector<double>{};
  };
  const std::vector<int64_t> layers = {2, 0, 1};
  const int64_t H = 64, L = 4;
  for (size_t i = 0; i < lengths.size(); ++i) {
    const int64_t n = lengths[i];
    const std::string sample = std::to_string(i);
    const std::vector<double> hs = load(sample + ".hidden_states");
    ASSERT_EQ(hs.size(), static_cast<size_t>(n * H * 3));
    for (size_t k = 0; k < layers.size(); ++k) {
      std::vector<double> mine;
      for (int64_t s = 0; s < n; ++s)
        for (int64_t h = 0; h < H; ++h)
          mine.push_back(hs[static_cast<size_t>(s * 3 * H + static_cast<int64_t>(k) * H + h)]);
      const std::string want =
          "hidden_states." + std::to_string(n) + "." + std::to_string(layers[k] + 1);
      EXPECT_LE(rel_diff(mine, golden->load(want).to_vector()), tol)
          << "sample " << i << ": layer id " << layers[k] << " vs " << want;
    }
    EXPECT_LE(rel_diff(load(sample + ".last_hidden"),
                       golden->load("hidden_states." + std::to_string(n) + "." + std::to_string(L))
                           .to_vector()),
              tol)
        << "sample " << i << ": last_hidden vs hidden_states[L]";
  }
  fs::remove_all(root);
}

TEST(FeaturesGoldenProgram, FeaturesOfATransformersFolderAreItsHiddenStates) {
  check_features("cpu", 2e-5);
}

TEST(FeaturesGoldenProgram, FeaturesOnTheGpuAreItsHiddenStates) {
  if (!cg::cuda_available()) GTEST_SKIP() << "no GPU";
  check_features("cuda", 2e-3);  // the GPU's f32 GEMMs (TF32 where allowed)
}

}  // namespace
