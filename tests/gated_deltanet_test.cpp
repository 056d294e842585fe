// Why this file exists: checks the Gated DeltaNet layer (nn/gated_deltanet.h) and its
// place in decoding (nn/kv_cache.h, Note [DeltaNet rollback]) without the full model:
//   - Hugging Face's parameter names and shapes, transformers' init;
//   - the forward against a double-precision reference of the layer written here as
//     transformers' Qwen3_5GatedDeltaNet reads (the split order q|k|v, the conv over all
//     channels, repeat_interleave heads, the gates, the gated norm per value head), with
//     non-trivial norm weights, A_log and dt_bias;
//   - cached decoding (one call of n, then single tokens) equals the forward on the
//     whole sequence, exactly;
//   - a rejected block rolled back leaves the outputs and both states equal to never
//     having seen it; what cannot be rolled back is refused and leaves the cache as it was.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "core/views.h"
#include "decode_test_util.h"
#include "error_helpers.h"
#include "nn/gated_deltanet.h"
#include "nn/kv_cache.h"
#include "nn/qwen3.h"
#include "ops/join_ops.h"
#include "ops/shape_ops.h"

namespace cg::nn {
namespace {

using Vec = std::vector<double>;

// 2 layers: a DeltaNet then a full-attention layer. 6 value heads over 2 key heads (where
// repeat_interleave and tiling differ), dk != dv, kernel 4.
Qwen3Config hybrid_config() {
  Qwen3Config c = testing_decode::tiny_target_config();
  c.num_layers = 2;
  c.family = "qwen3_5";
  c.layer_types = {"linear_attention", "full_attention"};
  c.linear_num_key_heads = 2;
  c.linear_num_value_heads = 6;
  c.linear_key_head_dim = 4;
  c.linear_value_head_dim = 3;
  c.linear_conv_kernel_dim = 4;
  return c;
}

// The layer with random values in every parameter (norm weight, A_log, dt_bias too), frozen.
std::unique_ptr<GatedDeltaNet> make_layer(DType dtype, uint64_t seed) {
  Generator gen(seed);
  auto layer = std::make_unique<GatedDeltaNet>(hybrid_config(),
                                               InitOptions{.dtype = dtype, .generator = &gen});
  NoGradGuard no_grad;
  raw::copy_(layer->norm_weight,
             rand(layer->norm_weight.shape(), {.dtype = dtype}, &gen, 0.5, 1.5));
  raw::copy_(layer->dt_bias, rand(layer->dt_bias.shape(), {.dtype = dtype}, &gen, -1.0, 1.0));
  layer->freeze();
  return layer;
}

Tensor random_x(int64_t B, int64_t S, DType dtype, uint64_t seed) {
  Generator gen(seed);
  return rand({B, S, 16}, {.dtype = dtype}, &gen, -1, 1);
}

// ---- an independent reference of the whole layer, in double ------------------------------

// y[r, o] = sum_i x[r, i] w[o, i]
Vec linear_ref(const Vec& x, const Vec& w, int64_t rows, int64_t in, int64_t out) {
  Vec y(static_cast<size_t>(rows * out), 0.0);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t o = 0; o < out; ++o)
      for (int64_t i = 0; i < in; ++i) y[r * out + o] += x[r * in + i] * w[o * in + i];
  return y;
}

double silu_ref(double x) { return x / (1 + std::exp(-x)); }
double softplus_ref(double x) { return std::log1p(std::exp(x)); }

Vec layer_reference(const GatedDeltaNet& m, const Tensor& x_t) {
  const GatedDeltaShape s = m.shape();
  const int64_t B = x_t.size(0), S = x_t.size(1), H = 16, C = s.conv_dim(), K = s.conv_kernel;
  const int64_t Hk = s.num_k_heads, Hv = s.num_v_heads, dk = s.k_head_dim, dv = s.v_head_dim;
  const Vec x = x_t.to_vector();
  const Vec qkv = linear_ref(x, m.in_proj_qkv->weight.to_vector(), B * S, H, C);
  const Vec z = linear_ref(x, m.in_proj_z->weight.to_vector(), B * S, H, Hv * dv);
  const Vec bb = linear_ref(x, m.in_proj_b->weight.to_vector(), B * S, H, Hv);
  const Vec aa = linear_ref(x, m.in_proj_a->weight.to_vector(), B * S, H, Hv);
  const Vec conv_w = m.conv1d_weight.to_vector();  // [C, 1, K]
  const Vec a_log = m.A_log.to_vector(), dt_bias = m.dt_bias.to_vector();
  const Vec norm_w = m.norm_weight.to_vector();
  // Depthwise causal conv over time on every channel, then SiLU.
  Vec mixed(qkv.size());
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = 0; t < S; ++t)
      for (int64_t c = 0; c < C; ++c) {
        double acc = 0;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t p = t - (K - 1) + j;
          if (p >= 0) acc += conv_w[c * K + j] * qkv[(b * S + p) * C + c];
        }
        mixed[(b * S + t) * C + c] = silu_ref(acc);
      }
  Vec core(static_cast<size_t>(B * S * Hv * dv));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t kh = h / (Hv / Hk);  // repeat_interleave
      Vec St(static_cast<size_t>(dk * dv), 0.0);
      for (int64_t t = 0; t < S; ++t) {
        const double* row = &mixed[(b * S + t) * C];
        Vec q(row + kh * dk, row + kh * dk + dk);
        Vec k(row + Hk * dk + kh * dk, row + Hk * dk + kh * dk + dk);
        Vec v(row + 2 * Hk * dk + h * dv, row + 2 * Hk * dk + h * dv + dv);
        double nq = 0, nk = 0;
        for (int64_t i = 0; i < dk; ++i) nq += q[i] * q[i], nk += k[i] * k[i];
        for (int64_t i = 0; i < dk; ++i) {
          q[i] = q[i] / std::sqrt(nq + 1e-6) / std::sqrt(static_cast<double>(dk));
          k[i] = k[i] / std::sqrt(nk + 1e-6);
        }
        const int64_t gi = (b * S + t) * Hv + h;
        const double beta = 1 / (1 + std::exp(-bb[gi]));
        const double g = -std::exp(a_log[h]) * softplus_ref(aa[gi] + dt_bias[h]);
        // S_t = e^g (I - beta k k^T) S + beta k v^T
        Vec kS(dv, 0.0);
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j) kS[j] += k[i] * St[i * dv + j];
        for (int64_t i = 0; i < dk; ++i)
          for (int64_t j = 0; j < dv; ++j)
            St[i * dv + j] =
                std::exp(g) * (St[i * dv + j] - beta * k[i] * kS[j]) + beta * k[i] * v[j];
        for (int64_t j = 0; j < dv; ++j) {
          double o = 0;
          for (int64_t i = 0; i < dk; ++i) o += St[i * dv + j] * q[i];
          core[gi * dv + j] = o;
        }
      }
    }
  // Gated RMSNorm per value head, then out_proj.
  Vec y(core.size());
  for (int64_t r = 0; r < B * S * Hv; ++r) {
    double ms = 0;
    for (int64_t j = 0; j < dv; ++j) ms += core[r * dv + j] * core[r * dv + j];
    const double inv = 1 / std::sqrt(ms / static_cast<double>(dv) + 1e-6);
    for (int64_t j = 0; j < dv; ++j)
      y[r * dv + j] = norm_w[j] * core[r * dv + j] * inv * silu_ref(z[r * dv + j]);
  }
  return linear_ref(y, m.out_proj->weight.to_vector(), B * S, Hv * dv, H);
}

