// Why this file exists: issue 21 is done when `chunkgrad features` and `chunkgrad eval` run
// with a Qwen3.5 target. This runs both programs as a user does, on the tiny transformers-made
// Qwen3.5 folders (tests/golden/qwen3_5, made by make_golden.py; the library-level checks are
// qwen3_5_golden_test.cpp):
//   - features on the conditional-generation layout (text_config nested, vision and mtp.*
//     tensors to skip) and on the text-only one: the stored features of layer id l are
//     transformers' hidden_states[l + 1] and last_hidden its hidden_states[L];
//   - eval with a public-layout drafter on the text-only target: prompts longer than
//     transformers' 64-token DeltaNet chunk, every output equal to target-only decoding
//     (so the DeltaNet state rollback after rejected draft tokens is lossless; the greedy
//     tokens themselves are checked against transformers' in qwen3_5_golden_test.cpp);
//   - both again with the mixture-of-experts target (make_golden_moe.py).
// Small and on the CPU, so CI runs them; the same on the GPU skips without one.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/backend.h"
#include "nn/safetensors.h"
#include "tests/eval_test_util.h"
#include "tests/golden_test_util.h"
#include "train_program_fixture.h"

namespace {

namespace fs = std::filesystem;
using cg::testing_golden::rel_diff;
using train_program_fixture::slurp;
using train_program_fixture::TrainRun;

const std::string kGolden = std::string(CHUNKGRAD_SOURCE_DIR) + "/tests/golden/qwen3_5";
constexpr int64_t kHidden = 64;

struct Case {
  std::string name;  // folder and reference prefix
  int64_t layers;
};
const Case kConditional{"tiny_qwen3_5", 6};
const Case kTextOnly{"tiny_qwen3_5_text", 5};
const Case kMoe{"tiny_qwen3_5_moe", 4};  // make_golden_moe.py: 8 experts, top 3, L F L F

bool have(const Case& c) {
  return fs::exists(kGolden + "/" + c.name + "/config.json") &&
         fs::exists(kGolden + "/" + c.name + "_hidden.safetensors");
}
#define SKIP_WITHOUT(c)                               \
  if (!have(c))                                       \
  GTEST_SKIP() << "no " << kGolden << "/" << (c).name \
               << " (make it with python3 tests/golden/qwen3_5/make_golden.py)"

std::vector<int64_t> ints(const cg::Tensor& t) {
  std::vector<int64_t> out;
  for (double v : t.to_vector()) out.push_back(static_cast<int64_t>(v));
  return out;
}

class Qwen35Program : public train_program_fixture::TrainProgram {
 protected:
  // `chunkgrad features` on the golden sequences of `c`, compared with transformers at `tol`.
  void check_features(const Case& c, const std::string& device, double tol) {
    const auto golden = cg::safetensors::open(kGolden + "/" + c.name + "_hidden.safetensors");
    const std::vector<int64_t> lengths = {77, 150};
    std::string lines;
    for (int64_t n : lengths)
      lines += cg::testing_eval::token_line(ints(golden->load("ids." + std::to_string(n))));
    const std::vector<int64_t> layers = {c.layers - 2, 0, 1};  // any order
    const std::string out = "f_" + c.name + "_" + device;      // one empty folder per run
    const TrainRun r =
        run("features --target '" + kGolden + "/" + c.name + "' --data '" +
            write("ids.jsonl", lines) + "' --out '" + path(out) + "' --layers " +
            std::to_string(layers[0]) + ",0,1 --dtype f32 --no-progress --device " + device);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    std::vector<std::unique_ptr<cg::safetensors::Reader>> shards;
    for (const auto& e : fs::directory_iterator(path(out)))
      if (e.path().extension() == ".safetensors") shards.push_back(cg::safetensors::open(e.path()));
    ASSERT_FALSE(shards.empty());
    auto load = [&](const std::string& name) {
      for (const auto& s : shards)
        if (s->contains(name)) return s->load(name).to_vector();
      ADD_FAILURE() << "no " << name << " in the feature shards";
      return std::vector<double>{};
    };
    const int64_t K = static_cast<int64_t>(layers.size());
    for (size_t i = 0; i < lengths.size(); ++i) {
      const int64_t n = lengths[i];
      const std::vector<double> hs = load(std::to_string(i) + ".hidden_states");
      ASSERT_EQ(hs.size(), static_cast<size_t>(n * K * kHidden));
      for (int64_t k = 0; k < K; ++k) {
        std::vector<double> mine;
        for (int64_t s = 0; s < n; ++s)
          for (int64_t h = 0; h < kHidden; ++h)
            mine.push_back(hs[static_cast<size_t>((s * K + k) * kHidden + h)]);
        const std::string want =
            "hidden_states." + std::to_string(n) + "." + std::to_string(layers[k] + 1);
        EXPECT_LE(rel_diff(mine, golden->load(want).to_vector()), tol)
            << c.name << " sample " << i << ": layer id " << layers[k] << " vs " << want;
      }
      const std::string last =
          "hidden_states." + std::to_string(n) + "." + std::to_string(c.layers);
      EXPECT_LE(rel_diff(load(std::to_string(i) + ".last_hidden"), golden->load(last).to_vector()),
                tol)
          << c.name << " sample " << i << ": last_hidden vs " << last;
    }
  }

