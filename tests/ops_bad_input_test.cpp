// Why this file exists: inputs that once produced a misleading message or an internal
// one (issue 18: an AdamW gradient on another device blamed its shape; `linear` with zero
// input features failed inside reshape). Each case checks the message names what to
// change, or that the empty case gives PyTorch's answer.
#include <gtest/gtest.h>

#include "core/factories.h"
#include "error_helpers.h"
#include "fake_kernels.h"
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
  EXPECT_ERROR_HAS(adamw_step({p}, {}, {g_host}, {m}, {v}, Tensor(), AdamWArgs{.lr = 0.1}),
                   "grads[0] is on cpu", "parameters are on", dev.str().c_str(), "cg::to");
}

TEST(AdamWBadInput, GradientShapeAndDtypeAreNamed) {
  const Tensor p = zeros({4}), m = zeros({4}), v = zeros({4});
  EXPECT_ERROR_HAS(adamw_step({p}, {}, {ones({3})}, {m}, {v}, Tensor(), AdamWArgs{.lr = 0.1}),
                   "grads[0] has shape [3]", "params[0] has shape [4]");
  EXPECT_ERROR_HAS(adamw_step({p}, {}, {Tensor()}, {m}, {v}, Tensor(), AdamWArgs{.lr = 0.1}),
                   "grads[0] is undefined");
  EXPECT_ERROR_HAS(adamw_step({p}, {}, {ones({4})}, {zeros({3})}, {v}, Tensor(), AdamWArgs{.lr = 0.1}),
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
