// Why this file exists: the lesson chunkgrad is built to teach, measured. The same
// lm_head + loss step (hidden [T, D], head [V, D], labels or a teacher) runs under the
// three head-loss paths and the caching allocator reports, for each: the forward peak,
// the step peak (forward + backward), the bytes the autograd graph retains at the end of
// forward (by node type), the loss, and the median time. Sizes default to the DFlash
// shape (24576 x 5120 x 248320) divided by --scale so that it runs on a CPU; with
// --device cuda it runs on a GPU, at full scale (--scale 1) on one H200.
//
//   ./build/examples/memory_lesson                      # table
//   ./build/examples/memory_lesson --json               # one JSON object keyed by path
//   ./build/examples/memory_lesson --loss kl --head trainable --trace-dir traces/
//   ./build-gpu/examples/memory_lesson --device cuda --scale 1 --loss kl --ce-weight 0.1
//   ./build/examples/chunkgrad trace traces/trace_{naive,chunked,fused}.json --html report.html
//
// Besides the peaks, the table splits each forward peak into what forward keeps (the
// graph's saved tensors and the outputs, alive when it returns) and its temporaries
// (freed before it returns), and names the largest block forward allocated: that is
// where naive's fp32 copy of all of [T, V] shows (16-bit logits are computed on in fp32).
// The closing text is derived from these measured numbers, not written in advance; the
// table, the JSON and that text are examples/memory_lesson/lesson_report.cpp's (this file
// measures, that one words).
//
// Bad input (an option out of range, an unwritable --trace-dir, inputs that do not fit
// under --memory-limit-mb) ends the run with one error line and exit code 1
// (examples/common/program.h); a path that runs out of memory is a row of the table, and
// its trace (with --trace-dir) holds the step up to the error, the oom event included.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/backend.h"
#include "core/caching_allocator.h"
#include "core/factories.h"
#include "core/memory_trace.h"
#include "core/views.h"
#include "examples/common/program.h"
#include "examples/memory_lesson/lesson_report.h"
#include "ops/head_loss.h"
#include "ops/ops.h"
#include "trace/trace_file.h"

