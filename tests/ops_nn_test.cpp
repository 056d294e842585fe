// Why this file exists: the fused transformer ops -- rms_norm, embedding, rotary, swiglu
// -- checked three ways: forward values against the plain formula written as loops,
// backward against finite differences (tests/gradcheck.h, f64, non-contiguous inputs,
// odd sizes), and 16-bit paths against fp32. Plus the errors users see for bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <complex>

#include "core/factories.h"
#include "core/views.h"
#include "error_helpers.h"
#include "ops/ops.h"
#include "tests/gradcheck.h"

namespace cg {
namespace {

using testing::error_of;

using testing::make_input;
using V = std::vector<Tensor>;

double max_abs_diff(const Tensor& a, const Tensor& b) {
  const auto x = a.to_vector(), y = b.to_vector();
  EXPECT_EQ(x.size(), y.size());
  double m = 0.0;
  for (size_t i = 0; i < x.size() && i < y.size(); ++i) m = std::max(m, std::abs(x[i] - y[i]));
  return m;
}

// ---- rms_norm ----------------------------------------------------------------------

// x / sqrt(mean(x^2) + eps) * w over the last dim, in double.
std::vector<double> rms_norm_reference(const Tensor& x, const Tensor& w, double eps) {
  const auto xv = raw::contiguous(x).to_vector();
  const auto wv = w.defined() ? w.to_vector() : std::vector<double>();
  const int64_t D = x.shape().back(), rows = x.numel() / D;
  std::vector<double> out(xv.size());
  for (int64_t r = 0; r < rows; ++r) {
    double ms = 0.0;
    for (int64_t j = 0; j < D; ++j) ms += xv[r * D + j] * xv[r * D + j];
    const double inv = 1.0 / std::sqrt(ms / D + eps);
    for (int64_t j = 0; j < D; ++j) {
      out[r * D + j] = xv[r * D + j] * inv * (wv.empty() ? 1.0 : wv[j]);
    }
  }
  return out;
}

TEST(OpsNorm, RmsNormMatchesFormula) {
  Generator gen(100);
  for (DType dt : {DType::f64, DType::f32}) {
    Tensor x = randn({3, 4, 7}, {.dtype = dt}, &gen);
    Tensor w = randn({7}, {.dtype = dt}, &gen);
    const auto ref = rms_norm_reference(x, w, 1e-5);
    const auto got = rms_norm(x, w, 1e-5).to_vector();
    const double tol = dt == DType::f64 ? 1e-12 : 1e-5;
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], tol) << i;
    // No weight; and a transposed x (rows strided in memory).
    const auto ref_nw = rms_norm_reference(x, Tensor(), 1e-5);
    const auto got_nw = rms_norm(x, Tensor(), 1e-5).to_vector();
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got_nw[i], ref_nw[i], tol) << i;
    Tensor xt = transpose(randn({7, 5}, {.dtype = dt}, &gen), 0, 1);
    const auto ref_t = rms_norm_reference(xt, w, 1e-6);
    const auto got_t = rms_norm(xt, w).to_vector();
    for (size_t i = 0; i < ref_t.size(); ++i) EXPECT_NEAR(got_t[i], ref_t[i], tol) << i;
  }
}

// f32 rows whose squares overflow f32 (|x| > 1.8e19): the sum of squares is taken in
// double, so y is x / rms, not 0 (issue 18 item 27; the contiguous fast path summed in f32).
TEST(OpsNorm, RmsNormOfHugeF32RowsIsNotZero) {
  const Tensor x = cat({full({1, 8}, 1e20), full({1, 8}, -3e19)}, 0);  // f32
  ASSERT_EQ(x.dtype(), DType::f32);
  for (const Tensor& in : {x, contiguous(transpose(contiguous(transpose(x, 0, 1)), 0, 1))}) {
    const auto y = rms_norm(in, Tensor(), 1e-6).to_vector();
    for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], i < 8 ? 1.0 : -1.0, 1e-6) << i;
  }
  // A strided row (the loop path) agrees.
  const auto ys =
      rms_norm(transpose(contiguous(transpose(x, 0, 1)), 0, 1), Tensor(), 1e-6).to_vector();
  for (size_t i = 0; i < ys.size(); ++i) EXPECT_NEAR(ys[i], i < 8 ? 1.0 : -1.0, 1e-6) << i;
}

