// Why this file exists: the autograd engine's contract -- composite graphs against finite
// differences, saved tensors freed after backward (to the byte, from the allocator's
// own stats), graph_retained_bytes against hand-computed numbers, retain_graph, no-grad,
// detach, and the errors users hit.
#include <gtest/gtest.h>

#include "autograd/engine.h"
#include "autograd/function.h"
#include "autograd/node.h"
#include "core/caching_allocator.h"
#include "core/factories.h"
#include "core/memory_trace.h"
#include "error_helpers.h"
#include "ops/ops.h"
#include "tests/gradcheck.h"

namespace cg {
namespace {

using testing::error_of;

using testing::make_input;
using V = std::vector<Tensor>;

int64_t cpu_allocated_bytes() { return allocator_for(kCPU).stats().allocated_bytes.current; }

// ---- composite graphs against finite differences -----------------------------------

TEST(AutogradGradcheck, InputUsedTwice) {
  Tensor x = make_input({3, 4}, 100);
  EXPECT_GRADCHECK([](const V& v) { return add(mul(v[0], v[0]), v[0]); }, x);
  EXPECT_GRADCHECK([](const V& v) { return matmul(v[0], transpose(v[0], 0, 1)); }, x);
}

TEST(AutogradGradcheck, DiamondGraph) {
  // x -> a -> (b, c) -> d: gradients of both paths meet at a.
  Tensor x = make_input({4, 5}, 101, 0.05), y = make_input({5}, 102);
  EXPECT_GRADCHECK(
      [](const V& v) {
        Tensor a = relu(v[0]);
        Tensor b = scale(a, 2.0);
        Tensor c = mul(a, v[1]);
        return add(b, mul(c, a));
      },
      x, y);
}

TEST(AutogradGradcheck, SmallMlp) {
  Tensor x = make_input({6, 5}, 103), w1 = make_input({5, 7}, 104), b1 = make_input({7}, 105),
         w2 = make_input({7, 3}, 106), b2 = make_input({3}, 107);
  EXPECT_GRADCHECK(
      [](const V& v) {
        Tensor h = relu(add(matmul(v[0], v[1]), v[2]));
        return mean(add(matmul(h, v[3]), v[4]), {1});
      },
      x, w1, b1, w2, b2);
}

// The harness itself: an op whose backward is deliberately wrong must be caught.
struct WrongIdentityBackward : Node {
  std::string name() const override { return "WrongIdentityBackward"; }
  std::vector<Tensor> backward(std::vector<Tensor>&& grads) override {
    return {scale(grads[0], 1.001)};  // off by 0.1%
  }
};

Tensor wrong_identity(const Tensor& x) {
  Tensor out = scale(x.detach(), 1.0);
  if (auto node = make_node<WrongIdentityBackward>({&x})) set_history(node, out);
  return out;
}

TEST(AutogradGradcheck, HarnessCatchesAWrongGradient) {
  Tensor x = make_input({2, 3}, 108);
  const auto result = testing::gradcheck([](const V& v) { return wrong_identity(v[0]); }, {x});
  EXPECT_FALSE(result.ok) << result.str();
  EXPECT_GT(result.worst_ratio, 1.0);
  EXPECT_TRUE(testing::gradcheck([](const V& v) { return scale(v[0], 1.0); }, {x}).ok);
}

// ---- memory: saved tensors are freed, graph bytes are honest ------------------------

TEST(AutogradMemory, SavedTensorsFreedAfterBackward) {
  const int64_t baseline = cpu_allocated_bytes();
  {
    Generator gen(110);
    Tensor x = randn({16, 32}, {}, &gen);
    Tensor w1 = randn({32, 64}, {}, &gen).requires_grad_();
    Tensor w2 = randn({64, 8}, {}, &gen).requires_grad_();
    const int64_t with_params = cpu_allocated_bytes();
    Tensor loss = mean(matmul(relu(matmul(x, w1)), w2));
    EXPECT_GT(graph_retained_bytes(loss).total_bytes, 0u);
    loss.backward();
    // Every node ran and released what it saved, though loss (and its graph) is alive.
    EXPECT_EQ(graph_retained_bytes(loss).total_bytes, 0u);
    EXPECT_TRUE(loss.grad_fn()->released());
    // What is left beyond x, w1, w2: their two grads and loss itself (one f32).
    const auto block = [](size_t n) {
      return static_cast<int64_t>(CachingAllocator::round_size(n));
    };
    EXPECT_EQ(cpu_allocated_bytes(),
              with_params + block(32 * 64 * 4) + block(64 * 8 * 4) + block(4));
  }
  EXPECT_EQ(cpu_allocated_bytes(), baseline);
}

TEST(AutogradMemory, GraphRetainedBytesOfMlp) {
  // x [5, 7] (an input) -> x @ w1 [7, 9] -> + b1 -> relu -> @ w2 [9, 3] -> mean.
  //   MatmulBackward #1 saves x (w1 needs a grad; x does not, so w1 is not saved)
  //   AddBackward saves nothing; ReluBackward saves its output r [5, 9]
  //   MatmulBackward #2 saves r (already counted) and w2 (a parameter: not counted)
  //   MeanBackward saves nothing.
  Generator gen(111);
  Tensor x = randn({5, 7}, {}, &gen);
  Tensor w1 = randn({7, 9}, {}, &gen).requires_grad_();
  Tensor b1 = randn({9}, {}, &gen).requires_grad_();
  Tensor w2 = randn({9, 3}, {}, &gen).requires_grad_();
  Tensor loss = mean(matmul(relu(add(matmul(x, w1), b1)), w2));

  const GraphMemory m = graph_retained_bytes(loss);
  const size_t x_bytes = 5 * 7 * 4, r_bytes = 5 * 9 * 4, w2_bytes = 9 * 3 * 4;
  EXPECT_EQ(m.total_bytes, x_bytes + r_bytes);  // 140 + 180: storage nbytes, not rounded
  EXPECT_EQ(m.rounded_bytes, 512u + 512u);      // what the allocator actually holds
  EXPECT_EQ(m.parameter_bytes, w2_bytes);
  EXPECT_EQ(m.bytes_by_node.at("MatmulBackward"), x_bytes);
  EXPECT_EQ(m.bytes_by_node.at("ReluBackward"), r_bytes);
  EXPECT_EQ(m.bytes_by_node.size(), 2u);
  EXPECT_EQ(m.node_count, 8u);  // 2 matmul, add, relu, mean, 3 AccumulateGrad
  EXPECT_EQ(m.nodes_by_name.at("AccumulateGrad"), 3u);
  EXPECT_EQ(m.nodes_by_name.at("MatmulBackward"), 2u);
  EXPECT_FALSE(m.str().empty());

  // A leaf's graph and a no-grad tensor's graph retain nothing.
  EXPECT_EQ(graph_retained_bytes(w1).total_bytes, 0u);
  EXPECT_EQ(graph_retained_bytes(x).node_count, 0u);
}

TEST(AutogradMemory, LeafGradsAreCategorisedAsGradients) {
  MemoryTrace::enable(1024);
  Tensor w = ones({64, 64}).requires_grad_();
  sum(scale(w, 2.0)).backward();
  bool found = false;
  for (const TraceEvent& e : MemoryTrace::events()) {
    if (e.action == TraceAction::alloc && e.category == MemoryCategory::gradient &&
        e.requested == 64 * 64 * 4) {
      found = true;
    }
  }
  MemoryTrace::disable();
  EXPECT_TRUE(found) << "w.grad should be allocated under MemoryCategory::gradient";
}

// ---- retain_graph, accumulation, second backward ------------------------------------

TEST(AutogradEngine, RetainGraphAllowsSecondBackwardAndDoublesGrads) {
  Tensor x = make_input({3, 4}, 120), w = make_input({4, 2}, 121);
  Tensor loss = sum(relu(matmul(x, w)));
  loss.backward(Tensor(), /*retain_graph=*/true);
  const auto gx = x.grad().to_vector(), gw = w.grad().to_vector();
  EXPECT_GT(graph_retained_bytes(loss).total_bytes, 0u);
  loss.backward();
  const auto gx2 = x.grad().to_vector(), gw2 = w.grad().to_vector();
  for (size_t i = 0; i < gx.size(); ++i) EXPECT_DOUBLE_EQ(gx2[i], 2 * gx[i]);
  for (size_t i = 0; i < gw.size(); ++i) EXPECT_DOUBLE_EQ(gw2[i], 2 * gw[i]);
  // The second backward did not retain: a third one fails.
  const std::string msg = error_of([&] { loss.backward(); });
  EXPECT_NE(msg.find("Trying to backward through the graph a second time"), std::string::npos)
      << msg;
}

TEST(AutogradEngine, SecondBackwardWithoutRetainThrows) {
  Tensor x = make_input({2, 3}, 122);
  Tensor loss = sum(mul(x, x));
  loss.backward();
  const std::string msg = error_of([&] { loss.backward(); });
  EXPECT_NE(msg.find("Trying to backward through the graph a second time (or directly access "
                     "saved tensors after they have already been freed)"),
            std::string::npos)
      << msg;
  EXPECT_NE(msg.find("Specify retain_graph=true"), std::string::npos) << msg;
}

TEST(AutogradEngine, GradsAccumulateAcrossGraphs) {
  Tensor x = from_vector({1, 2, 3}, {3}, {.dtype = DType::f64}).requires_grad_();
  sum(scale(x, 2.0)).backward();
  sum(mul(x, x)).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{4, 6, 8}));
  x.set_grad(Tensor());
  EXPECT_FALSE(x.grad().defined());
}

