// Why this file exists: the CPU speed target of chunkgrad, measured in one run. For
// lm_head + cross-entropy with a frozen head (hidden h [T, D] trains, head W [V, D] does
// not) it times, on this machine:
//   gemm            logits = h W^T, one [T, D] x [D, V] product (the floor for the rest)
//   naive           cg::head_loss path naive: logits [T, V], loss, backward to h
//   fused/<rows>    cg::head_loss path fused with that many rows per chunk
// and prints medians over --repeats and their ratios to the GEMM, wall-clock and the
// process's CPU seconds (on a shared machine the CPU seconds measure the work when the
// wall clock measures the neighbours). The defaults are
// memory_lesson --scale 4's shape (T=6144, D=1280, V=62080); head_loss_cpu_torch.py prints
// the same rows for PyTorch, and run_cpu_bench.sh runs both.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ctime>
#include <string>
#include <vector>

#include "core/factories.h"
#include "core/timing.h"
#include "examples/common/program.h"
#include "ops/head_loss.h"
#include "ops/ops.h"
#include "ops/threads.h"

namespace {

struct Options {
  int64_t T = 6144, D = 1280, V = 62080;
  std::string dtype = "f32";
  int repeats = 3;
  std::string chunks = "256,512,1024,2048";
  int threads = 0;  // 0: the library's default
};

struct Seconds {
  double wall = 0, cpu = 0;
};

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// One warm-up, then the medians of the runs' wall-clock and CPU seconds.
template <typename F>
Seconds median_seconds(int repeats, F&& f) {
  f();
  std::vector<double> wall, cpu;
  for (int i = 0; i < std::max(1, repeats); ++i) {
    const double c0 = process_cpu_seconds();
    const cg::Stopwatch watch;
    f();
    wall.push_back(watch.seconds());
    cpu.push_back(process_cpu_seconds() - c0);
  }
  return {cg::median(std::move(wall)), cg::median(std::move(cpu))};
}

// The rows, from options already checked.
void run_bench(const Options& o) {
  if (o.threads > 0) cg::set_num_threads(o.threads);
  const cg::DType dtype = cg::parse_dtype(o.dtype);
  cg::Generator gen(1);
  const cg::Tensor hidden = cg::randn({o.T, o.D}, {.dtype = dtype}, &gen).requires_grad_();
  const cg::Tensor head =
      cg::randn({o.V, o.D}, {.dtype = dtype}, &gen, 0.0, 1.0 / std::sqrt(double(o.D)));
  std::vector<int64_t> label_values(o.T);
  for (auto& y : label_values) y = static_cast<int64_t>(gen.next_u64() % o.V);
  const cg::Tensor labels = cg::from_ints(label_values, {o.T});
  const cg::HeadLossInputs in{hidden, head, labels};

  std::printf(
      "chunkgrad CPU: lm_head + CE, frozen head, T=%lld D=%lld V=%lld, %s, %d threads, "
      "median of %d\n",
      (long long)o.T, (long long)o.D, (long long)o.V, o.dtype.c_str(), cg::get_num_threads(),
      o.repeats);
  std::printf("%-14s %10s %10s %12s %10s %10s\n", "row", "seconds", "x gemm", "GFLOP/s", "cpu s",
              "cpu x gemm");
  const double gemm_flops = 2.0 * double(o.T) * double(o.D) * double(o.V);
  auto row = [&](const std::string& name, Seconds s, Seconds gemm_s, double flops) {
    std::printf("%-14s %10.3f %10.2f %12.1f %10.3f %10.2f\n", name.c_str(), s.wall,
                s.wall / gemm_s.wall, flops / s.wall * 1e-9, s.cpu, s.cpu / gemm_s.cpu);
    std::fflush(stdout);
  };

  const Seconds gemm_s = median_seconds(o.repeats, [&] {
    cg::NoGradGuard no_grad;
    cg::Tensor logits = cg::matmul(hidden, cg::transpose(head, 0, 1));
  });
  row("gemm", gemm_s, gemm_s, gemm_flops);

  // Forward + backward to h: three [T, D, V] GEMMs' worth of work for the naive path
  // (logits, dh = dlogits W) -- 2 GEMMs -- plus the row pass.
  auto loss_step = [&](cg::HeadLossOptions opt) {
    hidden.set_grad(cg::Tensor());
    cg::HeadLossResult r = cg::head_loss(in, opt);
    r.loss.backward();
  };
  cg::HeadLossOptions naive;
  naive.path = cg::HeadLossPath::naive;
  naive.with_metrics = false;
  const Seconds naive_s = median_seconds(o.repeats, [&] { loss_step(naive); });
  row("naive", naive_s, gemm_s, 2 * gemm_flops);

  for (const int64_t rows : cg::program::parse_integer_list(o.chunks)) {
    cg::HeadLossOptions fused;
    fused.path = cg::HeadLossPath::fused;
    fused.with_metrics = false;
    fused.chunk_rows = rows;
    const Seconds s = median_seconds(o.repeats, [&] { loss_step(fused); });
    row("fused/" + std::to_string(rows), s, gemm_s, 2 * gemm_flops);
  }
  std::printf(
      "(GFLOP/s counts 2 T D V per GEMM: 1 for gemm, 2 for the loss rows -- logits and dh)\n");
}

}  // namespace

// Every option is checked before any row runs; bad input is one line and exit 1, as for
// every program (examples/common/program.h).
int main(int argc, char** argv) {
  namespace program = cg::program;
  Options o;
  program::Program prog(
      "head_loss_cpu_bench",
      "chunkgrad CPU benchmark: GEMM, naive and fused lm_head + CE (frozen head)");
  CLI::App& app = prog.app();
  app.add_option("--T", o.T, "positions (rows of h)")
      ->check(program::integer_in(1, int64_t{1} << 24))
      ->capture_default_str();
  app.add_option("--D", o.D, "hidden size")
      ->check(program::integer_in(1, int64_t{1} << 16))
      ->capture_default_str();
  app.add_option("--V", o.V, "vocabulary")
      ->check(program::integer_in(1, int64_t{1} << 24))
      ->capture_default_str();
  app.add_option("--dtype", o.dtype, "element type")
      ->check(program::one_of({"f32", "bf16", "f16", "f64"}))
      ->capture_default_str();
  app.add_option("--repeats", o.repeats, "timed runs per row (median reported)")
      ->check(program::integer_in(1, 1000))
      ->capture_default_str();
  app.add_option("--chunks", o.chunks, "comma-separated rows per chunk for the fused path")
      ->check(program::integer_list_in(1, int64_t{1} << 24))
      ->capture_default_str();
  app.add_option("--threads", o.threads,
                 "threads (0: CHUNKGRAD_NUM_THREADS, OMP_NUM_THREADS or every core)")
      ->check(program::integer_in(0, 4096))
      ->capture_default_str();
  return prog.run(argc, argv, [&] { run_bench(o); });
}
