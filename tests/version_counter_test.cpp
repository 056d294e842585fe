// Why this file exists: a tensor saved for backward and then changed in place used to give
// silently wrong gradients (sum(mul(w, x)), then x += 100, then backward: w.grad was
// x + 100). Every in-place write now bumps its storage's version (Note [Version counter]
// in core/storage.h) and backward refuses a saved tensor whose version moved (Note [Saved
// tensor versions] in autograd/node.h). These tests pin down both, and the cases that must
// keep working.
#include <gtest/gtest.h>

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "core/views.h"
#include "error_helpers.h"
#include "nn/linear.h"
#include "ops/ops.h"

namespace cg {
namespace {

using V = std::vector<double>;

TEST(VersionCounter, EveryInPlaceWriteBumpsTheSharedCounter) {
  const Tensor x = zeros({2, 3});
  const Tensor t = transpose(x, 0, 1);  // a view: the same counter
  const uint64_t v0 = x.version();
  add_(x, ones({2, 3}));
  EXPECT_EQ(x.version(), v0 + 1);
  EXPECT_EQ(t.version(), v0 + 1);
  mul_(t, 2.0);
  add_scalar_(x, 1.0);
  copy_(narrow(x, 0, 0, 1), ones({1, 3}));
  fill_(x, 3.0);
  zero_(t);
  addcmul_(x, ones({3}), ones({3}));
  EXPECT_EQ(x.version(), v0 + 7);
  raw::copy_(t, ones({3, 2}));
  raw::fill_(narrow(x, 1, 1, 1), 0.0);
  EXPECT_EQ(x.version(), v0 + 9);
  EXPECT_EQ(x.detach().version(), x.version());  // detach shares the storage
  // Out-of-place ops and views write nothing into x.
  (void)add(x, x);
  (void)reshape(x, {6});
  EXPECT_EQ(x.version(), v0 + 9);
  // A refused write counts nothing.
  EXPECT_THROW(add_(x, expand(narrow(transpose(t, 0, 1), 1, 0, 2), {2, 2})), Error);
  EXPECT_EQ(x.version(), v0 + 9);
}

// The example: w.grad must be x (the value used in the forward pass), never x + 100.
TEST(VersionCounter, SavedInputChangedInPlaceFailsBackward) {
  const Tensor w = from_vector({1, 2, 3}, {3}).requires_grad_();
  const Tensor x = from_vector({4, 5, 6}, {3});
  const Tensor loss = sum(mul(w, x));  // MulBackward saves x for w's gradient
  add_scalar_(x, 100.0);               // x does not require grad: allowed in grad mode
  EXPECT_ERROR_HAS(loss.backward(), "modified by an inplace operation", "saved tensor 0",
                   "MulBackward", "[3] f32", "at version 1", "expected version 0", "clone");
  EXPECT_FALSE(w.grad().defined());
}

TEST(VersionCounter, SameUnderNoGradGuard) {
  const Tensor w = from_vector({1, 2, 3}, {3}).requires_grad_();
  const Tensor x = from_vector({4, 5, 6}, {3}).requires_grad_();
  const Tensor loss = sum(mul(w, x));  // saves both
  {
    NoGradGuard no_grad;  // an optimizer step between forward and backward
    add_(x, ones({3}), 100.0);
  }
  EXPECT_ERROR_HAS(loss.backward(), "modified by an inplace operation", "MulBackward", "[3] f32");
}

TEST(VersionCounter, ViewOfASavedTensorChangedInPlace) {
  const Tensor w = from_vector({1, 2, 3, 4}, {2, 2}).requires_grad_();
  const Tensor x = from_vector({4, 5, 6, 7}, {2, 2});
  // A view is saved; its base is written through another view.
  const Tensor loss = sum(mul(w, transpose(x, 0, 1)));
  fill_(narrow(x, 0, 1, 1), 0.0);
  EXPECT_ERROR_HAS(loss.backward(), "modified by an inplace operation", "MulBackward",
                   "[2, 2] f32");
  // The base is saved; a view of it is written with raw::copy_.
  const Tensor y = from_vector({4, 5, 6, 7}, {2, 2});
  const Tensor loss2 = sum(mul(w, y));
  raw::copy_(narrow(y, 1, 0, 1), zeros({2, 1}));
  EXPECT_ERROR_HAS(loss2.backward(), "modified by an inplace operation", "MulBackward");
}

TEST(VersionCounter, SavedOutputChangedInPlace) {
  const Tensor x = from_vector({0.5, -1, 2}, {3}).requires_grad_();
  const Tensor y = exp(x);  // ExpBackward saves its output
  const Tensor loss = sum(y);
  {
    NoGradGuard no_grad;
    mul_(y, 2.0);
  }
  EXPECT_ERROR_HAS(loss.backward(), "modified by an inplace operation", "ExpBackward");
}

TEST(VersionCounter, RetainedGraphAfterAnOptimizerStep) {
  const Tensor w = from_vector({1, 2}, {2}).requires_grad_();
  const Tensor loss = sum(mul(w, w));
  loss.backward(Tensor(), /*retain_graph=*/true);
  {
    NoGradGuard no_grad;
    add_(w, w.grad(), -0.1);
  }
  EXPECT_ERROR_HAS(loss.backward(), "modified by an inplace operation", "MulBackward");
}

TEST(VersionCounter, LoadingWeightsIsAWrite) {
  nn::Linear layer(2, 2);
  const Tensor x = from_vector({1, 2}, {1, 2}).requires_grad_();
  const Tensor loss = sum(layer.forward(x));  // saves the weight for x's gradient
  nn::StateDict state;
  state["weight"] = ones({2, 2});
  {
    NoGradGuard no_grad;
    layer.load_state_dict(state);
  }
  EXPECT_ERROR_HAS(loss.backward(), "modified by an inplace operation");
}

// ---- what must keep working ------------------------------------------------------------

TEST(VersionCounter, InPlaceOnATensorNobodySaved) {
  const Tensor w = from_vector({1, 2, 3}, {3}).requires_grad_();
  const Tensor x = from_vector({4, 5, 6}, {3});
  const Tensor unrelated = from_vector({1, 1, 1}, {3});
  const Tensor loss = sum(add(mul(w, x), unrelated));  // add saves nothing
  add_scalar_(unrelated, 100.0);
  loss.backward();
  EXPECT_EQ(w.grad().to_vector(), (V{4, 5, 6}));
}

TEST(VersionCounter, OutOfPlaceAfterInPlace) {
  const Tensor w = from_vector({1, 2, 3}, {3}).requires_grad_();
  const Tensor x = from_vector({4, 5, 6}, {3});
  add_scalar_(x, 100.0);  // before the forward pass: the saved version is 1
  const Tensor loss = sum(mul(w, x));
  loss.backward();
  EXPECT_EQ(w.grad().to_vector(), (V{104, 105, 106}));
  // A training loop: step, zero the gradient, forward and backward again.
  {
    NoGradGuard no_grad;
    add_(w, w.grad(), -0.01);
    zero_(w.grad());
  }
  sum(mul(w, x)).backward();
  EXPECT_EQ(w.grad().to_vector(), (V{104, 105, 106}));
}

TEST(VersionCounter, GradientAccumulationAcrossBackwards) {
  // AccumulateGrad adds into .grad in place: that must not trip anything.
  const Tensor w = from_vector({1, 2}, {2}).requires_grad_();
  sum(mul(w, w)).backward();
  sum(mul(w, w)).backward();
  EXPECT_EQ(w.grad().to_vector(), (V{4, 8}));
}

}  // namespace
}  // namespace cg