TEST(OpsNorm, RmsNormGradcheck) {
  Tensor x = make_input({3, 5}, 101), w = make_input({5}, 102);
  EXPECT_GRADCHECK([](const V& in) { return rms_norm(in[0], in[1], 1e-6); }, x, w);
  EXPECT_GRADCHECK([](const V& in) { return rms_norm(in[0], Tensor(), 0.1); }, x);
  // Odd sizes, 3-D, and a transposed x (last dim strided).
  Tensor x3 = make_input({2, 3, 7}, 103), w7 = make_input({7}, 104);
  EXPECT_GRADCHECK([](const V& in) { return rms_norm(in[0], in[1], 1e-6); }, x3, w7);
  Tensor xt = make_input({7, 2, 3}, 105);
  EXPECT_GRADCHECK(
      [](const V& in) {
        return rms_norm(permute(in[0], {1, 2, 0}), in[1], 1e-6);
      },
      xt, w7);
  // A sliced x (every other row) and a strided weight.
  Tensor xs = make_input({6, 5}, 106), w10 = make_input({10}, 107);
  EXPECT_GRADCHECK(
      [](const V& in) { return rms_norm(slice(in[0], 0, 0, 6, 2), slice(in[1], 0, 1, 10, 2)); }, xs,
      w10);
}

TEST(OpsNorm, RmsNormLargeRowsMatchLoopsAndAreDeterministic) {
  // 600 x 64 takes the parallel, chunked path; compare both gradients with loops.
  Generator gen(111);
  const int64_t R = 600, D = 64;
  Tensor x = randn({R, D}, {.dtype = DType::f64}, &gen).requires_grad_();
  Tensor w = randn({D}, {.dtype = DType::f64}, &gen).requires_grad_();
  Tensor g = randn({R, D}, {.dtype = DType::f64}, &gen);
  rms_norm(x, w, 1e-6).backward(g);
  const auto xv = x.to_vector(), wv = w.to_vector(), gv = g.to_vector();
  const auto dx = x.grad().to_vector(), dw = w.grad().to_vector();
  std::vector<double> dw_ref(D, 0.0);
  for (int64_t r = 0; r < R; ++r) {
    double ms = 0.0, dot = 0.0;
    for (int64_t j = 0; j < D; ++j) ms += xv[r * D + j] * xv[r * D + j] / D;
    const double rs = 1.0 / std::sqrt(ms + 1e-6);
    for (int64_t j = 0; j < D; ++j) dot += gv[r * D + j] * wv[j] * xv[r * D + j];
    for (int64_t j = 0; j < D; ++j) {
      const double ref = rs * (gv[r * D + j] * wv[j] - xv[r * D + j] * rs * rs * dot / D);
      EXPECT_NEAR(dx[r * D + j], ref, 1e-12);
      dw_ref[j] += gv[r * D + j] * xv[r * D + j] * rs;
    }
  }
  for (int64_t j = 0; j < D; ++j) EXPECT_NEAR(dw[j], dw_ref[j], 1e-10);
  // The same bits on a second run (dweight's partial sums are added in a fixed order).
  Tensor xf = to(x, DType::f32).detach().requires_grad_(),
         wf = to(w, DType::f32).detach().requires_grad_();
  rms_norm(xf, wf).backward(to(g, DType::f32));
  const auto first = wf.grad().to_vector();
  wf.set_grad(Tensor());
  rms_norm(xf, wf).backward(to(g, DType::f32));
  EXPECT_EQ(wf.grad().to_vector(), first);
}

TEST(OpsNorm, RmsNormWeightOnlyAndSavedTensors) {
  Generator gen(108);
  Tensor x = randn({4, 6}, {}, &gen).requires_grad_();
  Tensor w = randn({6}, {}, &gen).requires_grad_();
  Tensor y = rms_norm(x, w);
  // x (4*6 f32) + rstd (4 f32) + w (6 f32): never the normalised output.
  EXPECT_EQ(y.grad_fn()->name(), "RmsNormBackward");
  EXPECT_EQ(y.grad_fn()->saved_bytes(), (24 + 4 + 6) * 4u);
  // Only the weight trains (x is a frozen feature): the weight is not saved.
  Tensor xf = randn({4, 6}, {.dtype = DType::f64}, &gen);
  Tensor wf = make_input({6}, 109);
  EXPECT_EQ(rms_norm(xf, wf).grad_fn()->saved_bytes(), (24 + 4) * 8u);
  EXPECT_GRADCHECK([xf](const V& in) { return rms_norm(xf, in[0]); }, wf);
}

