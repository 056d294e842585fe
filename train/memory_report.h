// Why this file exists: the memory story of the drafter's own training step, measured by
// the caching allocator: one step (forward, backward) under each head-loss path (naive,
// chunked, fused), at the toy config and at a large-vocabulary config the CPU can still
// hold, with the forward peak, the step peak and the bytes the autograd graph retains by
// node at the end of forward, plus one allocator trace per path.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "train/train_config.h"

namespace cg::train {

struct MemoryShape {
  std::string name;  // "toy", "large_vocab"
  int64_t vocab = 0, hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, intermediate = 0;
  int64_t drafter_layers = 1, target_features = 3;
  int64_t seq_len = 0, anchors = 0, block_size = 0, batch = 1;
  // Chunked and fused: the run's drafter.head_loss_chunk_rows and _budget_mb (Note [The
  // drafter's chunk], train/drafter_step.h); 0 rows = as many as the budget holds.
  int64_t chunk_rows = 256;
  size_t chunk_budget_bytes = size_t{3} << 29;
};

struct PathMemory {
  std::string path;
  // Note [Step peaks are above the base]: the peaks count bytes above `base`, what was
  // allocated when the step began (weights, data, the run's other tensors), so that paths
  // compare; an allocator trace of the step (chunkgrad trace) shows base + step_peak.
  int64_t base = 0;
  int64_t forward_peak = 0;  // bytes above the step's base during forward
  int64_t step_peak = 0;     // ... during forward + backward
  int64_t graph_bytes = 0;   // retained by the graph after forward (parameters excluded)
  std::map<std::string, size_t> graph_by_node;
  double loss = 0;
  int64_t chunk_rows = 0;  // rows per chunk the path ran with (T for naive)
  std::string trace_file;  // "" when not traced
  // Note [Out of memory is a row]: under a memory limit (--memory-limit-mb) a path that does
  // not fit is the lesson, not a failure of the run: its row says so, like memory_lesson's.
  // "" when it fit; otherwise "forward", "backward" or "setup" (the config's weights and data
  // alone do not fit), and the allocator's message. The peaks are then what it reached.
  std::string oom_phase, oom_message;
};

struct MemoryReport {
  MemoryShape shape;
  std::vector<PathMemory> paths;    // naive, chunked, fused
  std::string report_file;          // the three traces' HTML report ("" when not traced)
  double naive_over_fused() const;  // step peak ratio (0 when either ran out of memory)
};

// A path that runs out of memory is recorded (PathMemory::oom_phase), never thrown.
// trace_dir: where to write trace_<shape>_<path>.json and their HTML report
// report_<shape>.html (trace/trace_report.h) ("" = none). The step runs on `device` and the
// figures are that device's allocator's.
MemoryReport measure_drafter_step_memory(const MemoryShape& shape, const std::string& trace_dir,
                                         uint64_t seed, Device device = kCPU);
// The shape's chunk fields from the run's drafter config (head_loss_chunk_rows, _budget_mb).
void set_chunk(MemoryShape& shape, const DrafterConfig& drafter);
// Before training: throws naming the config field when the run's chunk budget cannot hold
// one row at the large-vocabulary config (the toy one is the trainer's own shape, which
// the trainer checks).
void check_memory_chunk(const TrainConfig& config, Device device);

nlohmann::json to_json(const MemoryReport& r);
std::string memory_table(const std::vector<MemoryReport>& reports);

}  // namespace cg::train
