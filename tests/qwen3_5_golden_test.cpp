// Why this file exists: issue 21's golden tests. A Qwen3.5 / Qwen3.6 target is a folder
// transformers 5 wrote in one of two layouts, and chunkgrad must compute what transformers
// computes from it. tests/golden/qwen3_5/make_golden.py saved, with transformers 5.17 on the
// CPU in f32 (its PyTorch Gated DeltaNet: the chunked form for prefill, the recurrent one for
// cached single tokens):
//   tiny_qwen3_5/       Qwen3_5ForConditionalGeneration: text_config nested, model.visual.*
//                       and extra mtp.* tensors in the files (both skipped), untied lm_head,
//                       explicit layer_types (6 layers: L L L F L F), partial_rotary_factor
//                       0.25 inside rope_parameters (8 of 32 dims rotate), M-RoPE sections;
//   tiny_qwen3_5_text/  Qwen3_5ForCausalLM: flat, tied embeddings, no layer_types (derived
//                       from full_attention_interval 2: L F L F L), partial_rotary_factor 0.5
//                       at the top level (16 of 32 dims rotate);
// both with 2 key heads < 4 value heads, random zero-centred norm weights, gated-norm
// weights, A_log and dt_bias, and sequences of 5, 77 and 150 tokens (77 and 150 cross
// transformers' 64-token chunks and end inside one).
//
// What is compared (f32 on the CPU, kRelTol of the reference's scale: the two sides sum in
// other orders, and transformers' chunked DeltaNet solves a triangular system where the CPU
// reference steps the recurrence, so agreement is ~1e-6 of the scale per layer):
//   - every decoder layer's output (hidden_states[l + 1]; the last layer's own output, by a
//     forward hook, as hidden_states[L] is the normed one); the final normed hidden; the
//     logits (of the 5- and 77-token sequences: the file is kept small);
//   - cached decoding: prefill the 70-token prompt, then one token at a time, gives the
//     logits of transformers' full forward at each step and its 12 greedy tokens;
//   - rollback: a rejected block (all of it, or its tail after two accepted tokens) dropped
//     with KVCache::truncate leaves the cache computing what a cache that never saw it
//     computes (the DeltaNet layers' recurrent and conv state included). Only the last
//     forward's positions are rolled back: that is what verifying a draft block needs,
//     and a snapshot strategy need not keep more;
//   - on the GPU (skipped without one): f32 against the same f32 reference at kGpuRelTol;
//     f32 GPU against the f32 CPU forward directly at kGpuF32RelTol (every layer, the
//     normed hidden and the logits of all three lengths, the 150-token one included); bf16
//     GPU against the bf16 CPU forward at kBf16RelTol; f32 cached greedy decoding against
//     transformers'; bf16 cached decoding on the GPU against the GPU's own bf16 full
//     forward; and the rollback checks on the GPU.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "autograd/grad_mode.h"
#include "core/backend.h"
#include "core/factories.h"
#include "core/views.h"
#include "nn/config.h"
#include "nn/kv_cache.h"
#include "nn/safetensors.h"
#include "ops/ops.h"
#include "tests/golden_test_util.h"
#include "train/feature_target.h"

