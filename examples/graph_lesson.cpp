// Why this file exists: the second stop of the reading path (docs/README.md,
// docs/2_what_the_graph_keeps.md). What an autograd graph keeps alive until backward,
// measured with graph_retained_bytes and the allocator on four small cases:
//   1. three ops (matmul, relu, mean): what each node saves;
//   2. the same under no-grad: nothing;
//   3. "kept the loss, kept the graph": losses stored in a list hold every step's graph;
//   4. the chunked path's trap: the backward of a one-row narrow makes a full-size gradient.
//
//   ./build/examples/graph_lesson
#include <cstdio>
#include <vector>

#include "core/caching_allocator.h"
#include "core/factories.h"
#include "examples/common/program.h"
#include "ops/ops.h"

namespace {

constexpr int64_t B = 256, D = 128;  // a batch of 256 rows of 128 features: 128 KiB in fp32

std::string bytes(size_t n) { return cg::format_bytes(static_cast<uint64_t>(n)); }
int64_t allocated() { return cg::allocator_for(cg::kCPU).stats().allocated_bytes.current; }

void lesson() {
  cg::Generator gen(1);
  const cg::Tensor w = cg::randn({D, D}, {}, &gen).requires_grad_();  // a parameter, 64 KiB
  std::printf("x [%lld, %lld] = %s, w [%lld, %lld] = %s (a parameter: never counted)\n",
              (long long)B, (long long)D, bytes(4 * B * D).c_str(), (long long)D, (long long)D,
              bytes(4 * D * D).c_str());

  // 1. Three ops. matmul saves x (for w's gradient) and w (a parameter: not counted);
  //    relu saves its output (the mask's source); mean saves nothing of size B x D.
  {
    const cg::Tensor x = cg::randn({B, D}, {}, &gen);
    const cg::Tensor loss = cg::mean(cg::relu(cg::matmul(x, w)));
    const cg::GraphMemory g = cg::graph_retained_bytes(loss);
    std::printf("\n1. loss = mean(relu(x @ w)): the graph keeps %s\n",
                bytes(g.total_bytes).c_str());
    for (const auto& [node, n] : g.bytes_by_node)
      std::printf("   %-14s %s\n", node.c_str(), bytes(n).c_str());
    loss.backward();
    std::printf("   after backward: %s (the saved tensors are released)\n",
                bytes(cg::graph_retained_bytes(loss).total_bytes).c_str());
  }

  // 2. The same under no-grad: no node is recorded, nothing is kept.
  {
    cg::NoGradGuard no_grad;
    const cg::Tensor x = cg::randn({B, D}, {}, &gen);
    const cg::Tensor loss = cg::mean(cg::relu(cg::matmul(x, w)));
    std::printf("\n2. the same under NoGradGuard: the graph keeps %s\n",
                bytes(cg::graph_retained_bytes(loss).total_bytes).c_str());
  }

  // 3. Kept the loss, kept the graph: a list of losses (for logging) holds each step's x
  //    and relu output; storing loss.item() (or loss.detach()) holds 8 bytes.
  for (const bool keep_graph : {true, false}) {
    std::vector<cg::Tensor> losses;
    const int64_t before = allocated();
    for (int step = 0; step < 4; ++step) {
      const cg::Tensor x = cg::randn({B, D}, {}, &gen);
      const cg::Tensor loss = cg::mean(cg::relu(cg::matmul(x, w)));
      losses.push_back(keep_graph ? loss : loss.detach());
    }
    std::printf("\n3%s. 4 steps, storing %s: %s still allocated afterwards\n",
                keep_graph ? "a" : "b", keep_graph ? "the loss" : "loss.detach()",
                cg::format_bytes(allocated() - before).c_str());
  }

  // 4. One row of h through narrow: its backward returns a gradient of all of h.
  {
    const cg::Tensor h = cg::randn({B, D}, {}, &gen).requires_grad_();
    const cg::Tensor loss = cg::sum(cg::narrow(h, 0, 0, 1));  // one row of 256
    cg::CachingAllocator& a = cg::allocator_for(cg::kCPU);
    a.reset_peak_stats();
    const int64_t before = allocated();
    loss.backward();
    std::printf(
        "\n4. backward of sum(narrow(h, 0, 0, 1)), one row of h [%lld, %lld]: peak %s "
        "above the start (a [%lld, %lld] gradient is %s); h.grad() is [%lld, %lld]\n",
        (long long)B, (long long)D,
        cg::format_bytes(a.stats().allocated_bytes.peak - before).c_str(), (long long)B,
        (long long)D, bytes(4 * B * D).c_str(), (long long)h.grad().size(0),
        (long long)h.grad().size(1));
  }
}

}  // namespace

int main(int argc, char** argv) {
  cg::program::Program program("graph_lesson", "what an autograd graph keeps until backward");
  return program.run(argc, argv, [] { lesson(); });
}
