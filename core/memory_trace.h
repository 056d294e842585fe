// Why this file exists: every figure chunkgrad reports about memory is backed by events
// that say what was allocated, when, how big, for what (a category) and by whom (a scope
// path such as "drafter/layer3/attn"). Events go to one bounded ring buffer; recording
// is switched on at run time and costs one relaxed atomic load per allocation when off.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/device.h"

namespace cg {

// What a block of memory is for. Matches the categories PyTorch's memory_viz colours
// (autograd_saved is ours: tensors the autograd graph keeps for backward).
enum class MemoryCategory : uint8_t {
  unknown,
  parameter,
  gradient,
  optimizer_state,
  activation,
  autograd_saved,
  temporary,
  input
};
const char* category_name(MemoryCategory c);

// saved, phase_begin and phase_end allocate nothing; they annotate the timeline:
// - saved: the autograd node `label` ("RowLossBackward:logits") saved the block at addr
//   for backward (Note [Who holds a block] in trace/trace_analysis.h);
// - phase_begin / phase_end: a training loop's phase `label` ("forward", "backward", ...)
//   starts or ends (TracePhase below).
enum class TraceAction : uint8_t {
  alloc,
  free,
  segment_alloc,
  segment_free,
  oom,
  saved,
  phase_begin,
  phase_end
};
const char* action_name(TraceAction a);

struct TraceEvent {
  int64_t time_us = 0;     // microseconds since the process's first trace call
  uint64_t addr = 0;       // block or segment address (0 for oom)
  uint64_t size = 0;       // rounded block size, segment size, or for oom the requested size
  uint64_t requested = 0;  // bytes the caller asked for (alloc/free), else == size
  uint32_t scope_id = 0;   // index into MemoryTrace::scope_name
  uint32_t label_id = 0;   // saved / phase events: their holder or phase name (same table)
  StreamId stream = kDefaultStream;  // the stream the block or segment belongs to
  Device device;
  TraceAction action = TraceAction::alloc;
  MemoryCategory category = MemoryCategory::unknown;
};

// The process-wide ring buffer. All members are thread-safe.
class MemoryTrace {
 public:
  // Starts recording into a ring of `capacity` events (older ones are overwritten and
  // counted as dropped). Calling enable again clears the buffer.
  static void enable(size_t capacity = size_t{1} << 20);
  static void disable();
  static bool enabled() { return enabled_.load(std::memory_order_relaxed); }
  static void clear();
  // Does nothing when disabled. Category and scope are taken from the calling thread's
  // guards, the stream is the default one (segment and oom events, tests).
  static void record(TraceAction action, Device device, uint64_t addr, uint64_t size,
                     uint64_t requested);
  // Called by the allocator for block events: the block's own category, scope and stream
  // (Note [Block owner] in core/caching_allocator.h), not whatever is active at free time.
  static void record(TraceAction action, Device device, uint64_t addr, uint64_t size,
                     uint64_t requested, MemoryCategory category, uint32_t scope_id,
                     StreamId stream);
  // Annotations (nothing is allocated): `holder` saved the block at addr for backward;
  // a phase starts or ends. Both do nothing when disabled.
  static void record_saved(Device device, uint64_t addr, uint64_t size, const std::string& holder);
  static void record_phase(TraceAction begin_or_end, const std::string& name);
  static std::vector<TraceEvent> events();     // oldest first
  static uint64_t dropped();                   // events overwritten since enable/clear
  static size_t capacity();                    // of the ring (0 before the first enable)
  static std::string scope_name(uint32_t id);  // also names label_id
  static uint32_t intern(const std::string& text);
  static int64_t now_us();
  // {"format":"chunkgrad.memory_trace","version":1,"capacity":C,"dropped":N,
  //  "events":[{"action","time_us","addr","size","requested","device","stream","category",
  //  "scope"[,"label"]}]} -- the raw form. A trace file adds the allocators' end state
  //  (trace/trace_file.h); viewers' formats are built from that (trace/memory_snapshot.h,
  //  trace/chrome_trace.h).
  static nlohmann::json to_json();

 private:
  static void push(const TraceEvent& e);
  static std::atomic<bool> enabled_;
};

// The calling thread's current category; set with CategoryGuard.
MemoryCategory current_category();
// The calling thread's current scope path, "" at top level; pushed with ScopeGuard.
std::string current_scope();
uint32_t current_scope_id();

// RAII: allocations made while alive carry `category` (nests; restores on exit).
class CategoryGuard {
 public:
  explicit CategoryGuard(MemoryCategory category);
  ~CategoryGuard();
  CategoryGuard(const CategoryGuard&) = delete;
  CategoryGuard& operator=(const CategoryGuard&) = delete;

 private:
  MemoryCategory saved_;
};

// RAII: appends "/name" to the thread's scope path while alive.
class ScopeGuard {
 public:
  explicit ScopeGuard(const std::string& name);
  ~ScopeGuard();
  ScopeGuard(const ScopeGuard&) = delete;
  ScopeGuard& operator=(const ScopeGuard&) = delete;

 private:
  uint32_t saved_;
};

// RAII: marks a phase of a training loop ("forward", "loss", "backward", "optimizer
// step") in the trace, so that reports can say in which phase the peak fell and Perfetto
// shows the phase as a span. Phases may nest. Costs nothing when tracing is off.
//   { cg::TracePhase phase("forward"); logits = model(x); }
class TracePhase {
 public:
  explicit TracePhase(std::string name);
  ~TracePhase();
  TracePhase(const TracePhase&) = delete;
  TracePhase& operator=(const TracePhase&) = delete;

 private:
  std::string name_;
};

}  // namespace cg
