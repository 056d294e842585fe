// Why this file exists: the fused loss of docs/fused_loss.md in about 120 lines of public
// ops, to read before ops/fused_head_loss.cpp. lm_head + mean cross-entropy over h [T, D]
// and a frozen head W [V, D], chunk by chunk of rows:
//   logits_c = h_c W^T            [C, V]   (freed when the chunk ends)
//   loss_c   = lse(logits_c) - logits_c[y]
//   dlogits  = softmax(logits_c) - onehot(y)
//   dh_c     = dlogits W / T      [C, D]   (written into dh, kept)
// all in forward, under no-grad; one custom node (FlceMinBackward) keeps only dh and, in
// backward, multiplies it by the incoming gradient. It is checked against the naive
// cross_entropy(h W^T, y): the same loss, the same dh, and what each graph keeps.
//
//   ./build/examples/flce_min
//   ./build/examples/flce_min --T 512 --D 64 --V 8192 --chunk 64
#include <cmath>
#include <cstdio>

#include <CLI/CLI.hpp>

#include "autograd/function.h"
#include "core/caching_allocator.h"
#include "core/factories.h"
#include "examples/common/program.h"
#include "ops/loss.h"
#include "ops/ops.h"

namespace {

// Keeps dh [T, D] (d mean loss / d h, computed in forward); backward scales it by the
// incoming gradient of the scalar loss. Nothing of size V survives forward.
struct FlceMinBackward : cg::Node {
  size_t dh = 0;  // index of the saved dh
  std::string name() const override { return "FlceMinBackward"; }
  std::vector<cg::Tensor> backward(std::vector<cg::Tensor>&& grads) override {
    return {cg::mul(saved(dh), grads[0])};  // [T, D] times a scalar (broadcast)
  }
};

cg::Tensor flce(const cg::Tensor& h, const cg::Tensor& w, const cg::Tensor& y, int64_t chunk) {
  const int64_t T = h.size(0);
  cg::Tensor dh = cg::zeros(h.shape());
  double total = 0;
  {
    cg::NoGradGuard no_grad;  // nothing below is recorded: the node is made by hand
    const cg::Tensor wt = cg::transpose(w, 0, 1);
    for (int64_t r0 = 0; r0 < T; r0 += chunk) {
      const int64_t c = std::min(chunk, T - r0);
      const cg::Tensor logits = cg::matmul(cg::narrow(h, 0, r0, c), wt);    // [c, V]
      const cg::Tensor yc = cg::unsqueeze(cg::narrow(y, 0, r0, c), 1);      // [c, 1]
      const cg::Tensor picked = cg::squeeze(cg::gather(logits, 1, yc), 1);  // z_y [c]
      total += cg::sum(cg::sub(cg::logsumexp(logits, 1), picked)).item();
      const cg::Tensor minus_one = cg::full({c, 1}, -1.0);
      const cg::Tensor dlogits = cg::scatter_add(cg::softmax(logits, 1), 1, yc, minus_one);
      cg::copy_(cg::narrow(dh, 0, r0, c), cg::scale(cg::matmul(dlogits, w), 1.0 / T));
    }
  }
  cg::Tensor loss = cg::full({}, total / T);
  if (auto node = cg::make_node<FlceMinBackward>({&h})) {
    node->dh = node->save(dh, "dh");
    cg::set_history(node, loss);
  }
  return loss;
}

struct Options {
  int64_t T = 1024, D = 64, V = 8192, chunk = 128;
};

void run(const Options& o) {
  // Before any allocation: h, W, and naive's logits with their gradient ([T, V] f32 each).
  const double T = double(o.T), D = double(o.D), V = double(o.V);
  cg::program::check_fits_in_memory(4 * T * D + 4 * V * D + 8 * T * V,
                                    "h [T, D], the head [V, D] and naive's [T, V] logits and "
                                    "gradient",
                                    "lower --T, --D or --V");
  cg::Generator gen(1);
  const cg::Tensor h = cg::randn({o.T, o.D}, {}, &gen).requires_grad_();
  const cg::Tensor w = cg::randn({o.V, o.D}, {}, &gen, 0.0, 1.0 / std::sqrt(double(o.D)));
  std::vector<int64_t> labels(o.T);
  for (auto& l : labels) l = static_cast<int64_t>(gen.next_u64() % o.V);
  const cg::Tensor y = cg::from_ints(labels, {o.T});
  cg::CachingAllocator& a = cg::allocator_for(cg::kCPU);
  std::printf(
      "T=%lld D=%lld V=%lld chunk=%lld: logits [T, V] = %s, dh [T, D] = %s, one chunk "
      "[C, V] = %s\n",
      (long long)o.T, (long long)o.D, (long long)o.V, (long long)o.chunk,
      cg::format_bytes(4 * o.T * o.V).c_str(), cg::format_bytes(4 * o.T * o.D).c_str(),
      cg::format_bytes(4 * o.chunk * o.V).c_str());
  cg::Tensor grads[2];
  double losses[2];
  for (int fused = 0; fused < 2; ++fused) {
    const int64_t base = a.stats().allocated_bytes.current;
    a.reset_peak_stats();
    const cg::Tensor loss = fused ? flce(h, w, y, o.chunk)
                                  : cg::cross_entropy(cg::matmul(h, cg::transpose(w, 0, 1)), y);
    const int64_t forward_peak = a.stats().allocated_bytes.peak - base;
    const cg::GraphMemory g = cg::graph_retained_bytes(loss, {w, y});
    losses[fused] = loss.item();
    h.set_grad(cg::Tensor());
    loss.backward();
    grads[fused] = h.grad();
    std::printf("%-6s loss %.6f  forward peak %10s  graph keeps %10s  step peak %10s\n",
                fused ? "fused" : "naive", losses[fused], cg::format_bytes(forward_peak).c_str(),
                cg::format_bytes(g.total_bytes).c_str(),
                cg::format_bytes(a.stats().allocated_bytes.peak - base).c_str());
  }
  const cg::Tensor d = cg::sub(grads[0], grads[1]);
  const double diff = std::sqrt(cg::max(cg::mul(d, d)).item());
  std::printf("|loss difference| %.3g, max |dh difference| %.3g\n",
              std::fabs(losses[0] - losses[1]), diff);
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  cg::program::Program program("flce_min", "a minimal fused lm_head + cross-entropy");
  CLI::App& app = program.app();
  using cg::program::integer_in;
  app.add_option("--T", o.T, "rows")->check(integer_in(1, 1 << 16));
  app.add_option("--D", o.D, "hidden size")->check(integer_in(1, 1 << 14));
  app.add_option("--V", o.V, "vocabulary")->check(integer_in(1, 1 << 20));
  app.add_option("--chunk", o.chunk, "rows per chunk")->check(integer_in(1, 1 << 16));
  return program.run(argc, argv, [&] { run(o); });
}
