// Why this file exists: the forward values of the ops (against plain loops), the 16-bit
// float paths, the in-place helpers, and the errors users see for bad input.
#include <gtest/gtest.h>

#include <cmath>

#include "core/backend.h"
#include "core/factories.h"
#include "error_helpers.h"
#include "ops/ops.h"

namespace cg {
namespace {

using testing::error_of;

TEST(OpsForward, BroadcastBinaryValues) {
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  Tensor b = from_vector({10, 20, 30}, {3});
  Tensor c = from_vector({100, 200}, {2, 1});
  EXPECT_EQ(add(a, b).to_vector(), (std::vector<double>{11, 22, 33, 14, 25, 36}));
  EXPECT_EQ(sub(a, c).to_vector(), (std::vector<double>{-99, -98, -97, -196, -195, -194}));
  EXPECT_EQ(mul(b, c).shape(), (Shape{2, 3}));
  EXPECT_EQ(mul(b, c).to_vector(), (std::vector<double>{1000, 2000, 3000, 2000, 4000, 6000}));
  EXPECT_EQ(relu(a - 3.5).to_vector(), (std::vector<double>{0, 0, 0, 0.5, 1.5, 2.5}));
  EXPECT_EQ((2.0 * a).to_vector(), (std::vector<double>{2, 4, 6, 8, 10, 12}));
  // A transposed operand is read through its strides.
  EXPECT_EQ(add(transpose(a, 0, 1), from_vector({0, 0}, {2})).to_vector(),
            (std::vector<double>{1, 4, 2, 5, 3, 6}));
}

TEST(OpsForward, MatmulMatchesLoops) {
  Generator gen(7);
  for (DType dt : {DType::f32, DType::f64}) {
    Tensor a = randn({2, 3, 5}, {.dtype = dt}, &gen), b = randn({5, 4}, {.dtype = dt}, &gen);
    Tensor c = matmul(a, b);
    ASSERT_EQ(c.shape(), (Shape{2, 3, 4}));
    const auto av = a.to_vector(), bv = b.to_vector(), cv = c.to_vector();
    for (int n = 0; n < 2; ++n)
      for (int i = 0; i < 3; ++i)
        for (int j = 0; j < 4; ++j) {
          double ref = 0;
          for (int k = 0; k < 5; ++k) ref += av[n * 15 + i * 5 + k] * bv[k * 4 + j];
          EXPECT_NEAR(cv[n * 12 + i * 4 + j], ref, dt == DType::f32 ? 1e-5 : 1e-12);
        }
  }
  // Empty inner dim gives zeros.
  Tensor z = matmul(zeros({2, 0}), zeros({0, 3}));
  EXPECT_EQ(z.to_vector(), (std::vector<double>(6, 0.0)));
}

TEST(OpsForward, SumMeanValues) {
  Tensor a = from_vector({1, 2, 3, 4, 5, 6}, {2, 3});
  EXPECT_EQ(sum(a).item(), 21.0);
  EXPECT_EQ(sum(a).shape(), (Shape{}));
  EXPECT_EQ(mean(a).item(), 3.5);
  EXPECT_EQ(sum(a, {0}).to_vector(), (std::vector<double>{5, 7, 9}));
  EXPECT_EQ(sum(a, {1}, true).shape(), (Shape{2, 1}));
  EXPECT_EQ(mean(a, {-1}).to_vector(), (std::vector<double>{2, 5}));
  EXPECT_EQ(sum(transpose(a, 0, 1), {1}).to_vector(), (std::vector<double>{5, 7, 9}));
}

TEST(OpsForward, HalfDtypesComputeInFloat) {
  Generator gen(8);
  Tensor a = randn({4, 8}, {}, &gen), b = randn({8, 3}, {}, &gen);
  const auto ref_mm = matmul(a, b).to_vector();
  const auto ref_add = add(a, a).to_vector();
  for (DType dt : {DType::bf16, DType::f16}) {
    const double tol = dt == DType::bf16 ? 0.1 : 0.02;
    Tensor ah = to(a, dt), bh = to(b, dt);
    Tensor mm = matmul(ah, bh);
    EXPECT_EQ(mm.dtype(), dt);
    const auto got = mm.to_vector();
    for (size_t i = 0; i < got.size(); ++i)
      EXPECT_NEAR(got[i], ref_mm[i], tol * (1 + std::abs(ref_mm[i])));
    const auto sum_h = add(ah, ah).to_vector();
    for (size_t i = 0; i < sum_h.size(); ++i)
      EXPECT_NEAR(sum_h[i], ref_add[i], tol * std::abs(ref_add[i]) + 1e-3);
    EXPECT_NEAR(sum(ah).item(), sum(a).item(), 0.1 * 32 * tol);
  }
}

TEST(OpsInplace, UpdatesUnderNoGrad) {
  Tensor p = from_vector({1, 2, 3}, {3}).requires_grad_();
  Tensor g = from_vector({10, 20, 30}, {3});
  {
    NoGradGuard no_grad;
    add_(p, g, -0.1);
  }
  EXPECT_EQ(p.to_vector(), (std::vector<double>{0, 0, 0}));
  Tensor m = from_vector({1, 2, 3, 4}, {2, 2});
  mul_(m, 2.0);
  add_(m, from_vector({1, 1}, {2}));  // broadcast src
  EXPECT_EQ(m.to_vector(), (std::vector<double>{3, 5, 7, 9}));
  addcmul_(m, from_vector({1, 2}, {2}), from_vector({3, 4}, {2}), 0.5);
  EXPECT_EQ(m.to_vector(), (std::vector<double>{4.5, 9, 8.5, 13}));
  addcdiv_(m, from_vector({9, 9, 9, 9}, {2, 2}), from_vector({3, 9}, {2}), -1.0);
  EXPECT_EQ(m.to_vector(), (std::vector<double>{1.5, 8, 5.5, 12}));
  mul_(m, from_vector({2, 0}, {2}));
  EXPECT_EQ(m.to_vector(), (std::vector<double>{3, 0, 11, 0}));
  copy_(transpose(m, 0, 1), from_vector({1, 2, 3, 4}, {2, 2}));
  EXPECT_EQ(m.to_vector(), (std::vector<double>{1, 3, 2, 4}));
  add_scalar_(m, 1.0);
  zero_(narrow(m, 0, 0, 1));
  EXPECT_EQ(m.to_vector(), (std::vector<double>{0, 0, 3, 5}));
}

TEST(OpsErrors, InplaceOnLeafRequiringGrad) {
  Tensor p = ones({3}).requires_grad_();
  const std::string msg = error_of([&] { add_(p, ones({3})); });
  EXPECT_NE(msg.find("add_: dst is a leaf tensor that requires grad"), std::string::npos) << msg;
  EXPECT_NE(msg.find("NoGradGuard"), std::string::npos) << msg;
  EXPECT_THROW(mul_(scale(p, 2.0), 3.0), Error);                    // part of a graph
  EXPECT_THROW(add_(expand(ones({3}), {2, 3}), ones({3})), Error);  // stride-0 dst
  EXPECT_THROW(add_(ones({3}), ones({2, 3})), Error);               // src larger than dst
}

TEST(OpsErrors, ShapeMismatch) {
  EXPECT_THROW(add(ones({2, 3}), ones({4})), Error);
  EXPECT_NE(error_of([] { mul(ones({2, 3}), ones({2, 4})); }).find("mul"), std::string::npos);
  EXPECT_EQ(error_of([] {
              matmul(ones({2, 3}), ones({4, 5}));
            }),
            "matmul: shapes [2, 3] and [4, 5] don't match: inner dims 3 vs 4");
  EXPECT_EQ(error_of([] {
              matmul(ones({2, 2, 3}), ones({3, 3, 4}));
            }),
            "matmul: shapes [2, 2, 3] and [3, 3, 4] don't match: batch dims [2] and [3] don't "
            "broadcast (sizes must match or be 1, aligned from the last dim)");
  EXPECT_THROW(matmul(ones({3}), ones({4})), Error);
  EXPECT_THROW(matmul(ones({}), ones({4})), Error);
  EXPECT_THROW(sum(ones({2, 3}), {2}), Error);
  EXPECT_THROW(sum(ones({2, 3}), {1, -1}), Error);  // same dim twice
  EXPECT_THROW(view(transpose(ones({2, 3}), 0, 1), {6}), Error);
}

TEST(OpsErrors, DtypeMismatchAndUnsupported) {
  EXPECT_EQ(error_of([] { add(ones({2}), ones({2}, {.dtype = DType::bf16})); }),
            "add: dtypes differ (f32 and bf16); convert one with cg::to(t, dtype)");
  EXPECT_EQ(error_of([] {
              matmul(ones({2, 2}, {.dtype = DType::f64}), ones({2, 2}));
            }),
            "matmul: dtypes differ (f64 and f32); convert one with cg::to(t, dtype)");
  const std::string msg = error_of([] { relu(ones({2}, {.dtype = DType::i64})); });
  EXPECT_NE(msg.find("relu: dtype i64 is not supported"), std::string::npos) << msg;
  EXPECT_THROW(add(Tensor(), ones({2})), Error);
}

TEST(OpsErrors, CudaTensorsWithoutCuda) {
  if (cuda_available()) GTEST_SKIP() << "a GPU is present; this checks the CPU-only build";
  EXPECT_THROW(to(ones({2}), cuda_device(0)), Error);
}

}  // namespace
}  // namespace cg
