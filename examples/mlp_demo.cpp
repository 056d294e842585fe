// Why this file exists: the smallest whole training loop in chunkgrad, kept as a first
// program to read (docs/README.md, stop 2). It trains a 2-layer MLP
// (x -> relu(x W1 + b1) W2 + b2) on a synthetic regression task on the CPU and tells its
// memory story from the caching allocator: what the parameters, the batch and the
// autograd graph hold, the peak of a training step, and (optionally) a trace. (It was the
// main job before the DFlash drafter; `bash tools/run.sh` now runs `chunkgrad train`.)
//
//   ./build/examples/mlp_demo                 # defaults
//   ./build/examples/mlp_demo --steps 300 --hidden 1024 --memory-limit-mb 64 --trace trace.json
//
// Bad input (an option out of range, an unwritable --trace, out of memory, a loss that
// becomes NaN) ends the run with one error line and exit code 1 (examples/common/program.h).
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/backend.h"
#include "core/caching_allocator.h"
#include "core/factories.h"
#include "core/memory_trace.h"
#include "examples/common/program.h"
#include "ops/ops.h"
#include "trace/trace_file.h"

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
  std::string device = cg::kCPU.str();
};

struct Mlp {
  cg::Tensor w1, b1, w2, b2;
  std::vector<cg::Tensor> params() const { return {w1, b1, w2, b2}; }
};

