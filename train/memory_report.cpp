// Why this file exists: one measured drafter step per head-loss path (memory_report.h).
#include "train/memory_report.h"

#include <cstdio>
#include <fstream>
#include <sstream>

#include "autograd/graph_bytes.h"
#include "core/allocator_stats.h"
#include "core/atomic_file.h"
#include "core/caching_allocator.h"
#include "core/factories.h"
#include "core/memory_trace.h"
#include "ops/shape_ops.h"
#include "trace/trace_file.h"
#include "trace/trace_report.h"
#include "train/drafter_step.h"

namespace cg::train {

double MemoryReport::naive_over_fused() const {
  int64_t naive = 0, fused = 0;
  for (const auto& p : paths) {
    if (!p.oom_phase.empty()) return 0.0;
    if (p.path == "naive") naive = p.step_peak;
    if (p.path == "fused") fused = p.step_peak;
  }
  return fused > 0 ? static_cast<double>(naive) / static_cast<double>(fused) : 0.0;
}

namespace {

MemoryReport measure_paths(const MemoryShape& s, const std::string& trace_dir, uint64_t seed,
                           Device device) {
  MemoryReport report;
  report.shape = s;
  Generator gen(seed);
  nn::DFlashDrafterConfig dc;
  dc.layers.vocab_size = s.vocab;
  dc.layers.hidden_size = s.hidden;
  dc.layers.num_layers = s.drafter_layers;
  dc.layers.num_heads = s.heads;
  dc.layers.num_kv_heads = s.kv_heads;
  dc.layers.head_dim = s.head_dim;
  dc.layers.intermediate_size = s.intermediate;
  for (int64_t i = 0; i < s.target_features; ++i) dc.target_layers.push_back(i);
  dc.mask_token_id = s.vocab - 1;
  Tensor embed, head;
  {
    CategoryGuard category(MemoryCategory::parameter);
    embed = randn({s.vocab, s.hidden}, {.device = device}, &gen, 0.0, 0.02);
    head = randn({s.vocab, s.hidden}, {.device = device}, &gen, 0.0, 0.02);
  }
  nn::DFlashDrafter drafter(dc, embed, head, {.device = device, .generator = &gen});
  // A batch of one sequence per row whose second half is "generated".
  std::vector<DrafterSequence> seqs(static_cast<size_t>(s.batch));
  std::vector<const DrafterSequence*> rows;
  std::vector<std::vector<int64_t>> anchors;
  for (auto& q : seqs) {
    for (int64_t t = 0; t < s.seq_len; ++t) {
      q.ids.push_back(static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(s.vocab - 1)));
      q.loss_mask.push_back(t >= s.seq_len / 2 ? 1 : 0);
    }
    rows.push_back(&q);
    std::vector<uint8_t> all(static_cast<size_t>(s.seq_len), 1);  // anchors anywhere
    anchors.push_back(sample_anchors(all, s.anchors, gen));
  }
  const BlockBatch batch =
      build_block_batch(rows, anchors, s.anchors, s.block_size, 4.0, dc.mask_token_id, 0);
  Tensor features;
  {
    CategoryGuard category(MemoryCategory::input);
    features = randn({s.batch, s.seq_len, s.target_features * s.hidden}, {.device = device}, &gen);
  }
  CachingAllocator& alloc = allocator_for(device);
  DrafterHeadLoss head_loss;  // cross-entropy, the path set below, the run's chunk
  head_loss.loss.ignore_index = kIgnoreLabel;
  head_loss.chunk_rows = s.chunk_rows;
  head_loss.chunk_budget_bytes = s.chunk_budget_bytes;
  check_drafter_chunk(head_loss, s.vocab, s.hidden, head.dtype(), device);  // before any path runs
  for (HeadLossPath path : {HeadLossPath::naive, HeadLossPath::chunked, HeadLossPath::fused}) {
    PathMemory pm;
    pm.path = head_loss_path_name(path);
    drafter.zero_grad();
    const bool trace = !trace_dir.empty();
    // Each path's trace starts from an empty cache, so that its reserved bytes are its own.
    alloc.empty_cache();
    if (trace) MemoryTrace::enable(size_t{1} << 20);
    const int64_t base = alloc.stats().allocated_bytes.current;
    pm.base = base;
    alloc.reset_peak_stats();
    pm.oom_phase = "forward";
    try {
      HeadLossResult r;
      {
        TracePhase phase("forward");
        // What forward makes is activations unless an op files it otherwise.
        CategoryGuard category(MemoryCategory::activation);
        ScopeGuard scope("drafter_step/" + pm.path + "/forward");
        head_loss.path = path;
        r = drafter_loss(drafter, {&batch, features, Tensor()}, head_loss);
      }
      pm.forward_peak = alloc.stats().allocated_bytes.peak - base;
      const GraphMemory g = graph_retained_bytes(r.loss, {embed, head, features});
      pm.graph_bytes = static_cast<int64_t>(g.total_bytes);
      pm.graph_by_node = g.bytes_by_node;
      pm.loss = r.loss.item();
      pm.chunk_rows = r.chunk_rows;
      pm.oom_phase = "backward";
      {
        TracePhase phase("backward");
        ScopeGuard scope("drafter_step/" + pm.path + "/backward");
        r.loss.backward();
      }
      pm.oom_phase.clear();
    } catch (const OutOfMemoryError& e) {  // Note [Out of memory is a row]
      pm.oom_message = e.message();
      if (pm.oom_phase == "forward") pm.forward_peak = alloc.stats().allocated_bytes.peak - base;
    }
    pm.step_peak = alloc.stats().allocated_bytes.peak - base;
    if (trace) {
      pm.trace_file = trace_dir + "/trace_" + s.name + "_" + pm.path + ".json";
      write_memory_trace_file(pm.trace_file);  // events + the allocator's end state
      MemoryTrace::disable();
    }
    report.paths.push_back(pm);
  }
  drafter.zero_grad();
  if (!trace_dir.empty()) {
    std::vector<ReportTrace> traces;
    for (const PathMemory& p : report.paths) {
      traces.push_back({p.path, p.trace_file, analyse_trace(read_trace_file(p.trace_file)), {}});
      traces.back().notes = traces.back().analysis.notes;
    }
    report.report_file = trace_dir + "/report_" + s.name + ".html";
    write_file_atomically(report.report_file, html_report(traces), "the memory report");
  }
  return report;
}

}  // namespace

