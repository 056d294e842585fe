// Why this file exists: people open a memory trace to ask one question -- what held the
// memory at the peak, and why was it still alive? This answers it from a trace file
// alone: it replays the events (from the start state that the end state and the events
// imply, as memory_viz does), finds the peak of allocated bytes, and groups the blocks
// alive then by category, by scope and by the autograd node that saved them.
//
// Note [Who holds a block]: the allocator knows who allocated a block (its category and
// scope, Note [Block owner]); autograd knows who keeps it: Node::save records a `saved`
// event for the block's address with the label "<node name>:<what>" (e.g.
// "RowLossBackward:logits"). A block alive at the peak with such a label is held by the
// graph for backward -- the reason it was still alive. The label belongs to the block's
// whole life, from its allocation to its free: fused allocates dh before its loop and
// saves it after, and at a peak inside the loop dh is already what the graph will keep.
// One limitation: nothing is
// recorded when backward releases the saved tensors, so a block that outlives its node
// (kept by the caller as well) still names the node.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "trace/trace_file.h"

namespace cg {

constexpr int kNumMemoryCategories = static_cast<int>(MemoryCategory::input) + 1;

struct TimelinePoint {
  int64_t time_us = 0;
  size_t event = 0;  // index into TraceFile::events after which this holds (SIZE_MAX: start)
  int64_t allocated = 0, reserved = 0;
  std::array<int64_t, kNumMemoryCategories> by_category{};  // allocated bytes
};

struct LiveBlock {
  uint64_t addr = 0, size = 0, requested = 0;
  MemoryCategory category = MemoryCategory::unknown;
  uint32_t scope = 0;             // TraceFile::names
  std::vector<uint32_t> holders;  // labels of the nodes that saved it, first one first
  bool before_trace = false;      // allocated before the first event kept
};

struct MemoryGroup {
  std::string name;
  int64_t bytes = 0;
  int64_t blocks = 0;
};

struct PhaseSpan {
  std::string name;
  int64_t begin_us = 0, end_us = 0;
  size_t begin_event = 0, end_event = 0;
  int depth = 0;  // nesting level, 0 outermost
};

struct TraceAnalysis {
  std::string device;
  int64_t start_us = 0, end_us = 0;
  // At most ~kTimelinePoints points: each stands for a run of events and is the one with
  // the most allocated bytes in it, so the peak is always a point.
  std::vector<TimelinePoint> timeline;
  TimelinePoint peak;                   // the first time allocated reached its maximum
  std::vector<LiveBlock> live_at_peak;  // largest first
  std::vector<MemoryGroup> by_category, by_scope, by_holder;  // largest first
  std::vector<PhaseSpan> phases;
  std::string peak_phase;  // innermost phase around the peak ("" if none)
  std::vector<TraceRecord> ooms;
  // At the first out-of-memory event, when there is one: what held the memory when the
  // request was refused (a failing step's trace peaks earlier, often in another phase).
  struct AtOom {
    size_t event = SIZE_MAX;                          // index into TraceFile::events
    TimelinePoint point;                              // allocated and reserved then
    std::string phase;                                // innermost phase around it ("" if none)
    std::vector<MemoryGroup> by_category, by_holder;  // largest first
  };
  std::optional<AtOom> at_first_oom;
  size_t events = 0;               // events of this device
  size_t inconsistencies = 0;      // events that do not fit the replay (Note [Inconsistent events])
  std::vector<std::string> notes;  // partial trace, inconsistencies: say them with the answer
  // Reserved minus allocated at the peak: free blocks the cache keeps and the unused ends
  // of segments. People call it fragmentation; mostly it is not (only free blocks too
  // small or scattered for the next request are: docs/1_tensors_and_the_allocator.md).
  int64_t cached_unallocated() const { return peak.reserved - peak.allocated; }
  // cached_unallocated() for a report: a negative one (reserved below allocated, which only a
  // partial or inconsistent trace shows) is flagged, never a bare "-512 B".
  std::string cached_unallocated_text() const;
  // The largest holder that is an autograd node (by_holder minus the "not saved" group):
  // the allocator blocks live at the peak, each counted once, for the first node that
  // saved it (kHolderCounting says so in reports).
  const MemoryGroup* top_saved_holder() const;
};

constexpr size_t kTimelinePoints = 1500;
// How "largest autograd holder" counts, for the reports that print it: `chunkgrad train`'s
// memory table counts otherwise (a node name's saved tensors once the forward is done), so
// the two can name different nodes for the same step.
extern const char* const kHolderCounting;
extern const char* const kNotSavedGroup;  // by_holder's group of blocks no node saved
// by_holder's groups of unsaved blocks a node's backward made: this prefix, the node, ")".
extern const char* const kMadeInBackwardGroup;

// device: index into file.devices; -1 picks the device that ran out of memory first, or
// without one the device with the most allocations.
TraceAnalysis analyse_trace(const TraceFile& file, int device = -1);

// For each event of the file: whether the replay leaves it out (Note [Inconsistent events]
// in trace_analysis.cpp): an allocation or free of a block outside every segment the trace
// knows at that time. The memory_viz snapshot leaves the same events out, so that its
// viewer never meets a block outside its segments; analyse_trace's note says they were.
std::vector<bool> events_left_out(const TraceFile& file);

// The blocks alive right after event `event` (SIZE_MAX: before the first) of `device`,
// by address: what a viewer shows when it replays to that event. Holders include nodes
// that save a block later in its life (Note [Who holds a block]).
std::vector<LiveBlock> live_blocks_after(const TraceFile& file, int device, size_t event);

}  // namespace cg
