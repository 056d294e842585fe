// Why this file exists: memory_lesson's measurements and its words, apart. The program
// (examples/memory_lesson.cpp) runs the three head-loss paths and fills one PathReport per
// path; this half turns the reports into the table, the JSON and the closing text, which
// is derived from the measured numbers (Note [The lesson's text], lesson_report.cpp) and
// checked against them by tests/lessons_program_test.cpp.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/graph_bytes.h"
#include "core/device.h"
#include "ops/head_loss.h"

namespace memory_lesson {

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
  std::string error;              // out of memory under --memory-limit-mb
  std::string trace_until_error;  // the trace file written up to that error ("" if none)
  bool ok() const { return error.empty(); }
  int64_t forward_temporaries() const { return forward_peak - forward_kept; }
};

// The table, the per-node bytes and the lesson's text, on stdout.
void print_table(const std::vector<PathReport>& reports, const Options& o,
                 const cg::HeadLossInputs& in);
// One JSON object {shape, paths, lesson} on stdout.
void print_json(const std::vector<PathReport>& reports, const Options& o,
                const cg::HeadLossInputs& in);

}  // namespace memory_lesson
