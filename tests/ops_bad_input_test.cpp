// Why this file exists: inputs that once gave a misleading message, an internal one or a
// NaN (issue 18: masked -inf logits in the losses; an AdamW gradient on another device
// blamed on its shape; `linear` with zero input features failing inside reshape). Each
// case checks that the message names what to change, or that the result is PyTorch's.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "core/factories.h"
#include "error_helpers.h"
#include "fake_kernels.h"
#include "ops/loss.h"
#include "ops/ops.h"
#include "ops/optim.h"

namespace cg {
namespace {

TEST(AdamWBadInput, GradientOnAnotherDeviceNamesBothDevices) {
  FakeKernelDevice fake;
  const Device dev = fake.device();
  const Tensor p = zeros({4}, {.device = dev});
  const Tensor m = zeros({4}, {.device = dev});
  const Tensor v = zeros({4}, {.device = dev});
  const Tensor g_host = ones({4});
  const std::string dev_name = dev.str();  // alive while the macro reads its words
  EXPECT_ERROR_HAS(adamw_step({p}, {}, {g_host}, {m}, {v}, Tensor(), AdamWArgs{.lr = 0.1}),
                   "grads[0] is on cpu", "parameters are on", dev_name.c_str(), "cg::to");
}

TEST(AdamWBadInput, GradientShapeAndDtypeAreNamed) {
  const Tensor p = zeros({4}), m = zeros({4}), v = zeros({4});
  EXPECT_ERROR_HAS(adamw_step({p}, {}, {ones({3})}, {m}, {v}, Tensor(), AdamWArgs{.lr = 0.1}),
                   "grads[0] has shape [3]", "params[0] has shape [4]");
  EXPECT_ERROR_HAS(adamw_step({p}, {}, {Tensor()}, {m}, {v}, Tensor(), AdamWArgs{.lr = 0.1}),
                   "grads[0] is undefined");
  EXPECT_ERROR_HAS(
      adamw_step({p}, {}, {ones({4})}, {zeros({3})}, {v}, Tensor(), AdamWArgs{.lr = 0.1}),
      "exp_avgs[0] must be", "got a contiguous f32 tensor of shape [3]");
}

TEST(LinearEdge, ZeroInputFeaturesGiveTheBiasAndEmptyGradients) {
  // PyTorch: F.linear(x [2, 3, 0], w [5, 0], b [5]) is b broadcast to [2, 3, 5].
  const Tensor x = zeros({2, 3, 0}).requires_grad_(true);
  const Tensor w = zeros({5, 0}).requires_grad_(true);
  const Tensor b = arange(0.0, 5.0).requires_grad_(true);
  const Tensor y = linear(x, w, b);
  ASSERT_EQ(y.shape(), (Shape{2, 3, 5}));
  const auto yv = y.to_vector();
  for (size_t i = 0; i < yv.size(); ++i) EXPECT_EQ(yv[i], static_cast<double>(i % 5));
  sum(y).backward();
  EXPECT_EQ(x.grad().shape(), (Shape{2, 3, 0}));
  EXPECT_EQ(w.grad().shape(), (Shape{5, 0}));
  for (double g : b.grad().to_vector()) EXPECT_EQ(g, 6.0);
  // Without a bias: zeros.
  EXPECT_EQ(sum(linear(zeros({4, 0}), zeros({2, 0}))).item(), 0.0);
}

}  // namespace
}  // namespace cg

namespace cg {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Reference in double: log-softmax of a row with -inf entries (probability 0).
std::vector<double> log_softmax_ref(const std::vector<double>& z) {
  double m = -kInf;
  for (double v : z) m = std::max(m, v);
  double s = 0;
  for (double v : z) s += std::exp(v - m);
  std::vector<double> out;
  for (double v : z) out.push_back(v - m - std::log(s));
  return out;
}

// Issue 18 item 25: a masked (-inf) logit gave NaN (0 * -inf in the smoothing sum and the
// entropy); PyTorch gives the finite loss.
TEST(MaskedLogits, CrossEntropyAndEntropyAreFinite) {
  const std::vector<double> row = {1.0, -kInf, 0.5, 2.0, -kInf};
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor logits = from_vector(row, {1, 5}, {.dtype = dt});
    const Tensor labels = from_ints({3}, {1});
    LossConfig cfg;
    const RowLosses r = row_losses(logits, labels, Tensor(), cfg, /*with_metrics=*/true);
    const auto ls = log_softmax_ref(row);
    EXPECT_NEAR(r.loss.item(), -ls[3], 1e-6) << dtype_name(dt);
    double entropy = 0;
    for (double l : ls) entropy -= std::isinf(l) ? 0.0 : std::exp(l) * l;
    EXPECT_NEAR(r.entropy.item(), entropy, 1e-6) << dtype_name(dt);
    // The public op too, and its gradient stays finite (0 at the masked logits).
    const Tensor z = from_vector(row, {1, 5}, {.dtype = dt}).requires_grad_(true);
    const Tensor loss = cross_entropy(z, labels);
    EXPECT_NEAR(loss.item(), -ls[3], 1e-6);
    loss.backward();
    const auto g = z.grad().to_vector();
    EXPECT_EQ(g[1], 0.0);
    EXPECT_EQ(g[4], 0.0);
    for (double v : g) EXPECT_TRUE(std::isfinite(v));
    // With label smoothing a -inf logit makes the loss +inf, as in PyTorch.
    EXPECT_EQ(cross_entropy(logits, labels, {.label_smoothing = 0.1f}).item(), kInf);
  }
}

// Issue 18 item 26: forward KL with a teacher that masks tokens (-inf) was NaN on the CPU.
TEST(MaskedLogits, ForwardKlWithAMaskingTeacherIsFinite) {
  const std::vector<double> student = {0.3, 1.2, -0.7, 0.1};
  const std::vector<double> teacher = {2.0, -kInf, 0.4, -kInf};
  const auto lq = log_softmax_ref(student), lp = log_softmax_ref(teacher);
  double kl = 0;
  for (size_t j = 0; j < lp.size(); ++j) {
    if (!std::isinf(lp[j])) kl += std::exp(lp[j]) * (lp[j] - lq[j]);
  }
  for (DType dt : {DType::f32, DType::f64}) {
    const Tensor z = from_vector(student, {1, 4}, {.dtype = dt}).requires_grad_(true);
    const Tensor t = from_vector(teacher, {1, 4}, {.dtype = dt});
    const Tensor loss = kl_div(z, t);
    EXPECT_NEAR(loss.item(), kl, 1e-6) << dtype_name(dt);
    loss.backward();
    for (double v : z.grad().to_vector()) EXPECT_TRUE(std::isfinite(v));
  }
}

}  // namespace
}  // namespace cg
