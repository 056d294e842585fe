// Why this file exists: the attention tests need one obviously-correct attention to
// compare the fused op with -- an explicit [Sq, Sk] score matrix, mask, softmax and
// product, in double, on host vectors -- and the dense boolean masks that the compact
// rules stand for. Both are written here from the rule's definition, independently of
// ops/attention_mask.cpp, so the rule path is checked against the definition, not itself.
// Also the harness that compares two attention calls by values and gradients in f64.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <vector>

#include "core/factories.h"
#include "core/tensor.h"

namespace cg::testing {

// allowed(b, h, i, j): may query i of batch b, head h see key j.
using AllowedFn = std::function<bool(int64_t, int64_t, int64_t, int64_t)>;

inline AllowedFn allow_all() {
  return [](int64_t, int64_t, int64_t, int64_t) { return true; };
}

// Bottom-right aligned causal: j <= i + (Sk - Sq).
inline AllowedFn allow_causal(int64_t Sq, int64_t Sk) {
  return [=](int64_t, int64_t, int64_t i, int64_t j) { return j <= i + (Sk - Sq); };
}

// DFlash: anchors[b * N + block] (or anchors[block] when shared); negative = padded.
inline AllowedFn allow_dflash(int64_t S, int64_t Bs, std::vector<int64_t> anchors, int64_t N,
                              bool per_batch) {
  return [=](int64_t b, int64_t, int64_t i, int64_t j) {
    const int64_t block = i / Bs;
    const int64_t a = anchors[(per_batch ? b * N : 0) + block];
    if (a < 0) return false;
    if (j < S) return j < a;
    return (j - S) / Bs == block;
  };
}

// DFlash, sliding rule of window W (AttentionMask::dflash_blocks, sliding_window = W),
// written in positions: slot k of a block anchored at a sits at position a + k; context
// key j at position j (only j < a exists for the block); slot k' of its own block at a + k'.
// A key is visible iff it is at or before the query and fewer than W positions behind it.
inline AllowedFn allow_dflash_sliding(int64_t S, int64_t Bs, std::vector<int64_t> anchors,
                                      int64_t N, bool per_batch, int64_t W) {
  return [=](int64_t b, int64_t, int64_t i, int64_t j) {
    const int64_t block = i / Bs;
    const int64_t a = anchors[(per_batch ? b * N : 0) + block];
    if (a < 0) return false;
    const int64_t query_pos = a + i % Bs;
    int64_t key_pos = 0;
    if (j < S) {
      if (j >= a) return false;
      key_pos = j;
    } else {
      if ((j - S) / Bs != block) return false;
      key_pos = a + (j - S) % Bs;
    }
    return key_pos <= query_pos && query_pos - key_pos < W;
  };
}

// The dense bool tensor [B, 1, Sq, Sk] of an AllowedFn that ignores the head.
inline Tensor dense_mask(const AllowedFn& allowed, int64_t B, int64_t Sq, int64_t Sk) {
  std::vector<double> values;
  values.reserve(B * Sq * Sk);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t i = 0; i < Sq; ++i)
      for (int64_t j = 0; j < Sk; ++j) values.push_back(allowed(b, 0, i, j) ? 1.0 : 0.0);
  return from_vector(values, {B, 1, Sq, Sk}, {.dtype = DType::boolean});
}

// softmax(scale q k^T masked) v in double; q [B, Hq, Sq, hd], k/v [B, Hkv, Sk, hd] (any
// dtype, any strides). A row with no allowed key is 0. Returns out in row-major order.
inline std::vector<double> reference_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                               const AllowedFn& allowed, double scale) {
  const int64_t B = q.shape()[0], Hq = q.shape()[1], Sq = q.shape()[2], hd = q.shape()[3];
  const int64_t Hkv = k.shape()[1], Sk = k.shape()[2], G = Hq / Hkv;
  const std::vector<double> qv = q.to_vector(), kv = k.to_vector(), vv = v.to_vector();
  std::vector<double> out(B * Hq * Sq * hd, 0.0);
  std::vector<double> scores(Sk);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t kvh = (b * Hkv + h / G) * Sk * hd;
      for (int64_t i = 0; i < Sq; ++i) {
        const int64_t row = (b * Hq + h) * Sq + i;
        double m = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < Sk; ++j) {
          double s = 0;
          for (int64_t e = 0; e < hd; ++e) s += qv[row * hd + e] * kv[kvh + j * hd + e];
          scores[j] = allowed(b, h, i, j) ? s * scale : -std::numeric_limits<double>::infinity();
          m = std::max(m, scores[j]);
        }
        if (m == -std::numeric_limits<double>::infinity()) continue;
        double l = 0;
        for (int64_t j = 0; j < Sk; ++j) l += (scores[j] = std::exp(scores[j] - m));
        for (int64_t j = 0; j < Sk; ++j)
          for (int64_t e = 0; e < hd; ++e)
            out[row * hd + e] += scores[j] / l * vv[kvh + j * hd + e];
      }
    }
  }
  return out;
}

inline double max_abs_diff(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = a.size() == b.size() ? 0.0 : std::numeric_limits<double>::infinity();
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i) {
    const double d = std::abs(a[i] - b[i]);
    worst = std::isnan(d) ? std::numeric_limits<double>::infinity() : std::max(worst, d);
  }
  return worst;
}

inline double max_abs(const std::vector<double>& a) {
  double m = 0;
  for (double x : a) m = std::max(m, std::abs(x));
  return m;
}

// Standard normal f64 input, seeded; a leaf that requires grad when `grad`.
inline Tensor rand_f64(const Shape& shape, uint64_t seed, bool grad = false) {
  Generator gen(seed);
  Tensor t = randn(shape, {.dtype = DType::f64}, &gen);
  if (grad) t.requires_grad_();
  return t;
}

// Values and gradients of one attention call under a fixed upstream gradient.
struct AttentionRun {
  std::vector<double> out, dq, dk, dv;
};

inline AttentionRun run_with_grads(
    const std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>& f, const Shape& qs,
    const Shape& ks, uint64_t seed) {
  Tensor q = rand_f64(qs, seed, true), k = rand_f64(ks, seed + 1, true),
         v = rand_f64(ks, seed + 2, true);
  Tensor out = f(q, k, v);
  out.backward(rand_f64(out.shape(), seed + 3));
  return {out.to_vector(), q.grad().to_vector(), k.grad().to_vector(), v.grad().to_vector()};
}

inline void expect_runs_equal(const AttentionRun& a, const AttentionRun& b, double tol) {
  EXPECT_LE(max_abs_diff(a.out, b.out), tol) << "outputs differ";
  EXPECT_LE(max_abs_diff(a.dq, b.dq), tol) << "dq differs";
  EXPECT_LE(max_abs_diff(a.dk, b.dk), tol) << "dk differs";
  EXPECT_LE(max_abs_diff(a.dv, b.dv), tol) << "dv differs";
}

}  // namespace cg::testing
