// Why this file exists: issue 12's speed and memory targets, measured in one run on a GPU.
// For one shape (T, D, V) and loss it times chunkgrad's three head-loss paths as a user
// calls them (ops/head_loss.h: head_loss forward, then loss.backward()), next to the GEMM
// floor: the same kernel-table gemm calls the fused chunk loop makes (per chunk: the
// logits GEMM and the teacher's, then dh = dlogits W, and dW += dlogits^T h in fp32 for a
// trainable head; with a shared frozen head also the stacked [2c, D] variant, printed to
// show why the loop does not use it: Note [Separate teacher GEMM]), timed in the
// same process on the same buffers' shapes. "fused" is the one-stream loop (head_loss's
// default), "fused-pipelined" the pipelined one (a chunk's row pass and gradient GEMMs on
// a side stream beside the next chunk's logits GEMMs: Note [Pipelined chunks],
// ops/fused_head_loop.cpp); each
// sizes its chunk from the budget, and the floor is printed at both chunks, the ratios
// taken to the one-stream loop's (the first floor row). Medians of --repeats (CUDA events
// on the compute stream, which the side stream joins before head_loss returns, after one
// untimed warm-up). Memory: the caching allocator's allocated
// peak minus the bytes alive before the call (the inputs), and that peak less the
// gradients the call hands back (Note [What the grads column subtracts]).
// bench/fused_loss_torch.py prints PyTorch on the same shapes; bench/run_fused_loss_bench.sh
// runs both for the shapes.
//
//   ./build-gpu/bench/fused_loss_bench --loss kl --head frozen --ce-weight 0.1
//   ./build-gpu/bench/fused_loss_bench --loss kl --ce-weight 0.1 --paths floor,fused,fused-pipelined
//   ./build-gpu/bench/fused_loss_bench --loss ce --head trainable --T 16384 --D 4096 --V 128256
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <string>
#include <vector>

#include <cuda_runtime_api.h>
#include <CLI/CLI.hpp>

#include "core/backend.h"
#include "core/caching_allocator.h"
#include "core/factories.h"
#include "core/views.h"
#include "cuda/compute_stream.h"
#include "cuda/cuda_check.h"
#include "cuda/device_info.h"
#include "cuda/event_timer.h"
#include "examples/common/program.h"
#include "ops/head_loss.h"
#include "ops/kernels.h"