// ---- the module ---------------------------------------------------------------------------

TEST(GatedDeltaNet, HuggingFaceNamesShapesAndInit) {
  Generator gen(1);
  GatedDeltaNet layer(hybrid_config(), {.generator = &gen});
  std::map<std::string, Shape> shapes;
  for (const auto& [name, p] : layer.named_parameters()) shapes[name] = p.shape();
  const std::map<std::string, Shape> expected{{"in_proj_qkv.weight", {2 * 2 * 4 + 6 * 3, 16}},
                                              {"in_proj_z.weight", {18, 16}},
                                              {"in_proj_b.weight", {6, 16}},
                                              {"in_proj_a.weight", {6, 16}},
                                              {"conv1d.weight", {34, 1, 4}},
                                              {"dt_bias", {6}},
                                              {"A_log", {6}},
                                              {"norm.weight", {3}},
                                              {"out_proj.weight", {16, 18}}};
  EXPECT_EQ(shapes, expected);
  for (double v : layer.A_log.to_vector()) {
    EXPECT_GE(v, std::log(0.01));
    EXPECT_LT(v, std::log(16.0));
  }
  EXPECT_EQ(layer.dt_bias.to_vector(), Vec(6, 1.0));
  EXPECT_EQ(layer.norm_weight.to_vector(), Vec(3, 1.0));
  for (double v : layer.conv1d_weight.to_vector()) EXPECT_LE(std::abs(v), 0.5);  // 1/sqrt(4)
}

