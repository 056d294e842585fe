// Why this file exists: the main job until the DFlash toy drafter lands. It trains a
// 2-layer MLP (x -> relu(x W1 + b1) W2 + b2) on a synthetic regression task on the CPU
// and tells its memory story from the caching allocator: what the parameters, the batch
// and the autograd graph hold, the peak of a training step, and (optionally) a trace.
//
//   bash tools/run.sh                         # defaults
//   bash tools/run.sh --steps 300 --hidden 1024 --memory-limit-mb 64 --trace trace.json
#include <cstdio>
#include <fstream>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/caching_allocator.h"
#include "core/factories.h"
#include "core/memory_trace.h"
#include "ops/ops.h"

namespace {

struct Options {
  int steps = 300;
  int64_t batch = 256;
  int64_t in = 64;
  int64_t hidden = 512;
  double lr = 0.01;
  uint64_t seed = 1;
  int64_t memory_limit_mb = 0;
  std::string trace_path;
};

struct Mlp {
  cg::Tensor w1, b1, w2, b2;
  std::vector<cg::Tensor> params() const { return {w1, b1, w2, b2}; }
};

Mlp make_mlp(const Options& o, cg::Generator& gen) {
  cg::CategoryGuard category(cg::MemoryCategory::parameter);
  const double s1 = 1.0 / std::sqrt(static_cast<double>(o.in));
  const double s2 = 1.0 / std::sqrt(static_cast<double>(o.hidden));
  Mlp m;
  m.w1 = cg::randn({o.in, o.hidden}, {}, &gen, 0.0, s1).requires_grad_();
  m.b1 = cg::zeros({o.hidden}).requires_grad_();
  m.w2 = cg::randn({o.hidden, 1}, {}, &gen, 0.0, s2).requires_grad_();
  m.b2 = cg::zeros({1}).requires_grad_();
  return m;
}

cg::Tensor forward(const Mlp& m, const cg::Tensor& x) {
  cg::CategoryGuard category(cg::MemoryCategory::activation);
  cg::ScopeGuard scope("mlp");
  cg::Tensor h;
  {
    cg::ScopeGuard layer("layer1");
    h = cg::relu(cg::matmul(x, m.w1) + m.b1);
  }
  cg::ScopeGuard layer("layer2");
  return cg::matmul(h, m.w2) + m.b2;
}

// The target: y = sin(x . a) + 0.1 * (x . b)^2, a smooth function an MLP can learn.
void make_batch(const Options& o, cg::Generator& gen, const cg::Tensor& a, const cg::Tensor& b,
                cg::Tensor& x, cg::Tensor& y) {
  cg::CategoryGuard category(cg::MemoryCategory::input);
  x = cg::randn({o.batch, o.in}, {}, &gen);
  std::vector<double> xs = x.to_vector(), as = a.to_vector(), bs = b.to_vector(), ys(o.batch);
  for (int64_t i = 0; i < o.batch; ++i) {
    double pa = 0, pb = 0;
    for (int64_t j = 0; j < o.in; ++j) {
      pa += xs[i * o.in + j] * as[j];
      pb += xs[i * o.in + j] * bs[j];
    }
    ys[i] = std::sin(pa) + 0.1 * pb * pb;
  }
  y = cg::from_vector(ys, {o.batch, 1});
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"chunkgrad demo: a 2-layer MLP trained on the CPU, with its memory story"};
  app.add_option("--steps", o.steps, "training steps")->check(CLI::PositiveNumber);
  app.add_option("--batch", o.batch, "rows per batch")->check(CLI::PositiveNumber);
  app.add_option("--in", o.in, "input features")->check(CLI::PositiveNumber);
  app.add_option("--hidden", o.hidden, "hidden units")->check(CLI::PositiveNumber);
  app.add_option("--lr", o.lr, "SGD learning rate");
  app.add_option("--seed", o.seed, "random seed");
  app.add_option("--memory-limit-mb", o.memory_limit_mb,
                 "cap the CPU allocator's reserved memory (0 = none), like a smaller card");
  app.add_option("--trace", o.trace_path, "write the allocator's memory trace (JSON) here");
  CLI11_PARSE(app, argc, argv);

  cg::CachingAllocator& allocator = cg::allocator_for(cg::kCPU);
  if (o.memory_limit_mb > 0) allocator.set_memory_limit(static_cast<size_t>(o.memory_limit_mb) << 20);
  if (!o.trace_path.empty()) cg::MemoryTrace::enable();

  try {
    cg::Generator gen(o.seed);
    const cg::Tensor a = cg::randn({o.in}, {}, &gen, 0.0, 1.0 / std::sqrt(double(o.in)));
    const cg::Tensor b = cg::randn({o.in}, {}, &gen, 0.0, 1.0 / std::sqrt(double(o.in)));
    Mlp mlp = make_mlp(o, gen);
    const int64_t param_bytes = allocator.stats().allocated_bytes.current;

    std::printf("chunkgrad MLP demo: batch %lld, %lld -> %lld -> 1, %d steps of SGD (lr %g)\n",
                (long long)o.batch, (long long)o.in, (long long)o.hidden, o.steps, o.lr);
    // Each step draws a new batch, so single losses are noisy: compare window means.
    const int window = std::max(1, std::min(20, o.steps / 2));
    std::vector<double> losses;
    cg::GraphMemory graph;
    int64_t step_peak = 0;
    for (int step = 0; step < o.steps; ++step) {
      cg::Tensor x, y;
      make_batch(o, gen, a, b, x, y);
      allocator.reset_peak_stats();
      cg::Tensor diff = forward(mlp, x) - y;
      cg::Tensor loss = cg::mean(diff * diff);
      if (step == o.steps - 1) graph = cg::graph_retained_bytes(loss);
      loss.backward();
      {
        cg::NoGradGuard no_grad;
        for (cg::Tensor& p : {std::ref(mlp.w1), std::ref(mlp.b1), std::ref(mlp.w2), std::ref(mlp.b2)}) {
          cg::add_(p, p.grad(), -o.lr);
          p.set_grad(cg::Tensor());
        }
      }
      step_peak = allocator.stats().allocated_bytes.peak;
      losses.push_back(loss.item());
      if (step % 50 == 0 || step == o.steps - 1 || std::getenv("CG_VERBOSE")) std::printf("  step %4d  loss %.5f\n", step, losses.back());
    }

    const cg::AllocatorStats s = allocator.stats();
    auto window_mean = [&](size_t begin) {
      double sum = 0;
      for (size_t i = begin; i < begin + window; ++i) sum += losses[i];
      return sum / window;
    };
    const double first = window_mean(0), last = window_mean(losses.size() - window);
    std::printf("\nmean loss of the first %d steps %.5f -> of the last %d steps %.5f (%.1fx lower)\n",
                window, first, window, last, first / last);
    std::printf("\nmemory (all figures from chunkgrad's caching allocator, CPU):\n");
    std::printf("  parameters                  %s\n", cg::format_bytes(param_bytes).c_str());
    std::printf("  graph retained after forward (last step), by node:\n%s", graph.str().c_str());
    std::printf("  peak allocated in one training step: %s\n", cg::format_bytes(step_peak).c_str());
    std::printf("  allocator now:\n%s", s.str().c_str());
    if (!o.trace_path.empty()) {
      std::ofstream(o.trace_path) << cg::MemoryTrace::to_json().dump() << "\n";
      std::printf("  memory trace: %zu events -> %s\n", cg::MemoryTrace::events().size(),
                  o.trace_path.c_str());
    }
  } catch (const cg::OutOfMemoryError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 2;
  }
  return 0;
}