TEST(AutogradEngine, MultipleRootsAndExplicitGradient) {
  Tensor x = from_vector({1, 2}, {2}, {.dtype = DType::f64}).requires_grad_();
  Tensor y = scale(x, 3.0);
  Tensor z = mul(x, x);
  backward({y, z}, {from_vector({1, 1}, {2}, {.dtype = DType::f64}),
                    from_vector({10, 100}, {2}, {.dtype = DType::f64})});
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{3 + 20, 3 + 400}));
}

TEST(AutogradEngine, BackwardFromLeafAndThroughUnusedBranches) {
  Tensor x = from_vector({5}, {}, {.dtype = DType::f64}).requires_grad_();
  x.backward();  // a leaf root: grad 1
  EXPECT_EQ(x.grad().item(), 1.0);
  // A view of one part of a tensor: the rest of its gradient is zero.
  Tensor a = from_vector({1, 2, 3, 4}, {4}, {.dtype = DType::f64}).requires_grad_();
  sum(narrow(a, 0, 1, 2)).backward();
  EXPECT_EQ(a.grad().to_vector(), (std::vector<double>{0, 1, 1, 0}));
}

TEST(AutogradEngine, DeepGraphRunsAndFreesWithoutRecursion) {
  // 200k nodes in a chain: backward and destruction must not recurse per node.
  const int64_t baseline = cpu_allocated_bytes();
  {
    Tensor x = from_vector({1}, {}, {.dtype = DType::f64}).requires_grad_();
    Tensor y = x;
    for (int i = 0; i < 200000; ++i) y = add_scalar(y, 1e-6);
    y.backward();
    EXPECT_EQ(x.grad().item(), 1.0);
  }
  EXPECT_EQ(cpu_allocated_bytes(), baseline);
}

