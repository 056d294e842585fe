// Why this file exists: checks the Gated DeltaNet ops (ops/gated_delta.h) on the CPU
// against a double-precision reference written here in another formulation: the chunked
// WY / UT-transform form (chunks of 3, so several chunks and a ragged last one), where
// the kernel runs the plain recurrence. Value heads outnumber key heads with a mapping
// where transformers' repeat_interleave (value head h reads key head h / (Hv / Hk)) and
// tiling (h % Hk) differ, and a test shows the check would catch the wrong one. Also:
// a nonzero initial state, continuation (T tokens at once == T1 then T2 with the state
// handed on), l2norm off, the conv with and without history, bad inputs' messages.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "core/views.h"
#include "error_helpers.h"
#include "ops/gated_delta.h"

namespace cg {
namespace {

using Vec = std::vector<double>;

struct DeltaInputs {
  int64_t B = 2, T = 7, Hk = 2, Hv = 6, dk = 5, dv = 3;
  Tensor q, k, v, g, beta, state;  // f64 on the CPU
};

DeltaInputs make_inputs(uint64_t seed, int64_t T = 7) {
  DeltaInputs in;
  in.T = T;
  Generator gen(seed);
  const TensorOptions f64{.dtype = DType::f64};
  in.q = rand({in.B, T, in.Hk, in.dk}, f64, &gen, -1, 1);
  in.k = rand({in.B, T, in.Hk, in.dk}, f64, &gen, -1, 1);
  in.v = rand({in.B, T, in.Hv, in.dv}, f64, &gen, -1, 1);
  // g and beta hold f32 values: the entry reads them in fp32 (ops/kernels.h), so the f64
  // comparison below can be tight.
  in.g = raw::to_dtype(rand({in.B, T, in.Hv}, {.dtype = DType::f32}, &gen, -0.7, -0.01),
                       DType::f64);  // log decays
  in.beta =
      raw::to_dtype(rand({in.B, T, in.Hv}, {.dtype = DType::f32}, &gen, 0.05, 0.95), DType::f64);
  in.state = rand({in.B, in.Hv, in.dk, in.dv}, {.dtype = DType::f32}, &gen, -0.5, 0.5);
  return in;
}

struct Reference {
  Vec out;    // [B, T, Hv, dv]
  Vec state;  // [B, Hv, dk, dv]
};

// The gated delta rule in the chunked form, in double. Per (b, h) and chunk of tokens
// 1..C with G_i = sum_{s<=i} g_s (within the chunk) and S0 the state before it:
//   L u = beta (v - e^{G} S0^T k),  L = I + strictly_lower(beta_i e^{G_i - G_j} k_i.k_j)
//   out_i = e^{G_i} S0^T q_i + sum_{j<=i} e^{G_i - G_j} (q_i.k_j) u_j
//   S_end = e^{G_C} S0 + sum_j e^{G_C - G_j} k_j u_j^T
// `key_head_of(h)` picks the key head value head h reads (the mapping under test).
template <typename KeyHeadOf>
Reference chunked_reference(const DeltaInputs& in, bool l2norm, double scale, KeyHeadOf key_head_of,
                            bool with_state = true) {
  const int64_t B = in.B, T = in.T, Hk = in.Hk, Hv = in.Hv, dk = in.dk, dv = in.dv;
  const Vec q = in.q.to_vector(), k = in.k.to_vector(), v = in.v.to_vector();
  const Vec g = in.g.to_vector(), beta = in.beta.to_vector();
  const Vec s0 = in.state.to_vector();
  Reference r{Vec(static_cast<size_t>(B * T * Hv * dv)),
              Vec(static_cast<size_t>(B * Hv * dk * dv))};
  const int64_t chunk = 3;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hv; ++h) {
      const int64_t kh = key_head_of(h);
      Vec S(static_cast<size_t>(dk * dv), 0.0);
      if (with_state) {
        for (int64_t i = 0; i < dk * dv; ++i) S[i] = s0[(b * Hv + h) * dk * dv + i];
      }
      for (int64_t t0 = 0; t0 < T; t0 += chunk) {
        const int64_t C = std::min(chunk, T - t0);
        std::vector<Vec> qs(C), ks(C), vs(C), us(C);
        Vec G(C), bt(C);
        double cum = 0;
        for (int64_t i = 0; i < C; ++i) {
          const int64_t t = t0 + i;
          qs[i].resize(dk);
          ks[i].resize(dk);
          vs[i].resize(dv);
          double nq = 0, nk = 0;
          for (int64_t d = 0; d < dk; ++d) {
            qs[i][d] = q[((b * T + t) * Hk + kh) * dk + d];
            ks[i][d] = k[((b * T + t) * Hk + kh) * dk + d];
            nq += qs[i][d] * qs[i][d];
            nk += ks[i][d] * ks[i][d];
          }
          const double fq = l2norm ? scale / std::sqrt(nq + 1e-6) : scale;
          const double fk = l2norm ? 1.0 / std::sqrt(nk + 1e-6) : 1.0;
          for (int64_t d = 0; d < dk; ++d) {
            qs[i][d] *= fq;
            ks[i][d] *= fk;
          }
          for (int64_t e = 0; e < dv; ++e) vs[i][e] = v[((b * T + t) * Hv + h) * dv + e];
          cum += g[(b * T + t) * Hv + h];
          G[i] = cum;
          bt[i] = beta[(b * T + t) * Hv + h];
        }
        auto dot = [&](const Vec& x, const Vec& y) {
          double s = 0;
          for (size_t d = 0; d < x.size(); ++d) s += x[d] * y[d];
          return s;
        };
        // Forward substitution: u_i = rhs_i - sum_{j<i} L_ij u_j.
        for (int64_t i = 0; i < C; ++i) {
          us[i].assign(dv, 0.0);
          for (int64_t e = 0; e < dv; ++e) {
            double s0k = 0;  // (S0^T k_i)_e
            for (int64_t d = 0; d < dk; ++d) s0k += S[d * dv + e] * ks[i][d];
            us[i][e] = bt[i] * (vs[i][e] - std::exp(G[i]) * s0k);
          }
          for (int64_t j = 0; j < i; ++j) {
            const double l = bt[i] * std::exp(G[i] - G[j]) * dot(ks[i], ks[j]);
            for (int64_t e = 0; e < dv; ++e) us[i][e] -= l * us[j][e];
          }
        }
        for (int64_t i = 0; i < C; ++i) {
          for (int64_t e = 0; e < dv; ++e) {
            double o = 0;
            for (int64_t d = 0; d < dk; ++d) o += std::exp(G[i]) * S[d * dv + e] * qs[i][d];
            for (int64_t j = 0; j <= i; ++j)
              o += std::exp(G[i] - G[j]) * dot(qs[i], ks[j]) * us[j][e];
            r.out[((b * T + t0 + i) * Hv + h) * dv + e] = o;
          }
        }
        for (int64_t d = 0; d < dk; ++d) {
          for (int64_t e = 0; e < dv; ++e) {
            double s = std::exp(G[C - 1]) * S[d * dv + e];
            for (int64_t j = 0; j < C; ++j) s += std::exp(G[C - 1] - G[j]) * ks[j][d] * us[j][e];
            S[d * dv + e] = s;
          }
        }
      }
      for (int64_t i = 0; i < dk * dv; ++i) r.state[(b * Hv + h) * dk * dv + i] = S[i];
    }
  }
  return r;
}