TEST(GatedDeltaNet, ForwardMatchesTheLayerAsTransformersComputesIt) {
  const auto layer = make_layer(DType::f64, 2);
  const Tensor x = random_x(2, 9, DType::f64, 3);
  const Vec got = layer->forward(x).to_vector();
  const Vec want = layer_reference(*layer, x);
  // g is computed in fp32 even for an f64 layer (as transformers does: A_log.float(),
  // a.float()), so f64 agrees to about fp32's precision; a wiring mistake is O(0.1).
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 2e-7) << "element " << i;
  // f32 within rounding.
  const auto layer32 = make_layer(DType::f32, 2);
  const Vec got32 = layer32->forward(raw::to_dtype(x, DType::f32)).to_vector();
  for (size_t i = 0; i < got32.size(); ++i) ASSERT_NEAR(got32[i], want[i], 1e-5) << "element " << i;
}

TEST(GatedDeltaNet, RefusesToRecordAGraph) {
  Generator gen(4);
  GatedDeltaNet layer(hybrid_config(), {.generator = &gen});  // not frozen
  const Tensor x = random_x(1, 3, DType::f32, 5);
  EXPECT_ERROR_HAS(layer.forward(x), "records no gradient", "freeze()", "NoGradGuard");
  NoGradGuard no_grad;
  EXPECT_NO_THROW(layer.forward(x));
}

// ---- the cache ----------------------------------------------------------------------------

// Cached and uncached runs agree to rounding: the projections of n rows and of 1 row are
// GEMMs of different shapes (Eigen takes a GEMV for one row), so their last bits differ.
void expect_close(const Tensor& got, const Tensor& want, double tol, const char* what) {
  const Vec a = got.to_vector(), b = want.to_vector();
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i)
    ASSERT_NEAR(a[i], b[i], tol * (1 + std::abs(b[i]))) << what << " element " << i;
}

KVCache make_cache(int64_t max_length, int64_t batch, DType dtype) {
  return KVCache(hybrid_config(), max_length, {.batch = batch, .dtype = dtype});
}

// Runs x through the layer's cached forward as the model would: write, then advance.
Tensor cached(const GatedDeltaNet& layer, const Tensor& x, KVCache& cache) {
  Tensor out = layer.forward_cached(x, cache, 0);
  cache.advance(x.size(1));
  return out;
}

TEST(GatedDeltaNetCache, HybridLayoutHasStatesForDeltaNetLayersOnly) {
  KVCache cache = make_cache(8, 2, DType::bf16);
  EXPECT_TRUE(cache.is_linear_layer(0));
  EXPECT_FALSE(cache.is_linear_layer(1));
  EXPECT_EQ(cache.recurrent_state(0).shape(), (Shape{2, 6, 4, 3}));
  EXPECT_EQ(cache.recurrent_state(0).dtype(), DType::f32);
  EXPECT_EQ(cache.conv_state(0).shape(), (Shape{2, 3, 34}));
  EXPECT_EQ(cache.conv_state(0).dtype(), DType::bf16);
  EXPECT_EQ(cache.keys(1).shape(), (Shape{2, 2, 0, 6}));
  // Layer 0: states only (2*6*4*3 f32 + 2*3*34 bf16); layer 1: keys and values of 8 positions.
  EXPECT_EQ(cache.nbytes(), size_t{2 * 6 * 4 * 3 * 4 + 2 * 3 * 34 * 2 + 2 * 2 * 2 * 8 * 6 * 2});
  EXPECT_ERROR_HAS(cache.keys(0), "layer 0 is a Gated DeltaNet", "not keys and values");
  EXPECT_ERROR_HAS(cache.recurrent_state(1), "layer 1 is a full-attention layer");
  const Tensor kv = zeros({2, 1, 2, 6}, {.dtype = DType::bf16});
  EXPECT_ERROR_HAS(cache.write(0, kv, kv), "Gated DeltaNet");
}

