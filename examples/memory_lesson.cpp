// Why this file exists: the lesson chunkgrad is built to teach, measured. The same
// lm_head + loss step (hidden [T, D], head [V, D], labels or a teacher) runs under the
// three head-loss paths and the caching allocator reports, for each: the forward peak,
// the step peak (forward + backward), the bytes the autograd graph retains at the end of
// forward (by node type), the loss, and the median time. Sizes default to the DFlash
// shape (24576 x 5120 x 248320) divided by --scale so that it runs on a CPU.
//
//   ./build/examples/memory_lesson                      # table
//   ./build/examples/memory_lesson --json               # one JSON object keyed by path
//   ./build/examples/memory_lesson --loss kl --head trainable --trace-dir traces/
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/caching_allocator.h"
#include "core/factories.h"
#include "core/memory_trace.h"
#include "ops/head_loss.h"
#include "ops/ops.h"

namespace {

struct Options {
  int64_t scale = 16;
  int64_t T = 0, D = 0, V = 0;  // 0: DFlash shape / scale
  std::string loss = "ce";      // ce | kl | rkl | soft_ce
  std::string head = "frozen";  // frozen | trainable
  std::string dtype = "f32";
  std::string paths = "naive,chunked,fused";
  int64_t chunk_rows = 0;
  double chunk_budget_mb = 8;  // small, so that the CPU-sized lesson runs several chunks
  bool recompute = false;
  int repeat = 3;
  bool json = false;
  std::string trace_dir;
  int64_t memory_limit_mb = 0;
};

struct PathReport {
  std::string path;
  int64_t forward_peak = 0, step_peak = 0;
  cg::GraphMemory graph;
  double loss = 0, median_ms = 0;
  int64_t chunk_rows = 0;
  std::string error;  // e.g. out of memory under --memory-limit-mb
};

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

PathReport run_path(cg::HeadLossPath path, const cg::HeadLossInputs& in, cg::HeadLossOptions o,
                    const Options& opt) {
  PathReport rep;
  rep.path = cg::head_loss_path_name(path);
  o.path = path;
  cg::CachingAllocator& alloc = cg::allocator_for(cg::kCPU);
  std::vector<double> times;
  for (int i = 0; i < std::max(1, opt.repeat); ++i) {
    const bool first = i == 0;
    if (first && !opt.trace_dir.empty()) cg::MemoryTrace::enable();
    in.hidden.set_grad(cg::Tensor());
    if (in.head.requires_grad()) in.head.set_grad(cg::Tensor());
    const int64_t base = alloc.stats().allocated_bytes.current;
    alloc.reset_peak_stats();
    const auto t0 = std::chrono::steady_clock::now();
    cg::HeadLossResult r;
    {
      cg::ScopeGuard scope(std::string("head_loss/") + rep.path);
      r = cg::head_loss(in, o);
    }
    if (first) {
      rep.forward_peak = alloc.stats().allocated_bytes.peak - base;
      rep.graph = cg::graph_retained_bytes(r.loss, {in.head, in.labels, in.teacher_hidden});
      rep.loss = cg::to(r.loss, cg::DType::f64).item();
      rep.chunk_rows = r.chunk_rows;
    }
    {
      cg::ScopeGuard scope(std::string("backward/") + rep.path);
      r.loss.backward();
    }
    times.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (first) rep.step_peak = alloc.stats().allocated_bytes.peak - base;
    if (first && !opt.trace_dir.empty()) {
      std::filesystem::create_directories(opt.trace_dir);
      std::ofstream(opt.trace_dir + "/trace_" + rep.path + ".json") << cg::MemoryTrace::to_json().dump() << "\n";
      cg::MemoryTrace::disable();
    }
  }
  rep.median_ms = median(times);
  return rep;
}

cg::LossKind parse_kind(const std::string& s) {
  if (s == "ce") return cg::LossKind::cross_entropy;
  if (s == "kl") return cg::LossKind::forward_kl;
  if (s == "rkl") return cg::LossKind::reverse_kl;
  if (s == "soft_ce") return cg::LossKind::soft_cross_entropy;
  throw CLI::ValidationError("--loss", "expected ce, kl, rkl or soft_ce");
}

void print_table(const std::vector<PathReport>& reports, const Options& o, const cg::HeadLossInputs& in) {
  const int64_t T = in.hidden.size(0), D = in.hidden.size(1), V = in.head.size(0);
  const size_t el = cg::element_size(in.hidden.dtype());
  std::printf("lm_head + %s loss, T=%lld D=%lld V=%lld (%s, head %s); logits [T, V] = %s in fp32\n",
              o.loss.c_str(), (long long)T, (long long)D, (long long)V, o.dtype.c_str(), o.head.c_str(),
              cg::format_bytes(4 * T * V).c_str());
  std::printf("inputs: hidden %s, head %s (not counted below: peaks are above the inputs)\n\n",
              cg::format_bytes(T * D * el).c_str(), cg::format_bytes(V * D * el).c_str());
  std::printf("%-8s %8s %14s %14s %16s %12s %10s\n", "path", "chunk", "forward peak", "step peak",
              "graph retains", "loss", "median ms");
  for (const PathReport& r : reports) {
    if (!r.error.empty()) {
      std::printf("%-8s %s\n", r.path.c_str(), r.error.c_str());
      continue;
    }
    std::printf("%-8s %8lld %14s %14s %16s %12.6f %10.1f\n", r.path.c_str(), (long long)r.chunk_rows,
                cg::format_bytes(r.forward_peak).c_str(), cg::format_bytes(r.step_peak).c_str(),
                cg::format_bytes(static_cast<int64_t>(r.graph.total_bytes)).c_str(), r.loss, r.median_ms);
  }
  std::printf("\nwhat each graph retains at the end of forward, by node:\n");
  for (const PathReport& r : reports) {
    if (!r.error.empty()) continue;
    std::printf("  %s:", r.path.c_str());
    for (const auto& [node, bytes] : r.graph.bytes_by_node) {
      std::printf("  %s %s", node.c_str(), cg::format_bytes(static_cast<int64_t>(bytes)).c_str());
    }
    std::printf("\n");
  }
  std::printf("\nnaive keeps the logits [T, V]; chunked keeps every chunk's logits -- the same\n"
              "bytes -- so its forward peak does not drop; fused keeps dh [T, D] (and dW when\n"
              "the head trains), and its peak is one chunk's logits on top of that.\n");
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  CLI::App app{"chunkgrad memory lesson: naive vs chunked vs fused lm_head + loss"};
  app.add_option("--scale", o.scale, "divide the DFlash shape 24576 x 5120 x 248320 by this")->check(CLI::PositiveNumber);
  app.add_option("--T", o.T, "positions (rows); overrides --scale");
  app.add_option("--D", o.D, "hidden size; overrides --scale");
  app.add_option("--V", o.V, "vocabulary; overrides --scale");
  app.add_option("--loss", o.loss, "ce | kl | rkl | soft_ce (teacher losses use a shared frozen head)");
  app.add_option("--head", o.head, "frozen | trainable")->check(CLI::IsMember({"frozen", "trainable"}));
  app.add_option("--dtype", o.dtype, "f32 | bf16 | f16 | f64")->check(CLI::IsMember({"f32", "bf16", "f16", "f64"}));
  app.add_option("--paths", o.paths, "comma-separated subset of naive,chunked,fused");
  app.add_option("--chunk-rows", o.chunk_rows, "rows per chunk (0: from the budget)");
  app.add_option("--chunk-budget-mb", o.chunk_budget_mb, "chunk temporaries budget in MiB");
  app.add_flag("--recompute", o.recompute, "fused: recompute logits in backward");
  app.add_option("--repeat", o.repeat, "timed repetitions per path (median reported)");
  app.add_flag("--json", o.json, "print one JSON object keyed by path instead of the table");
  app.add_option("--trace-dir", o.trace_dir, "write trace_<path>.json (allocator events) here");
  app.add_option("--memory-limit-mb", o.memory_limit_mb, "cap the CPU allocator like a smaller card");
  CLI11_PARSE(app, argc, argv);

  const int64_t T = o.T ? o.T : 24576 / o.scale, D = o.D ? o.D : 5120 / o.scale,
                V = o.V ? o.V : 248320 / o.scale;
  const cg::DType dtype = cg::parse_dtype(o.dtype);
  cg::HeadLossOptions hopt;
  try {
    hopt.loss.kind = parse_kind(o.loss);
  } catch (const CLI::Error& e) {
    return app.exit(e);
  }
  hopt.chunk_rows = o.chunk_rows;
  if (o.chunk_budget_mb > 0) hopt.chunk_budget_bytes = static_cast<size_t>(o.chunk_budget_mb * (1 << 20));
  hopt.recompute_in_backward = o.recompute;

  cg::Generator gen(1);
  cg::HeadLossInputs in;
  {
    cg::CategoryGuard category(cg::MemoryCategory::input);
    in.hidden = cg::randn({T, D}, {.dtype = dtype}, &gen).requires_grad_();
    in.head = cg::randn({V, D}, {.dtype = dtype}, &gen, 0.0, 1.0 / std::sqrt(double(D)));
    if (o.head == "trainable") in.head.requires_grad_();
    std::vector<int64_t> labels(T);
    for (auto& y : labels) y = static_cast<int64_t>(gen.next_u64() % V);
    in.labels = cg::from_ints(labels, {T});
    if (cg::loss_needs_teacher(hopt.loss)) in.teacher_hidden = cg::randn({T, D}, {.dtype = dtype}, &gen);
  }
  if (o.memory_limit_mb > 0) cg::allocator_for(cg::kCPU).set_memory_limit(size_t(o.memory_limit_mb) << 20);

  std::vector<PathReport> reports;
  std::stringstream list(o.paths);
  for (std::string name; std::getline(list, name, ',');) {
    try {
      reports.push_back(run_path(cg::parse_head_loss_path(name), in, hopt, o));
    } catch (const cg::OutOfMemoryError& e) {
      PathReport r;
      r.path = name;
      r.error = std::string("out of memory: ") + e.message();
      reports.push_back(r);
    } catch (const cg::Error& e) {
      std::fprintf(stderr, "%s\n", e.what());
      return 1;
    }
  }

  if (o.json) {
    nlohmann::json out;
    for (const PathReport& r : reports) {
      nlohmann::json j;
      if (!r.error.empty()) {
        j["error"] = r.error;
      } else {
        j = {{"peak_bytes", r.step_peak},     {"forward_peak_bytes", r.forward_peak},
             {"retained_bytes", r.graph.total_bytes}, {"retained_by_node", r.graph.bytes_by_node},
             {"loss", r.loss},                {"median_ms", r.median_ms},
             {"chunk_rows", r.chunk_rows}};
      }
      out[r.path] = j;
    }
    out["shape"] = {{"T", T}, {"D", D}, {"V", V}, {"dtype", o.dtype}, {"loss", o.loss}, {"head", o.head}};
    std::cout << out.dump(2) << "\n";
  } else {
    print_table(reports, o, in);
  }
  return 0;
}