  // `chunkgrad eval` on `target` (the text-only one unless told) with a random public drafter.
  void check_eval(const std::string& device, const Case& target = kTextOnly) {
    cg::nn::Qwen3Config drafter_layers;  // the drafter's own (plain Qwen3) layout
    drafter_layers.vocab_size = 1024;
    drafter_layers.hidden_size = kHidden;
    drafter_layers.num_layers = target.layers;  // the target's depth, for its layer ids
    drafter_layers.num_heads = 4;
    drafter_layers.num_kv_heads = 2;
    drafter_layers.head_dim = 16;
    drafter_layers.intermediate_size = 128;
    drafter_layers.rope_theta = 1e6;
    cg::testing_eval::write_public_drafter_for(path("pub"), drafter_layers, {1, 3}, 4, 1003, 7);
    const auto golden = cg::safetensors::open(kGolden + "/" + target.name + "_hidden.safetensors");
    const std::vector<int64_t> prompt = ints(golden->load("gen.prompt"));  // 70 tokens
    std::string lines;
    for (int i = 0; i < 3; ++i) {  // the golden prompt, and two more past 64 tokens
      std::vector<int64_t> p = prompt;
      if (i > 0) p.resize(prompt.size() - 3 * static_cast<size_t>(i));
      lines += cg::testing_eval::token_line(p, {}, "long");
    }
    const TrainRun r = run("eval --target '" + kGolden + "/" + target.name + "' --drafter '" +
                           path("pub") + "' --data '" + write("p.jsonl", lines) +
                           "' --max-new-tokens 12 --eos-id 1023 --json '" + path("r.json") +
                           "' --no-progress --device " + device);
    ASSERT_EQ(r.exit_code, 0) << r.err;
    EXPECT_NE(r.out.find("all 3 prompts equal target-only decoding token for token"),
              std::string::npos)
        << r.out;
    EXPECT_EQ(r.out.find("NOT LOSSLESS"), std::string::npos) << r.out;
    const auto j = nlohmann::json::parse(slurp(path("r.json")));
    EXPECT_TRUE(j["identical"].get<bool>());
    EXPECT_GE(j["tau"].get<double>(), 1.0);
  }
};

TEST_F(Qwen35Program, FeaturesOfBothLayoutsAreTransformersHiddenStates) {
  SKIP_WITHOUT(kConditional);
  SKIP_WITHOUT(kTextOnly);
  check_features(kConditional, "cpu", 5e-5);
  check_features(kTextOnly, "cpu", 5e-5);
}

TEST_F(Qwen35Program, EvalOnAQwen35TargetIsLossless) {
  SKIP_WITHOUT(kTextOnly);
  check_eval("cpu");
}

// The mixture-of-experts target (qwen3_5_moe): features are transformers' hidden states,
// and speculative decoding with it is lossless.
TEST_F(Qwen35Program, FeaturesAndEvalWithAMixtureOfExpertsTarget) {
  SKIP_WITHOUT(kMoe);
  check_features(kMoe, "cpu", 5e-5);
  check_eval("cpu", kMoe);
}

// An outside tester: a wrapper's top-level num_hidden_layers that disagreed with its
// text_config was ignored without a word. Still ignored (as transformers does), now said.
TEST_F(Qwen35Program, AWrappersIgnoredTopLevelFieldIsAWarning) {
  SKIP_WITHOUT(kConditional);
  fs::copy(kGolden + "/" + kConditional.name, path("target"), fs::copy_options::recursive);
  auto config = nlohmann::json::parse(slurp(path("target/config.json")));
  config["num_hidden_layers"] = 9;
  write("target/config.json", config.dump(2));
  const TrainRun r = run("features --target '" + path("target") + "' --data '" +
                         write("ids.jsonl", "{\"input_ids\": [5, 6, 7, 8]}\n") + "' --out '" +
                         path("f") + "' --layers 0 --no-progress");
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.err.find("warning: --target " + path("target") +
                       ": config.json's top-level num_hidden_layers 9 (text_config: 6) is not "
                       "read"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err;
}

TEST_F(Qwen35Program, MixtureOfExpertsFeaturesAndEvalOnTheGpu) {
  SKIP_WITHOUT(kMoe);
  if (!cg::cuda_available()) GTEST_SKIP() << "no GPU";
  check_features(kMoe, "cuda", 2e-3);
  check_eval("cuda", kMoe);
}

TEST_F(Qwen35Program, FeaturesAndEvalOnTheGpu) {
  SKIP_WITHOUT(kConditional);
  SKIP_WITHOUT(kTextOnly);
  if (!cg::cuda_available()) GTEST_SKIP() << "no GPU";
  check_features(kConditional, "cuda", 2e-3);  // f32 GEMMs (TF32 where allowed)
  check_features(kTextOnly, "cuda", 2e-3);
  check_eval("cuda");
}

}  // namespace
