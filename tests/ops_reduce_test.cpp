// Why this file exists: the reductions (max, argmax, logsumexp, and sum's threaded
// paths) checked against finite differences (f64; negative dims, keepdim, transposed,
// sliced and odd-sized inputs), against plain loops, for stability at 1e4, and for the
// errors a user sees. Sums must come out the same for any number of threads.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "ops/ops.h"
#include "ops/threads.h"
#include "tests/gradcheck.h"
#include "tests/tensor_test_helpers.h"

namespace cg {
namespace {

using testing::make_input;
using V = std::vector<Tensor>;

// ---- gradients -----------------------------------------------------------------------

TEST(OpsReduceGradcheck, MaxAlongDim) {
  Tensor a = make_input({3, 4, 5}, 1);
  EXPECT_GRADCHECK([](const V& x) { return max(x[0], 1).values; }, a);
  EXPECT_GRADCHECK([](const V& x) { return max(x[0], -1, true).values; }, a);
  EXPECT_GRADCHECK([](const V& x) { return max(x[0], 0).values; }, a);
  EXPECT_GRADCHECK([](const V& x) { return max(transpose(x[0], 0, 2), -2).values; }, a);
  EXPECT_GRADCHECK([](const V& x) { return max(slice(x[0], 2, 1, 5, 2), 2).values; }, a);
  EXPECT_GRADCHECK([](const V& x) { return max(x[0]); }, a);
  EXPECT_GRADCHECK([](const V& x) { return max(transpose(x[0], 0, 1)); }, a);
  EXPECT_GRADCHECK([](const V& x) { return max(x[0], 0).values; }, make_input({7}, 2));
}

TEST(OpsReduceGradcheck, Logsumexp) {
  Tensor a = make_input({3, 4, 5}, 3);
  EXPECT_GRADCHECK([](const V& x) { return logsumexp(x[0], -1); }, a);
  EXPECT_GRADCHECK([](const V& x) { return logsumexp(x[0], 1, true); }, a);
  EXPECT_GRADCHECK([](const V& x) { return logsumexp(x[0], -3); }, a);
  EXPECT_GRADCHECK([](const V& x) { return logsumexp(transpose(x[0], 1, 2), 1); }, a);
  EXPECT_GRADCHECK([](const V& x) { return logsumexp(expand(x[0], {2, 3, 4, 5}), 0); }, a);
  EXPECT_GRADCHECK([](const V& x) { return logsumexp(x[0]); }, a);
  EXPECT_GRADCHECK([](const V& x) { return logsumexp(slice(x[0], 0, 0, 3, 2)); }, a);
}

TEST(OpsReduceGradcheck, TiesSendTheGradientToTheFirst) {
  Tensor a = from_vector({1, 5, 5, 2, 3, 3, 3, 0}, {2, 4}).requires_grad_();
  MaxResult m = max(a, 1);
  EXPECT_EQ(m.values.to_vector(), (std::vector<double>{5, 3}));
  EXPECT_EQ(m.indices.to_vector(), (std::vector<double>{1, 0}));
  sum(m.values).backward();
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{0, 1, 0, 0, 1, 0, 0, 0}));
  Tensor b = from_vector({2, 7, 7, 1}, {2, 2}).requires_grad_();
  max(b).backward();
  EXPECT_EQ(b.grad().to_vector(), (std::vector<double>{0, 1, 0, 0}));
}

// ---- forward values ------------------------------------------------------------------