TEST(OpsNorm, RmsNormHalfPrecisionNearFp32) {
  Generator gen(110);
  Tensor x = randn({8, 64}, {}, &gen), w = randn({64}, {}, &gen, 1.0, 0.1);
  Tensor ref = rms_norm(x, w);
  for (DType dt : {DType::bf16, DType::f16}) {
    Tensor got = rms_norm(to(x, dt), to(w, dt));
    EXPECT_EQ(got.dtype(), dt);
    // Inputs rounded to 16 bits, one rounding of the output: within 2^-7 relative (bf16).
    const auto g = got.to_vector(), r = ref.to_vector();
    for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], r[i], 1.6e-2 * (1 + std::abs(r[i])));
    // The backward runs in fp32 too and comes back in the input's dtype.
    Tensor xh = to(x, dt).requires_grad_(), wh = to(w, dt).requires_grad_();
    sum(rms_norm(xh, wh)).backward();
    EXPECT_EQ(xh.grad().dtype(), dt);
    EXPECT_EQ(wh.grad().dtype(), dt);
  }
}

TEST(OpsNorm, RmsNormErrors) {
  EXPECT_ERROR_HAS(rms_norm(ones({2, 8}), ones({5})), "rms_norm", "[5]", "8");
  EXPECT_ERROR_HAS(rms_norm(ones({2, 8}), ones({8}, {.dtype = DType::f64})), "dtypes differ");
  EXPECT_ERROR_HAS(rms_norm(ones({2, 8}, {.dtype = DType::i64}), Tensor()), "i64");
  EXPECT_ERROR_HAS(rms_norm(ones({}), Tensor()), "0-d");
}

// ---- embedding ---------------------------------------------------------------------

TEST(OpsEmbed, LooksUpRows) {
  Tensor w = from_vector({0, 1, 10, 11, 20, 21, 30, 31}, {4, 2});
  for (DType idt : {DType::i64, DType::i32}) {
    Tensor ids = from_ints({3, 0, 3, 1, 2, 2}, {2, 3}, {.dtype = idt});
    Tensor out = embedding(w, ids);
    EXPECT_EQ(out.shape(), (Shape{2, 3, 2}));
    EXPECT_EQ(out.to_vector(), (std::vector<double>{30, 31, 0, 1, 30, 31, 10, 11, 20, 21, 20, 21}));
  }
  EXPECT_EQ(embedding(w, from_ints({2}, {})).to_vector(), (std::vector<double>{20, 21}));
  // A transposed table and transposed ids are read through their strides.
  Tensor wt = transpose(from_vector({0, 10, 20, 30, 1, 11, 21, 31}, {2, 4}), 0, 1);
  Tensor ids_t = transpose(from_ints({3, 1, 0, 2}, {2, 2}), 0, 1);  // [[3, 0], [1, 2]]
  EXPECT_EQ(embedding(wt, ids_t).to_vector(), (std::vector<double>{30, 31, 0, 1, 10, 11, 20, 21}));
}

TEST(OpsEmbed, Gradcheck) {
  Tensor w = make_input({5, 3}, 120), wt = make_input({3, 5}, 121);
  Tensor ids = from_ints({4, 0, 4, 2, 4, 1}, {3, 2});  // 4 repeats
  EXPECT_GRADCHECK([ids](const V& in) { return embedding(in[0], ids); }, w);
  EXPECT_GRADCHECK([ids](const V& in) { return embedding(transpose(in[0], 0, 1), ids); }, wt);
  // With padding_idx = 4 the gradient is deliberately not the derivative for row 4 (it
  // stays zero, as in PyTorch): the other rows match the unpadded gradient exactly.
  Generator gen(122);
  Tensor up = randn({3, 2, 3}, {.dtype = DType::f64}, &gen);
  w.set_grad(Tensor());
  embedding(w, ids).backward(up);
  auto expect = w.grad().to_vector();
  for (int j = 0; j < 3; ++j) expect[4 * 3 + j] = 0.0;
  w.set_grad(Tensor());
  embedding(w, ids, 4).backward(up);
  EXPECT_EQ(w.grad().to_vector(), expect);
}