void expect_near_all(const Vec& got, const Vec& want, double tol, const char* what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    ASSERT_NEAR(got[i], want[i], tol * (1 + std::abs(want[i]))) << what << " element " << i;
  }
}

double max_abs_diff(const Vec& a, const Vec& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::abs(a[i] - b[i]));
  return m;
}

GatedDeltaResult run(const DeltaInputs& in, DType dtype, bool l2norm, double scale,
                     bool with_state = true) {
  auto cast = [&](const Tensor& t) { return raw::to_dtype(t, dtype); };
  return gated_delta_rule(
      cast(in.q), cast(in.k), cast(in.v), in.g, in.beta,
      {.state = with_state ? in.state : Tensor(), .l2norm_qk = l2norm, .scale = scale});
}

const double kScale = 1.0 / std::sqrt(5.0);

TEST(GatedDeltaRule, MatchesTheChunkedReferenceInF64AndF32) {
  const DeltaInputs in = make_inputs(11);
  const int64_t group = in.Hv / in.Hk;
  const Reference want = chunked_reference(in, true, kScale, [&](int64_t h) { return h / group; });
  const GatedDeltaResult f64 = run(in, DType::f64, true, kScale);
  EXPECT_EQ(f64.out.dtype(), DType::f64);
  EXPECT_EQ(f64.out.shape(), (Shape{2, 7, 6, 3}));
  EXPECT_EQ(f64.final_state.dtype(), DType::f32);
  expect_near_all(f64.out.to_vector(), want.out, 1e-12, "f64 out");
  expect_near_all(f64.final_state.to_vector(), want.state, 1e-6, "f64 final state (stored f32)");
  const GatedDeltaResult f32 = run(in, DType::f32, true, kScale);
  expect_near_all(f32.out.to_vector(), want.out, 2e-5, "f32 out");
  expect_near_all(f32.final_state.to_vector(), want.state, 2e-5, "f32 final state");
  const GatedDeltaResult bf16 = run(in, DType::bf16, true, kScale);
  EXPECT_EQ(bf16.out.dtype(), DType::bf16);
  expect_near_all(bf16.out.to_vector(), want.out, 5e-2, "bf16 out");
}