TEST(OpsReduceForward, MaxAndArgmaxMatchLoops) {
  Generator gen(4);
  for (DType dt : {DType::f32, DType::f64, DType::bf16}) {
    Tensor a = randn({4, 6, 5}, {.dtype = dt}, &gen);
    const auto av = a.to_vector();
    MaxResult m = max(a, -2);
    ASSERT_EQ(m.values.shape(), (Shape{4, 5}));
    EXPECT_EQ(m.values.dtype(), dt);
    EXPECT_EQ(m.indices.dtype(), DType::i64);
    const auto mv = m.values.to_vector(), iv = m.indices.to_vector(), am = argmax(a, 1).to_vector();
    for (int i = 0; i < 4; ++i)
      for (int k = 0; k < 5; ++k) {
        int best = 0;
        for (int j = 1; j < 6; ++j)
          if (av[i * 30 + j * 5 + k] > av[i * 30 + best * 5 + k]) best = j;
        EXPECT_EQ(iv[i * 5 + k], best);
        EXPECT_EQ(am[i * 5 + k], best);
        EXPECT_EQ(mv[i * 5 + k], av[i * 30 + best * 5 + k]);
      }
    int64_t flat = 0;
    for (size_t i = 1; i < av.size(); ++i)
      if (av[i] > av[flat]) flat = static_cast<int64_t>(i);
    EXPECT_EQ(argmax(a).item(), flat);
    EXPECT_EQ(argmax(a).shape(), (Shape{}));
    EXPECT_EQ(max(a).item(), av[flat]);
    EXPECT_EQ(argmax(a, 0, true).shape(), (Shape{1, 6, 5}));
    // Transposed input: the same answer as its contiguous copy.
    EXPECT_EQ(argmax(transpose(a, 0, 2), 1).to_vector(),
              argmax(contiguous(transpose(a, 0, 2)), 1).to_vector());
  }
  const double nan = std::numeric_limits<double>::quiet_NaN();
  EXPECT_EQ(argmax(from_vector({1, nan, 3, nan}, {4})).item(), 1);  // a NaN is the maximum
  EXPECT_FALSE(argmax(ones({3}, {.dtype = DType::f64})).requires_grad());
}

TEST(OpsReduceForward, LogsumexpMatchesLoopsAndDoesNotOverflow) {
  Generator gen(5);
  Tensor a = randn({3, 7}, {.dtype = DType::f64}, &gen);
  const auto av = a.to_vector(), got = logsumexp(a, 1).to_vector();
  for (int i = 0; i < 3; ++i) {
    double s = 0;
    for (int j = 0; j < 7; ++j) s += std::exp(av[i * 7 + j]);
    EXPECT_NEAR(got[i], std::log(s), 1e-13);
  }
  // exp(1e4) overflows even double; the shifted form gives 1e4 + log(sum(exp(x - 1e4))).
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor big = from_vector({1e4, 1e4, 1e4 - 1, -1e4}, {4}, {.dtype = dt});
    const double want = 1e4 + std::log(2 + std::exp(-1.0));
    EXPECT_NEAR(logsumexp(big, 0).item(), want, dt == DType::f32 ? 2e-3 : 1e-9);
    EXPECT_NEAR(logsumexp(big).item(), want, dt == DType::f32 ? 2e-3 : 1e-9);
  }
  const double inf = std::numeric_limits<double>::infinity();
  const auto edge = logsumexp(from_vector({-inf, -inf, 0, inf}, {2, 2}), 1).to_vector();
  EXPECT_EQ(edge[0], -inf);
  EXPECT_EQ(edge[1], inf);
  EXPECT_EQ(logsumexp(zeros({2, 0}), 1).to_vector(), (std::vector<double>{-inf, -inf}));
  // bf16 is computed in fp32 and rounded once: within 2^-8 relative.
  Tensor h = to(randn({4, 33}, {}, &gen), DType::bf16);
  const auto lh = logsumexp(h, -1).to_vector(), lf = logsumexp(to(h, DType::f32), -1).to_vector();
  for (size_t i = 0; i < lh.size(); ++i) EXPECT_NEAR(lh[i], lf[i], std::abs(lf[i]) / 256 + 1e-6);
}