TEST(OpsEmbed, RepeatedIdsAccumulateAndPaddingGetsNone) {
  for (DType dt : {DType::f32, DType::bf16}) {
    Tensor w = zeros({4, 3}, {.dtype = dt}).requires_grad_();
    Tensor ids = from_ints({1, 3, 1, 1, 0, 3}, {6}, {.dtype = DType::i32});
    sum(embedding(w, ids, /*padding_idx=*/-1)).backward();  // -1 = row 3
    EXPECT_EQ(w.grad().dtype(), dt);
    EXPECT_EQ(w.grad().to_vector(), (std::vector<double>{1, 1, 1, 3, 3, 3, 0, 0, 0, 0, 0, 0}));
  }
  // The padding row's forward value is whatever is stored (PyTorch's rule).
  Tensor w = from_vector({1, 2, 3, 4}, {2, 2});
  EXPECT_EQ(embedding(w, from_ints({0}, {1}), 0).to_vector(), (std::vector<double>{1, 2}));
  Tensor leaf = ones({2, 2}).requires_grad_();
  EXPECT_EQ(embedding(leaf, from_ints({0, 1}, {2})).grad_fn()->saved_bytes(), 2 * 8u);  // ids
}

TEST(OpsEmbed, Errors) {
  Tensor w = ones({10, 4});
  EXPECT_ERROR_HAS(embedding(w, from_ints({1, 12, 3}, {3})), "embedding", "12", "V = 10",
                   "[0, 10)");
  EXPECT_ERROR_HAS(embedding(w, from_ints({-1}, {1})), "-1", "V = 10");
  EXPECT_ERROR_HAS(embedding(w, from_vector({1, 2}, {2})), "ids", "f32", "i32 or i64");
  EXPECT_ERROR_HAS(embedding(ones({10}), from_ints({1}, {1})), "[V, D]");
  EXPECT_ERROR_HAS(embedding(w, from_ints({1}, {1}), 10), "padding_idx", "10");
}

// ---- rotary ------------------------------------------------------------------------

// Explicit complex rotation: pair (i, i + hd/2) as z = x_i + i x_{i+hd/2}, times
// exp(i pos theta^(-2i/hd)). x [S, H, hd] f64.
std::vector<double> rotary_reference(const Tensor& x, const std::vector<int64_t>& pos,
                                     double theta) {
  const auto xv = raw::contiguous(x).to_vector();
  const int64_t S = x.shape()[0], H = x.shape()[1], hd = x.shape()[2], half = hd / 2;
  std::vector<double> out(xv.size());
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t h = 0; h < H; ++h) {
      const double* row = xv.data() + (s * H + h) * hd;
      double* o = out.data() + (s * H + h) * hd;
      for (int64_t i = 0; i < half; ++i) {
        const double freq = 1.0 / std::pow(theta, 2.0 * i / hd);
        const std::complex<double> z(row[i], row[i + half]);
        const std::complex<double> r = z * std::polar(1.0, pos[s] * freq);
        o[i] = r.real();
        o[i + half] = r.imag();
      }
    }
  }
  return out;
}

TEST(OpsRotary, MatchesComplexRotationAtArbitraryPositions) {
  Generator gen(130);
  const std::vector<int64_t> pos = {0, 7, 3, 1000, 4095, 12};  // not an arange
  Tensor x = randn({6, 3, 8}, {.dtype = DType::f64}, &gen);
  Tensor p = from_ints(pos, {6});
  const auto ref = rotary_reference(x, pos, 1e6);
  const auto got = apply_rotary(x, p, 1e6).to_vector();
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-12) << i;
  // f32, i32 positions, theta 1e4, a leading batch dim sharing the [S] positions.
  Tensor xb = randn({2, 6, 3, 8}, {}, &gen);
  Tensor out = apply_rotary(xb, from_ints(pos, {6}, {.dtype = DType::i32}), 1e4);
  for (int64_t b = 0; b < 2; ++b) {
    Tensor xb64 = raw::to_dtype(raw::contiguous(raw::narrow(xb, 0, b, 1)), DType::f64);
    const auto r = rotary_reference(raw::reshape(xb64, {6, 3, 8}), pos, 1e4);
    const auto g = raw::narrow(out, 0, b, 1).to_vector();
    for (size_t i = 0; i < r.size(); ++i) EXPECT_NEAR(g[i], r[i], 2e-5) << i;
  }
}