// ---- grad mode, detach, leaves ------------------------------------------------------

TEST(AutogradGradMode, NoGradGuardRecordsNothing) {
  Tensor x = ones({2, 2}).requires_grad_();
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(GradMode::is_enabled());
    Tensor y = matmul(mul(x, x), x);
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    EXPECT_TRUE(y.is_leaf());
    {
      AutoGradMode enable(true);
      EXPECT_TRUE(mul(x, x).requires_grad());
    }
    EXPECT_FALSE(GradMode::is_enabled());
  }
  EXPECT_TRUE(GradMode::is_enabled());
  EXPECT_TRUE(mul(x, x).requires_grad());
  EXPECT_FALSE(mul(ones({2}), ones({2})).requires_grad());  // no input requires grad
}

TEST(AutogradGradMode, DetachCutsTheGraph) {
  Tensor x = from_vector({1, 2, 3}, {3}, {.dtype = DType::f64}).requires_grad_();
  Tensor y = scale(x, 2.0).detach();
  EXPECT_FALSE(y.requires_grad());
  EXPECT_TRUE(y.is_leaf());
  Tensor z = mul(y, x);  // d/dx = y only; no path through y
  sum(z).backward();
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>{2, 4, 6}));
  Tensor d = x.detach();
  EXPECT_EQ(d.storage().get(), x.storage().get());
  EXPECT_FALSE(d.requires_grad());
}

