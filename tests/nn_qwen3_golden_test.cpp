// Why this file exists: chunkgrad's Qwen3 checked against numbers made by Hugging Face
// transformers itself (issue 8, item 8), not only against itself. tests/data/
// make_qwen3_golden.py builds tiny random Qwen3ForCausalLM models (tied and untied
// embeddings, rope_theta 1e6), saves them with save_pretrained and writes their outputs
// for a fixed batch of ids; here chunkgrad reads each folder with its own config and
// checkpoint loaders, runs the same ids, and compares the embedding output, every
// decoder layer's output, the final norm output and the logits in fp32.
//
// The data is made on a machine with torch and transformers and committed; without it
// the test is skipped and says how to make it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "core/views.h"
#include "nn/nn.h"

namespace cg {
namespace {

namespace fs = std::filesystem;

constexpr double kAbsTol = 1e-4;  // fp32 on both sides; they agree to ~1e-6 when right

// max |a - b| over all elements, with a shape check.
double max_abs_diff(const Tensor& got, const Tensor& want, const std::string& what) {
  EXPECT_EQ(got.shape(), want.shape()) << what;
  if (got.shape() != want.shape()) return INFINITY;
  const std::vector<double> a = got.to_vector(), b = want.to_vector();
  double worst = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::abs(a[i] - b[i]);
    if (!(d <= worst)) worst = d;  // NaN propagates as the worst
  }
  return worst;
}

void check_golden_folder(const std::string& name, bool expect_tied) {
  const fs::path folder = fs::path(CHUNKGRAD_TEST_DATA_DIR) / name;
  if (!fs::exists(folder / "reference_outputs.safetensors")) {
    GTEST_SKIP() << "no golden data in " << folder.string()
                 << "; make it on a machine with torch and transformers: python3 "
                    "tests/data/make_qwen3_golden.py (then commit tests/data/qwen3_tiny_*)";
  }
  const nn::Qwen3Config config = nn::Qwen3Config::from_hf_file((folder / "config.json").string());
  ASSERT_EQ(config.tie_embeddings, expect_tied);
  EXPECT_EQ(config.rope_theta, 1e6) << "the RoPE base was not read from config.json";

  nn::Qwen3ForCausalLM lm(config);  // f32
  // Strict by name; the checkpoint is BF16 and the model f32 (exact widening).
  nn::load_checkpoint(lm, folder.string(), {.strict = true, .convert_dtype = true});

  const auto ref = safetensors::open((folder / "reference_outputs.safetensors").string());
  const Tensor ids = ref->load("input_ids", kCPU);
  std::vector<int64_t> all_layers(static_cast<size_t>(config.num_layers));
  for (int64_t i = 0; i < config.num_layers; ++i) all_layers[static_cast<size_t>(i)] = i;
  const nn::DecoderOutput out = lm.forward(ids, {.capture_layers = all_layers});

  const Tensor embeddings = lm.model->embed_tokens->forward(ids);
  double worst = 0.0;
  auto compare = [&](const Tensor& got, const std::string& key) {
    const double d = max_abs_diff(got, ref->load(key, kCPU), name + " " + key);
    EXPECT_LE(d, kAbsTol) << name << ": " << key << " differs from transformers by " << d;
    worst = std::max(worst, d);
  };
  compare(embeddings, "embeddings");
  for (int64_t i = 0; i < config.num_layers; ++i) {
    compare(out.layer_hidden[static_cast<size_t>(i)], "layers." + std::to_string(i) + ".output");
  }
  compare(out.hidden, "norm.output");
  compare(out.logits, "logits");
  std::cout << "[ golden   ] " << name << ": max |chunkgrad - transformers| = " << worst << "\n";
}

TEST(NnQwen3Golden, TiedMatchesTransformers) { check_golden_folder("qwen3_tiny_tied", true); }

TEST(NnQwen3Golden, UntiedMatchesTransformers) { check_golden_folder("qwen3_tiny_untied", false); }

// An outside tester removed tie_word_embeddings from a tied folder's config.json: the load
// said "missing 1 key(s): lm_head.weight ... or load with strict = false", which no command
// offers. Now it points at the field.
TEST(NnQwen3Golden, ATiedCheckpointReadUntiedNamesTheField) {
  const fs::path folder = fs::path(CHUNKGRAD_TEST_DATA_DIR) / "qwen3_tiny_tied";
  nn::Qwen3Config config = nn::Qwen3Config::from_hf_file((folder / "config.json").string());
  config.tie_embeddings = false;
  nn::Qwen3ForCausalLM lm(config);
  try {
    nn::load_checkpoint(lm, folder.string(), {.strict = true, .convert_dtype = true});
    ADD_FAILURE() << "loaded without lm_head.weight";
  } catch (const Error& e) {
    const std::string m = e.message();
    EXPECT_NE(m.find("missing 1 key(s): lm_head.weight"), std::string::npos) << m;
    EXPECT_NE(m.find("\"tie_word_embeddings\": true"), std::string::npos) << m;
    EXPECT_EQ(m.find("strict = false"), std::string::npos) << m;
  }
}

}  // namespace
}  // namespace cg
