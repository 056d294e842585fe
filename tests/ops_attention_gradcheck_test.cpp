// Why this file exists: the fused attention op's hand-written backward (probabilities
// recomputed from the saved logsumexp) checked against finite differences in f64, for
// q, k and v, under every mask kind (the DFlash rule full and sliding), grouped-query
// heads, strided inputs and odd sizes.
#include <gtest/gtest.h>

#include "ops/ops.h"
#include "tests/attention_test_util.h"
#include "tests/gradcheck.h"

namespace cg {
namespace {

using testing::make_input;
using V = std::vector<Tensor>;

Tensor sdpa(const V& x, const AttentionMask& mask = AttentionMask::none()) {
  return scaled_dot_product_attention(x[0], x[1], x[2], mask);
}

TEST(OpsAttentionGradcheck, NoMask) {
  Tensor q = make_input({2, 2, 3, 4}, 1), k = make_input({2, 2, 5, 4}, 2),
         v = make_input({2, 2, 5, 4}, 3);
  EXPECT_GRADCHECK([](const V& x) { return sdpa(x); }, q, k, v);
}

TEST(OpsAttentionGradcheck, CustomScale) {
  Tensor q = make_input({1, 2, 3, 4}, 4), k = make_input({1, 2, 4, 4}, 5),
         v = make_input({1, 2, 4, 4}, 6);
  EXPECT_GRADCHECK(
      [](const V& x) {
        return scaled_dot_product_attention(x[0], x[1], x[2], AttentionMask::none(), 0.7);
      },
      q, k, v);
}

TEST(OpsAttentionGradcheck, Causal) {
  // Sq == Sk, Sq < Sk (bottom-right aligned) and Sq > Sk (first rows see nothing).
  for (auto [sq, sk] : {std::pair<int64_t, int64_t>{4, 4}, {3, 6}, {5, 3}}) {
    Tensor q = make_input({1, 2, sq, 3}, 7), k = make_input({1, 2, sk, 3}, 8),
           v = make_input({1, 2, sk, 3}, 9);
    SCOPED_TRACE(::testing::Message() << "Sq=" << sq << " Sk=" << sk);
    EXPECT_GRADCHECK([](const V& x) { return sdpa(x, AttentionMask::causal()); }, q, k, v);
  }
}

TEST(OpsAttentionGradcheck, BoolMask) {
  // A random [B, Hq, Sq, Sk] mask with one all-false row, and a broadcast [Sq, Sk] one.
  Generator gen(10);
  std::vector<double> bits(2 * 2 * 3 * 5);
  for (double& b : bits) b = gen.uniform() < 0.6 ? 1.0 : 0.0;
  for (int j = 0; j < 5; ++j) bits[5 + j] = 0.0;  // row (0, 0, 1) sees nothing
  Tensor full = from_vector(bits, {2, 2, 3, 5}, {.dtype = DType::boolean});
  Tensor rows =
      from_vector({1, 0, 1, 1, 0, 0, 1, 1, 0, 1, 1, 1, 1, 0, 0}, {3, 5}, {.dtype = DType::boolean});
  Tensor q = make_input({2, 2, 3, 4}, 11), k = make_input({2, 2, 5, 4}, 12),
         v = make_input({2, 2, 5, 4}, 13);
  EXPECT_GRADCHECK([&](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], full); },
                   q, k, v);
  EXPECT_GRADCHECK([&](const V& x) { return scaled_dot_product_attention(x[0], x[1], x[2], rows); },
                   q, k, v);
}

