// Why this file exists: issue 21's golden test of a mixture-of-experts Qwen3.5 target. A
// tiny Qwen3_5MoeForConditionalGeneration made and saved by transformers 5.17 (f32, CPU,
// experts pinned to transformers' "eager" loop; tests/golden/qwen3_5/make_golden_moe.py):
//   tiny_qwen3_5_moe/            as save_pretrained writes it: transformers 5.17 stores the
//                                experts one tensor per expert and projection
//                                (experts.{e}.{gate,up,down}_proj.weight); model.visual.* and
//                                mtp.* in the file (skipped); 4 layers L F L F, 8 experts, top
//                                3, expert MLP 16, shared expert 24 gated by a random
//                                shared_expert_gate, partial rotary 0.25, untied lm_head;
//   tiny_qwen3_5_moe_packed/     the same weights packed as the released checkpoints store
//                                them (experts.gate_up_proj [8, 32, 64], gate rows first;
//                                experts.down_proj [8, 64, 16]);
//   tiny_qwen3_5_moe_hidden.safetensors    transformers' hidden states and logits for 2, 77
//                                and 150 tokens (2 x top 3 = 6 slots < 8 experts: some expert
//                                gets no token; 77 and 150 cross DeltaNet chunks of 64);
//   tiny_qwen3_5_moe_routing.safetensors   the router's logits, top-k indices and weights
//                                per layer and sequence.
// What is compared (f32 CPU at kRelTol of the reference's scale, as the dense golden):
// every decoder layer's output, the final normed hidden, the logits (from both layouts); the
// router on
// transformers' own router logits (indices exactly, weights to fp32 rounding); both expert
// layouts load to bit-identical parameters; cached greedy decoding equals transformers'.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/backend.h"
#include "core/factories.h"
#include "core/views.h"
#include "nn/kv_cache.h"
#include "nn/safetensors.h"
#include "ops/moe.h"
#include "ops/ops.h"
#include "tests/golden_test_util.h"
#include "train/feature_target.h"