namespace {

struct Options {
  int64_t T = 24576, D = 5120, V = 248320;
  std::string loss = "kl";      // a loss kind's short name (ops/loss_config.h)
  std::string head = "frozen";  // frozen | trainable
  double ce_weight = 0.0;       // teacher kinds: loss = a CE + (1 - a) teacher loss
  std::string paths = "floor,fused,fused-pipelined,chunked,naive";
  int repeats = 5;
  int64_t chunk_rows = 0;
  double budget_mib = 0;  // 0: head_loss's default budget
};

constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;

using cg::median;
using cg::cuda::EventTimer;

struct Row {
  std::string name;
  double ms = 0, peak = 0, peak_less_grads = 0;
  int64_t chunk = 0;
  std::string error;
};

// Note [What the grads column subtracts]: the issue counts the gradients as outputs: dh
// [T, D] (hidden's dtype) and, with a trainable head, dW. peak-grads is the larger of
//   forward peak - what fused's forward holds of them (dh; the fp32 dW accumulator [V, D])
//   step peak    - dh - W.grad [V, D] (head's dtype) - fused's fp32 accumulator
// (naive and chunked hold no gradient in forward, so nothing is subtracted there).
int64_t grad_bytes(const cg::HeadLossInputs& in, cg::HeadLossPath path, bool forward) {
  const bool fused = path == cg::HeadLossPath::fused;
  int64_t b = forward && !fused
                  ? 0
                  : in.hidden.numel() * static_cast<int64_t>(cg::element_size(in.hidden.dtype()));
  if (in.head.requires_grad()) {
    if (fused) b += in.head.numel() * 4;
    if (!forward) b += in.head.numel() * static_cast<int64_t>(cg::element_size(in.head.dtype()));
  }
  return b;
}

// `o` says the path, and for fused whether it runs pipelined.
Row run_path(const std::string& name, const cg::HeadLossInputs& in, const cg::HeadLossOptions& o,
             int repeats, cg::CachingAllocator& alloc, EventTimer& timer) {
  Row row;
  row.name = "chunkgrad " + name;
  const cg::HeadLossPath path = o.path;
  std::vector<double> ms;
  try {
    for (int r = 0; r <= repeats; ++r) {
      in.hidden.set_grad(cg::Tensor());
      if (in.head.requires_grad()) in.head.set_grad(cg::Tensor());
      cg::backend_for(in.hidden.device()).synchronize(in.hidden.device().index);
      const int64_t base = alloc.stats().allocated_bytes.current;
      alloc.reset_peak_stats();
      timer.start();
      int64_t forward_peak = 0;
      {
        cg::HeadLossResult res = cg::head_loss(in, o);
        forward_peak = alloc.stats().allocated_bytes.peak - base;
        res.loss.backward();
        row.chunk = res.chunk_rows;
      }
      const double t = timer.stop_ms();
      if (r > 0) ms.push_back(t);
      const int64_t peak = alloc.stats().allocated_bytes.peak - base;
      row.peak = static_cast<double>(peak) / kGiB;
      row.peak_less_grads = static_cast<double>(std::max(forward_peak - grad_bytes(in, path, true),
                                                         peak - grad_bytes(in, path, false))) /
                            kGiB;
    }
  } catch (const cg::OutOfMemoryError& e) { row.error = e.message(); }
  in.hidden.set_grad(cg::Tensor());
  if (in.head.requires_grad()) in.head.set_grad(cg::Tensor());
  alloc.empty_cache();
  if (row.error.empty()) row.ms = median(ms);
  return row;
}

// The fused loop's GEMMs alone (ops/fused_head_loop.cpp makes the same calls per chunk).
// With a shared frozen head the teacher's logits are either a second GEMM or stacked
// into one [2c, D] x [D, V] GEMM with the student's (`stack`).
Row gemm_floor(const cg::HeadLossInputs& in, const cg::HeadLossOptions& o, int64_t chunk,
               bool stack_rows, int repeats, EventTimer& timer) {
  const cg::Device dev = in.hidden.device();
  cg::DeviceKernels& k = cg::kernels_for(dev, "gemm floor");
  const int64_t T = in.hidden.size(0), D = in.hidden.size(1), V = in.head.size(0);
  const bool teacher = cg::loss_needs_teacher(o.loss);
  const bool stacked = stack_rows && teacher && !in.teacher_head.defined();
  const cg::DType work = k.head_logits_dtype(in.hidden.dtype());
  const int64_t logit_rows = teacher ? 2 * chunk : chunk;
  const cg::Tensor logits = cg::raw::empty({logit_rows, V}, work, dev);
  const cg::Tensor stack =
      stacked ? cg::raw::empty({2 * chunk, D}, in.hidden.dtype(), dev) : cg::Tensor();
  const cg::Tensor dh = cg::raw::empty({T, D}, in.hidden.dtype(), dev);
  const cg::Tensor dw =
      in.head.requires_grad() ? cg::raw::empty({V, D}, cg::DType::f32, dev) : cg::Tensor();
  if (dw.defined()) cg::raw::fill_(dw, 0.0);
  const cg::Tensor head_t = cg::raw::transpose(in.head, 0, 1);
  auto one_pass = [&] {
    for (int64_t r0 = 0; r0 < T; r0 += chunk) {
      const int64_t c = std::min(chunk, T - r0);
      const cg::Tensor hc = cg::raw::narrow(in.hidden, 0, r0, c);
      const cg::Tensor lc = cg::raw::narrow(logits, 0, 0, c);
      if (stacked) {
        // One GEMM over [student rows; teacher rows] (the copies are part of the floor).
        const cg::Tensor sc = cg::raw::narrow(stack, 0, 0, 2 * c);
        cg::raw::copy_(cg::raw::narrow(sc, 0, 0, c), hc);
        cg::raw::copy_(cg::raw::narrow(sc, 0, c, c), cg::raw::narrow(in.teacher_hidden, 0, r0, c));
        k.gemm(sc, head_t, cg::raw::narrow(logits, 0, 0, 2 * c), 1.0, 0.0);
      } else {
        k.gemm(hc, head_t, lc, 1.0, 0.0);
        if (teacher) {
          k.gemm(cg::raw::narrow(in.teacher_hidden, 0, r0, c),
                 cg::raw::transpose(cg::teacher_head_of(in), 0, 1),
                 cg::raw::narrow(logits, 0, chunk, c), 1.0, 0.0);
        }
      }
      k.gemm(lc, in.head, cg::raw::narrow(dh, 0, r0, c), 1.0, 0.0);
      if (dw.defined()) k.gemm(cg::raw::transpose(lc, 0, 1), hc, dw, 1.0, 1.0);
    }
  };
  std::vector<double> ms;
  for (int r = 0; r <= repeats; ++r) {
    timer.start();
    one_pass();
    const double t = timer.stop_ms();
    if (r > 0) ms.push_back(t);
  }
  Row row;
  row.name = stacked ? "GEMM floor (stacked logits)" : "GEMM floor";
  row.ms = median(ms);
  row.chunk = chunk;
  return row;
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"chunkgrad head loss on a GPU: fused / chunked / naive vs the GEMM floor"};
  app.add_option("--T", o.T, "rows (positions)")->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--D", o.D, "hidden size")->check(CLI::Range(int64_t{1}, int64_t{1} << 16));
  app.add_option("--V", o.V, "vocabulary")->check(CLI::Range(int64_t{1}, int64_t{1} << 24));
  app.add_option("--loss", o.loss,
                 cg::loss_kind_choices() +
                     " (teacher kinds: shared frozen head, teacher "
                     "hidden; fused_loss_torch.py has kl and ce)")
      ->check(CLI::IsMember(cg::loss_kind_short_names()));
  app.add_option("--head", o.head, "frozen or trainable")
      ->check(CLI::IsMember({"frozen", "trainable"}));
  app.add_option("--ce-weight", o.ce_weight, "teacher kinds: weight of hard CE in the mix (0..1)")
      ->check(CLI::Range(0.0, 1.0));
  app.add_option("--paths", o.paths,
                 "comma-separated, in order: floor (first, for the ratios), fused (one stream), "
                 "fused-pipelined (a side stream), chunked, naive");
  app.add_option("--repeats", o.repeats, "timed runs per path")->check(CLI::Range(1, 1000));
  app.add_option("--chunk-rows", o.chunk_rows, "rows per chunk (0: from the budget)");
  app.add_option("--budget-mib", o.budget_mib, "chunk budget in MiB (0: head_loss's default)");
  if (const int rc = cg::program::parse_command_line(app, "fused_loss_bench", argc, argv); rc >= 0)
    return rc;
  std::setvbuf(stdout, nullptr, _IOLBF, 0);
  try {
    if (cg::cuda::device_count() == 0) {
      std::printf("no CUDA device: %s\n", cg::cuda::unavailable_reason().c_str());
      return 1;
    }
    const cg::Device dev = cg::cuda_device(0);
    const cg::DType dt = cg::DType::bf16;
    cg::CachingAllocator& alloc = cg::allocator_for(dev);
    EventTimer timer(cg::cuda::compute_stream(0));
    cg::Generator gen(1);
    cg::HeadLossInputs in;
    in.hidden = cg::randn({o.T, o.D}, {.dtype = dt, .device = dev}, &gen).requires_grad_();
    in.head = cg::randn({o.V, o.D}, {.dtype = dt, .device = dev}, &gen, 0.0,
                        1.0 / std::sqrt(double(o.D)));
    if (o.head == "trainable") in.head.requires_grad_();
    std::vector<int64_t> labels(static_cast<size_t>(o.T));
    for (auto& y : labels) y = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(o.V));
    in.labels = cg::from_ints(labels, {o.T},
                              {.dtype = cg::DType::i64, .device = dev});  // keeps the known bounds
    cg::HeadLossOptions hopt;
    hopt.loss.kind = cg::parse_loss_kind(o.loss, "--loss");
    const bool teacher = cg::loss_needs_teacher(hopt.loss);
    if (teacher) {
      hopt.loss.hard_ce_weight = static_cast<float>(o.ce_weight);
      in.teacher_hidden = cg::randn({o.T, o.D}, {.dtype = dt, .device = dev}, &gen);
    }
    hopt.chunk_rows = o.chunk_rows;
    if (o.budget_mib > 0) hopt.chunk_budget_bytes = static_cast<size_t>(o.budget_mib * 1024 * 1024);
    hopt.with_metrics = true;
    cg::HeadLossOptions serial = hopt;
    serial.pipelined = false;
    hopt.pipelined = true;
    const int64_t chunk = cg::head_loss_chunk_rows(in, serial);
    const int64_t pipelined_chunk = cg::head_loss_chunk_rows(in, hopt);
    std::printf(
        "chunkgrad head loss, %s, bf16, T=%lld D=%lld V=%lld, %s%s, head %s, chunk %lld rows "
        "(one stream) / %lld (pipelined), median of %d\n",
        cg::cuda::device_properties(0).summary().c_str(), (long long)o.T, (long long)o.D,
        (long long)o.V, cg::loss_kind_name(hopt.loss.kind),
        teacher && o.ce_weight > 0 ? (" + " + std::to_string(o.ce_weight) + " CE").c_str() : "",
        o.head.c_str(), (long long)chunk, (long long)pipelined_chunk, o.repeats);
    const int64_t in_bytes = alloc.stats().allocated_bytes.current;
    std::printf(
        "inputs %.2f GiB; peak = allocated peak above them; peak-grads = the larger of forward "
        "peak and "
        "step peak less the gradients alive then (Note [What the grads column subtracts]): dh [T, "
        "D] bf16%s\n",
        in_bytes / kGiB,
        in.head.requires_grad() ? ", W.grad [V, D] bf16, fused's fp32 dW accumulator [V, D]" : "");

