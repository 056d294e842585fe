// Why this file exists: the sliding-window DFlash rule (AttentionMask::dflash_blocks with
// sliding_window W: the drafter's sliding layers) checked on the CPU against the dense
// mask written from its definition (tests/attention_test_util.h), values and gradients,
// over the edge cases the kernels get wrong first: anchors at 0 and at the end, repeated
// anchors, padded blocks, windows wider than the context, windows narrower than a block
// (the in-block causal window cuts too), W = 1, per-batch anchors. Also the rule's
// arguments: a negative window is refused and str() names the window; and whether the
// resolved anchors ascend, which picks the CUDA forward's dense tiles.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "ops/attention_mask.h"
#include "ops/ops.h"
#include "tests/attention_test_util.h"

namespace cg {
namespace {

using testing::AttentionRun;
using testing::expect_runs_equal;
using testing::max_abs_diff;
using testing::reference_attention;
using testing::run_with_grads;

// One sliding-rule problem: B batch rows of N blocks of Bs slots over S context keys.
// anchors: [N] when !per_batch, else [B, N]; negative = padded. padded_flags (optional,
// anchors' shape) pads blocks whose anchor is valid.
struct SlidingCase {
  std::string name;
  int64_t S = 0, Bs = 0, N = 0, B = 1, W = 0;
  std::vector<int64_t> anchors;
  bool per_batch = false;
  std::vector<double> padded_flags;
};

std::vector<SlidingCase> sliding_cases() {
  return {
      {"anchors at 0 and at the end", 10, 4, 3, 1, 4, {0, 10, 5}, false, {}},
      {"repeated anchors, W < block", 9, 4, 4, 1, 3, {6, 6, 6, 2}, false, {}},
      {"padded blocks, per-batch anchors",
       11,
       3,
       3,
       2,
       5,
       {7, -1, 0, 11, 4, -3},
       true,
       {0, 0, 1, 0, 0, 0}},
      {"window wider than the context", 7, 3, 3, 2, 100, {3, 7, 0, 1, 5, 7}, true, {}},
      {"W = 1: each slot sees itself only", 8, 3, 3, 1, 1, {2, 8, 0}, false, {}},
      {"W = 2 < block 5", 12, 5, 3, 2, 2, {12, 1, 6, 0, 9, 9}, true, {}},
      {"window = block: context cut per slot", 13, 4, 2, 1, 4, {13, 6}, false, {}},
  };
}

Shape anchor_shape(const SlidingCase& c) { return c.per_batch ? Shape{c.B, c.N} : Shape{c.N}; }

AttentionMask sliding_mask(const SlidingCase& c) {
  Tensor anchors = from_ints(c.anchors, anchor_shape(c));
  Tensor padded;
  if (!c.padded_flags.empty()) {
    padded = from_vector(c.padded_flags, anchor_shape(c), {.dtype = DType::boolean});
  }
  return AttentionMask::dflash_blocks(c.S, c.Bs, anchors, padded, c.W);
}

// The definition's view of the case: padded flags become negative anchors.
testing::AllowedFn sliding_allowed(const SlidingCase& c) {
  std::vector<int64_t> a = c.anchors;
  for (size_t i = 0; i < c.padded_flags.size(); ++i) {
    if (c.padded_flags[i] != 0) a[i] = -1;
  }
  return testing::allow_dflash_sliding(c.S, c.Bs, a, c.N, c.per_batch, c.W);
}

TEST(OpsAttentionSliding, ForwardMatchesReference) {
  for (const SlidingCase& c : sliding_cases()) {
    SCOPED_TRACE(c.name);
    const int64_t Sq = c.N * c.Bs, Sk = c.S + c.N * c.Bs;
    Tensor q = testing::rand_f64({c.B, 4, Sq, 5}, 50), k = testing::rand_f64({c.B, 2, Sk, 5}, 51),
           v = testing::rand_f64({c.B, 2, Sk, 5}, 52);
    const auto ref = reference_attention(q, k, v, sliding_allowed(c), 0.5);
    const auto out = scaled_dot_product_attention(q, k, v, sliding_mask(c), 0.5).to_vector();
    EXPECT_LE(max_abs_diff(out, ref), 1e-12);
  }
}

TEST(OpsAttentionSliding, RuleEqualsDenseMaskValuesAndGradients) {
  for (const SlidingCase& c : sliding_cases()) {
    SCOPED_TRACE(c.name);
    const int64_t Sq = c.N * c.Bs, Sk = c.S + c.N * c.Bs;
    const Shape qs{c.B, 4, Sq, 5}, ks{c.B, 2, Sk, 5};
    const AttentionMask rule = sliding_mask(c);
    const Tensor dense = testing::dense_mask(sliding_allowed(c), c.B, Sq, Sk);
    // Every case hides pairs the full rule shows (else it would not test the window).
    std::vector<int64_t> full_anchors = c.anchors;
    for (size_t i = 0; i < c.padded_flags.size(); ++i) {
      if (c.padded_flags[i] != 0) full_anchors[i] = -1;
    }
    const Tensor full = testing::dense_mask(
        testing::allow_dflash(c.S, c.Bs, full_anchors, c.N, c.per_batch), c.B, Sq, Sk);
    EXPECT_LT(sum(to(dense, DType::f64)).item(), sum(to(full, DType::f64)).item());
    const AttentionRun by_rule =
        run_with_grads([&](const Tensor& q, const Tensor& k,
                           const Tensor& v) { return scaled_dot_product_attention(q, k, v, rule); },
                       qs, ks, 60);
    const AttentionRun by_dense = run_with_grads(
        [&](const Tensor& q, const Tensor& k, const Tensor& v) {
          return scaled_dot_product_attention(q, k, v, dense);
        },
        qs, ks, 60);
    expect_runs_equal(by_rule, by_dense, 1e-12);
  }
}

// The reference itself, at a few keys worked out by hand: block anchored at 5, Bs 3, W 3.
TEST(OpsAttentionSliding, ReferenceRuleByHand) {
  const auto allowed = testing::allow_dflash_sliding(6, 3, {5}, 1, false, 3);
  const int64_t S = 6;
  // Slot 0 (position 5) sees context 3, 4 and itself; slot 2 (position 7) sees slots 0..2.
  EXPECT_FALSE(allowed(0, 0, 0, 2));
  EXPECT_TRUE(allowed(0, 0, 0, 3));
  EXPECT_TRUE(allowed(0, 0, 0, 4));
  EXPECT_FALSE(allowed(0, 0, 0, 5));  // context key at the anchor: never
  EXPECT_TRUE(allowed(0, 0, 0, S + 0));
  EXPECT_FALSE(allowed(0, 0, 0, S + 1));  // causal inside the block
  EXPECT_FALSE(allowed(0, 0, 2, 4));      // position 4 is 3 behind position 7
  EXPECT_TRUE(allowed(0, 0, 2, S + 0));
  EXPECT_TRUE(allowed(0, 0, 2, S + 2));
}

// A window at least as long as context + block is the full rule's context part with a
// causal block: equal to a dense mask built from allow_dflash restricted to j <= slot.
TEST(OpsAttentionSliding, HugeWindowIsFullContextWithCausalBlock) {
  const int64_t S = 9, Bs = 3, N = 3;
  const std::vector<int64_t> a = {4, 0, 9};
  const auto full = testing::allow_dflash(S, Bs, a, N, false);
  const testing::AllowedFn causal_block = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    return full(b, h, i, j) && (j < S || (j - S) % Bs <= i % Bs);
  };
  Tensor q = testing::rand_f64({1, 2, N * Bs, 4}, 70),
         k = testing::rand_f64({1, 2, S + N * Bs, 4}, 71),
         v = testing::rand_f64({1, 2, S + N * Bs, 4}, 72);
  const auto out =
      scaled_dot_product_attention(
          q, k, v, AttentionMask::dflash_blocks(S, Bs, from_ints(a, {N}), Tensor(), S + Bs))
          .to_vector();
  EXPECT_LE(max_abs_diff(out, reference_attention(q, k, v, causal_block, 0.5)), 1e-12);
}

TEST(OpsAttentionSliding, ArgumentsAndDescription) {
  Tensor a = from_ints({1, 2}, {2});
  EXPECT_THROW(AttentionMask::dflash_blocks(4, 3, a, Tensor(), -1), Error);
  try {
    AttentionMask::dflash_blocks(4, 3, a, Tensor(), -5);
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("sliding_window must be >= 0"), std::string::npos)
        << e.what();
  }
  const AttentionMask sliding = AttentionMask::dflash_blocks(4, 3, a, Tensor(), 2048);
  EXPECT_EQ(sliding.sliding_window(), 2048);
  EXPECT_NE(sliding.str().find("sliding_window=2048"), std::string::npos) << sliding.str();
  const AttentionMask full = AttentionMask::dflash_blocks(4, 3, a);
  EXPECT_EQ(full.sliding_window(), 0);
  EXPECT_EQ(full.str().find("sliding_window"), std::string::npos) << full.str();
}