TEST(OpsRotary, DotProductDependsOnlyOnRelativePosition) {
  Generator gen(131);
  Tensor q = randn({1, 1, 16}, {.dtype = DType::f64}, &gen);
  Tensor k = randn({1, 1, 16}, {.dtype = DType::f64}, &gen);
  auto dot_at = [&](int64_t m, int64_t n) {
    Tensor qm = apply_rotary(q, from_ints({m}, {1}), 1e6);
    Tensor kn = apply_rotary(k, from_ints({n}, {1}), 1e6);
    return sum(qm * kn).item();
  };
  const double base = dot_at(10, 3);
  EXPECT_NEAR(dot_at(17, 10), base, 1e-10);
  EXPECT_NEAR(dot_at(2007, 2000), base, 1e-10);
  EXPECT_GT(std::abs(dot_at(11, 3) - base), 1e-6);  // a different offset differs
  // Rotating by p then by -p is the identity.
  Tensor x = randn({4, 2, 6}, {.dtype = DType::f64}, &gen);
  Tensor p = from_ints({5, 9, 2, 100}, {4}), minus_p = from_ints({-5, -9, -2, -100}, {4});
  EXPECT_LT(max_abs_diff(apply_rotary(apply_rotary(x, p, 1e4), minus_p, 1e4), x), 1e-12);
}

TEST(OpsRotary, LargeInputTakesParallelPathSameValues) {
  // [2, 64, 8, 64] = 65536 elements runs rows in parallel; every row still matches the
  // formula (checked for batch 1, whose positions differ from batch 0's).
  Generator gen(135);
  std::vector<int64_t> pos;
  for (int64_t b = 0; b < 2; ++b)
    for (int64_t s = 0; s < 64; ++s) pos.push_back(b == 0 ? s : 3000 + 5 * s);
  Tensor x = randn({2, 64, 8, 64}, {.dtype = DType::f64}, &gen);
  Tensor out = apply_rotary(x, from_ints(pos, {2, 64}), 1e6);
  const std::vector<int64_t> pos1(pos.begin() + 64, pos.end());
  const auto ref = rotary_reference(raw::reshape(raw::narrow(x, 0, 1, 1), {64, 8, 64}), pos1, 1e6);
  const auto got = raw::narrow(out, 0, 1, 1).to_vector();
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(got[i], ref[i], 1e-12) << i;
}

TEST(OpsRotary, Gradcheck) {
  Tensor x = make_input({5, 2, 6}, 132);
  Tensor p = from_ints({3, 0, 9, 4, 21}, {5});
  EXPECT_GRADCHECK([p](const V& in) { return apply_rotary(in[0], p, 1e4); }, x);
  // [B, H, S, hd] transposed to [B, S, H, hd] (non-contiguous), per-batch positions [B, S].
  Tensor xh = make_input({2, 3, 4, 4}, 133);
  Tensor pb = from_ints({0, 1, 2, 3, 17, 18, 19, 20}, {2, 4});
  EXPECT_GRADCHECK([pb](const V& in) { return apply_rotary(transpose(in[0], 1, 2), pb, 100.0); },
                   xh);
  // Only positions are saved.
  Tensor leaf = ones({5, 2, 6}).requires_grad_();
  EXPECT_EQ(apply_rotary(leaf, p, 1e4).grad_fn()->saved_bytes(), 5 * 8u);
}

TEST(OpsRotary, HalfPrecisionNearFp32) {
  Generator gen(134);
  Tensor x = randn({6, 4, 32}, {}, &gen);
  Tensor p = from_ints({0, 1, 2, 500, 501, 502}, {6});
  Tensor ref = apply_rotary(x, p, 1e6);
  for (DType dt : {DType::bf16, DType::f16}) {
    const auto g = apply_rotary(to(x, dt), p, 1e6).to_vector(), r = ref.to_vector();
    for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], r[i], 2e-2 * (1 + std::abs(r[i])));
  }
}

TEST(OpsRotary, Errors) {
  EXPECT_ERROR_HAS(apply_rotary(ones({4, 2, 7}), from_ints({0, 1, 2, 3}, {4}), 1e4), "head_dim",
                   "7", "even");
  EXPECT_ERROR_HAS(apply_rotary(ones({4, 2, 8}), from_ints({0, 1, 2}, {3}), 1e4), "positions",
                   "[3]", "[4, 2, 8]");
  EXPECT_ERROR_HAS(apply_rotary(ones({4, 2, 8}), from_vector({0, 1, 2, 3}, {4}), 1e4), "positions",
                   "f32", "i32 or i64");
  EXPECT_ERROR_HAS(apply_rotary(ones({4, 8}), from_ints({0, 1, 2, 3}, {4}), 1e4),
                   "[..., S, H, head_dim]");
}