TEST(GatedDeltaRule, ValueHeadsReadKeyHeadsLikeRepeatInterleaveNotTiling) {
  // 6 value heads over 2 key heads: repeat_interleave maps 0,1,2 -> 0 and 3,4,5 -> 1;
  // tiling would map 0,2,4 -> 0. The op must match the first, and the two must differ by
  // far more than the tolerance above, or the previous test could not catch the mix-up.
  const DeltaInputs in = make_inputs(12);
  const GatedDeltaResult got = run(in, DType::f64, true, kScale);
  const Reference tiled = chunked_reference(in, true, kScale, [&](int64_t h) { return h % in.Hk; });
  const Reference interleaved =
      chunked_reference(in, true, kScale, [&](int64_t h) { return h / (in.Hv / in.Hk); });
  EXPECT_GT(max_abs_diff(got.out.to_vector(), tiled.out), 1e-2);
  EXPECT_LT(max_abs_diff(got.out.to_vector(), interleaved.out), 1e-10);
}

TEST(GatedDeltaRule, WithoutL2NormAndFromZeros) {
  const DeltaInputs in = make_inputs(13);
  const int64_t group = in.Hv / in.Hk;
  auto key_head = [&](int64_t h) { return h / group; };
  const Reference want = chunked_reference(in, false, 0.3, key_head, /*with_state=*/false);
  const GatedDeltaResult got = run(in, DType::f64, false, 0.3, /*with_state=*/false);
  expect_near_all(got.out.to_vector(), want.out, 1e-12, "out without l2norm");
  expect_near_all(got.final_state.to_vector(), want.state, 1e-6, "state without l2norm");
  // An undefined state is zeros.
  DeltaInputs zero = in;
  zero.state = zeros({in.B, in.Hv, in.dk, in.dv});
  EXPECT_EQ(run(zero, DType::f64, false, 0.3).out.to_vector(), got.out.to_vector());
}

TEST(GatedDeltaRule, ContinuingFromTheFinalStateEqualsOneCall) {
  // T = 7 at once, or 3 then 4 with the first call's final state handed on: identical in
  // f32 (the state the kernel carries between tokens is the fp32 state it returns).
  const DeltaInputs in = make_inputs(14);
  const Tensor state_before = raw::clone(in.state);
  const GatedDeltaResult whole = run(in, DType::f32, true, kScale);
  EXPECT_EQ(in.state.to_vector(), state_before.to_vector()) << "the op modified options.state";
  auto part = [&](const Tensor& t, int64_t start, int64_t len) {
    return raw::to_dtype(raw::narrow(t, 1, start, len),
                         t.dtype() == DType::f64 ? DType::f32 : t.dtype());
  };
  const GatedDeltaResult first = gated_delta_rule(
      part(in.q, 0, 3), part(in.k, 0, 3), part(in.v, 0, 3), raw::narrow(in.g, 1, 0, 3),
      raw::narrow(in.beta, 1, 0, 3), {.state = in.state, .scale = kScale});
  const GatedDeltaResult second = gated_delta_rule(
      part(in.q, 3, 4), part(in.k, 3, 4), part(in.v, 3, 4), raw::narrow(in.g, 1, 3, 4),
      raw::narrow(in.beta, 1, 3, 4), {.state = first.final_state, .scale = kScale});
  const Vec all = whole.out.to_vector();
  Vec joined = first.out.to_vector();
  const Vec rest = second.out.to_vector();
  // [B, T, Hv, dv]: rows of b are interleaved, so compare per batch row.
  const size_t per_t = 6 * 3;
  Vec expect_first, expect_rest;
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t t = 0; t < 7; ++t) {
      for (size_t e = 0; e < per_t; ++e) {
        (t < 3 ? expect_first : expect_rest).push_back(all[(b * 7 + t) * per_t + e]);
      }
    }
  }
  EXPECT_EQ(joined, expect_first);
  EXPECT_EQ(rest, expect_rest);
  EXPECT_EQ(second.final_state.to_vector(), whole.final_state.to_vector());
}