// ResolvedAttentionMask::anchors_ascend: per batch row, padded blocks (negative or flagged)
// skipped, equal anchors allowed; one row out of order is enough to say no.
TEST(OpsAttentionSliding, ResolvedAnchorsAscend) {
  // (B: the batch; anchors of shape [N] or [1, N] serve every batch row)
  auto ascend = [](std::vector<int64_t> anchors, Shape shape, std::vector<double> padded = {},
                   int64_t B = 0) {
    Tensor p;
    if (!padded.empty()) p = from_vector(padded, shape, {.dtype = DType::boolean});
    const AttentionMask m = AttentionMask::dflash_blocks(12, 2, from_ints(anchors, shape), p);
    const int64_t N = shape.back();
    if (B == 0) B = shape.size() == 2 ? shape[0] : 1;
    return resolve_attention_mask(m, B, 1, N * 2, 12 + N * 2, kCPU, "test").anchors_ascend;
  };
  EXPECT_TRUE(ascend({0, 3, 3, 12}, {4}));
  EXPECT_FALSE(ascend({0, 5, 3, 12}, {4}));
  EXPECT_TRUE(ascend({2, -1, 5, 9}, {4}));                 // a padded block in between
  EXPECT_FALSE(ascend({5, -1, 3}, {3}));                   // which does not start over
  EXPECT_TRUE(ascend({2, 9, 5, 10}, {4}, {0, 0, 1, 0}));   // flagged padded: 5 is skipped
  EXPECT_FALSE(ascend({2, 9, 5, 10}, {4}, {0, 0, 0, 1}));  // 9 then 5
  EXPECT_TRUE(ascend({1, 4, 0, 2}, {2, 2}));               // each batch row starts over
  EXPECT_FALSE(ascend({1, 4, 2, 0}, {2, 2}));
  EXPECT_TRUE(ascend({0, 2, 6}, {3}, {}, 3));  // [N] and [1, N] with three batch rows
  EXPECT_FALSE(ascend({0, 6, 2}, {1, 3}, {}, 3));
}

}  // namespace
}  // namespace cg