namespace cg {
namespace {

namespace fs = std::filesystem;
using testing_golden::rel_diff;

const std::string kGolden = std::string(CHUNKGRAD_TEST_DATA_DIR) + "/../golden/qwen3_5";
const std::vector<int64_t> kLengths = {5, 77, 150};
constexpr int64_t kHiddenSize = 64, kVocab = 1024, kPromptLen = 70, kNewTokens = 12;
constexpr double kRelTol = 5e-5;     // f32 CPU vs transformers f32 CPU
constexpr double kGpuRelTol = 2e-3;  // f32 GPU (TF32 GEMMs where allowed) vs transformers
// f32 GPU vs the f32 CPU forward: TF32 is off unless CHUNKGRAD_TF32=1 (cuda/lt_gemm.cpp), so
// the two differ by summation order and by the DeltaNet's algorithm (chunked on the GPU,
// the stepped recurrence on the CPU): the same kind of gap as CPU vs transformers (kRelTol),
// with room for both sides' errors.
constexpr double kGpuF32RelTol = 2 * kRelTol;
// bf16 GPU vs bf16 CPU: the same bf16 weights, two implementations that both compute in
// fp32 and round to bf16 where they store. (Against the f32 reference a bf16 model is off
// by up to ~0.15 here: tiny random layers with |h| up to 11 amplify the weights' own
// rounding, so that comparison says nothing about the GPU code.)
constexpr double kBf16RelTol = 3e-2;
// Rollback: the same kernels on the same state; only a snapshot/recompute order can differ.
constexpr double kRollbackTol = 1e-6;
constexpr double kGpuRollbackTol = 2e-5;  // f32 on the GPU: GEMMs of 2 and 4 rows may differ

struct Layout {
  const char* name;  // folder under tests/golden/qwen3_5 and the prefix of its reference files
  int64_t layers;
  std::vector<std::string> layer_types;
  int64_t rotary_dim;
  bool tied;
};

const Layout kConditional{"tiny_qwen3_5",
                          6,
                          {"linear_attention", "linear_attention", "linear_attention",
                           "full_attention", "linear_attention", "full_attention"},
                          8,
                          false};
const Layout kTextOnly{"tiny_qwen3_5_text",
                       5,
                       {"linear_attention", "full_attention", "linear_attention", "full_attention",
                        "linear_attention"},
                       16,
                       true};

std::string folder(const Layout& l) { return kGolden + "/" + l.name; }
std::string reference(const Layout& l) { return kGolden + "/" + l.name + "_hidden.safetensors"; }

bool have_goldens(const Layout& l) {
  return fs::exists(folder(l) + "/config.json") && fs::exists(reference(l));
}
#define SKIP_WITHOUT_GOLDENS(layout)                                             \
  if (!have_goldens(layout))                                                     \
  GTEST_SKIP() << "no " << folder(layout)                                        \
               << ": make it on a machine with torch and transformers (python3 " \
                  "tests/golden/qwen3_5/make_golden.py)"

struct Golden {
  explicit Golden(const Layout& l) : file(safetensors::open(reference(l))) {}
  std::unique_ptr<safetensors::Reader> file;
  Tensor at(const std::string& name) const { return file->load(name, kCPU); }
  Tensor at(const std::string& what, int64_t n) const { return at(what + "." + std::to_string(n)); }
  Tensor at(const std::string& what, int64_t n, int64_t i) const {
    return at(what + "." + std::to_string(n) + "." + std::to_string(i));
  }
  std::vector<int64_t> ids(const std::string& name) const {
    std::vector<int64_t> out;
    for (double v : at(name).to_vector()) out.push_back(static_cast<int64_t>(v));
    return out;
  }
};

Tensor ids_tensor(const std::vector<int64_t>& ids, Device device) {
  return to_device(from_ints(ids, {1, static_cast<int64_t>(ids.size())}), device);
}

std::vector<int64_t> all_layers(int64_t n) {
  std::vector<int64_t> out;
  for (int64_t l = 0; l < n; ++l) out.push_back(l);
  return out;
}

// Row `row` of logits [1, n, V] as [V] on the CPU in f32.
Tensor logits_row(const Tensor& logits, int64_t row) {
  return to_dtype(to_device(contiguous(reshape(narrow(logits, 1, row, 1), {logits.size(2)})), kCPU),
                  DType::f32);
}

int64_t argmax_of(const Tensor& row) {
  const std::vector<double> v = row.to_vector();
  size_t best = 0;
  for (size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[best]) best = i;
  return static_cast<int64_t>(best);
}

void check_config(const Layout& l, const nn::Qwen3Config& c) {
  EXPECT_EQ(c.family, "qwen3_5");
  EXPECT_EQ(c.num_layers, l.layers);
  EXPECT_EQ(c.hidden_size, kHiddenSize);
  EXPECT_EQ(c.vocab_size, kVocab);
  EXPECT_EQ(c.layer_types, l.layer_types);
  EXPECT_EQ(c.rotary_dim(), l.rotary_dim);
  EXPECT_EQ(c.tie_embeddings, l.tied);
  EXPECT_TRUE(c.attn_output_gate);
  EXPECT_TRUE(c.zero_centred_norm);
  EXPECT_EQ(c.linear_num_key_heads, 2);
  EXPECT_EQ(c.linear_num_value_heads, 4);
  EXPECT_EQ(c.linear_key_head_dim, 16);
  EXPECT_EQ(c.linear_value_head_dim, 16);
  EXPECT_EQ(c.linear_conv_kernel_dim, 4);
}

// The forward of every golden sequence against transformers (or, with `cpu_reference`, the
// CPU target's own forward), every layer, the normed hidden and the logits.
void check_forward(const Layout& l, Device device, DType dtype, double tol) {
  const train::FeatureTarget target = train::load_feature_target(folder(l), device, dtype);
  check_config(l, target.lm->config());
  const Golden g(l);
  NoGradGuard no_grad;
  for (int64_t n : kLengths) {
    const Tensor ids = to_device(reshape(g.at("ids", n), {1, n}), device);
    const auto out = target.lm->forward(ids, {.capture_layers = all_layers(l.layers)});
    auto f32 = [&](const Tensor& t, Shape shape) {
      return to_dtype(to_device(reshape(t, shape), kCPU), DType::f32);
    };
    for (int64_t i = 0; i < l.layers; ++i) {
      // Layer i's output is hidden_states[i + 1], except the last: that entry is the normed
      // output, and layer_out holds the last layer's own (make_golden.py keeps only it).
      const Tensor mine = f32(out.layer_hidden[i], {n, kHiddenSize});
      const Tensor want =
          i + 1 < l.layers ? g.at("hidden_states", n, i + 1) : g.at("layer_out", n, i);
      EXPECT_LE(rel_diff(mine, want), tol) << l.name << " n " << n << ": output of decoder layer "
                                           << i << " (" << l.layer_types[i] << ")";
    }
    EXPECT_LE(rel_diff(f32(out.hidden, {n, kHiddenSize}), g.at("hidden_states", n, l.layers)), tol)
        << l.name << " n " << n << ": the final normed hidden vs hidden_states[L]";
    if (n != kLengths.back()) {  // the longest one has no logits file entry (kept small)
      EXPECT_LE(rel_diff(f32(out.logits, {n, kVocab}), g.at("logits", n)), tol)
          << l.name << " n " << n << ": logits";
    }
  }
}

// The GPU forward against the CPU forward of the same checkpoint in `dtype`: every layer,
// the normed hidden and the logits.
void check_gpu_against_cpu(const Layout& l, DType dtype, double tol) {
  const train::FeatureTarget cpu = train::load_feature_target(folder(l), kCPU, dtype);
  const train::FeatureTarget gpu = train::load_feature_target(folder(l), cuda_device(), dtype);
  const Golden g(l);
  NoGradGuard no_grad;
  for (int64_t n : kLengths) {
    const Tensor ids = reshape(g.at("ids", n), {1, n});
    const auto want = cpu.lm->forward(ids, {.capture_layers = all_layers(l.layers)});
    const auto got =
        gpu.lm->forward(to_device(ids, cuda_device()), {.capture_layers = all_layers(l.layers)});
    auto f32 = [](const Tensor& t) { return to_dtype(to_device(t, kCPU), DType::f32); };
    for (int64_t i = 0; i < l.layers; ++i) {
      EXPECT_LE(rel_diff(f32(got.layer_hidden[i]), f32(want.layer_hidden[i])), tol)
          << l.name << " n " << n << " " << dtype_name(dtype) << ": decoder layer " << i << " ("
          << l.layer_types[i] << "), GPU vs CPU";
    }
    EXPECT_LE(rel_diff(f32(got.hidden), f32(want.hidden)), tol)
        << l.name << " n " << n << ": the final normed hidden, GPU vs CPU";
    EXPECT_LE(rel_diff(f32(got.logits), f32(want.logits)), tol)
        << l.name << " n " << n << ": logits, GPU vs CPU";
  }
}

// Cached decoding: prefill the prompt, then the greedy tokens one at a time; each step's
// logits are transformers' full-forward logits at that position, and the argmax its token.
void check_cached_greedy(const Layout& l, Device device, double tol) {
  const train::FeatureTarget target = train::load_feature_target(folder(l), device);
  const Golden g(l);
  const std::vector<int64_t> prompt = g.ids("gen.prompt");
  const std::vector<int64_t> greedy = g.ids("gen.greedy");
  const Tensor want = g.at("gen.logits");  // [12, V]: row i predicts greedy[i]
  ASSERT_EQ(static_cast<int64_t>(prompt.size()), kPromptLen);
  ASSERT_EQ(static_cast<int64_t>(greedy.size()), kNewTokens);
  nn::KVCache cache = target.lm->make_cache(kPromptLen + kNewTokens);
  auto out =
      target.lm->forward_cached(ids_tensor(prompt, device), cache, {.last_logits_only = true});
  std::vector<int64_t> mine;
  for (int64_t i = 0; i < kNewTokens; ++i) {
    const Tensor row = logits_row(out.logits, out.logits.size(1) - 1);
    EXPECT_LE(rel_diff(row, contiguous(reshape(narrow(want, 0, i, 1), {kVocab}))), tol)
        << l.name << ": logits of decoding step " << i;
    mine.push_back(argmax_of(row));
    if (i + 1 < kNewTokens)
      out = target.lm->forward_cached(ids_tensor({mine.back()}, device), cache);
  }
  EXPECT_EQ(mine, greedy) << l.name << ": cached greedy decoding vs transformers'";
  EXPECT_EQ(cache.length(), kPromptLen + kNewTokens - 1);
}

// Cached decoding against the same target's full forward on `device` in `dtype`: prefill the
// prompt, then feed transformers' greedy tokens one at a time (fed, not picked, so that a
// near-tie in bf16 cannot send the two runs apart); each step's logits are the full
// forward's at that position.
void check_cached_against_forward(const Layout& l, Device device, DType dtype, double tol) {
  const train::FeatureTarget target = train::load_feature_target(folder(l), device, dtype);
  const Golden g(l);
  std::vector<int64_t> all = g.ids("gen.prompt");
  const std::vector<int64_t> greedy = g.ids("gen.greedy");
  all.insert(all.end(), greedy.begin(), greedy.end() - 1);  // the last token is never fed
  NoGradGuard no_grad;
  const Tensor full = target.lm->forward(ids_tensor(all, device)).logits;  // [1, P + 11, V]
  nn::KVCache cache = target.lm->make_cache(kPromptLen + kNewTokens);
  const std::vector<int64_t> prompt(all.begin(), all.begin() + kPromptLen);
  auto out =
      target.lm->forward_cached(ids_tensor(prompt, device), cache, {.last_logits_only = true});
  for (int64_t i = 0; i < kNewTokens; ++i) {
    EXPECT_LE(rel_diff(logits_row(out.logits, 0), logits_row(full, kPromptLen - 1 + i)), tol)
        << l.name << " " << dtype_name(dtype) << ": cached decoding step " << i
        << " vs the full forward";
    if (i + 1 < kNewTokens) out = target.lm->forward_cached(ids_tensor({greedy[i]}, device), cache);
  }
}

// Logits [1, n, V] of `block` after the cache's positions.
Tensor step(const train::FeatureTarget& t, nn::KVCache& cache, const std::vector<int64_t>& block) {
  return t.lm->forward_cached(ids_tensor(block, t.lm->model->embed_tokens->weight.device()), cache)
      .logits;
}

// `golden_tol`: a cached block against transformers' logits; `rollback_tol`: a rolled-back
// cache against one that never saw the rejected tokens (on the GPU the two runs' GEMMs
// have other row counts, so cuBLASLt may sum in another order).
void check_rollback(const Layout& l, Device device, double golden_tol, double rollback_tol) {
  const train::FeatureTarget target = train::load_feature_target(folder(l), device);
  const Golden g(l);
  const std::vector<int64_t> prompt = g.ids("gen.prompt");
  const std::vector<int64_t> greedy = g.ids("gen.greedy");
  const Tensor want = g.at("gen.logits");
  const std::vector<int64_t> accepted(greedy.begin(), greedy.begin() + 4);
  const std::vector<int64_t> wrong = {17, 400, 999, 3};
  const int64_t cap = kPromptLen + 16;

  // Never sees a wrong token: the block of 4 right after the prompt.
  nn::KVCache clean = target.lm->make_cache(cap);
  step(target, clean, prompt);
  const Tensor clean_block = step(target, clean, accepted);
  for (int64_t i = 0; i < 4; ++i) {  // block position i predicts greedy[i + 1]: row i + 1
    EXPECT_LE(rel_diff(logits_row(clean_block, i),
                       contiguous(reshape(narrow(want, 0, i + 1, 1), {kVocab}))),
              golden_tol)
        << l.name << ": a cached block of 4, position " << i;
  }

  // A whole block rejected, then the right one.
  nn::KVCache c1 = target.lm->make_cache(cap);
  step(target, c1, prompt);
  step(target, c1, wrong);
  // Not rolled back, the block would be far off: the comparisons below can fail.
  {
    nn::KVCache seen = target.lm->make_cache(cap);
    step(target, seen, prompt);
    step(target, seen, wrong);
    EXPECT_GT(rel_diff(logits_row(step(target, seen, accepted), 0), logits_row(clean_block, 0)),
              100 * rollback_tol)
        << l.name << ": the rejected block should change what follows it";
  }
  c1.truncate(kPromptLen);
  const Tensor after_reject = step(target, c1, accepted);
  EXPECT_LE(rel_diff(to_device(after_reject, kCPU), to_device(clean_block, kCPU)), rollback_tol)
      << l.name << ": after rolling a rejected block of 4 back";

  // Two accepted, the tail rejected (the verify step of speculative decoding), then the rest.
  nn::KVCache c2 = target.lm->make_cache(cap);
  step(target, c2, prompt);
  step(target, c2, {accepted[0], accepted[1], wrong[2], wrong[3]});
  c2.truncate(kPromptLen + 2);
  const Tensor tail = step(target, c2, {accepted[2], accepted[3]});
  EXPECT_LE(
      rel_diff(to_device(tail, kCPU), to_device(contiguous(narrow(clean_block, 1, 2, 2)), kCPU)),
      rollback_tol)
      << l.name << ": after keeping 2 of a block of 4";
}

TEST(Qwen35Golden, ConditionalGenerationFolderMatchesTransformersOnTheCpu) {
  SKIP_WITHOUT_GOLDENS(kConditional);
  check_forward(kConditional, kCPU, DType::f32, kRelTol);
}

TEST(Qwen35Golden, TextOnlyFolderMatchesTransformersOnTheCpu) {
  SKIP_WITHOUT_GOLDENS(kTextOnly);
  check_forward(kTextOnly, kCPU, DType::f32, kRelTol);
}

// The fixtures hold what the loader must skip, so the tests above exercise the skipping.
TEST(Qwen35Golden, TheFixturesCarryVisionAndMtpTensors) {
  SKIP_WITHOUT_GOLDENS(kConditional);
  std::ifstream in(folder(kConditional) + "/model.safetensors.index.json");
  ASSERT_TRUE(in) << "the conditional-generation golden is meant to be sharded with an index";
  const nlohmann::json index = nlohmann::json::parse(in);
  int visual = 0, mtp = 0, language = 0;
  for (const auto& [name, file] : index["weight_map"].items()) {
    visual += name.rfind("model.visual.", 0) == 0;
    mtp += name.rfind("mtp.", 0) == 0;
    language += name.rfind("model.language_model.", 0) == 0;
  }
  EXPECT_GT(visual, 0);
  EXPECT_GT(mtp, 0);
  EXPECT_GT(language, 0);
  EXPECT_TRUE(index["weight_map"].contains("lm_head.weight"));
  std::ifstream text(folder(kTextOnly) + "/config.json");
  const nlohmann::json c = nlohmann::json::parse(text);
  EXPECT_FALSE(c.contains("layer_types")) << "the text-only golden derives its layer types";
  EXPECT_TRUE(c.contains("partial_rotary_factor")) << "at the top level in the text-only golden";
}

TEST(Qwen35Golden, CachedGreedyDecodingEqualsTransformersOnTheCpu) {
  SKIP_WITHOUT_GOLDENS(kTextOnly);
  SKIP_WITHOUT_GOLDENS(kConditional);
  check_cached_greedy(kTextOnly, kCPU, kRelTol);
  check_cached_greedy(kConditional, kCPU, kRelTol);
}

TEST(Qwen35Golden, RolledBackBlocksLeaveTheStateAsIfNeverSeen) {
  SKIP_WITHOUT_GOLDENS(kTextOnly);
  SKIP_WITHOUT_GOLDENS(kConditional);
  check_rollback(kTextOnly, kCPU, kRelTol, kRollbackTol);
  check_rollback(kConditional, kCPU, kRelTol, kRollbackTol);
}

// The comparisons above can fail: neighbouring entries (a feature read off by one layer,
// the last layer's output vs the normed one) differ by far more than the tolerance.
TEST(Qwen35Golden, NeighbouringEntriesDifferByFarMoreThanTheTolerance) {
  SKIP_WITHOUT_GOLDENS(kTextOnly);
  const Golden g(kTextOnly);
  const int64_t L = kTextOnly.layers;
  for (int64_t l = 0; l + 1 < L; ++l)
    EXPECT_GT(rel_diff(g.at("hidden_states", 77, l + 1), g.at("hidden_states", 77, l)),
              100 * kRelTol)
        << "layer " << l;
  EXPECT_GT(rel_diff(g.at("layer_out", 77, L - 1), g.at("hidden_states", 77, L - 1)), 100 * kRelTol)
      << "the last layer";
  EXPECT_GT(rel_diff(g.at("layer_out", 77, L - 1), g.at("hidden_states", 77, L)), 100 * kRelTol)
      << "hidden_states[L] is the normed output";
}

TEST(Qwen35Golden, GpuMatchesTheCpuInF32AndBf16) {
  SKIP_WITHOUT_GOLDENS(kTextOnly);
  SKIP_WITHOUT_GOLDENS(kConditional);
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  for (const Layout* l : {&kConditional, &kTextOnly}) {
    check_forward(*l, cuda_device(), DType::f32, kGpuRelTol);
    check_gpu_against_cpu(*l, DType::f32, kGpuF32RelTol);
    check_gpu_against_cpu(*l, DType::bf16, kBf16RelTol);
  }
}

TEST(Qwen35Golden, CachedGreedyDecodingEqualsTransformersOnTheGpu) {
  SKIP_WITHOUT_GOLDENS(kTextOnly);
  SKIP_WITHOUT_GOLDENS(kConditional);
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  check_cached_greedy(kTextOnly, cuda_device(), kGpuRelTol);
  check_cached_greedy(kConditional, cuda_device(), kGpuRelTol);
}

// bf16 on the GPU: cached decoding equals the full forward (the bf16 cache, the DeltaNet's
// recurrent kernel for single tokens against its chunked prefill), and the rollback checks.
TEST(Qwen35Golden, CachedDecodingAndRollbackOnTheGpu) {
  SKIP_WITHOUT_GOLDENS(kTextOnly);
  SKIP_WITHOUT_GOLDENS(kConditional);
  if (!cuda_available()) GTEST_SKIP() << "no GPU";
  for (const Layout* l : {&kConditional, &kTextOnly}) {
    check_cached_against_forward(*l, cuda_device(), DType::bf16, kBf16RelTol);
    check_cached_against_forward(*l, cuda_device(), DType::f32, kGpuF32RelTol);
    check_rollback(*l, cuda_device(), kGpuRelTol, kGpuRollbackTol);
  }
}

}  // namespace
}  // namespace cg