// ---- swiglu ------------------------------------------------------------------------

TEST(OpsSwiGLU, MatchesFormula) {
  Generator gen(140);
  Tensor a = randn({3, 5}, {.dtype = DType::f64}, &gen),
         u = randn({3, 5}, {.dtype = DType::f64}, &gen);
  const auto av = a.to_vector(), uv = u.to_vector(), got = swiglu(a, u).to_vector();
  for (size_t i = 0; i < av.size(); ++i) {
    EXPECT_NEAR(got[i], av[i] / (1 + std::exp(-av[i])) * uv[i], 1e-14);
  }
  // Large |gate| stays finite.
  Tensor big = from_vector({-100, 100, -1e4}, {3});
  const auto b = swiglu(big, ones({3})).to_vector();
  EXPECT_NEAR(b[0], 0.0, 1e-30);
  EXPECT_NEAR(b[1], 100.0, 1e-4);
  EXPECT_NEAR(b[2], 0.0, 1e-30);
}

TEST(OpsSwiGLU, ContiguousParallelPathMatchesStridedPath) {
  Generator gen(147);
  Tensor a = randn({64, 1024}, {}, &gen), u = randn({64, 1024}, {}, &gen);
  Tensor g = randn({64, 1024}, {}, &gen);
  // The same values through transposed views take the strided loop.
  Tensor at = transpose(contiguous(transpose(a, 0, 1)), 0, 1);
  Tensor ut = transpose(contiguous(transpose(u, 0, 1)), 0, 1);
  EXPECT_EQ(swiglu(a, u).to_vector(), swiglu(at, ut).to_vector());
  Tensor a1 = a.detach().requires_grad_(), u1 = u.detach().requires_grad_();
  Tensor a2 = at.detach().requires_grad_(), u2 = ut.detach().requires_grad_();
  swiglu(a1, u1).backward(g);
  swiglu(a2, u2).backward(g);
  EXPECT_EQ(a1.grad().to_vector(), a2.grad().to_vector());
  EXPECT_EQ(u1.grad().to_vector(), u2.grad().to_vector());
}

TEST(OpsSwiGLU, Gradcheck) {
  Tensor a = make_input({4, 7}, 141), u = make_input({4, 7}, 142);
  EXPECT_GRADCHECK([](const V& in) { return swiglu(in[0], in[1]); }, a, u);
  Tensor at = make_input({7, 4}, 143), us = make_input({8, 7}, 144);
  EXPECT_GRADCHECK(
      [](const V& in) { return swiglu(transpose(in[0], 0, 1), slice(in[1], 0, 0, 8, 2)); }, at, us);
  // Only up trains: gate alone is saved; only gate trains: both.
  Generator gen(145);
  Tensor g = randn({4, 7}, {.dtype = DType::f64}, &gen);
  EXPECT_GRADCHECK([g](const V& in) { return swiglu(g, in[0]); }, u);
  EXPECT_GRADCHECK([g](const V& in) { return swiglu(in[0], g); }, a);
  Tensor leaf = ones({4, 7}).requires_grad_();
  EXPECT_EQ(swiglu(ones({4, 7}), leaf).grad_fn()->saved_bytes(), 28 * 4u);
  EXPECT_EQ(swiglu(leaf, ones({4, 7})).grad_fn()->saved_bytes(), 2 * 28 * 4u);
}

TEST(OpsSwiGLU, HalfPrecisionNearFp32) {
  Generator gen(146);
  Tensor a = randn({16, 33}, {}, &gen), u = randn({16, 33}, {}, &gen);
  Tensor ref = swiglu(a, u);
  const auto r = ref.to_vector();
  const auto g = swiglu(to(a, DType::bf16), to(u, DType::bf16)).to_vector();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(g[i], r[i], 2e-2 * (1 + std::abs(r[i])));
}

TEST(OpsSwiGLU, Errors) {
  EXPECT_ERROR_HAS(swiglu(ones({2, 3}), ones({3})), "swiglu", "[2, 3]", "[3]", "same shape");
  EXPECT_ERROR_HAS(swiglu(ones({3}), ones({3}, {.dtype = DType::bf16})), "dtypes differ");
}

}  // namespace
}  // namespace cg