TEST(GatedDeltaNetCache, CachedDecodingEqualsTheWholeSequence) {
  for (DType dtype : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dtype));
    const auto layer = make_layer(dtype, 6);
    const Tensor x = random_x(2, 8, dtype, 7);
    const Tensor whole = layer->forward(x);
    // 5 positions in one call, then 3 single tokens.
    KVCache cache = make_cache(16, 2, dtype);
    std::vector<Tensor> parts{cached(*layer, narrow(x, 1, 0, 5), cache)};
    for (int64_t t = 5; t < 8; ++t) parts.push_back(cached(*layer, narrow(x, 1, t, 1), cache));
    const double tol = dtype == DType::f32 ? 1e-5 : 3e-2;
    expect_close(cat(parts, 1), whole, tol, "cached outputs");
    EXPECT_EQ(cache.length(), 8);
    // The conv state is the last 3 conv inputs (in_proj_qkv of positions 5..7).
    const Tensor qkv = layer->in_proj_qkv->forward(narrow(x, 1, 5, 3));
    expect_close(cache.conv_state(0), qkv, tol, "conv state");
    // One call of all 8 positions: the same projections as the forward, the same values.
    KVCache once = make_cache(16, 2, dtype);
    EXPECT_EQ(cached(*layer, x, once).to_vector(), whole.to_vector());
  }
}

TEST(GatedDeltaNetCache, ARejectedBlockRolledBackIsNeverSeen) {
  const auto layer = make_layer(DType::f32, 8);
  const Tensor prompt = random_x(2, 5, DType::f32, 9);
  const Tensor block = random_x(2, 4, DType::f32, 10);  // 2 accepted, 2 rejected
  const Tensor next = random_x(2, 3, DType::f32, 11);
  // Never seen: the prompt, then the 2 accepted positions.
  KVCache clean = make_cache(16, 2, DType::f32);
  cached(*layer, prompt, clean);
  cached(*layer, narrow(block, 1, 0, 2), clean);
  // Speculative: the whole block verified in one call, then truncated to the accepted.
  KVCache spec = make_cache(16, 2, DType::f32);
  cached(*layer, prompt, spec);
  const Tensor verified = cached(*layer, block, spec);
  spec.truncate(5 + 2);
  EXPECT_EQ(spec.length(), clean.length());
  expect_close(spec.recurrent_state(0), clean.recurrent_state(0), 1e-6, "rolled-back state");
  expect_close(spec.conv_state(0), clean.conv_state(0), 1e-6, "rolled-back conv state");
  // Both go on with the same 3 positions.
  const Tensor clean_next = cached(*layer, next, clean);
  const Tensor spec_next = cached(*layer, next, spec);
  expect_close(spec_next, clean_next, 1e-5, "outputs after the rollback");
  expect_close(spec.recurrent_state(0), clean.recurrent_state(0), 1e-6, "state after");
  // And against the forward over the sequence with the rejected positions left out.
  const Tensor whole = layer->forward(cat({prompt, narrow(block, 1, 0, 2), next}, 1));
  expect_close(spec_next, narrow(whole, 1, 7, 3), 1e-5, "vs the forward");
  expect_close(narrow(verified, 1, 0, 2), narrow(whole, 1, 5, 2), 1e-5, "verified positions");
}

TEST(GatedDeltaNetCache, RollBackKeepsTheCallsOwnConvInputs) {
  // After truncating 5 verified positions to 3, the conv state is exactly those 3
  // positions' in_proj_qkv rows of the verify call (K - 1 = 3): nothing recomputed differs.
  const auto layer = make_layer(DType::f32, 17);
  const Tensor prompt = random_x(2, 4, DType::f32, 18);
  const Tensor block = random_x(2, 5, DType::f32, 19);
  KVCache cache = make_cache(16, 2, DType::f32);
  cached(*layer, prompt, cache);
  cached(*layer, block, cache);
  cache.truncate(4 + 3);
  NoGradGuard no_grad;
  const Tensor qkv = layer->in_proj_qkv->forward(block);  // the same GEMM as the call's
  EXPECT_EQ(cache.conv_state(0).to_vector(), narrow(qkv, 1, 0, 3).to_vector());
  cache.truncate(4 + 1);  // again, within the accepted span: [prompt's last 2, block 0]
  KVCache check = make_cache(16, 2, DType::f32);
  cached(*layer, prompt, check);
  const Tensor expected = cat({narrow(check.conv_state(0), 1, 1, 2), narrow(qkv, 1, 0, 1)}, 1);
  EXPECT_EQ(cache.conv_state(0).to_vector(), expected.to_vector());
}