TEST(OpsReduceSaved, MaxSavesIndicesLogsumexpInputAndOutput) {
  Tensor a = make_input({4, 8}, 6);
  MaxResult m = max(a, 1);
  EXPECT_EQ(m.values.grad_fn()->name(), "MaxBackward");
  EXPECT_EQ(m.values.grad_fn()->saved_bytes(), 4u * 8);  // four i64 indices
  EXPECT_FALSE(m.indices.requires_grad());
  Tensor l = logsumexp(a, 1);
  EXPECT_EQ(l.grad_fn()->saved_bytes(), a.nbytes() + 4u * 8);  // input + output
}

// ---- threads ----------------------------------------------------------------------------

// Runs f with the pool at `threads` threads, restoring the previous count.
template <typename F>
auto with_threads(int threads, F&& f) {
  const int before = get_num_threads();
  set_num_threads(threads);
  auto result = f();
  set_num_threads(before);
  return result;
}

TEST(OpsReduceThreads, SumsAreTheSameForAnyThreadCount) {
  Generator gen(7);
  Tensor a = randn({513, 301}, {}, &gen);  // 154k elements: every sum walk goes parallel
  auto sums = [&] {
    return std::vector<std::vector<double>>{sum(a).to_vector(),
                                            sum(transpose(a, 0, 1)).to_vector(),
                                            sum(a, {0}).to_vector(),
                                            sum(a, {1}).to_vector(),
                                            mean(transpose(a, 0, 1), {1}).to_vector(),
                                            logsumexp(a, 0).to_vector(),
                                            max(a, 0).values.to_vector(),
                                            softmax(a, 0).to_vector()};
  };
  const auto one = with_threads(1, sums), four = with_threads(4, sums);
  for (size_t i = 0; i < one.size(); ++i) EXPECT_EQ(one[i], four[i]) << "result " << i;
}

TEST(OpsReduceThreads, LargeSumsMatchDoubleLoops) {
  Generator gen(8);
  Tensor a = randn({700, 97}, {.dtype = DType::f64}, &gen);
  const auto av = a.to_vector();
  double total = 0;
  std::vector<double> cols(97, 0.0), rows(700, 0.0);
  for (int i = 0; i < 700; ++i)
    for (int j = 0; j < 97; ++j) {
      total += av[i * 97 + j];
      cols[j] += av[i * 97 + j];
      rows[i] += av[i * 97 + j];
    }
  EXPECT_NEAR(sum(a).item(), total, 1e-9);
  EXPECT_NEAR(sum(transpose(a, 0, 1)).item(), total, 1e-9);
  const auto c = sum(a, {0}).to_vector(), r = sum(transpose(a, 0, 1), {0}).to_vector();
  for (int j = 0; j < 97; ++j) EXPECT_NEAR(c[j], cols[j], 1e-11);
  for (int i = 0; i < 700; ++i) EXPECT_NEAR(r[i], rows[i], 1e-11);
}

// ---- errors ----------------------------------------------------------------------------

TEST(OpsReduceErrors, DimsOutOfRangeAndEmptyInputs) {
  TENSOR_EXPECT_ERROR(max(ones({2, 3}), 2), "max", "dim 2 out of range", "2-d");
  TENSOR_EXPECT_ERROR(argmax(ones({2, 3}), -3), "argmax", "dim -3 out of range");
  TENSOR_EXPECT_ERROR(logsumexp(ones({4}), 1), "logsumexp", "dim 1 out of range");
  TENSOR_EXPECT_ERROR(max(ones({2, 0}), 1), "max", "size 0", "no maximum");
  TENSOR_EXPECT_ERROR(max(ones({0})), "max", "empty");
  TENSOR_EXPECT_ERROR(argmax(ones({3, 0})), "argmax", "empty");
  TENSOR_EXPECT_ERROR(argmax(ones({3}, {.dtype = DType::i64}), 0), "argmax", "i64",
                      "not supported");
  TENSOR_EXPECT_ERROR(logsumexp(Tensor(), 0), "logsumexp", "undefined");
}

}  // namespace
}  // namespace cg