TEST(OpsAttentionGradcheck, DflashBlocks) {
  // S = 5 context keys, N = 3 blocks of 2; per-batch anchors with a padded block (-1),
  // an anchor of 0 (own block only) and one via the padded flag.
  const int64_t S = 5, Bs = 2, N = 3;
  Tensor anchors = from_ints({2, 0, 5, 3, -1, 4}, {2, N});
  Tensor padded = from_vector({0, 0, 0, 0, 0, 1}, {2, N}, {.dtype = DType::boolean});
  Tensor q = make_input({2, 2, N * Bs, 3}, 14), k = make_input({2, 1, S + N * Bs, 3}, 15),
         v = make_input({2, 1, S + N * Bs, 3}, 16);
  EXPECT_GRADCHECK(
      [&](const V& x) { return sdpa(x, AttentionMask::dflash_blocks(S, Bs, anchors, padded)); }, q,
      k, v);
  Tensor shared = from_ints({1, 4, 3}, {N});
  EXPECT_GRADCHECK([&](const V& x) { return sdpa(x, AttentionMask::dflash_blocks(S, Bs, shared)); },
                   q, k, v);
}

TEST(OpsAttentionGradcheck, DflashSlidingWindow) {
  // The sliding rule, W = 2 < block 3 (the in-block causal window cuts), per-batch anchors
  // at 0, at the end, and padded.
  const int64_t S = 5, Bs = 3, N = 2;
  Tensor anchors = from_ints({0, 5, 3, -1}, {2, N});
  Tensor q = make_input({2, 2, N * Bs, 3}, 40), k = make_input({2, 1, S + N * Bs, 3}, 41),
         v = make_input({2, 1, S + N * Bs, 3}, 42);
  EXPECT_GRADCHECK(
      [&](const V& x) {
        return sdpa(x, AttentionMask::dflash_blocks(S, Bs, anchors, Tensor(), 2));
      },
      q, k, v);
}

TEST(OpsAttentionGradcheck, GroupedQueryHeads) {
  for (int64_t hkv : {2, 1}) {
    SCOPED_TRACE(::testing::Message() << "Hq=4 Hkv=" << hkv);
    Tensor q = make_input({2, 4, 3, 3}, 17), k = make_input({2, hkv, 4, 3}, 18),
           v = make_input({2, hkv, 4, 3}, 19);
    EXPECT_GRADCHECK([](const V& x) { return sdpa(x); }, q, k, v);
    EXPECT_GRADCHECK([](const V& x) { return sdpa(x, AttentionMask::causal()); }, q, k, v);
  }
}

TEST(OpsAttentionGradcheck, NonContiguousInputs) {
  // q, v given as [B, S, H, hd] and transposed; k sliced with a step along the sequence.
  Tensor q = make_input({2, 3, 2, 4}, 20), k = make_input({2, 2, 9, 4}, 21),
         v = make_input({2, 5, 2, 4}, 22);
  EXPECT_GRADCHECK(
      [](const V& x) {
        return scaled_dot_product_attention(transpose(x[0], 1, 2), slice(x[1], 2, 0, 9, 2),
                                            transpose(x[2], 1, 2), AttentionMask::causal());
      },
      q, k, v);
}

TEST(OpsAttentionGradcheck, OddSizes) {
  // One key; one query; hd = 1; three query heads on one kv head.
  Tensor q = make_input({1, 3, 5, 1}, 23), k = make_input({1, 1, 1, 1}, 24),
         v = make_input({1, 1, 1, 1}, 25);
  EXPECT_GRADCHECK([](const V& x) { return sdpa(x); }, q, k, v);
  Tensor q1 = make_input({3, 1, 1, 5}, 26), k1 = make_input({3, 1, 7, 5}, 27),
         v1 = make_input({3, 1, 7, 5}, 28);
  EXPECT_GRADCHECK([](const V& x) { return sdpa(x, AttentionMask::causal()); }, q1, k1, v1);
}

TEST(OpsAttentionGradcheck, OnlySomeInputsNeedGrad) {
  Tensor q = make_input({1, 2, 3, 4}, 29), k = make_input({1, 2, 4, 4}, 30),
         v = make_input({1, 2, 4, 4}, 31);
  Tensor k_const = k.detach(), v_const = v.detach();
  EXPECT_GRADCHECK([&](const V& x) { return scaled_dot_product_attention(x[0], k_const, v_const); },
                   q);
  Tensor q_const = q.detach();
  EXPECT_GRADCHECK([&](const V& x) { return scaled_dot_product_attention(q_const, x[0], v_const); },
                   k);
}

}  // namespace
}  // namespace cg
