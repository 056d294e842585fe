// Why this file exists: checkpoint() (autograd/activation_checkpoint.h) must give the
// gradients the plain call gives -- of its inputs and of the parameters it reads -- while
// its forward keeps only the inputs. These tests check it against finite differences and
// against the plain call bit for bit, with several outputs, unused outputs, inputs that need
// no gradient, nesting and no-grad; that the forward holds no intermediate and the backward
// frees the recomputed graph (from the allocator's own stats); and the errors.
#include <gtest/gtest.h>

#include "autograd/activation_checkpoint.h"
#include "autograd/grad_mode.h"
#include "autograd/graph_bytes.h"
#include "core/caching_allocator.h"
#include "core/factories.h"
#include "error_helpers.h"
#include "ops/ops.h"
#include "tests/gradcheck.h"

namespace cg {
namespace {

using testing::make_input;
using V = std::vector<Tensor>;

int64_t cpu_allocated_bytes() { return allocator_for(kCPU).stats().allocated_bytes.current; }

// A two-input, two-output function with a parameter w read through the closure.
V two_outputs(const V& in, const Tensor& w) {
  const Tensor h = tanh(matmul(in[0], w));
  return {add(h, in[1]), mul(h, h)};
}

TEST(ActivationCheckpoint, GradcheckOfInputsAndAParameter) {
  // Inputs 0 and 1 go through checkpoint's inputs, input 2 is the closure's parameter.
  Tensor x = make_input({3, 4}, 1), y = make_input({3, 5}, 2), w = make_input({4, 5}, 3);
  EXPECT_GRADCHECK(
      [](const V& v) {
        const Tensor w = v[2];
        V out = checkpoint([w](const V& in) { return two_outputs(in, w); }, {v[0], v[1]}, {w});
        return add(out[0], scale(out[1], 0.5));
      },
      x, y, w);
  // Nested: an inner checkpoint inside the checkpointed function.
  EXPECT_GRADCHECK(
      [](const V& v) {
        const Tensor w = v[2];
        auto outer = [w](const V& in) {
          V inner = checkpoint([w](const V& i) { return two_outputs(i, w); }, in, {w});
          return V{mul(inner[0], inner[1])};
        };
        return checkpoint(outer, {v[0], v[1]}, {w})[0];
      },
      x, y, w);
}

// Same values and the same gradients as the plain call, to the bit: the recompute runs
// the same ops in the same order.
TEST(ActivationCheckpoint, GradientsEqualThePlainCall) {
  Generator gen(5);
  auto leaf = [&](const Shape& s) { return randn(s, {}, &gen).requires_grad_(); };
  Tensor x = leaf({6, 8}), y = leaf({6, 7}), w = leaf({8, 7});
  const Tensor up0 = randn({6, 7}, {}, &gen), up1 = randn({6, 7}, {}, &gen);
  auto run = [&](bool checkpointed, bool use_second) {
    for (const Tensor& t : {x, y, w}) t.set_grad(Tensor());
    auto f = [w](const V& in) { return two_outputs(in, w); };
    const V out = checkpointed ? checkpoint(f, {x, y}, {w}) : f({x, y});
    Tensor loss = sum(mul(out[0], up0));
    if (use_second) loss = add(loss, sum(mul(out[1], up1)));
    loss.backward();
    return V{out[0].detach(), x.grad(), y.grad(), w.grad()};
  };
  for (bool use_second : {true, false}) {  // false: output 1 gets no gradient
    SCOPED_TRACE(use_second ? "both outputs used" : "second output unused");
    const V plain = run(false, use_second), ckpt = run(true, use_second);
    for (size_t i = 0; i < plain.size(); ++i) {
      EXPECT_EQ(ckpt[i].to_vector(), plain[i].to_vector()) << "tensor " << i;
    }
  }
}

TEST(ActivationCheckpoint, InputsThatNeedNoGradientGetNone) {
  Generator gen(6);
  const Tensor x = randn({4, 3}, {}, &gen);  // data: no gradient
  Tensor w = randn({3, 3}, {}, &gen).requires_grad_();
  auto f = [w](const V& in) { return V{matmul(in[0], w), scale(in[1], 2.0)}; };
  // The parameter alone makes the graph; an undefined input is allowed.
  V out = checkpoint([&](const V& in) { return V{f({in[0], x})[0]}; }, {x, Tensor()}, {w});
  ASSERT_TRUE(out[0].requires_grad());
  sum(out[0]).backward();
  EXPECT_FALSE(x.grad().defined());
  // d sum(x w) / dw[i][j] = sum over rows of x[., i].
  const std::vector<double> xs = x.to_vector(), gw = w.grad().to_vector();
  for (int64_t i = 0; i < 3; ++i) {
    double column = 0;
    for (int64_t r = 0; r < 4; ++r) column += xs[static_cast<size_t>(r * 3 + i)];
    for (int64_t j = 0; j < 3; ++j) EXPECT_FLOAT_EQ(gw[static_cast<size_t>(i * 3 + j)], column);
  }
  // Nothing trainable: f is just called, no history.
  const V plain = checkpoint([](const V& in) { return V{scale(in[0], 2.0)}; }, {x});
  EXPECT_FALSE(plain[0].requires_grad());
}

TEST(ActivationCheckpoint, UnderNoGradNothingIsRecorded) {
  Tensor x = make_input({2, 2}, 7);
  NoGradGuard no_grad;
  const V out = checkpoint([](const V& in) { return V{mul(in[0], in[0])}; }, {x});
  EXPECT_FALSE(out[0].requires_grad());
  EXPECT_EQ(out[0].grad_fn(), nullptr);
}

TEST(ActivationCheckpoint, ReturningAnInputIsAFreshOutput) {
  Tensor x = make_input({2, 3}, 8);
  const V out = checkpoint([](const V& in) { return V{in[0], scale(in[0], 3.0)}; }, {x});
  EXPECT_TRUE(x.is_leaf());
  add(sum(out[0]), sum(out[1])).backward();
  EXPECT_EQ(x.grad().to_vector(), std::vector<double>(6, 4.0));
}

// The forward keeps the inputs and nothing of f; the backward frees the recomputed graph.
TEST(ActivationCheckpoint, ForwardHoldsOnlyTheInputsAndBackwardFreesTheRecompute) {
  Generator gen(9);
  Tensor x = randn({64, 64}, {}, &gen).requires_grad_();
  Tensor w = randn({64, 64}, {}, &gen).requires_grad_();
  auto deep = [w](const V& in) {  // the plain graph saves each tanh's output
    Tensor h = in[0];
    for (int i = 0; i < 4; ++i) h = tanh(matmul(h, w));
    return V{h};
  };
  auto measure = [&](bool checkpointed) {
    x.set_grad(Tensor());
    w.set_grad(Tensor());
    const int64_t before = cpu_allocated_bytes();
    Tensor out = checkpointed ? checkpoint(deep, {x}, {w})[0] : deep({x})[0];
    const int64_t after_forward = cpu_allocated_bytes() - before;
    const size_t retained = graph_retained_bytes(out, {x}).total_bytes;
    sum(out).backward();
    out = Tensor();
    const int64_t after_backward = cpu_allocated_bytes() - before;
    return std::array<int64_t, 3>{after_forward, static_cast<int64_t>(retained), after_backward};
  };
  const auto plain = measure(false), ckpt = measure(true);
  const int64_t one = 64 * 64 * 4;  // bytes of one [64, 64] f32 tensor
  EXPECT_EQ(ckpt[0], one) << "only the output is new after the checkpointed forward";
  EXPECT_EQ(ckpt[1], 0) << "the node saved x alone, which the caller holds";
  EXPECT_GE(plain[0], 4 * one);
  EXPECT_GE(plain[1], 3 * one);
  EXPECT_EQ(ckpt[2], plain[2]) << "after backward: the same gradients, nothing else";
  EXPECT_EQ(ckpt[2], 2 * one);
}

TEST(ActivationCheckpoint, Errors) {
  Tensor x = make_input({2, 2}, 10);
  // A tensor with history read through the closure.
  const Tensor made = scale(x, 2.0);
  V out = checkpoint([made](const V& in) { return V{mul(in[0], made)}; }, {x});
  EXPECT_ERROR_HAS(sum(out[0]).backward(), "closure", "ScaleBackward", "inputs of checkpoint()");
  // An input written into between the forward and the backward.
  const Tensor data = full({2, 2}, 1.0, {.dtype = DType::f64});
  out = checkpoint([x](const V& in) { return V{mul(in[0], x)}; }, {data}, {x});
  add_(data, data);
  EXPECT_ERROR_HAS(sum(out[0]).backward(), "modified by an inplace operation",
                   "CheckpointBackward");
  // Integer outputs carry no gradient.
  EXPECT_ERROR_HAS(checkpoint([](const V& in) { return V{argmax(in[0], 1)}; }, {x}), "output 0",
                   "integer");
  // A function that changes between the runs.
  int calls = 0;
  out = checkpoint([&calls](const V& in) { return V{++calls == 1 ? in[0] : reshape(in[0], {4})}; },
                   {x});
  EXPECT_ERROR_HAS(sum(out[0]).backward(), "same thing each time");
}

}  // namespace
}  // namespace cg
