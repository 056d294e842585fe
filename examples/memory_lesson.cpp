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
// The closing text is derived from these measured numbers, not written in advance.
//
// Bad input (an option out of range, an unwritable --trace-dir, inputs that do not fit
// under --memory-limit-mb) ends the run with one error line and exit code 1
// (examples/common/program.h); a path that runs out of memory is a row of the table.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
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
#include "ops/head_loss.h"
#include "ops/ops.h"
#include "trace/trace_file.h"

namespace {

struct Options {
  int64_t scale = 16;
  int64_t T = 0, D = 0, V = 0;  // 0: DFlash shape / scale (an explicit 0 is refused)
  std::string loss = "ce";      // a loss kind's short name (ops/loss_config.h)
  std::string head = "frozen";  // frozen | trainable
  std::string dtype = "f32";
  std::string device = cg::kCPU.str();
  double ce_weight = 0;  // teacher losses: loss = a CE + (1 - a) teacher loss
  std::string paths = "naive,chunked,fused";
  int64_t chunk_rows = 0;
  double chunk_budget_mb = 0;  // 0: what the device's efficient GEMM rows need (see run())
  bool recompute = false;
  int repeat = 3;
  bool json = false;
  std::string trace_dir;
  int64_t memory_limit_mb = 0;
};

struct PathReport {
  std::string path;
  int64_t forward_peak = 0, step_peak = 0;
  int64_t forward_kept = 0;   // allocated when forward returns (saved tensors, outputs)
  int64_t largest_block = 0;  // the largest single block forward allocated
  cg::GraphMemory graph;
  double loss = 0, median_ms = 0;
  int64_t chunk_rows = 0;
  std::string error;  // out of memory under --memory-limit-mb
  bool ok() const { return error.empty(); }
  int64_t forward_temporaries() const { return forward_peak - forward_kept; }
};

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
      cg::ScopeGuard scope(std::string("head_loss/") + rep.path);
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

std::string mib(int64_t bytes) { return cg::format_bytes(bytes); }

// What the step starts with: the peaks are above these bytes (hidden, head, labels, teacher).
int64_t input_bytes(const cg::HeadLossInputs& in) {
  int64_t n = 0;
  for (const cg::Tensor* t : {&in.hidden, &in.head, &in.labels, &in.teacher_hidden})
    if (t->defined()) n += static_cast<int64_t>(t->nbytes());
  return n;
}

// Note [The lesson's text]: the closing explanation is derived from the measured numbers,
// so that it cannot contradict the table (tests/programs_test.cpp checks each case):
// - with 16-bit logits naive makes fp32 working copies of all of [T, V] (two with a
//   teacher: the student's and the teacher's) and chunked only of one chunk, so chunked's
//   forward peak drops while what its graph keeps does not;
// - in backward chunked makes one chunk's logits gradient at a time, which lowers the step
//   peak, but each chunk's narrow of h passes back a gradient of all of h, [T, D] (zeros
//   outside the chunk), and the engine sums them: when D is near V those [T, D] blocks
//   lift chunked's step peak above naive's (--V 2000 --D 2048);
// - when one chunk holds all T rows, fused makes the whole [T, V] too;
// - --recompute keeps no dh: only the mean's [T] scale, and backward reruns the logits;
// - for f32 CE with a frozen head the fused forward peak is predicted by the byte formula
//   of docs/fused_loss.md and printed beside the measured one.
std::vector<std::string> explain(const std::vector<PathReport>& reports, const Options& o,
                                 int64_t T, int64_t D, int64_t V, cg::DType dtype,
                                 int64_t input_bytes, bool on_cpu) {
  auto find = [&](const std::string& name) -> const PathReport* {
    for (const PathReport& r : reports) {
      if (r.path == name && r.ok()) return &r;
    }
    return nullptr;
  };
  const PathReport *naive = find("naive"), *chunked = find("chunked"), *fused = find("fused");
  const int64_t fp32_logits = 4 * T * V;
  const bool half = cg::element_size(dtype) == 2;
  const bool teacher = cg::loss_kind_info(cg::parse_loss_kind(o.loss, "--loss")).needs_teacher;
  auto near = [&](int64_t bytes, int64_t target) {
    return bytes >= target && bytes < target + target / 20 + 4096;
  };
  auto ratio = [](int64_t a, int64_t b) {
    return cg::detail::concat(std::round(10.0 * double(a) / double(std::max<int64_t>(1, b))) / 10);
  };
  std::vector<std::string> lines;
  std::ostringstream line;
  auto flush = [&] {
    lines.push_back(line.str());
    line.str("");
  };

  if (naive) {
    line << "naive keeps "
         << (teacher ? "two [T, V] logits tensors, the student's and the teacher's,"
                     : "the logits [T, V]")
         << " until backward (its graph retains " << mib(naive->graph.total_bytes)
         << "); its forward peak " << mib(naive->forward_peak) << " adds "
         << mib(naive->forward_temporaries()) << " of temporaries";
    if (half && near(naive->largest_block, fp32_logits)) {
      line << ": its largest block, " << mib(naive->largest_block)
           << ", is an fp32 copy of all of [T, V]";
      const int64_t temps = naive->forward_temporaries();
      if (teacher && temps > 2 * fp32_logits * 95 / 100 && temps < 2 * fp32_logits * 105 / 100)
        line << ", and there are two of them, the student's and the teacher's";
      line << ": the loss works on " << o.dtype << " logits in fp32, and naive converts all " << T
           << " rows at once.";
    } else {
      line << " (its largest block: " << mib(naive->largest_block) << ").";
    }
    flush();
  }
  if (naive && chunked) {
    const double r = double(chunked->forward_peak) / double(naive->forward_peak);
    line << "chunked's forward peak " << mib(chunked->forward_peak);
    if (r < 0.9) {
      line << " is lower than naive's " << mib(naive->forward_peak)
           << ", but only by temporaries: chunked makes "
           << (half ? "its fp32 working copies" : "its working rows") << " one chunk ("
           << chunked->chunk_rows << " rows) at a time, naive for all " << T
           << " rows. What its graph keeps until backward -- every chunk's logits, "
           << mib(chunked->graph.total_bytes) << " -- is what naive's keeps ("
           << mib(naive->graph.total_bytes)
           << "): chunking under autograd does not lower that, so no peak falls below it.";
    } else if (r <= 1.1) {
      line << " is about naive's " << mib(naive->forward_peak)
           << ": its graph keeps every chunk's logits (" << mib(chunked->graph.total_bytes)
           << ", naive's graph " << mib(naive->graph.total_bytes)
           << ") until backward, so chunking under autograd does not lower the forward peak.";
    } else {
      line << " is above naive's " << mib(naive->forward_peak) << ": it keeps the same logits ("
           << mib(chunked->graph.total_bytes) << ") and adds per-chunk temporaries.";
    }
    flush();
    if (chunked->step_peak < naive->step_peak * 0.9) {
      line << "In backward chunked makes one chunk's gradient at a time, so its step peak "
           << mib(chunked->step_peak) << " is below naive's " << mib(naive->step_peak) << ".";
      flush();
    } else if (chunked->step_peak > naive->step_peak * 1.1) {
      line << "chunked's step peak " << mib(chunked->step_peak) << " is above naive's "
           << mib(naive->step_peak) << ": in backward each chunk's narrow of h passes back a "
           << "gradient of all of h, [T, D] = " << mib(4 * T * D)
           << " (zeros outside the chunk), and the engine sums them into one, a copy each time; "
              "at this shape (D = "
           << D << " next to V = " << V << ") a few [T, D] blocks outweigh the [T, V] gradient "
           << "naive makes once. `chunkgrad trace` files them as made in backward by "
              "NarrowBackward.";
      flush();
    }
  }
  if (fused) {
    const PathReport* ref = naive ? naive : chunked;
    if (o.recompute) {
      line << "fused with --recompute keeps no dh: its graph retains "
           << mib(fused->graph.total_bytes)
           << " (the mean's [T] scale; the inputs are the caller's), and backward reruns the "
              "chunk loop, logits GEMMs included: 8TDV FLOPs instead of 6TDV, so expect it "
              "slower than fused without --recompute (run both and compare the median ms).";
      flush();
    }
    const std::string keeps = o.recompute             ? "the mean's [T] scale"
                              : o.head == "trainable" ? "dh [T, D] and dW [V, D]"
                                                      : "dh [T, D]";
    line << "fused's graph keeps only " << keeps << " (" << mib(fused->graph.total_bytes) << ")";
    if (ref && fused->forward_peak < ref->forward_peak * 0.9) {
      line << ", and the logits exist one chunk (" << fused->chunk_rows << " of " << T
           << " rows) at a time, so its forward peak " << mib(fused->forward_peak) << " is "
           << ratio(ref->forward_peak, fused->forward_peak) << "x lower than " << ref->path << "'s "
           << mib(ref->forward_peak) << ".";
    } else if (ref && fused->chunk_rows >= T) {
      line << ", but its forward peak " << mib(fused->forward_peak) << " is not below " << ref->path
           << "'s " << mib(ref->forward_peak) << ": at this size one chunk holds all " << T
           << " rows, so fused makes the whole [T, V] logits at once too. It lowers the peak when "
              "T spans "
              "several chunks: lower --chunk-budget-mb or --chunk-rows, or raise T.";
    } else if (ref) {
      line << ", but its forward peak " << mib(fused->forward_peak) << " is not below " << ref->path
           << "'s " << mib(ref->forward_peak) << ": one chunk's temporaries (" << fused->chunk_rows
           << " rows) and " << keeps
           << " are as large as the [T, V] logits at this shape (D = " << D << " next to V = " << V
           << ").";
    } else {
      line << "; its forward peak is " << mib(fused->forward_peak) << ".";
    }
    flush();
    // The byte formula (docs/fused_loss.md; tests/head_loss_memory_test.cpp) covers f32 CE
    // with a frozen head, metrics on, on the host allocator.
    if (on_cpu && !teacher && o.loss == "ce" && o.dtype == "f32" && o.head == "frozen" &&
        !o.recompute) {
      const int64_t C = std::min(fused->chunk_rows, T);
      int64_t predicted = 0;
      for (int64_t b : {4 * T, 4 * T, 4 * T, 8 * T, 4 * T * D, 4 * C * V})
        predicted += static_cast<int64_t>(cg::CachingAllocator::round_size(static_cast<size_t>(b)));
      line << "byte formula for fused's forward peak: 20 T + 4 T D + 4 C V (C = " << C
           << "), each block rounded to 512 B = " << mib(predicted) << " (" << predicted
           << " B); measured " << mib(fused->forward_peak) << " (" << fused->forward_peak << " B)"
           << (predicted == fused->forward_peak ? ": equal." : ": they differ.");
      flush();
    }
  }
  if (naive && fused && !o.recompute) {
    line << "naive's peak / fused's, three ways from one run: forward peaks above the inputs "
         << ratio(naive->forward_peak, fused->forward_peak) << "x, step peaks above the inputs "
         << ratio(naive->step_peak, fused->step_peak) << "x, step peaks counting the inputs ("
         << mib(input_bytes) << ") "
         << ratio(naive->step_peak + input_bytes, fused->step_peak + input_bytes)
         << "x. The inputs add the same bytes to both sides, which pulls the ratio toward 1; "
            "naive's backward adds a [T, V] gradient that fused never makes.";
    flush();
  }
  return lines;
}

void print_table(const std::vector<PathReport>& reports, const Options& o,
                 const cg::HeadLossInputs& in) {
  const int64_t T = in.hidden.size(0), D = in.hidden.size(1), V = in.head.size(0);
  const size_t el = cg::element_size(in.hidden.dtype());
  std::printf(
      "lm_head + %s loss%s, T=%lld D=%lld V=%lld (%s, head %s, on %s); logits [T, V] = %s in "
      "fp32\n",
      o.loss.c_str(), o.ce_weight > 0 ? cg::detail::concat(" + ", o.ce_weight, " CE").c_str() : "",
      (long long)T, (long long)D, (long long)V, o.dtype.c_str(), o.head.c_str(),
      in.hidden.device().str().c_str(), mib(4 * T * V).c_str());
  std::printf("inputs: hidden %s, head %s, labels %s", mib(T * D * el).c_str(),
              mib(V * D * el).c_str(), mib(in.labels.nbytes()).c_str());
  if (in.teacher_hidden.defined())
    std::printf(", teacher hidden %s", mib(in.teacher_hidden.nbytes()).c_str());
  std::printf(" (not counted below: peaks are above the inputs)\n\n");
  std::printf("%-8s %7s %14s %14s %14s %14s %14s %11s %9s\n", "path", "chunk", "forward peak",
              "= fwd keeps", "+ temporaries", "largest block", "step peak", "loss", "median ms");
  for (const PathReport& r : reports) {
    if (!r.ok()) {
      std::printf("%-8s %s\n", r.path.c_str(), r.error.c_str());
      continue;
    }
    std::printf("%-8s %7lld %14s %14s %14s %14s %14s %11.6f %9.1f\n", r.path.c_str(),
                (long long)r.chunk_rows, mib(r.forward_peak).c_str(), mib(r.forward_kept).c_str(),
                mib(r.forward_temporaries()).c_str(), mib(r.largest_block).c_str(),
                mib(r.step_peak).c_str(), r.loss, r.median_ms);
  }
  std::printf("\nwhat each graph retains at the end of forward, by node:\n");
  for (const PathReport& r : reports) {
    if (!r.ok()) continue;
    std::printf("  %-8s %s:", r.path.c_str(),
                mib(static_cast<int64_t>(r.graph.total_bytes)).c_str());
    for (const auto& [node, bytes] : r.graph.bytes_by_node) {
      std::printf("  %s %s", node.c_str(), mib(static_cast<int64_t>(bytes)).c_str());
    }
    std::printf("\n");
  }
  std::printf("\n");
  for (const std::string& line : explain(reports, o, T, D, V, in.hidden.dtype(), input_bytes(in),
                                         in.hidden.device() == cg::kCPU))
    std::printf("%s\n", line.c_str());
}

void print_json(const std::vector<PathReport>& reports, const Options& o,
                const cg::HeadLossInputs& in) {
  const int64_t T = in.hidden.size(0), D = in.hidden.size(1), V = in.head.size(0);
  nlohmann::json paths = nlohmann::json::object();
  for (const PathReport& r : reports) {
    if (!r.ok()) {
      paths[r.path] = {{"error", r.error}};
      continue;
    }
    paths[r.path] = {{"peak_bytes", r.step_peak},
                     {"forward_peak_bytes", r.forward_peak},
                     {"forward_kept_bytes", r.forward_kept},
                     {"forward_temporary_bytes", r.forward_temporaries()},
                     {"largest_forward_block_bytes", r.largest_block},
                     {"retained_bytes", r.graph.total_bytes},
                     {"retained_by_node", r.graph.bytes_by_node},
                     {"loss", r.loss},
                     {"median_ms", r.median_ms},
                     {"chunk_rows", r.chunk_rows}};
  }
  nlohmann::json out;
  out["shape"] = {{"T", T},
                  {"D", D},
                  {"V", V},
                  {"dtype", o.dtype},
                  {"loss", o.loss},
                  {"head", o.head},
                  {"ce_weight", o.ce_weight},
                  {"device", in.hidden.device().str()}};
  out["paths"] = paths;
  out["lesson"] = explain(reports, o, T, D, V, in.hidden.dtype(), input_bytes(in),
                          in.hidden.device() == cg::kCPU);
  std::cout << out.dump(2) << "\n";
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
      cg::MemoryTrace::disable();
      PathReport r;
      r.path = name;
      r.error = e.message();  // "out of memory on cpu (...): tried to allocate ..."
      reports.push_back(r);
    }
  }
  if (o.json) {
    print_json(reports, o, in);
  } else {
    print_table(reports, o, in);
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
                 "write trace_<path>.json (allocator events of the first step) here");
  app.add_option("--memory-limit-mb", o.memory_limit_mb,
                 "cap the host allocator like a smaller card (0 = none); covers everything the run "
                 "allocates")
      ->check(integer_in(0, kMaxSize));
  return program.run(argc, argv, [&] { run(o); });
}