Mlp make_mlp(const Options& o, cg::Generator& gen, cg::Device device) {
  cg::CategoryGuard category(cg::MemoryCategory::parameter);
  const double s1 = 1.0 / std::sqrt(static_cast<double>(o.in));
  const double s2 = 1.0 / std::sqrt(static_cast<double>(o.hidden));
  const cg::TensorOptions on{.device = device};
  Mlp m;
  m.w1 = cg::randn({o.in, o.hidden}, on, &gen, 0.0, s1).requires_grad_();
  m.b1 = cg::zeros({o.hidden}, on).requires_grad_();
  m.w2 = cg::randn({o.hidden, 1}, on, &gen, 0.0, s2).requires_grad_();
  m.b2 = cg::zeros({1}, on).requires_grad_();
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

// The target: y = sin(x . a) + 0.1 * (x . b)^2, a smooth function an MLP can learn. The
// batch is made on the host (the targets are computed there) and uploaded to `device`.
void make_batch(const Options& o, cg::Generator& gen, const cg::Tensor& a, const cg::Tensor& b,
                cg::Device device, cg::Tensor& x, cg::Tensor& y) {
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
  y = cg::from_vector(ys, {o.batch, 1}, {.device = device});
  x = cg::to(x, device);
}

// The bytes the last step's graph keeps, readable: one total, then one indented row per
// node type (GraphMemory::str() is the raw form, in bytes).
void print_graph(const cg::GraphMemory& g) {
  std::printf("  graph retained after forward (last step): %s in saved tensors over %zu nodes\n",
              cg::format_bytes(static_cast<int64_t>(g.total_bytes)).c_str(), g.node_count);
  std::printf("      (%s as allocator blocks; saved parameters, not counted: %s)\n",
              cg::format_bytes(static_cast<int64_t>(g.rounded_bytes)).c_str(),
              cg::format_bytes(static_cast<int64_t>(g.parameter_bytes)).c_str());
  for (const auto& [name, bytes] : g.bytes_by_node) {
    auto count = g.nodes_by_name.find(name);
    const std::string label =
        name + " x" + std::to_string(count == g.nodes_by_name.end() ? 0 : count->second);
    std::printf("      %-26s %12s\n", label.c_str(),
                cg::format_bytes(static_cast<int64_t>(bytes)).c_str());
  }
}

// Each option alone is checked by its validator, but their products are the tensors:
// --batch 16777216 --hidden 16777216 passed and ground for minutes on a 2^48-element
// activation. Every 2-d tensor the demo makes is capped (512 MiB as f32), before anything
// is allocated.
constexpr int64_t kMaxElements = int64_t{1} << 27;

void check_tensor_sizes(const Options& o) {
  auto check = [](const char* a, int64_t x, const char* b, int64_t y, const char* what) {
    CG_CHECK(x <= kMaxElements / y, a, " ", x, " x ", b, " ", y, " = ",
             x * y,  // each at most 2^24: no overflow
             " elements for ", what, ", more than this demo allows (", kMaxElements,
             ", 512 MiB as f32): lower ", a, " or ", b);
  };
  check("--batch", o.batch, "--hidden", o.hidden, "the hidden activations");
  check("--batch", o.batch, "--in", o.in, "the input batch");
  check("--in", o.in, "--hidden", o.hidden, "the first layer's weight");
}

void run(const Options& o) {
  check_tensor_sizes(o);
  const cg::Device device = cg::resolve_device(o.device, "--device");  // before the work
  // A limit with a device of its own memory would cap only the host's batch staging, not
  // "the run" the option promises (memory_lesson refuses the pair too).
  CG_CHECK(o.memory_limit_mb == 0 || !cg::backend_for(device).capabilities().own_memory,
           "--memory-limit-mb caps the host allocator; it does not apply to --device ", o.device,
           " (the device's own memory is the limit there): drop one of them");
  // Before anything is allocated: the limit holds for the whole run.
  cg::program::set_cpu_memory_limit_mb(o.memory_limit_mb);
  // Before the work: a trace that cannot be written fails now, not after the run.
  cg::program::OutputFile trace;
  if (!o.trace_path.empty()) {
    trace = cg::program::OutputFile(o.trace_path, "--trace");
    cg::MemoryTrace::enable();
  }
  cg::CachingAllocator& allocator = cg::allocator_for(device);

  cg::Generator gen(o.seed);
  const cg::Tensor a = cg::randn({o.in}, {}, &gen, 0.0, 1.0 / std::sqrt(double(o.in)));
  const cg::Tensor b = cg::randn({o.in}, {}, &gen, 0.0, 1.0 / std::sqrt(double(o.in)));
  Mlp mlp = make_mlp(o, gen, device);
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
    make_batch(o, gen, a, b, device, x, y);
    allocator.reset_peak_stats();
    cg::Tensor prediction;
    {
      cg::TracePhase phase("forward");
      prediction = forward(mlp, x);
    }
    cg::Tensor loss;
    {
      cg::TracePhase phase("loss");
      cg::Tensor diff = prediction - y;
      loss = cg::mean(diff * diff);
    }
    losses.push_back(loss.item());
    cg::program::check_finite_loss(losses.back(), "step " + std::to_string(step),
                                   cg::detail::concat("Lower --lr (it is ", o.lr, ")."));
    if (step == o.steps - 1) graph = cg::graph_retained_bytes(loss);
    {
      cg::TracePhase phase("backward");
      loss.backward();
    }
    {
      cg::TracePhase phase("optimizer step");
      cg::NoGradGuard no_grad;
      for (cg::Tensor& p :
           {std::ref(mlp.w1), std::ref(mlp.b1), std::ref(mlp.w2), std::ref(mlp.b2)}) {
        cg::add_(p, p.grad(), -o.lr);
        p.set_grad(cg::Tensor());
      }
    }
    step_peak = allocator.stats().allocated_bytes.peak;
    if (step % 50 == 0 || step == o.steps - 1 || std::getenv("CG_VERBOSE")) {
      std::printf("  step %4d  loss %.5f\n", step, losses.back());
      std::fflush(stdout);
    }
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
  std::printf("\nmemory (all figures from chunkgrad's caching allocator, %s):\n",
              device.str().c_str());
  std::printf("  parameters                  %s\n", cg::format_bytes(param_bytes).c_str());
  print_graph(graph);
  std::printf("  peak allocated in one training step: %s\n", cg::format_bytes(step_peak).c_str());
  std::printf("  allocator now:\n%s", s.str().c_str());
  if (trace.is_open()) {
    const size_t events = cg::MemoryTrace::events().size();
    trace.write_json(cg::memory_trace_file());  // events + the allocator's end state
    std::printf("  memory trace: %zu events -> %s\n", events, trace.path().c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  cg::program::Program program("mlp_demo",
                               "chunkgrad demo: a 2-layer MLP trained on the host (or another "
                               "--device), with its memory story");
  CLI::App& app = program.app();
  using cg::program::integer_in;
  app.add_option("--steps", o.steps, "training steps")->check(integer_in(1, 1000000000));
  app.add_option("--batch", o.batch, "rows per batch")->check(integer_in(1, int64_t{1} << 24));
  app.add_option("--in", o.in, "input features")->check(integer_in(1, int64_t{1} << 20));
  app.add_option("--hidden", o.hidden, "hidden units")->check(integer_in(1, int64_t{1} << 24));
  app.add_option("--lr", o.lr, "SGD learning rate")
      ->check(cg::program::number_in(0, 1e6, /*lo_open=*/true));
  app.add_option("--seed", o.seed, "random seed")->check(integer_in(0, INT64_MAX));
  app.add_option("--memory-limit-mb", o.memory_limit_mb,
                 "cap the host allocator's reserved memory (0 = none), like a smaller card; "
                 "covers everything the run allocates")
      ->check(integer_in(0, int64_t{1} << 24));
  app.add_option("--device", o.device, cg::device_names_help() + ": where the MLP trains");
  app.add_option("--trace", o.trace_path, "write the allocator's memory trace (JSON) here")
      ->check(cg::program::not_empty());
  return program.run(argc, argv, [&] { run(o); });
}