TEST(AutogradGradMode, LeavesAndGradFns) {
  Tensor x = ones({2}).requires_grad_();
  EXPECT_TRUE(x.is_leaf());
  Tensor y = relu(x);
  EXPECT_FALSE(y.is_leaf());
  ASSERT_TRUE(y.grad_fn());
  EXPECT_EQ(y.grad_fn()->name(), "ReluBackward");
  EXPECT_EQ(y.grad_fn()->next_edges.size(), 1u);
  EXPECT_EQ(y.grad_fn()->next_edges[0].fn->name(), "AccumulateGrad");
  // One AccumulateGrad per leaf, shared by every op that uses it.
  EXPECT_EQ(relu(x).grad_fn()->next_edges[0].fn, y.grad_fn()->next_edges[0].fn);
  // Later nodes have higher sequence numbers.
  EXPECT_GT(scale(y, 2.0).grad_fn()->sequence_nr(), y.grad_fn()->sequence_nr());
}

// ---- errors ---------------------------------------------------------------------------

TEST(AutogradErrors, BackwardOnNonScalarWithoutGradient) {
  Tensor x = ones({2, 3}).requires_grad_();
  Tensor y = scale(x, 2.0);
  const std::string msg = error_of([&] { y.backward(); });
  EXPECT_NE(msg.find("grad can be implicitly created only for scalar outputs; pass a gradient "
                     "of shape [2, 3]"),
            std::string::npos)
      << msg;
  EXPECT_THROW(y.backward(ones({3, 2})), Error);                         // wrong shape
  EXPECT_THROW(y.backward(ones({2, 3}, {.dtype = DType::f64})), Error);  // wrong dtype
}

TEST(AutogradErrors, BackwardOnTensorWithoutGrad) {
  Tensor x = ones({});
  EXPECT_EQ(error_of([&] { x.backward(); }),
            "element 0 of tensors does not require grad and does not have a grad_fn");
  EXPECT_THROW(scale(x, 2.0).backward(), Error);
  EXPECT_THROW(Tensor().backward(), Error);
}

TEST(AutogradErrors, RequiresGradOnNonLeafOrIntegers) {
  Tensor x = ones({2}).requires_grad_();
  Tensor y = scale(x, 2.0);
  EXPECT_NE(error_of([&] { y.requires_grad_(false); }).find("only leaf tensors"),
            std::string::npos);
  const std::string msg = error_of([] { ones({2}, {.dtype = DType::i64}).requires_grad_(); });
  EXPECT_NE(msg.find("only floating-point tensors"), std::string::npos) << msg;
  EXPECT_THROW(x.set_grad(ones({3})), Error);
  EXPECT_THROW(x.set_grad(ones({2}, {.dtype = DType::f64})), Error);
}