MemoryReport measure_drafter_step_memory(const MemoryShape& s, const std::string& trace_dir,
                                         uint64_t seed, Device device) {
  try {
    return measure_paths(s, trace_dir, seed, device);
  } catch (const OutOfMemoryError& e) {  // the weights and data alone do not fit
    MemoryTrace::disable();
    MemoryReport report;
    report.shape = s;
    for (HeadLossPath path : {HeadLossPath::naive, HeadLossPath::chunked, HeadLossPath::fused}) {
      PathMemory pm;
      pm.path = head_loss_path_name(path);
      pm.oom_phase = "setup";
      pm.oom_message = e.message();
      report.paths.push_back(pm);
    }
    return report;
  }
}

void set_chunk(MemoryShape& shape, const DrafterConfig& drafter) {
  const DrafterHeadLoss h = drafter_head_loss(drafter);
  shape.chunk_rows = h.chunk_rows;
  shape.chunk_budget_bytes = h.chunk_budget_bytes;
}

void check_memory_chunk(const TrainConfig& config, Device device) {
  if (!config.memory.enabled) return;
  // The report's step: cross-entropy in f32 (measure_paths), at the run's chunk.
  const DrafterHeadLoss h = drafter_eval_head_loss(config.drafter);
  check_drafter_chunk(h, config.memory.large_vocab, config.memory.large_hidden, DType::f32, device);
}

