// Why this file exists: the fused attention op checked for what gradcheck cannot see:
// its values against an explicit-matrix reference for every mask kind; the DFlash rule
// equal to its dense mask and grouped-query heads equal to repeated heads (values and
// gradients); fully masked rows; bf16/f16 accuracy; the allocator's peak with 4K context
// keys; what the node saves; and the errors bad inputs raise.
#include <gtest/gtest.h>

#include <cmath>

#include "core/caching_allocator.h"
#include "ops/ops.h"
#include "tests/attention_test_util.h"

namespace cg {
namespace {

using testing::AttentionRun;
using testing::expect_runs_equal;
using testing::max_abs;
using testing::max_abs_diff;
using testing::rand_f64;
using testing::reference_attention;
using testing::run_with_grads;

// ---- forward against the explicit reference ------------------------------------------

TEST(OpsAttentionForward, NoMaskMatchesReference) {
  Tensor q = rand_f64({2, 3, 5, 4}, 1), k = rand_f64({2, 3, 7, 4}, 2),
         v = rand_f64({2, 3, 7, 4}, 3);
  const auto ref = reference_attention(q, k, v, testing::allow_all(), 0.5);
  EXPECT_LE(max_abs_diff(scaled_dot_product_attention(q, k, v).to_vector(), ref), 1e-12);
  // f32 computes in f32.
  Tensor out32 =
      scaled_dot_product_attention(to(q, DType::f32), to(k, DType::f32), to(v, DType::f32));
  EXPECT_EQ(out32.dtype(), DType::f32);
  EXPECT_LE(max_abs_diff(out32.to_vector(), ref), 1e-5);
}

TEST(OpsAttentionForward, ScaleOverride) {
  Tensor q = rand_f64({1, 2, 3, 8}, 4), k = rand_f64({1, 2, 6, 8}, 5),
         v = rand_f64({1, 2, 6, 8}, 6);
  const auto ref = reference_attention(q, k, v, testing::allow_all(), 1.7);
  EXPECT_LE(max_abs_diff(
                scaled_dot_product_attention(q, k, v, AttentionMask::none(), 1.7).to_vector(), ref),
            1e-12);
}

TEST(OpsAttentionForward, CausalMatchesReferenceBottomRightAligned) {
  for (auto [sq, sk] : {std::pair<int64_t, int64_t>{6, 6}, {3, 8}, {7, 4}}) {
    SCOPED_TRACE(::testing::Message() << "Sq=" << sq << " Sk=" << sk);
    Tensor q = rand_f64({2, 2, sq, 4}, 7), k = rand_f64({2, 2, sk, 4}, 8),
           v = rand_f64({2, 2, sk, 4}, 9);
    const auto ref = reference_attention(q, k, v, testing::allow_causal(sq, sk), 0.5);
    const auto out = scaled_dot_product_attention(q, k, v, AttentionMask::causal()).to_vector();
    EXPECT_LE(max_abs_diff(out, ref), 1e-12);
  }
  // With Sq < Sk the last query sees every key: the same row as with no mask.
  Tensor q = rand_f64({1, 1, 2, 4}, 10), k = rand_f64({1, 1, 5, 4}, 11),
         v = rand_f64({1, 1, 5, 4}, 12);
  const auto causal = scaled_dot_product_attention(q, k, v, AttentionMask::causal()).to_vector();
  const auto full = scaled_dot_product_attention(q, k, v).to_vector();
  for (int e = 4; e < 8; ++e) EXPECT_NEAR(causal[e], full[e], 1e-14);
}

TEST(OpsAttentionForward, BoolMaskMatchesReference) {
  const int64_t B = 2, H = 3, Sq = 4, Sk = 6;
  Generator gen(13);
  std::vector<double> bits(B * H * Sq * Sk);
  for (double& b : bits) b = gen.uniform() < 0.5 ? 1.0 : 0.0;
  Tensor q = rand_f64({B, H, Sq, 5}, 14), k = rand_f64({B, H, Sk, 5}, 15),
         v = rand_f64({B, H, Sk, 5}, 16);
  const double scale = 1.0 / std::sqrt(5.0);
  // Full [B, H, Sq, Sk], and broadcast [B, 1, Sq, Sk] and [Sq, Sk] masks.
  Tensor full = from_vector(bits, {B, H, Sq, Sk}, {.dtype = DType::boolean});
  auto at = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    return bits[((b * H + h) * Sq + i) * Sk + j] != 0.0;
  };
  EXPECT_LE(max_abs_diff(scaled_dot_product_attention(q, k, v, full).to_vector(),
                         reference_attention(q, k, v, at, scale)),
            1e-12);
  Tensor per_batch = slice(full, 1, 0, 1);  // [B, 1, Sq, Sk], a strided view
  auto at_h0 = [&](int64_t b, int64_t, int64_t i, int64_t j) { return at(b, 0, i, j); };
  EXPECT_LE(max_abs_diff(scaled_dot_product_attention(q, k, v, per_batch).to_vector(),
                         reference_attention(q, k, v, at_h0, scale)),
            1e-12);
  Tensor shared = reshape(slice(per_batch, 0, 0, 1), {Sq, Sk});
  auto at_b0 = [&](int64_t, int64_t, int64_t i, int64_t j) { return at(0, 0, i, j); };
  EXPECT_LE(max_abs_diff(scaled_dot_product_attention(q, k, v, shared).to_vector(),
                         reference_attention(q, k, v, at_b0, scale)),
            1e-12);
}

TEST(OpsAttentionForward, DflashMatchesReference) {
  const int64_t S = 9, Bs = 3, N = 4;
  const std::vector<int64_t> a = {4, 0, 9, -1, 7, 2, 1, 5};  // [B=2, N]; -1 = padded
  Tensor q = rand_f64({2, 4, N * Bs, 4}, 17), k = rand_f64({2, 2, S + N * Bs, 4}, 18),
         v = rand_f64({2, 2, S + N * Bs, 4}, 19);
  const auto ref = reference_attention(q, k, v, testing::allow_dflash(S, Bs, a, N, true), 0.5);
  const auto out = scaled_dot_product_attention(
                       q, k, v, AttentionMask::dflash_blocks(S, Bs, from_ints(a, {2, N})))
                       .to_vector();
  EXPECT_LE(max_abs_diff(out, ref), 1e-12);
}

// ---- equivalences, values and gradients ----------------------------------------------

TEST(OpsAttentionDflash, RuleEqualsDenseMask) {
  const int64_t S = 11, Bs = 4, N = 3;
  const std::vector<int64_t> a = {6, 11, 0, -1, 3, 8};  // [2, N]
  Tensor anchors = from_ints(a, {2, N});
  Tensor dense =
      testing::dense_mask(testing::allow_dflash(S, Bs, a, N, true), 2, N * Bs, S + N * Bs);
  const Shape qs{2, 4, N * Bs, 5}, ks{2, 2, S + N * Bs, 5};
  const AttentionRun rule = run_with_grads(
      [&](const Tensor& q, const Tensor& k, const Tensor& v) {
        return scaled_dot_product_attention(q, k, v, AttentionMask::dflash_blocks(S, Bs, anchors));
      },
      qs, ks, 20);
  const AttentionRun masked =
      run_with_grads([&](const Tensor& q, const Tensor& k,
                         const Tensor& v) { return scaled_dot_product_attention(q, k, v, dense); },
                     qs, ks, 20);
  expect_runs_equal(rule, masked, 1e-12);
}

TEST(OpsAttentionGqa, EqualsRepeatedHeads) {
  for (int64_t hkv : {2, 1}) {
    SCOPED_TRACE(::testing::Message() << "Hq=4 Hkv=" << hkv);
    const int64_t G = 4 / hkv;
    const Shape qs{2, 4, 5, 3}, ks{2, hkv, 6, 3};
    auto repeat = [&](const Tensor& t) {  // [B, Hkv, Sk, hd] -> [B, Hkv * G, Sk, hd]
      return reshape(expand(unsqueeze(t, 2), {2, hkv, G, 6, 3}), {2, hkv * G, 6, 3});
    };
    const AttentionRun grouped = run_with_grads(
        [&](const Tensor& q, const Tensor& k, const Tensor& v) {
          return scaled_dot_product_attention(q, k, v, AttentionMask::causal());
        },
        qs, ks, 30);
    // expand's backward sums the repeated heads' gradients back over each group.
    const AttentionRun repeated = run_with_grads(
        [&](const Tensor& q, const Tensor& k, const Tensor& v) {
          return scaled_dot_product_attention(q, repeat(k), repeat(v), AttentionMask::causal());
        },
        qs, ks, 30);
    expect_runs_equal(grouped, repeated, 1e-12);
  }
}

// ---- rows that see nothing ------------------------------------------------------------

TEST(OpsAttentionMasked, FullyMaskedRowsAreZeroWithoutNaN) {
  const int64_t S = 6, Bs = 2, N = 3;
  // Block 1 padded by a negative anchor, block 2 by the flag.
  Tensor anchors = from_ints({3, -5, 4}, {N});
  Tensor padded = from_vector({0, 0, 1}, {N}, {.dtype = DType::boolean});
  Tensor q = rand_f64({1, 2, N * Bs, 4}, 40, true), k = rand_f64({1, 2, S + N * Bs, 4}, 41, true),
         v = rand_f64({1, 2, S + N * Bs, 4}, 42, true);
  Tensor out =
      scaled_dot_product_attention(q, k, v, AttentionMask::dflash_blocks(S, Bs, anchors, padded));
  out.backward(rand_f64(out.shape(), 43));
  const auto o = out.to_vector(), dq = q.grad().to_vector(), dk = k.grad().to_vector(),
             dv = v.grad().to_vector();
  for (double x : o) EXPECT_FALSE(std::isnan(x));
  for (double x : dq) EXPECT_FALSE(std::isnan(x));
  for (double x : dk) EXPECT_FALSE(std::isnan(x));
  for (int64_t h = 0; h < 2; ++h) {
    for (int64_t i = 0; i < N * Bs; ++i) {
      const bool padded_row = i / Bs >= 1;
      for (int64_t e = 0; e < 4; ++e) {
        const int64_t at = (h * N * Bs + i) * 4 + e;
        if (padded_row) {
          EXPECT_EQ(o[at], 0.0);
          EXPECT_EQ(dq[at], 0.0);
        } else {
          EXPECT_NE(o[at], 0.0);
        }
      }
    }
    // The padded blocks' own keys are seen by nobody: zero dk, dv.
    for (int64_t j = S + Bs; j < S + N * Bs; ++j) {
      for (int64_t e = 0; e < 4; ++e) {
        EXPECT_EQ(dk[(h * (S + N * Bs) + j) * 4 + e], 0.0);
        EXPECT_EQ(dv[(h * (S + N * Bs) + j) * 4 + e], 0.0);
      }
    }
  }
  // An all-false boolean mask: every row 0, every gradient 0.
  Tensor none = zeros({3, S + N * Bs}, {.dtype = DType::boolean});
  Tensor q2 = rand_f64({1, 2, 3, 4}, 44, true);
  Tensor out2 = scaled_dot_product_attention(q2, k, v, none);
  out2.backward(ones_like(out2));
  EXPECT_EQ(max_abs(out2.to_vector()), 0.0);
  EXPECT_EQ(max_abs(q2.grad().to_vector()), 0.0);
  // Zero keys at all.
  Tensor k0 = zeros({1, 2, 0, 4}, {.dtype = DType::f64});
  EXPECT_EQ(max_abs(scaled_dot_product_attention(q2, k0, k0).to_vector()), 0.0);
}

// ---- 16-bit storage ------------------------------------------------------------------

// Stated tolerance: a bf16 (f16) output is within 2^-8 (2^-10) relative of the fp32
// result on the same rounded inputs (one output rounding), and within 3e-2 (5e-3)
// absolute of fp32 on the unrounded inputs (q, k, v rounding as well).
TEST(OpsAttentionHalf, Bf16AndF16WithinToleranceOfF32) {
  const Shape qs{2, 4, 9, 32}, ks{2, 2, 13, 32};
  Tensor q = randn(qs, {}, nullptr), k = randn(ks), v = randn(ks);
  const auto exact = scaled_dot_product_attention(q, k, v, AttentionMask::causal()).to_vector();
  for (auto [dt, rel, abs_tol] :
       {std::tuple{DType::bf16, 1.0 / 256, 3e-2}, std::tuple{DType::f16, 1.0 / 1024, 5e-3}}) {
    SCOPED_TRACE(dtype_name(dt));
    Tensor qh = to(q, dt), kh = to(k, dt), vh = to(v, dt);
    Tensor out = scaled_dot_product_attention(qh, kh, vh, AttentionMask::causal());
    ASSERT_EQ(out.dtype(), dt);
    const auto o = out.to_vector();
    const auto same_inputs =
        scaled_dot_product_attention(to(qh, DType::f32), to(kh, DType::f32), to(vh, DType::f32),
                                     AttentionMask::causal())
            .to_vector();
    for (size_t i = 0; i < o.size(); ++i) {
      ASSERT_LE(std::abs(o[i] - same_inputs[i]), rel * std::abs(same_inputs[i]) + 1e-7) << i;
    }
    EXPECT_LE(max_abs_diff(o, exact), abs_tol);
    // Backward runs in fp32 and rounds once: gradients near fp32 ones (5% of their scale).
    Tensor q16 = qh.detach().requires_grad_(), k16 = kh.detach().requires_grad_();
    Tensor q32 = to(qh, DType::f32).requires_grad_(), k32 = to(kh, DType::f32).requires_grad_();
    Tensor g = randn(out.shape());
    scaled_dot_product_attention(q16, k16, vh, AttentionMask::causal()).backward(to(g, dt));
    scaled_dot_product_attention(q32, k32, to(vh, DType::f32), AttentionMask::causal())
        .backward(to(to(g, dt), DType::f32));
    EXPECT_EQ(q16.grad().dtype(), dt);
    EXPECT_LE(max_abs_diff(q16.grad().to_vector(), q32.grad().to_vector()),
              5e-2 * max_abs(q32.grad().to_vector()));
    EXPECT_LE(max_abs_diff(k16.grad().to_vector(), k32.grad().to_vector()),
              5e-2 * max_abs(k32.grad().to_vector()));
  }
}

// ---- memory -------------------------------------------------------------------------

// S = 4096 context keys, 64 blocks of 16: a score matrix would be Sq x Sk = 1024 x 5120
// per head (21 MB in f32, 42 MB for both heads). Forward plus backward must stay linear:
// outputs, lse, gradients and per-thread scratch, well under 1/8 of one head's scores.
TEST(OpsAttentionMemory, LargeContextPeakFarBelowScoreMatrix) {
  const int64_t S = 4096, Bs = 16, N = 64, hd = 16, Sq = N * Bs, Sk = S + N * Bs;
  std::vector<int64_t> a(N);
  for (int64_t b = 0; b < N; ++b) a[b] = (b * 61 + 17) % (S + 1);
  Tensor anchors = from_ints(a, {N});
  Tensor q = randn({1, 2, Sq, hd}).requires_grad_(), k = randn({1, 1, Sk, hd}).requires_grad_(),
         v = randn({1, 1, Sk, hd}).requires_grad_();
  Tensor g = randn({1, 2, Sq, hd});
  CachingAllocator& alloc = allocator_for(kCPU);
  alloc.reset_peak_stats();
  const int64_t before = alloc.stats().allocated_bytes.current;
  {
    Tensor out =
        scaled_dot_product_attention(q, k, v, AttentionMask::dflash_blocks(S, Bs, anchors));
    out.backward(g);
  }
  const int64_t peak = alloc.stats().allocated_bytes.peak - before;
  const int64_t scores_bytes = Sq * Sk * 4;
  RecordProperty("peak_bytes", std::to_string(peak));
  EXPECT_LT(peak, scores_bytes / 8)
      << "peak " << format_bytes(peak) << " vs one head's scores " << format_bytes(scores_bytes);
  // Spot-check a few rows against the reference (the full reference is too slow here).
  Tensor q_rows = slice(q.detach(), 2, Sq - 2 * Bs, Sq);  // the last two blocks
  const auto ref = reference_attention(
      q_rows, k.detach(), v.detach(),
      [&](int64_t, int64_t, int64_t i, int64_t j) {
        const int64_t block = N - 2 + i / Bs;
        return j < S ? j < a[block] : (j - S) / Bs == block;
      },
      0.25);
  NoGradGuard no_grad;
  Tensor out = scaled_dot_product_attention(q, k, v, AttentionMask::dflash_blocks(S, Bs, anchors));
  EXPECT_LE(max_abs_diff(slice(out, 2, Sq - 2 * Bs, Sq).to_vector(), ref), 1e-5);
}

TEST(OpsAttentionMemory, SavesInputsOutputAndLogsumexpOnly) {
  Tensor q = randn({2, 4, 32, 8}).requires_grad_(), k = randn({2, 2, 48, 8}).requires_grad_(),
         v = randn({2, 2, 48, 8}).requires_grad_();
  Tensor out = scaled_dot_product_attention(q, k, v, AttentionMask::causal());
  ASSERT_NE(out.grad_fn(), nullptr);
  EXPECT_EQ(out.grad_fn()->name(), "ScaledDotProductAttentionBackward");
  EXPECT_EQ(out.grad_fn()->saved_tensors().size(), 5u);
  const size_t lse_bytes = 2 * 4 * 32 * sizeof(float);
  EXPECT_EQ(out.grad_fn()->saved_bytes(),
            q.nbytes() + k.nbytes() + v.nbytes() + out.nbytes() + lse_bytes);
  // A dense mask is saved too (and counted).
  Tensor allowed = ones({32, 48}, {.dtype = DType::boolean});
  Tensor out2 = scaled_dot_product_attention(q, k, v, allowed);
  EXPECT_EQ(out2.grad_fn()->saved_bytes(),
            q.nbytes() + k.nbytes() + v.nbytes() + out2.nbytes() + lse_bytes + allowed.nbytes());
}

// ---- errors -------------------------------------------------------------------------

#define EXPECT_THROW_WITH(stmt, text)                                          \
  do {                                                                         \
    try {                                                                      \
      stmt;                                                                    \
      ADD_FAILURE() << "no error thrown; expected one mentioning: " << (text); \
    } catch (const Error& e) {                                                 \
      EXPECT_NE(e.message().find(text), std::string::npos) << e.message();     \
    }                                                                          \
  } while (0)

TEST(OpsAttentionErrors, BadShapesAndDtypes) {
  Tensor q = randn({1, 4, 3, 8}), k = randn({1, 2, 5, 8}), v = randn({1, 2, 5, 8});
  EXPECT_THROW_WITH(scaled_dot_product_attention(randn({4, 3, 8}), k, v), "must be 4-D");
  EXPECT_THROW_WITH(scaled_dot_product_attention(q, randn({1, 2, 5, 6}), randn({1, 2, 5, 6})),
                    "head dims differ");
  EXPECT_THROW_WITH(scaled_dot_product_attention(q, randn({1, 3, 5, 8}), randn({1, 3, 5, 8})),
                    "multiple of Hkv");
  EXPECT_THROW_WITH(scaled_dot_product_attention(q, k, randn({1, 2, 6, 8})), "same shape");
  EXPECT_THROW_WITH(scaled_dot_product_attention(q, randn({2, 2, 5, 8}), randn({2, 2, 5, 8})),
                    "batch sizes differ");
  EXPECT_THROW_WITH(scaled_dot_product_attention(q, to(k, DType::f64), v), "share a dtype");
  EXPECT_THROW_WITH(
      scaled_dot_product_attention(to(q, DType::i64), to(k, DType::i64), to(v, DType::i64)),
      "not supported");
  EXPECT_THROW_WITH(scaled_dot_product_attention(q, k, v, AttentionMask::none(), NAN),
                    "scale must be finite");
}

TEST(OpsAttentionErrors, BadMasks) {
  Tensor q = randn({2, 4, 3, 8}), k = randn({2, 2, 5, 8}), v = randn({2, 2, 5, 8});
  EXPECT_THROW_WITH(scaled_dot_product_attention(q, k, v, ones({3, 4}, {.dtype = DType::boolean})),
                    "doesn't broadcast");
  EXPECT_THROW_WITH(
      scaled_dot_product_attention(q, k, v, ones({3, 2, 3, 5}, {.dtype = DType::boolean})),
      "doesn't broadcast");
  EXPECT_THROW_WITH(
      scaled_dot_product_attention(q, k, v, ones({1, 1, 1, 3, 5}, {.dtype = DType::boolean})),
      "doesn't broadcast");
  EXPECT_THROW_WITH(scaled_dot_product_attention(q, k, v, ones({3, 5})), "must be bool");
  // dflash: 1 block of 3 queries needs Sk = S + 3; with S = 1: 4 keys, not 5.
  Tensor a1 = from_ints({1}, {1});
  EXPECT_THROW_WITH(scaled_dot_product_attention(q, k, v, AttentionMask::dflash_blocks(1, 3, a1)),
                    "Sk = S + N");
  EXPECT_THROW_WITH(  // 2 blocks of 3 = 6 queries, q has 3
      scaled_dot_product_attention(q, k, v,
                                   AttentionMask::dflash_blocks(2, 3, from_ints({1, 1}, {2}))),
      "Sq = N * block_size");
  EXPECT_THROW_WITH(  // anchor past the context
      scaled_dot_product_attention(q, k, v,
                                   AttentionMask::dflash_blocks(2, 3, from_ints({3}, {1}))),
      "past the context length");
  EXPECT_THROW_WITH(  // anchors for 3 batch rows, batch is 2
      scaled_dot_product_attention(
          q, k, v, AttentionMask::dflash_blocks(2, 3, from_ints({1, 1, 1}, {3, 1}))),
      "batch is 2");
  EXPECT_THROW_WITH(AttentionMask::dflash_blocks(2, 3, from_vector({1}, {1})), "must be i64");
  EXPECT_THROW_WITH(AttentionMask::dflash_blocks(2, 0, a1), "block_size must be > 0");
  EXPECT_THROW_WITH(AttentionMask::dflash_blocks(2, 3, a1, zeros({2}, {.dtype = DType::boolean})),
                    "one flag per block");
}

}  // namespace
}  // namespace cg