TEST(AutogradErrors, AGradientOfTheWrongShapeForALeafIsABug) {
  // Every op's backward returns its input's shape; AccumulateGrad does not sum a
  // broadcast gradient away but names the node and both shapes.
  Tensor x = ones({2, 3}).requires_grad_();
  const std::shared_ptr<Node> acc = grad_accumulator(x);
  std::vector<Tensor> wrong;
  wrong.push_back(ones({4, 2, 3}));
  const std::string msg = error_of([&] { acc->apply(std::move(wrong)); });
  EXPECT_NE(msg.find("AccumulateGrad"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[4, 2, 3]"), std::string::npos) << msg;
  EXPECT_FALSE(x.grad().defined());
}

TEST(AutogradEngine, GradientsFromTwoPathsAreSummedIntoAFreshTensor) {
  // The engine sums both paths' gradients (in place only into a gradient nobody else
  // holds: Note [Summing in place]), leaving each path's own
  // gradient tensor untouched; .grad then accumulates across backward calls.
  Tensor x = full({3}, 2.0).requires_grad_();
  Tensor y = add(scale(x, 3.0), mul(x, x));  // dy/dx = 3 + 2x = 7
  y.backward(ones({3}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>(3, 7.0)));
  Tensor z = scale(x, 0.5);
  z.backward(ones({3}));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>(3, 7.5)));
}

TEST(AutogradEngine, SummingInPlaceNeverWritesATensorOthersHold) {
  // Note [Summing in place]: the user's root gradient reaches x twice (add's backward
  // passes it on to both inputs); the sum must not go into it.
  Tensor x = full({3}, 2.0).requires_grad_();
  Tensor g = ones({3});
  add(x, x).backward(g);
  EXPECT_EQ(g.to_vector(), (std::vector<double>(3, 1.0)));
  EXPECT_EQ(x.grad().to_vector(), (std::vector<double>(3, 2.0)));
  // Fresh gradients nobody else holds are summed in place: the same values.
  Tensor w = full({3}, 1.0).requires_grad_();
  Tensor u = add(add(mul(w, w), scale(w, 3.0)), exp(scale(w, 0.0)));  // 2w + 3 + 0
  u.backward(ones({3}));
  EXPECT_EQ(w.grad().to_vector(), (std::vector<double>(3, 5.0)));
}

TEST(AutogradEngine, AColumnMajorWeightGetsAColumnMajorGradient) {
  // Note [Gradient in the operand's layout] (ops/linalg.cpp): x @ w^T hands w^T's gradient
  // back in w^T's own (column-major) layout, so w's arrives contiguous, and its values are
  // x^T g as before.
  Tensor x = reshape(arange(0.0, 10.0), {5, 2}).requires_grad_();
  Tensor w = reshape(arange(0.0, 6.0), {3, 2}).requires_grad_();
  {
    Tensor y = matmul(x, transpose(w, 0, 1));  // [5, 3]
    std::vector<Tensor> grads = y.grad_fn()->apply({ones({5, 3})});
    ASSERT_EQ(grads.size(), 2u);
    EXPECT_EQ(grads[1].shape(), (Shape{2, 3}));
    EXPECT_EQ(grads[1].strides(), (Shape{1, 2}));
    // x^T @ ones: column sums of x, 20 and 25, in every column.
    EXPECT_EQ(grads[1].to_vector(), (std::vector<double>{20, 20, 20, 25, 25, 25}));
  }
  sum(matmul(x, transpose(w, 0, 1))).backward();
  EXPECT_TRUE(w.grad().is_contiguous());
  EXPECT_EQ(w.grad().to_vector(), (std::vector<double>{20, 25, 20, 25, 20, 25}));
}

}  // namespace
}  // namespace cg