TEST(GatedDeltaRule, NoTokensReturnTheStateUnchanged) {
  const DeltaInputs in = make_inputs(15, /*T=*/0);
  const GatedDeltaResult r = run(in, DType::f32, true, kScale);
  EXPECT_EQ(r.out.shape(), (Shape{2, 0, 6, 3}));
  EXPECT_EQ(r.final_state.to_vector(), in.state.to_vector());
}

TEST(GatedDeltaRule, BadInputsSayWhatToChange) {
  const DeltaInputs in = make_inputs(16);
  const Tensor q = raw::to_dtype(in.q, DType::f32), k = raw::to_dtype(in.k, DType::f32);
  const Tensor v = raw::to_dtype(in.v, DType::f32);
  EXPECT_ERROR_HAS(gated_delta_rule(q, raw::narrow(k, 2, 0, 1), v, in.g, in.beta), "q and k",
                   "[B, T, Hk, dk]");
  EXPECT_ERROR_HAS(gated_delta_rule(q, k, raw::to_dtype(v, DType::bf16), in.g, in.beta),
                   "share one dtype", "cg::to");
  EXPECT_ERROR_HAS(gated_delta_rule(q, k, raw::narrow(v, 2, 0, 5), raw::narrow(in.g, 2, 0, 5),
                                    raw::narrow(in.beta, 2, 0, 5)),
                   "value heads (5", "multiple of the key heads (2", "h / (Hv / Hk)");
  EXPECT_ERROR_HAS(gated_delta_rule(q, k, v, raw::narrow(in.g, 1, 0, 6), in.beta), "g must be",
                   "[2, 7, 6]");
  EXPECT_ERROR_HAS(
      gated_delta_rule(q, k, v, in.g, in.beta, {.state = raw::to_dtype(in.state, DType::f64)}),
      "state must be f32");
  EXPECT_ERROR_HAS(
      gated_delta_rule(q, k, v, in.g, in.beta, {.state = raw::narrow(in.state, 1, 0, 2)}),
      "[B, Hv, dk, dv] = [2, 6, 5, 3]", "final_state");
  // A tensor that needs a gradient is refused while grad mode is on, accepted under no-grad.
  Tensor leaf = raw::clone(q);
  leaf.requires_grad_();
  EXPECT_ERROR_HAS(gated_delta_rule(leaf, k, v, in.g, in.beta), "q requires grad",
                   "records no gradient", "no-grad", "detach");
  NoGradGuard no_grad;
  EXPECT_NO_THROW(gated_delta_rule(leaf, k, v, in.g, in.beta));
}

// ---- causal_conv1d ------------------------------------------------------------------------

// out[b, t, c] = act(sum_j w[c, j] xx[b, t + j, c]), xx = cat(history, x), in double.
Vec conv_reference(const Tensor& x, const Tensor& w, const Tensor& history, bool silu) {
  const int64_t B = x.size(0), T = x.size(1), C = x.size(2), K = w.size(1);
  const Vec xv = x.to_vector(), wv = w.to_vector();
  const Vec hv =
      history.defined() ? history.to_vector() : Vec(static_cast<size_t>(B * (K - 1) * C), 0.0);
  Vec out(static_cast<size_t>(B * T * C));
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < T; ++t) {
      for (int64_t c = 0; c < C; ++c) {
        double s = 0;
        for (int64_t j = 0; j < K; ++j) {
          const int64_t p = t + j;  // index into xx
          const double xx =
              p < K - 1 ? hv[(b * (K - 1) + p) * C + c] : xv[(b * T + p - (K - 1)) * C + c];
          s += wv[c * K + j] * xx;
        }
        out[(b * T + t) * C + c] = silu ? s / (1 + std::exp(-s)) : s;
      }
    }
  }
  return out;
}