    std::printf("%-30s %7s %10s %9s %12s %16s\n", "path", "chunk", "ms", "x floor", "peak GiB",
                "peak-grads GiB");
    // Rows print as they are measured (line-buffered), so a run cut short keeps its rows.
    std::stringstream list(o.paths);
    double floor_ms = 0;
    for (std::string n; std::getline(list, n, ',');) {
      Row r;
      if (n == "floor") {
        // The floor is the loop's own GEMMs at the one-stream chunk (the ratios' base), then
        // at the pipelined loop's chunk where that differs; the stacked variant last.
        r = gemm_floor(in, hopt, chunk, false, o.repeats, timer);
        floor_ms = r.ms;
        auto print_floor = [&](const Row& f) {
          std::printf("%-30s %7lld %10.2f %9.3f %12s %16s\n", f.name.c_str(), (long long)f.chunk,
                      f.ms, f.ms / floor_ms, "-", "-");
        };
        if (pipelined_chunk != chunk) {
          print_floor(r);
          r = gemm_floor(in, hopt, pipelined_chunk, false, o.repeats, timer);
          r.name = "GEMM floor (pipelined chunk)";
        }
        if (cg::loss_needs_teacher(hopt.loss) && !in.teacher_head.defined()) {
          print_floor(r);
          r = gemm_floor(in, hopt, chunk, true, o.repeats, timer);
        }
        alloc.empty_cache();
      } else {
        cg::HeadLossOptions p = n == "fused-pipelined" ? hopt : serial;
        p.path = cg::parse_head_loss_path(n == "fused-pipelined" ? "fused" : n);
        r = run_path(n, in, p, o.repeats, alloc, timer);
      }
      if (!r.error.empty()) {
        std::printf("%-30s out of memory: %s\n", r.name.c_str(), r.error.c_str());
        continue;
      }
      std::printf("%-30s %7lld %10.2f %9.3f", r.name.c_str(), (long long)r.chunk, r.ms,
                  floor_ms > 0 ? r.ms / floor_ms : 0.0);
      if (n == "floor")
        std::printf(" %12s %16s\n", "-", "-");
      else
        std::printf(" %12.2f %16.2f\n", r.peak, r.peak_less_grads);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fused_loss_bench: %s\n", e.what());
    return 1;
  }
  return 0;
}