TEST(GatedDeltaNetCache, RollBackToTheCallStartTwiceAndClear) {
  const auto layer = make_layer(DType::f32, 12);
  const Tensor prompt = random_x(1, 4, DType::f32, 13);
  const Tensor block = random_x(1, 5, DType::f32, 14);
  KVCache cache = make_cache(16, 1, DType::f32);
  cached(*layer, prompt, cache);
  const Vec state_after_prompt = cache.recurrent_state(0).to_vector();
  const Vec conv_after_prompt = cache.conv_state(0).to_vector();
  cached(*layer, block, cache);
  cache.truncate(7);  // 3 of 5 accepted
  cache.truncate(4);  // then none: the state the prompt left
  EXPECT_EQ(cache.recurrent_state(0).to_vector(), state_after_prompt);
  EXPECT_EQ(cache.conv_state(0).to_vector(), conv_after_prompt);
  // Further back than the last call's start: refused, the cache unchanged.
  EXPECT_ERROR_HAS(cache.truncate(2), "truncate(2)", "layer 0 is a Gated DeltaNet layer",
                   "positions 4..", "DeltaNet rollback", "clear()");
  EXPECT_EQ(cache.length(), 4);
  EXPECT_EQ(cache.recurrent_state(0).to_vector(), state_after_prompt);
  cache.clear();
  EXPECT_EQ(cache.length(), 0);
  EXPECT_EQ(cache.recurrent_state(0).to_vector(), Vec(6 * 4 * 3, 0.0));
  EXPECT_EQ(cache.conv_state(0).to_vector(), Vec(3 * 34, 0.0));
  // After clear the cache runs a sequence as a fresh one.
  const Tensor again = cached(*layer, prompt, cache);
  EXPECT_EQ(again.to_vector(), layer->forward(prompt).to_vector());
}

TEST(GatedDeltaNetCache, AdvanceChecksEveryDeltaNetLayerWrote) {
  KVCache cache = make_cache(8, 1, DType::f32);
  EXPECT_ERROR_HAS(cache.advance(2), "layer 0 did not write positions 0..1");
  const auto layer = make_layer(DType::f32, 15);
  layer->forward_cached(random_x(1, 3, DType::f32, 16), cache, 0);
  EXPECT_ERROR_HAS(cache.advance(2), "did not write");
  EXPECT_NO_THROW(cache.advance(3));
}

// ---- the whole hybrid model: attention keys and DeltaNet states rolled back together ----

TEST(GatedDeltaNetCache, HybridModelDecodesAndRollsBackLikeItsForward) {
  Qwen3Config c = hybrid_config();
  c.num_layers = 3;
  c.layer_types = {"linear_attention", "full_attention", "linear_attention"};
  c.attn_output_gate = true;
  c.zero_centred_norm = true;
  c.head_dim = 8;
  c.partial_rotary_factor = 0.5;
  Generator gen(20);
  Qwen3ForCausalLM lm(c, {.generator = &gen});
  lm.freeze();
  const std::vector<int64_t> prompt{3, 17, 5, 29, 11}, accepted{8, 21}, rejected{2, 36};
  const std::vector<int64_t> next{14, 6, 33};
  auto ids = [](std::vector<int64_t> v) {
    return from_ints(v, {1, static_cast<int64_t>(v.size())});
  };
  std::vector<int64_t> kept = prompt;
  kept.insert(kept.end(), accepted.begin(), accepted.end());
  kept.insert(kept.end(), next.begin(), next.end());
  const Tensor full = lm.forward(ids(kept)).logits;  // [1, 10, vocab]
  KVCache cache = lm.make_cache(16);
  const Tensor p = lm.forward_cached(ids(prompt), cache).logits;
  std::vector<int64_t> block = accepted;
  block.insert(block.end(), rejected.begin(), rejected.end());
  const Tensor verified = lm.forward_cached(ids(block), cache).logits;
  cache.truncate(7);  // keep the 2 accepted
  const Tensor first = lm.forward_cached(ids({next[0]}), cache).logits;
  const Tensor rest = lm.forward_cached(ids({next[1], next[2]}), cache).logits;
  expect_close(p, narrow(full, 1, 0, 5), 1e-4, "prompt");
  expect_close(narrow(verified, 1, 0, 2), narrow(full, 1, 5, 2), 1e-4, "accepted");
  expect_close(first, narrow(full, 1, 7, 1), 1e-4, "after the rollback");
  expect_close(rest, narrow(full, 1, 8, 2), 1e-4, "two more");
  // Not frozen, the DeltaNet layers refuse to record a graph.
  lm.unfreeze();
  EXPECT_ERROR_HAS(lm.forward(ids(prompt)), "records no gradient");
}

}  // namespace
}  // namespace cg::nn