nlohmann::json to_json(const MemoryReport& r) {
  nlohmann::json paths = nlohmann::json::object();
  for (const auto& p : r.paths) {
    paths[p.path] = {{"allocated_before_step_bytes", p.base},
                     {"forward_peak_bytes", p.forward_peak},
                     {"step_peak_bytes", p.step_peak},
                     {"graph_retained_bytes", p.graph_bytes},
                     {"graph_bytes_by_node", p.graph_by_node},
                     {"loss", p.loss},
                     {"chunk_rows", p.chunk_rows},
                     {"trace", p.trace_file}};
    if (!p.oom_phase.empty()) {  // the peaks are what it reached before running out
      paths[p.path]["out_of_memory"] = {{"phase", p.oom_phase}, {"message", p.oom_message}};
    }
  }
  const MemoryShape& s = r.shape;
  return {{"shape",
           {{"name", s.name},
            {"vocab", s.vocab},
            {"hidden", s.hidden},
            {"seq_len", s.seq_len},
            {"anchors", s.anchors},
            {"block_size", s.block_size},
            {"batch", s.batch},
            {"drafter_layers", s.drafter_layers},
            {"chunk_rows", s.chunk_rows},
            {"chunk_budget_bytes", s.chunk_budget_bytes},
            {"positions", s.batch * s.anchors * s.block_size}}},
          {"paths", paths},
          {"naive_over_fused_step_peak", r.naive_over_fused()},
          {"report", r.report_file}};
}

std::string memory_table(const std::vector<MemoryReport>& reports) {
  std::ostringstream o;
  char line[256];
  std::snprintf(line, sizeof line, "%-12s %-8s %14s %14s %14s  %s\n", "config", "path",
                "forward peak", "step peak", "graph keeps", "largest graph node");
  o << line;
  for (const auto& r : reports) {
    for (const auto& p : r.paths) {
      std::string top = "-";
      size_t top_bytes = 0;
      for (const auto& [n, b] : p.graph_by_node) {
        if (b > top_bytes) {
          top = n + " " + format_bytes(b);
          top_bytes = b;
        }
      }
      const bool oom = !p.oom_phase.empty(), fwd_oom = oom && p.oom_phase != "backward";
      std::snprintf(line, sizeof line, "%-12s %-8s %14s %14s %14s  %s\n", r.shape.name.c_str(),
                    p.path.c_str(),
                    fwd_oom ? "out of memory" : format_bytes(p.forward_peak).c_str(),
                    oom ? "out of memory" : format_bytes(p.step_peak).c_str(),
                    fwd_oom ? "-" : format_bytes(p.graph_bytes).c_str(),
                    oom ? ("ran out of memory in " + p.oom_phase).c_str() : top.c_str());
      o << line;
    }
    char ratio[64] = "- (a path ran out of memory)";
    if (r.naive_over_fused() > 0) std::snprintf(ratio, sizeof ratio, "%.1fx", r.naive_over_fused());
    std::snprintf(
        line, sizeof line, "%-12s V=%lld H=%lld positions=%lld: naive / fused step peak = %s\n",
        r.shape.name.c_str(), static_cast<long long>(r.shape.vocab),
        static_cast<long long>(r.shape.hidden),
        static_cast<long long>(r.shape.batch * r.shape.anchors * r.shape.block_size), ratio);
    o << line;
    if (!r.paths.empty() &&
        r.paths.front().oom_phase != "setup") {  // Note [Step peaks are above the base]
      std::snprintf(line, sizeof line,
                    "%-12s peaks above the %s allocated before the step (weights, data); "
                    "its traces' peaks include them\n",
                    r.shape.name.c_str(), format_bytes(r.paths.front().base).c_str());
      o << line;
    }
  }
  return o.str();
}

}  // namespace cg::train