namespace {

using memory_lesson::Options;
using memory_lesson::PathReport;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The largest block allocated among the trace's events from index `from` on.
int64_t largest_alloc_since(size_t from) {
  const std::vector<cg::TraceEvent> events = cg::MemoryTrace::events();
  int64_t largest = 0;
  for (size_t i = from; i < events.size(); ++i) {
    if (events[i].action == cg::TraceAction::alloc)
      largest = std::max(largest, int64_t(events[i].size));
  }
  return largest;
}

PathReport run_path(cg::HeadLossPath path, const cg::HeadLossInputs& in, cg::HeadLossOptions o,
                    const Options& opt, cg::program::OutputFile* trace) {
  PathReport rep;
  rep.path = cg::head_loss_path_name(path);
  o.path = path;
  const cg::Device dev = in.hidden.device();
  cg::CachingAllocator& alloc = cg::allocator_for(dev);
  std::vector<double> times;
  for (int i = 0; i < opt.repeat; ++i) {
    const bool first = i == 0;
    cg::program::progress("memory_lesson", rep.path + ": step " + std::to_string(i + 1) + " of " +
                                               std::to_string(opt.repeat));
    // The first step is traced: the largest block comes from the trace (and --trace-dir).
    if (first) {
      // Each path's trace starts from an empty cache, so that its reserved bytes (and
      // reserved - allocated) are its own, not the segments an earlier path left cached.
      alloc.empty_cache();
      cg::MemoryTrace::enable(trace ? size_t{1} << 20 : size_t{1} << 16);
    }
    in.hidden.set_grad(cg::Tensor());
    if (in.head.requires_grad()) in.head.set_grad(cg::Tensor());
    const int64_t base = alloc.stats().allocated_bytes.current;
    alloc.reset_peak_stats();
    const auto t0 = std::chrono::steady_clock::now();
    cg::HeadLossResult r;
    {
      cg::TracePhase phase("forward");  // lm_head + loss: one op here
      // What forward makes is activations, unless the op files it otherwise (fused's
      // temporaries and the dh it keeps for backward).
      cg::CategoryGuard category(cg::MemoryCategory::activation);
      cg::ScopeGuard scope(std::string("forward/") + rep.path);  // + "/head_loss" (the op's)
      r = cg::head_loss(in, o);
    }
    if (first) {
      rep.forward_peak = alloc.stats().allocated_bytes.peak - base;
      rep.forward_kept = alloc.stats().allocated_bytes.current - base;
      rep.largest_block = largest_alloc_since(0);
      rep.graph = cg::graph_retained_bytes(r.loss, {in.head, in.labels, in.teacher_hidden});
      rep.loss = cg::to(r.loss, cg::DType::f64).item();
      rep.chunk_rows = r.chunk_rows;
      cg::program::check_finite_loss(rep.loss, "the " + rep.path + " path",
                                     "Try --dtype f32 (16-bit logits can overflow).");
    }
    {
      cg::TracePhase phase("backward");
      cg::ScopeGuard scope(std::string("backward/") + rep.path);
      r.loss.backward();
    }
    cg::backend_for(dev).synchronize(dev.index);  // a GPU's step is done when its work is
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (first) {
      rep.step_peak = alloc.stats().allocated_bytes.peak - base;
      // With the allocator's end state: what `chunkgrad trace` and memory_viz replay from.
      if (trace) trace->write_json(cg::memory_trace_file());
      cg::MemoryTrace::disable();
    }
  }
  rep.median_ms = median(times);
  return rep;
}

void run(const Options& o) {
  // The device first: no GPU (or a CPU-only build) is one error line before any work,
  // naming --device also for a value that is no device name at all.
  const cg::Device dev = cg::resolve_device(o.device, "--device");
  const cg::DeviceCapabilities caps = cg::backend_for(dev).capabilities();
  CG_CHECK(o.memory_limit_mb == 0 || !caps.own_memory,
           "--memory-limit-mb caps the host allocator; it does not "
           "apply to --device ",
           o.device, " (the device's own memory is the limit there)");
  const cg::LossKind kind = cg::parse_loss_kind(o.loss, "--loss");
  CG_CHECK(o.ce_weight == 0 || cg::loss_kind_info(kind).needs_teacher,
           "--ce-weight mixes hard CE into a teacher "
           "loss; --loss ",
           o.loss, " is CE already");
  // Before anything is allocated: the limit holds for everything the run allocates,
  // the inputs included.
  cg::program::set_cpu_memory_limit_mb(o.memory_limit_mb);
  const int64_t T = o.T ? o.T : 24576 / o.scale, D = o.D ? o.D : 5120 / o.scale,
                V = o.V ? o.V : 248320 / o.scale;
  CG_CHECK(T > 0 && D > 0 && V > 0, "--scale ", o.scale, " leaves T=", T, " D=", D, " V=", V,
           ": every size must be at least 1; use a smaller --scale or give --T, --D and --V");
  const cg::DType dtype = cg::parse_dtype(o.dtype);
  cg::HeadLossOptions hopt;
  hopt.loss.kind = kind;
  hopt.loss.hard_ce_weight = static_cast<float>(o.ce_weight);
  hopt.chunk_rows = o.chunk_rows;
  // 0: the lesson's default below, or head_loss's own (a device with no GEMM row floor).
  if (o.chunk_budget_mb > 0)
    hopt.chunk_budget_bytes = static_cast<size_t>(o.chunk_budget_mb * (1 << 20));
  hopt.recompute_in_backward = o.recompute;

  // Before the work: the trace files are opened now, so an unwritable --trace-dir fails
  // before minutes of computing.
  std::vector<std::string> names;
  std::stringstream list(o.paths);
  for (std::string name; std::getline(list, name, ',');) names.push_back(name);
  // A --trace-dir made here goes again when the run fails before writing a trace into it
  // (inputs that do not fit under --memory-limit-mb); it outlives the files opened in it.
  const cg::program::RemoveIfLeftEmpty made_here(o.trace_dir);
  std::map<std::string, cg::program::OutputFile> traces;
  if (!o.trace_dir.empty()) {
    cg::program::make_output_dir(o.trace_dir, "--trace-dir");
    for (const std::string& name : names) {
      traces.emplace(
          name, cg::program::OutputFile(o.trace_dir + "/trace_" + name + ".json", "--trace-dir"));
    }
  }

  cg::Generator gen(1);
  cg::HeadLossInputs in;
  try {
    cg::CategoryGuard category(cg::MemoryCategory::input);
    in.hidden = cg::randn({T, D}, {.dtype = dtype, .device = dev}, &gen).requires_grad_();
    in.head =
        cg::randn({V, D}, {.dtype = dtype, .device = dev}, &gen, 0.0, 1.0 / std::sqrt(double(D)));
    if (o.head == "trainable") in.head.requires_grad_();
    std::vector<int64_t> labels(T);
    for (auto& y : labels) y = static_cast<int64_t>(gen.next_u64() % V);
    in.labels = cg::from_ints(
        labels, {T},
        {.dtype = cg::DType::i64,
         .device = dev});  // keeps the labels' known bounds: no host wait in the label check
    if (cg::loss_needs_teacher(hopt.loss)) {
      in.teacher_hidden = cg::randn({T, D}, {.dtype = dtype, .device = dev}, &gen);
    }
  } catch (const cg::OutOfMemoryError& e) {
    CG_FAIL("the inputs (hidden [", T, ", ", D, "], head [", V, ", ", D, "], labels",
            cg::loss_needs_teacher(hopt.loss) ? ", teacher hidden" : "", ") do not fit",
            o.memory_limit_mb ? cg::detail::concat(" under --memory-limit-mb ", o.memory_limit_mb)
                              : std::string(),
            ": ", e.message());
  }

  // Note [The lesson's chunk]: by default the budget is what a chunk of the device's
  // efficient GEMM rows needs at this shape (or T rows when fewer): 512 on the host (Note
  // [The host's GEMM rows], core/host_backend.cpp). A fixed byte budget picked tiny chunks
  // at large scales (33 rows at --scale 4, where fused ran 7x slower than with 1024) and
  // refused 16-bit trainable heads outright; with the row floor the lesson shows fused at
  // GEMM speed and its peak falls with T/512 at every --scale. A device with no row floor
  // (a GPU) keeps head_loss's own default budget: its GEMMs want thousands of rows
  // (ops/head_loss.h).
  if (o.chunk_rows == 0 && o.chunk_budget_mb == 0 && caps.efficient_gemm_rows > 0) {
    hopt.chunk_budget_bytes =
        cg::head_loss_chunk_bytes(in, hopt, std::min<int64_t>(T, caps.efficient_gemm_rows));
  }
  // A --chunk-budget-mb too small for one row fails here, before any path runs.
  if (o.chunk_rows == 0 && o.chunk_budget_mb > 0) {
    const size_t one_row = cg::head_loss_chunk_bytes(in, hopt, 1);
    CG_CHECK(hopt.chunk_budget_bytes >= one_row, "--chunk-budget-mb ", o.chunk_budget_mb,
             " is too small: one row of a chunk needs ", cg::format_bytes(one_row),
             " at this shape; give at least ", static_cast<double>(one_row) / (1 << 20),
             " or 0 for the default");
  }

  std::vector<PathReport> reports;
  for (const std::string& name : names) {
    auto trace = traces.find(name);
    try {
      reports.push_back(run_path(cg::parse_head_loss_path(name), in, hopt, o,
                                 trace == traces.end() ? nullptr : &trace->second));
    } catch (const cg::OutOfMemoryError& e) {
      PathReport r;
      r.path = name;
      r.error = e.message();  // "out of memory on cpu (...): tried to allocate ..."
      // Note [A trace up to the out-of-memory error]: the traced first step failed, so its
      // trace is written now, the oom event and the frees of the unwinding included. Left
      // unwritten, a trace of an earlier run in the same folder stayed there, and
      // `chunkgrad trace` compared it with this run's other paths without a word.
      if (trace != traces.end() && trace->second.is_open() && cg::MemoryTrace::enabled()) {
        trace->second.write_json(cg::memory_trace_file());
        r.trace_until_error = trace->second.path();
      }
      cg::MemoryTrace::disable();
      reports.push_back(r);
    }
  }
  if (o.json) {
    memory_lesson::print_json(reports, o, in);
  } else {
    memory_lesson::print_table(reports, o, in);
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  cg::program::Program program("memory_lesson",
                               "chunkgrad memory lesson: naive vs chunked vs fused lm_head + loss");
  CLI::App& app = program.app();
  using cg::program::integer_in;
  constexpr int64_t kMaxSize = int64_t{1} << 24;
  app.add_option("--scale", o.scale, "divide the DFlash shape 24576 x 5120 x 248320 by this")
      ->check(integer_in(1, 5120));
  app.add_option("--T", o.T, "positions (rows); overrides --scale")
      ->default_str("24576 / scale")
      ->check(integer_in(1, kMaxSize));
  app.add_option("--D", o.D, "hidden size; overrides --scale")
      ->default_str("5120 / scale")
      ->check(integer_in(1, kMaxSize));
  app.add_option("--V", o.V, "vocabulary; overrides --scale")
      ->default_str("248320 / scale")
      ->check(integer_in(1, kMaxSize));
  app.add_option("--loss", o.loss,
                 cg::loss_kind_choices() + " (teacher losses use a shared frozen head)")
      ->check(cg::program::one_of(cg::loss_kind_short_names()));
  app.add_option("--ce-weight", o.ce_weight,
                 "teacher losses: loss = a CE + (1 - a) teacher loss (0..1)")
      ->check(cg::program::number_in(0, 1));
  app.add_option("--device", o.device, cg::device_names_help() + " (checked before any work)");
  app.add_option("--head", o.head, "frozen | trainable")
      ->check(cg::program::one_of({"frozen", "trainable"}));
  app.add_option("--dtype", o.dtype, "f32 | bf16 | f16 | f64")
      ->check(cg::program::one_of({"f32", "bf16", "f16", "f64"}));
  app.add_option("--paths", o.paths, "comma-separated subset of naive,chunked,fused")
      ->check(cg::program::subset_of({"naive", "chunked", "fused"}));
  app.add_option("--chunk-rows", o.chunk_rows, "rows per chunk (0: from the budget)")
      ->check(integer_in(0, kMaxSize));
  app.add_option("--chunk-budget-mb", o.chunk_budget_mb,
                 "chunk temporaries budget in MiB (0: what a chunk of 512 rows needs)")
      ->check(cg::program::number_in(0, 1 << 20));
  app.add_flag("--recompute", o.recompute, "fused: recompute logits in backward");
  app.add_option("--repeat", o.repeat, "timed repetitions per path (median reported)")
      ->check(integer_in(1, 1000));
  app.add_flag("--json", o.json,
               "print one JSON object {shape, paths, lesson} instead of the table");
  app.add_option("--trace-dir", o.trace_dir,
                 "write trace_<path>.json (allocator events of the first step) here")
      ->check(cg::program::not_empty());
  app.add_option("--memory-limit-mb", o.memory_limit_mb,
                 "cap the host allocator like a smaller card (0 = none); covers everything the run "
                 "allocates")
      ->check(integer_in(0, kMaxSize));
  return program.run(argc, argv, [&] { run(o); });
}
