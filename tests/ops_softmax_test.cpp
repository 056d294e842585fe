// Why this file exists: softmax and log_softmax checked against finite differences (f64;
// every dim, negative dims, transposed/sliced/expanded and odd-sized inputs), against the
// textbook exp(x - max) / sum, at logits of 1e4, in bf16 against fp32, for what they
// save (the output only), and for the errors a user sees.
#include <gtest/gtest.h>

#include <cmath>

#include "ops/ops.h"
#include "tests/gradcheck.h"
#include "tests/tensor_test_helpers.h"

namespace cg {
namespace {

using testing::make_input;
using V = std::vector<Tensor>;

TEST(OpsSoftmaxGradcheck, EveryDimAndLayout) {
  Tensor a = make_input({3, 4, 5}, 1);
  for (int64_t dim : {0, 1, 2, -1, -2}) {
    SCOPED_TRACE(dim);
    EXPECT_GRADCHECK([dim](const V& x) { return softmax(x[0], dim); }, a);
    EXPECT_GRADCHECK([dim](const V& x) { return log_softmax(x[0], dim); }, a);
    EXPECT_GRADCHECK([dim](const V& x) { return softmax(transpose(x[0], 0, 2), dim); }, a);
    EXPECT_GRADCHECK([dim](const V& x) { return log_softmax(transpose(x[0], 1, 2), dim); }, a);
  }
  EXPECT_GRADCHECK([](const V& x) { return softmax(slice(x[0], 2, 0, 5, 2)); }, a);
  EXPECT_GRADCHECK(
      [](const V& x) {
        return log_softmax(expand(x[0], {2, 7}), 0);
      },
      make_input({1, 7}, 2));
  EXPECT_GRADCHECK([](const V& x) { return softmax(x[0], 0); }, make_input({11}, 3));
  // Upstream gradients that are not contiguous (softmax feeding a transpose).
  EXPECT_GRADCHECK([](const V& x) { return transpose(softmax(x[0], 1), 0, 1); },
                   make_input({3, 6}, 4));
  // A chain: attention-like softmax(q k^T) v.
  Tensor q = make_input({3, 4}, 5), k = make_input({5, 4}, 6), v = make_input({5, 2}, 7);
  EXPECT_GRADCHECK(
      [](const V& x) { return matmul(softmax(matmul(x[0], transpose(x[1], 0, 1))), x[2]); }, q, k,
      v);
}

TEST(OpsSoftmaxForward, RowsSumToOneAndMatchTheFormula) {
  Generator gen(8);
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor a = randn({4, 9}, {.dtype = dt}, &gen);
    const auto av = a.to_vector(), s = softmax(a, -1).to_vector(),
               ls = log_softmax(a, 1).to_vector();
    const double tol = dt == DType::f32 ? 1e-6 : 1e-14;
    for (int i = 0; i < 4; ++i) {
      double m = av[i * 9], total = 0, row_sum = 0;
      for (int j = 0; j < 9; ++j) m = std::max(m, av[i * 9 + j]);
      for (int j = 0; j < 9; ++j) total += std::exp(av[i * 9 + j] - m);
      for (int j = 0; j < 9; ++j) {
        const double want = std::exp(av[i * 9 + j] - m) / total;
        EXPECT_NEAR(s[i * 9 + j], want, tol);
        EXPECT_NEAR(ls[i * 9 + j], std::log(want), 10 * tol);
        row_sum += s[i * 9 + j];
      }
      EXPECT_NEAR(row_sum, 1.0, 10 * tol);
    }
    // Along dim 0 of a transposed view = along dim 1 of the original, transposed.
    EXPECT_EQ(softmax(transpose(a, 0, 1), 0).to_vector(),
              contiguous(transpose(softmax(a, 1), 0, 1)).to_vector());
  }
}

TEST(OpsSoftmaxForward, LargeLogitsDoNotOverflow) {
  Tensor big = from_vector({1e4, 1e4 - 1, -1e4, 1e4}, {1, 4});
  const auto s = softmax(big).to_vector(), ls = log_softmax(big).to_vector();
  const double z = 2 + std::exp(-1.0);
  const std::vector<double> want{1 / z, std::exp(-1.0) / z, 0, 1 / z};
  for (int j = 0; j < 4; ++j) {
    EXPECT_FALSE(std::isnan(s[j]));
    EXPECT_NEAR(s[j], want[j], 1e-6);
  }
  EXPECT_NEAR(ls[0], -std::log(z), 1e-5);
  EXPECT_NEAR(ls[2], -2e4 - std::log(z), 1e-2);
}

TEST(OpsSoftmaxForward, HalfDtypesWithinRoundingOfFloat) {
  Generator gen(9);
  Tensor a = randn({5, 37}, {}, &gen);
  for (DType dt : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(dt));
    const double rel = dt == DType::bf16 ? 1.0 / 256 : 1.0 / 2048;
    Tensor h = to(a, dt), f = to(h, DType::f32);
    EXPECT_EQ(softmax(h).dtype(), dt);
    const auto sh = softmax(h).to_vector(), sf = softmax(f).to_vector();
    const auto lh = log_softmax(h, 0).to_vector(), lf = log_softmax(f, 0).to_vector();
    for (size_t i = 0; i < sh.size(); ++i) {
      EXPECT_NEAR(sh[i], sf[i], rel * sf[i] + 1e-7);
      EXPECT_NEAR(lh[i], lf[i], rel * std::abs(lf[i]) + 1e-6);
    }
  }
}

TEST(OpsSoftmaxSaved, OnlyTheOutput) {
  Tensor a = make_input({4, 8}, 10);
  Tensor s = softmax(scale(a, 2.0)), ls = log_softmax(a, 0);
  EXPECT_EQ(s.grad_fn()->name(), "SoftmaxBackward");
  EXPECT_EQ(ls.grad_fn()->name(), "LogSoftmaxBackward");
  EXPECT_EQ(s.grad_fn()->saved_bytes(), s.nbytes());
  EXPECT_EQ(ls.grad_fn()->saved_bytes(), ls.nbytes());
  // scale's output (softmax's input) is not kept alive by the graph.
  EXPECT_EQ(graph_retained_bytes(s).total_bytes, s.nbytes());
}

TEST(OpsSoftmaxErrors, BadDimsAndDtypes) {
  TENSOR_EXPECT_ERROR(softmax(ones({2, 3}), 2), "softmax", "dim 2 out of range", "2-d");
  TENSOR_EXPECT_ERROR(log_softmax(ones({2, 3}), -3), "log_softmax", "dim -3 out of range");
  TENSOR_EXPECT_ERROR(softmax(ones({}), 0), "softmax", "0-d");
  TENSOR_EXPECT_ERROR(softmax(ones({3}, {.dtype = DType::i32})), "softmax", "i32", "not supported");
}

}  // namespace
}  // namespace cg
