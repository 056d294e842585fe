// Why this file exists: every differentiable op's backward checked against finite
// differences (tests/gradcheck.h), with shapes that broadcast, non-contiguous inputs
// (transposed, sliced with a step) and odd sizes.
#include <gtest/gtest.h>

#include "ops/ops.h"
#include "tests/gradcheck.h"

namespace cg {
namespace {

using testing::make_input;
using V = std::vector<Tensor>;

// ---- elementwise -------------------------------------------------------------------

TEST(OpsGradcheck, AddSubMulSameShape) {
  Tensor a = make_input({3, 5}, 1), b = make_input({3, 5}, 2);
  EXPECT_GRADCHECK([](const V& x) { return add(x[0], x[1]); }, a, b);
  EXPECT_GRADCHECK([](const V& x) { return sub(x[0], x[1]); }, a, b);
  EXPECT_GRADCHECK([](const V& x) { return mul(x[0], x[1]); }, a, b);
}

TEST(OpsGradcheck, BinaryOpsBroadcast) {
  // [3, 1, 4] with [2, 4] -> [3, 2, 4]; [2, 3, 4] with [4]; with a 0-d scalar.
  Tensor a = make_input({3, 1, 4}, 3), b = make_input({2, 4}, 4);
  EXPECT_GRADCHECK([](const V& x) { return add(x[0], x[1]); }, a, b);
  EXPECT_GRADCHECK([](const V& x) { return sub(x[0], x[1]); }, a, b);
  EXPECT_GRADCHECK([](const V& x) { return mul(x[0], x[1]); }, a, b);
  Tensor c = make_input({2, 3, 4}, 5), d = make_input({4}, 6), s = make_input({}, 7);
  EXPECT_GRADCHECK([](const V& x) { return mul(x[1], x[0]); }, c, d);
  EXPECT_GRADCHECK([](const V& x) { return sub(x[0], x[1]); }, c, s);
  EXPECT_GRADCHECK([](const V& x) { return mul(x[1], x[0]); }, c, s);
}

TEST(OpsGradcheck, BinaryOpsNonContiguous) {
  Tensor a = make_input({5, 3}, 8), b = make_input({3, 5}, 9), c = make_input({7, 5}, 10);
  // a^T (strides [1, 3]) with b; rows 1, 3, 5 of c (step 2) with a^T.
  EXPECT_GRADCHECK([](const V& x) { return mul(transpose(x[0], 0, 1), x[1]); }, a, b);
  EXPECT_GRADCHECK([](const V& x) { return add(slice(x[1], 0, 1, 6, 2), transpose(x[0], 0, 1)); },
                   a, c);
}

TEST(OpsGradcheck, UnaryOps) {
  Tensor a = make_input({4, 3}, 11, /*min_abs=*/0.05);
  EXPECT_GRADCHECK([](const V& x) { return neg(x[0]); }, a);
  EXPECT_GRADCHECK([](const V& x) { return scale(x[0], -2.5); }, a);
  EXPECT_GRADCHECK([](const V& x) { return add_scalar(x[0], 0.75); }, a);
  EXPECT_GRADCHECK([](const V& x) { return relu(x[0]); }, a);
  EXPECT_GRADCHECK([](const V& x) { return relu(transpose(x[0], 0, 1)); }, a);
}

TEST(OpsGradcheck, Operators) {
  Tensor a = make_input({2, 3}, 12), b = make_input({3}, 13);
  EXPECT_GRADCHECK([](const V& x) { return x[0] * x[1] - x[1] + 2.0 * x[0]; }, a, b);
  EXPECT_GRADCHECK([](const V& x) { return (1.0 - x[0]) / 4.0 + (-x[1]) * 3.0 + 1.0; }, a, b);
}

// ---- matmul ----------------------------------------------------------------------------

TEST(OpsGradcheck, Matmul2D) {
  Tensor a = make_input({3, 5}, 20), b = make_input({5, 4}, 21);
  EXPECT_GRADCHECK([](const V& x) { return matmul(x[0], x[1]); }, a, b);
  // Transposed operands (column-major maps) and a sliced one (row stride 2 * 5).
  Tensor at = make_input({5, 3}, 22), bt = make_input({4, 5}, 23), c = make_input({6, 5}, 24);
  EXPECT_GRADCHECK([](const V& x) { return matmul(transpose(x[0], 0, 1), transpose(x[1], 0, 1)); },
                   at, bt);
  EXPECT_GRADCHECK([](const V& x) { return matmul(slice(x[0], 0, 0, 6, 2), x[1]); }, c, b);
}

TEST(OpsGradcheck, MatmulBatchedAndBroadcast) {
  Tensor a = make_input({2, 3, 4}, 25), b = make_input({2, 4, 5}, 26);
  EXPECT_GRADCHECK([](const V& x) { return matmul(x[0], x[1]); }, a, b);
  // Batch dims broadcast: [2, 1, 3, 4] @ [3, 4, 2] -> [2, 3, 3, 2].
  Tensor c = make_input({2, 1, 3, 4}, 27), d = make_input({3, 4, 2}, 28);
  EXPECT_GRADCHECK([](const V& x) { return matmul(x[0], x[1]); }, c, d);
  // A weight shared over the batch ([2, 3, 4] @ [4, 5]) and a transposed batch.
  Tensor w = make_input({4, 5}, 29);
  EXPECT_GRADCHECK([](const V& x) { return matmul(x[0], x[1]); }, a, w);
  Tensor e = make_input({2, 3, 2}, 37);  // a^T per batch [2, 4, 3] @ [2, 3, 2]
  EXPECT_GRADCHECK([](const V& x) { return matmul(transpose(x[0], 1, 2), x[1]); }, a, e);
  // A batched right operand with a 2-D left one, and an expanded (stride 0) operand.
  Tensor m = make_input({2, 3}, 30);  // [2, 3] @ [2, 3, 4] -> [2, 2, 4]
  EXPECT_GRADCHECK([](const V& x) { return matmul(x[0], x[1]); }, m, a);
  Tensor r = make_input({1, 4}, 31);
  EXPECT_GRADCHECK([](const V& x) { return matmul(expand(x[0], {3, 4}), x[1]); }, r, w);
}

TEST(OpsGradcheck, MatmulOneDimensional) {
  Tensor v = make_input({4}, 32), u = make_input({4}, 33), m = make_input({4, 3}, 34),
         n = make_input({3, 4}, 35), batch = make_input({2, 4, 3}, 36);
  EXPECT_GRADCHECK([](const V& x) { return matmul(x[0], x[1]); }, v, m);      // [4]@[4,3]
  EXPECT_GRADCHECK([](const V& x) { return matmul(x[0], x[1]); }, n, v);      // [3,4]@[4]
  EXPECT_GRADCHECK([](const V& x) { return matmul(x[0], x[1]); }, v, u);      // dot
  EXPECT_GRADCHECK([](const V& x) { return matmul(x[0], x[1]); }, v, batch);  // [4]@[2,4,3]
  EXPECT_EQ(matmul(v, m).shape(), (Shape{3}));
  EXPECT_EQ(matmul(n, v).shape(), (Shape{3}));
  EXPECT_EQ(matmul(v, u).shape(), (Shape{}));
  EXPECT_EQ(matmul(v, batch).shape(), (Shape{2, 3}));
}

// ---- reductions ----------------------------------------------------------------------

TEST(OpsGradcheck, SumAndMean) {
  Tensor a = make_input({3, 4, 5}, 40);
  EXPECT_GRADCHECK([](const V& x) { return sum(x[0]); }, a);
  EXPECT_GRADCHECK([](const V& x) { return mean(x[0]); }, a);
  EXPECT_GRADCHECK([](const V& x) { return sum(x[0], {1}); }, a);
  EXPECT_GRADCHECK([](const V& x) { return sum(x[0], {0, -1}, true); }, a);
  EXPECT_GRADCHECK([](const V& x) { return mean(x[0], {2}); }, a);
  EXPECT_GRADCHECK([](const V& x) { return mean(x[0], {0, 2}, true); }, a);
  EXPECT_GRADCHECK([](const V& x) { return sum(transpose(x[0], 0, 2), {1}); }, a);
}

// ---- views and conversions -----------------------------------------------------------

TEST(OpsGradcheck, ReshapeViewTransposePermute) {
  Tensor a = make_input({2, 3, 4}, 50);
  EXPECT_GRADCHECK([](const V& x) { return reshape(x[0], {6, 4}); }, a);
  EXPECT_GRADCHECK([](const V& x) { return reshape(x[0], {-1}); }, a);
  EXPECT_GRADCHECK([](const V& x) { return view(x[0], {4, 6}); }, a);
  EXPECT_GRADCHECK([](const V& x) { return transpose(x[0], 0, 2); }, a);
  EXPECT_GRADCHECK([](const V& x) { return permute(x[0], {2, 0, 1}); }, a);
  // reshape of a non-contiguous tensor copies; its gradient must still come back.
  EXPECT_GRADCHECK([](const V& x) { return reshape(transpose(x[0], 1, 2), {2, 12}); }, a);
  EXPECT_GRADCHECK([](const V& x) { return squeeze(unsqueeze(x[0], 1), 1); }, a);
  EXPECT_GRADCHECK(
      [](const V& x) {
        return contiguous(transpose(reshape(x[0], {3, 8}), 0, 1));
      },
      a);
}

TEST(OpsGradcheck, NarrowSliceExpand) {
  Tensor a = make_input({5, 7}, 51), b = make_input({3, 1}, 52);
  EXPECT_GRADCHECK([](const V& x) { return narrow(x[0], 1, 2, 3); }, a);
  EXPECT_GRADCHECK([](const V& x) { return narrow(x[0], 0, -3, 2); }, a);
  EXPECT_GRADCHECK([](const V& x) { return slice(x[0], 1, 1, 7, 3); }, a);
  EXPECT_GRADCHECK([](const V& x) { return slice(x[0], 0, 0, 100); }, a);  // end clamps
  EXPECT_GRADCHECK([](const V& x) { return expand(x[0], {3, 6}); }, b);
  EXPECT_GRADCHECK([](const V& x) { return expand(x[0], {2, 3, 4}); }, b);
}

TEST(OpsViews, ShareStorageAndSaveNothing) {
  Tensor a = make_input({4, 6}, 53);
  for (const Tensor& v : {reshape(a, {6, 4}), view(a, {24}), transpose(a, 0, 1), permute(a, {1, 0}),
                          narrow(a, 0, 1, 2), slice(a, 1, 0, 6, 2), expand(a, {4, 6})}) {
    EXPECT_EQ(v.storage().get(), a.storage().get());
    ASSERT_TRUE(v.grad_fn());
    EXPECT_EQ(v.grad_fn()->saved_bytes(), 0u) << v.grad_fn()->name();
  }
  // Already contiguous / same dtype / same device: the tensor itself.
  EXPECT_TRUE(contiguous(a).is_same(a));
  EXPECT_TRUE(to(a, DType::f64).is_same(a));
  EXPECT_TRUE(to(a, kCPU).is_same(a));
}

TEST(OpsConvert, ToDtypeBackwardConvertsBack) {
  Generator gen(54);
  Tensor x = randn({3, 4}, {}, &gen).requires_grad_();  // f32
  Tensor w = randn({3, 4}, {.dtype = DType::f64}, &gen);
  Tensor y = mul(to(x, DType::f64), w);
  EXPECT_EQ(y.dtype(), DType::f64);
  sum(y).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().dtype(), DType::f32);
  const auto g = x.grad().to_vector(), wv = w.to_vector();
  for (size_t i = 0; i < g.size(); ++i) EXPECT_FLOAT_EQ(g[i], static_cast<float>(wv[i]));
  // bf16 round trip: the gradient comes back in the leaf's dtype.
  Tensor h = ones({5}, {.dtype = DType::bf16}).requires_grad_();
  sum(scale(to(h, DType::f32), 3.0)).backward();
  EXPECT_EQ(h.grad().dtype(), DType::bf16);
  for (double v : h.grad().to_vector()) EXPECT_EQ(v, 3.0);
}

}  // namespace
}  // namespace cg

namespace cg {
namespace {

TEST(OpsGradcheck, LinearWithAndWithoutBias) {
  const Tensor x = testing::make_input({2, 3, 5}, 301);
  const Tensor w = testing::make_input({4, 5}, 302);
  const Tensor b = testing::make_input({4}, 303);
  auto with_bias = [](const std::vector<Tensor>& in) { return linear(in[0], in[1], in[2]); };
  EXPECT_TRUE(testing::gradcheck(with_bias, {x, w, b}).ok);
  auto no_bias = [](const std::vector<Tensor>& in) {
    return linear(transpose(in[0], 0, 1), in[1]);
  };
  EXPECT_TRUE(testing::gradcheck(no_bias, {x, w}).ok);
  EXPECT_EQ(linear(x.detach(), w.detach(), b.detach()).shape(), (Shape{2, 3, 4}));
  EXPECT_THROW(linear(x.detach(), testing::make_input({4, 6}, 304).detach()), Error);
  EXPECT_THROW(linear(x.detach(), w.detach(), ones({5}, {.dtype = DType::f64})), Error);
}

}  // namespace
}  // namespace cg