namespace cg {
namespace {

namespace fs = std::filesystem;
using testing_golden::rel_diff;

const std::string kGolden = std::string(CHUNKGRAD_TEST_DATA_DIR) + "/../golden/qwen3_5";
const std::string kSaved = kGolden + "/tiny_qwen3_5_moe";  // per expert, as transformers saves
const std::string kPacked = kGolden + "/tiny_qwen3_5_moe_packed";
const std::string kHidden = kGolden + "/tiny_qwen3_5_moe_hidden.safetensors";
const std::string kRouting = kGolden + "/tiny_qwen3_5_moe_routing.safetensors";
const std::vector<int64_t> kLengths = {2, 77, 150};
const std::vector<std::string> kLayerTypes = {"linear_attention", "full_attention",
                                              "linear_attention", "full_attention"};
constexpr int64_t kLayers = 4, kHiddenSize = 64, kVocab = 1024, kExperts = 8, kTopK = 3;
constexpr int64_t kPromptLen = 70, kNewTokens = 12;
constexpr double kRelTol = 5e-5;     // f32 CPU vs transformers f32 CPU
constexpr double kGpuRelTol = 2e-3;  // f32 GPU vs the same reference

bool have_goldens() {
  return fs::exists(kSaved + "/config.json") && fs::exists(kPacked + "/config.json") &&
         fs::exists(kHidden);
}
#define SKIP_WITHOUT_GOLDENS()                                                   \
  if (!have_goldens())                                                           \
  GTEST_SKIP() << "no " << kSaved                                                \
               << ": make it on a machine with torch and transformers (python3 " \
                  "tests/golden/qwen3_5/make_golden_moe.py)"

struct Golden {
  explicit Golden(const std::string& path) : file(safetensors::open(path)) {}
  std::unique_ptr<safetensors::Reader> file;
  Tensor at(const std::string& name) const { return file->load(name, kCPU); }
  std::vector<int64_t> ids(const std::string& name) const {
    std::vector<int64_t> out;
    for (double v : at(name).to_vector()) out.push_back(static_cast<int64_t>(v));
    return out;
  }
};

std::string key(const std::string& what, int64_t n) { return what + "." + std::to_string(n); }
std::string key(const std::string& what, int64_t n, int64_t i) {
  return key(what, n) + "." + std::to_string(i);
}

std::vector<int64_t> all_layers() {
  std::vector<int64_t> out;
  for (int64_t l = 0; l < kLayers; ++l) out.push_back(l);
  return out;
}

Tensor f32_cpu(const Tensor& t, const Shape& shape) {
  return to_dtype(to_device(reshape(t, shape), kCPU), DType::f32);
}

void check_forward(const std::string& folder, Device device, double tol) {
  const train::FeatureTarget target = train::load_feature_target(folder, device, DType::f32);
  const nn::Qwen3Config& c = target.lm->config();
  ASSERT_TRUE(c.is_moe());
  EXPECT_EQ(c.num_experts, kExperts);
  EXPECT_EQ(c.num_experts_per_tok, kTopK);
  EXPECT_EQ(c.moe_intermediate_size, 16);
  EXPECT_EQ(c.shared_expert_intermediate_size, 24);
  EXPECT_EQ(c.layer_types, kLayerTypes);
  EXPECT_FALSE(c.tie_embeddings);
  const Golden g(kHidden);
  NoGradGuard no_grad;
  for (int64_t n : kLengths) {
    const Tensor ids = to_device(reshape(g.at(key("ids", n)), {1, n}), device);
    const auto out = target.lm->forward(ids, {.capture_layers = all_layers()});
    for (int64_t i = 0; i < kLayers; ++i) {
      // hidden_states[i + 1] is layer i's output, except the last (the normed one there).
      const Tensor want =
          i + 1 < kLayers ? g.at(key("hidden_states", n, i + 1)) : g.at(key("layer_out", n, i));
      EXPECT_LE(rel_diff(f32_cpu(out.layer_hidden[i], {n, kHiddenSize}), want), tol)
          << folder << " n " << n << ": output of decoder layer " << i << " (" << kLayerTypes[i]
          << ")";
    }
    EXPECT_LE(
        rel_diff(f32_cpu(out.hidden, {n, kHiddenSize}), g.at(key("hidden_states", n, kLayers))),
        tol)
        << folder << " n " << n << ": the final normed hidden";
    if (n != kLengths.back()) {
      EXPECT_LE(rel_diff(f32_cpu(out.logits, {n, kVocab}), g.at(key("logits", n))), tol)
          << folder << " n " << n << ": logits";
    }
  }
}

TEST(Qwen35MoeGolden, BothExpertLayoutsMatchTransformersOnTheCpu) {
  SKIP_WITHOUT_GOLDENS();
  check_forward(kSaved, kCPU, kRelTol);
  check_forward(kPacked, kCPU, kRelTol);
}

TEST(Qwen35MoeGolden, BothExpertLayoutsLoadTheSameParameters) {
  SKIP_WITHOUT_GOLDENS();
  const train::FeatureTarget saved = train::load_feature_target(kSaved, kCPU, DType::f32);
  const train::FeatureTarget packed = train::load_feature_target(kPacked, kCPU, DType::f32);
  const auto a = saved.lm->named_parameters(), b = packed.lm->named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    ASSERT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(a[i].second.to_vector(), b[i].second.to_vector()) << a[i].first;
  }
  // The two files really hold the two layouts (the test above would pass on a copy).
  auto layout_of = [](const std::string& file) {
    bool packed_names = false, split_names = false;
    const auto reader = safetensors::open(file);
    for (const std::string& name : reader->names()) {
      packed_names = packed_names || name.find("experts.gate_up_proj") != std::string::npos;
      split_names = split_names || name.find("experts.7.up_proj.weight") != std::string::npos;
    }
    return std::pair{packed_names, split_names};
  };
  EXPECT_EQ(layout_of(kSaved + "/model.safetensors"), std::pair(false, true));
  EXPECT_EQ(layout_of(kPacked + "/model.safetensors"), std::pair(true, false));
}

TEST(Qwen35MoeGolden, RouterMatchesTransformersTopK) {
  SKIP_WITHOUT_GOLDENS();
  if (!fs::exists(kRouting)) GTEST_SKIP() << "no " << kRouting << " (make_golden_moe.py)";
  const Golden r(kRouting);
  bool an_expert_without_tokens = false;
  for (int64_t n : kLengths) {
    for (int64_t l = 0; l < kLayers; ++l) {
      const std::string base = "route." + std::to_string(n) + "." + std::to_string(l) + ".";
      const MoeRouting mine = moe_route(r.at(base + "logits"), kTopK);
      const std::vector<int64_t> want = r.ids(base + "indices");
      std::vector<int64_t> got;
      for (double v : mine.indices.to_vector()) got.push_back(static_cast<int64_t>(v));
      EXPECT_EQ(got, want) << "top-k experts of layer " << l << ", " << n << " tokens";
      EXPECT_LE(rel_diff(mine.weights, r.at(base + "weights")), 1e-6)
          << "routing weights of layer " << l << ", " << n << " tokens";
      std::vector<int> hits(kExperts, 0);
      for (int64_t e : want) ++hits[static_cast<size_t>(e)];
      for (int h : hits) an_expert_without_tokens = an_expert_without_tokens || h == 0;
    }
  }
  EXPECT_TRUE(an_expert_without_tokens) << "the golden was meant to leave some expert idle";
}

TEST(Qwen35MoeGolden, CachedGreedyDecodingEqualsTransformers) {
  SKIP_WITHOUT_GOLDENS();
  const train::FeatureTarget target = train::load_feature_target(kSaved, kCPU, DType::f32);
  const Golden g(kHidden);
  const std::vector<int64_t> prompt = g.ids("gen.prompt"), greedy = g.ids("gen.greedy");
  const Tensor want = g.at("gen.logits");  // [12, V]: row i predicts greedy[i]
  ASSERT_EQ(static_cast<int64_t>(prompt.size()), kPromptLen);
  ASSERT_EQ(static_cast<int64_t>(greedy.size()), kNewTokens);
  nn::KVCache cache = target.lm->make_cache(kPromptLen + kNewTokens);
  auto out = target.lm->forward_cached(from_ints(prompt, {1, kPromptLen}), cache,
                                       {.last_logits_only = true});
  std::vector<int64_t> mine;
  for (int64_t i = 0; i < kNewTokens; ++i) {
    const Tensor row = f32_cpu(narrow(out.logits, 1, out.logits.size(1) - 1, 1), {kVocab});
    EXPECT_LE(rel_diff(row, contiguous(reshape(narrow(want, 0, i, 1), {kVocab}))), kRelTol)
        << "logits of decoding step " << i;
    mine.push_back(static_cast<int64_t>(argmax(row, 0).item()));
    if (i + 1 < kNewTokens)
      out = target.lm->forward_cached(from_ints({mine.back()}, {1, 1}), cache);
  }
  EXPECT_EQ(mine, greedy) << "cached greedy decoding vs transformers'";
}

TEST(Qwen35MoeGolden, GpuMatchesTransformersInF32) {
  SKIP_WITHOUT_GOLDENS();
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  check_forward(kSaved, cuda_device(), kGpuRelTol);
  check_forward(kPacked, cuda_device(), kGpuRelTol);
}

}  // namespace
}  // namespace cg