TEST(CausalConv1d, MatchesTheDirectSumWithAndWithoutHistory) {
  Generator gen(21);
  const TensorOptions f64{.dtype = DType::f64};
  const Tensor x = rand({2, 6, 5}, f64, &gen, -1, 1);
  const Tensor w = rand({5, 4}, f64, &gen, -1, 1);
  const Tensor h = rand({2, 3, 5}, f64, &gen, -1, 1);
  expect_near_all(causal_conv1d(x, w, h).to_vector(), conv_reference(x, w, h, true), 1e-14,
                  "silu, history");
  expect_near_all(causal_conv1d(x, w, Tensor(), false).to_vector(),
                  conv_reference(x, w, Tensor(), false), 1e-14, "no act, zeros");
  // Hugging Face's [C, 1, K] weight is the same weight.
  EXPECT_EQ(causal_conv1d(x, raw::view(w, {5, 1, 4}), h).to_vector(),
            causal_conv1d(x, w, h).to_vector());
  // f32 and bf16 within rounding.
  const Tensor x32 = raw::to_dtype(x, DType::f32), w32 = raw::to_dtype(w, DType::f32),
               h32 = raw::to_dtype(h, DType::f32);
  expect_near_all(causal_conv1d(x32, w32, h32).to_vector(), conv_reference(x, w, h, true), 1e-6,
                  "f32");
  const Tensor xb = raw::to_dtype(x, DType::bf16), wb = raw::to_dtype(w, DType::bf16),
               hb = raw::to_dtype(h, DType::bf16);
  expect_near_all(causal_conv1d(xb, wb, hb).to_vector(), conv_reference(x, w, h, true), 3e-2,
                  "bf16");
}

TEST(CausalConv1d, TheLastInputsAsHistoryContinueTheSequence) {
  // conv(x)[:, 4:] == conv(x[:, 4:], history = x[:, 1:4]): the conv state of decoding.
  Generator gen(22);
  const Tensor x = rand({2, 9, 7}, {}, &gen, -1, 1);
  const Tensor w = rand({7, 4}, {}, &gen, -1, 1);
  const Tensor whole = causal_conv1d(x, w);
  const Tensor tail = causal_conv1d(raw::narrow(x, 1, 4, 5), w, raw::narrow(x, 1, 1, 3));
  EXPECT_EQ(tail.to_vector(), raw::narrow(whole, 1, 4, 5).to_vector());
  // With fewer than K-1 real inputs before, the history's missing rows are zeros: from
  // position 1 on, the history is [0, 0, x0].
  const Tensor padded_history = zeros({2, 3, 7});
  raw::copy_(raw::narrow(padded_history, 1, 2, 1), raw::narrow(x, 1, 0, 1));
  EXPECT_EQ(causal_conv1d(raw::narrow(x, 1, 1, 8), w, padded_history).to_vector(),
            raw::narrow(whole, 1, 1, 8).to_vector());
}

TEST(CausalConv1d, BadInputsSayWhatToChange) {
  const Tensor x = zeros({2, 6, 5});
  EXPECT_ERROR_HAS(causal_conv1d(x, zeros({4, 4})), "[C, K] or Hugging Face", "C = 5");
  EXPECT_ERROR_HAS(causal_conv1d(x, zeros({5, 2, 4})), "[C, 1, K]");
  EXPECT_ERROR_HAS(causal_conv1d(zeros({6, 5}), zeros({5, 4})), "[B, T, C]");
  EXPECT_ERROR_HAS(causal_conv1d(x, zeros({5, 4}), zeros({2, 4, 5})), "history must be",
                   "[2, 3, 5]");
  EXPECT_ERROR_HAS(causal_conv1d(x, zeros({5, 4}, {.dtype = DType::bf16})), "weight is bf16",
                   "x is f32");
  Tensor w = zeros({5, 4});
  w.requires_grad_();
  EXPECT_ERROR_HAS(causal_conv1d(x, w), "weight requires grad", "no-grad");
}

}  // namespace
}  // namespace cg
