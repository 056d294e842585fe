// Why this file exists: the replay behind analyse_trace (see trace/trace_analysis.h).
#include "trace/trace_analysis.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>

#include "core/allocator_stats.h"
#include "core/error.h"

namespace cg {

const char* const kNotSavedGroup = "(not saved for backward)";
const char* const kMadeInBackwardGroup = "(not saved: made in backward by ";

namespace {

// A block no node saved: when a node's backward allocated it (the engine's scope while a
// trace records, "backward/chunked/NarrowBackward"), say which node; otherwise the plain
// group.
std::string unsaved_group(const TraceFile& file, const LiveBlock& b) {
  if (b.scope == 0) return kNotSavedGroup;
  const std::string scope = file.name(b.scope);
  const std::string last = scope.substr(scope.rfind('/') + 1);
  const std::string suffix = "Backward";
  if (last.size() > suffix.size() &&
      last.compare(last.size() - suffix.size(), suffix.size(), suffix) == 0)
    return kMadeInBackwardGroup + last + ")";
  return kNotSavedGroup;
}

bool changes_memory(TraceAction a) {
  return a == TraceAction::alloc || a == TraceAction::free || a == TraceAction::segment_alloc ||
         a == TraceAction::segment_free;
}

// The allocator's state of one device, replayed event by event.
// Note [Held by the graph, one colour]: a block a node saves for backward is coloured
// autograd_saved whatever category it was allocated under. naive's logits are allocated
// as activations and saved later by RowLossBackward, fused's dh is allocated as
// autograd_saved: without this the lesson's key concept -- bytes the graph holds -- was
// orange in two pictures and red in the third. The replay looks ahead once for the
// allocations that a `saved` event names before their free.
struct Replay {
  Replay(const TraceFile& f, int d) : file(f), device(d) {
    std::unordered_map<uint64_t, size_t> live_ordinal;
    size_t ordinal = 0;
    for (const TraceRecord& e : file.events) {
      if (e.device != device) continue;
      if (e.action == TraceAction::alloc) {
        live_ordinal[e.addr] = ordinal++;
      } else if (e.action == TraceAction::free) {
        live_ordinal.erase(e.addr);
      } else if (e.action == TraceAction::saved) {
        auto it = live_ordinal.find(e.addr);
        if (it != live_ordinal.end()) saved_allocs.insert(it->second);
      }
    }
  }
  const TraceFile& file;
  int device;
  std::unordered_set<size_t> saved_allocs;  // ordinals of this device's alloc events
  size_t allocs_applied = 0;
  std::unordered_map<uint64_t, LiveBlock> live;
  int64_t allocated = 0, reserved = 0;
  std::array<int64_t, kNumMemoryCategories> by_category{};
  size_t inconsistencies = 0;

  void add(const LiveBlock& b) {
    allocated += static_cast<int64_t>(b.size);
    by_category[static_cast<int>(b.category)] += static_cast<int64_t>(b.size);
  }
  void remove(const LiveBlock& b) {
    allocated -= static_cast<int64_t>(b.size);
    by_category[static_cast<int>(b.category)] -= static_cast<int64_t>(b.size);
  }

  // The state before the first event: the end state with the events undone, last first
  // (what memory_viz does with a snapshot's segments and trace).
  void start() {
    for (const SegmentRecord& s : file.segments) {
      if (s.device != device) continue;
      reserved += static_cast<int64_t>(s.size);
      for (const BlockRecord& b : s.blocks) {
        if (b.allocated)
          live[b.addr] = LiveBlock{b.addr, b.size, b.requested, b.category, b.scope, {}, true};
      }
    }
    for (auto it = file.events.rbegin(); it != file.events.rend(); ++it) {
      const TraceRecord& e = *it;
      if (e.device != device) continue;
      switch (e.action) {
        case TraceAction::free:
          if (!live.emplace(e.addr,
                            LiveBlock{e.addr, e.size, e.requested, e.category, e.scope, {}, true})
                   .second) {
            ++inconsistencies;
          }
          break;
        case TraceAction::alloc:
          // A rebuilt end state lacks blocks outside the segments the trace saw allocated.
          if (live.erase(e.addr) == 0 && file.end_state_recorded) ++inconsistencies;
          break;
        case TraceAction::segment_alloc: reserved -= static_cast<int64_t>(e.size); break;
        case TraceAction::segment_free: reserved += static_cast<int64_t>(e.size); break;
        default: break;
      }
    }
    for (const auto& [addr, b] : live) add(b);
  }

  void apply(const TraceRecord& e) {
    if (e.device != device) return;
    switch (e.action) {
      case TraceAction::alloc: {
        auto it = live.find(e.addr);
        if (it != live.end()) {
          ++inconsistencies;
          remove(it->second);
        }
        const bool saved = saved_allocs.count(allocs_applied++) > 0;
        LiveBlock b{
            e.addr,  e.size, e.requested, saved ? MemoryCategory::autograd_saved : e.category,
            e.scope, {},     false};
        add(b);
        live[e.addr] = std::move(b);
        break;
      }
      case TraceAction::free: {
        auto it = live.find(e.addr);
        if (it == live.end()) {
          ++inconsistencies;
          break;
        }
        remove(it->second);
        live.erase(it);
        break;
      }
      case TraceAction::segment_alloc: reserved += static_cast<int64_t>(e.size); break;
      case TraceAction::segment_free: reserved -= static_cast<int64_t>(e.size); break;
      case TraceAction::saved: {
        auto it = live.find(e.addr);
        if (it != live.end() && std::find(it->second.holders.begin(), it->second.holders.end(),
                                          e.label) == it->second.holders.end()) {
          it->second.holders.push_back(e.label);
        }
        break;
      }
      default: break;
    }
  }

  TimelinePoint point(int64_t time_us, size_t event) const {
    return TimelinePoint{time_us, event, allocated, reserved, by_category};
  }
};

std::vector<MemoryGroup> sorted_groups(const std::map<std::string, MemoryGroup>& groups) {
  std::vector<MemoryGroup> out;
  for (const auto& [name, g] : groups) out.push_back(g);
  std::stable_sort(out.begin(), out.end(),
                   [](const MemoryGroup& a, const MemoryGroup& b) { return a.bytes > b.bytes; });
  return out;
}

int pick_device(const TraceFile& file) {
  std::vector<size_t> allocs(file.devices.size(), 0);
  for (const TraceRecord& e : file.events) {
    if (e.action == TraceAction::alloc) ++allocs[e.device];
  }
  if (allocs.empty()) return 0;
  return static_cast<int>(std::max_element(allocs.begin(), allocs.end()) - allocs.begin());
}

std::vector<PhaseSpan> phase_spans(const TraceFile& file) {
  std::vector<PhaseSpan> spans, open;
  const int64_t last = file.events.empty() ? 0 : file.events.back().time_us;
  for (size_t i = 0; i < file.events.size(); ++i) {
    const TraceRecord& e = file.events[i];
    if (e.action == TraceAction::phase_begin) {
      open.push_back(PhaseSpan{file.name(e.label), e.time_us, last, i, file.events.size(),
                               static_cast<int>(open.size())});
    } else if (e.action == TraceAction::phase_end) {
      // The innermost open phase of that name (an end without a begin: the begin was dropped).
      for (size_t k = open.size(); k-- > 0;) {
        if (open[k].name == file.name(e.label)) {
          open[k].end_us = e.time_us;
          open[k].end_event = i;
          spans.push_back(open[k]);
          open.erase(open.begin() + static_cast<std::ptrdiff_t>(k));
          break;
        }
      }
    }
  }
  spans.insert(spans.end(), open.begin(), open.end());
  std::sort(spans.begin(), spans.end(),
            [](const PhaseSpan& a, const PhaseSpan& b) { return a.begin_event < b.begin_event; });
  return spans;
}

}  // namespace

const char* const kHolderCounting =
    "largest autograd holder: the allocator blocks live at the peak, each counted once for the "
    "first node that "
    "saved it (chunkgrad train's \"largest graph node\" counts a node name's saved tensors once "
    "the forward is "
    "done, so the two can differ)";

std::string TraceAnalysis::cached_unallocated_text() const {
  const int64_t f = cached_unallocated();
  return f >= 0 ? format_bytes(f)
                : format_bytes(f) + " (NEGATIVE: reserved is below allocated; see the note)";
}

const MemoryGroup* TraceAnalysis::top_saved_holder() const {
  for (const MemoryGroup& g : by_holder) {
    if (g.name.rfind(kNotSavedGroup, 0) != 0 && g.name.rfind(kMadeInBackwardGroup, 0) != 0)
      return &g;
  }
  return nullptr;
}

std::vector<LiveBlock> live_blocks_after(const TraceFile& file, int device, size_t event) {
  Replay r(file, device);
  r.start();
  if (event != SIZE_MAX) {
    CG_CHECK(event < file.events.size(), "live_blocks_after: event ", event, " of ",
             file.events.size());
    for (size_t i = 0; i <= event; ++i) r.apply(file.events[i]);
    // A node may save a block after this event (fused saves dh once its loop is done):
    // it holds the block for the block's whole life, so later saves count until it is freed.
    std::unordered_set<uint64_t> freed;
    for (size_t i = event + 1; i < file.events.size(); ++i) {
      const TraceRecord& e = file.events[i];
      if (e.device != device) continue;
      if (e.action == TraceAction::free) freed.insert(e.addr);
      if (e.action == TraceAction::saved && !freed.count(e.addr)) r.apply(e);
    }
  }
  std::vector<LiveBlock> out;
  for (const auto& [addr, b] : r.live) out.push_back(b);
  std::sort(out.begin(), out.end(),
            [](const LiveBlock& a, const LiveBlock& b) { return a.addr < b.addr; });
  return out;
}

TraceAnalysis analyse_trace(const TraceFile& file, int device) {
  if (device < 0) device = pick_device(file);
  CG_CHECK(file.devices.empty() || device < static_cast<int>(file.devices.size()), file.source,
           ": no device ", device, " (the trace has ", file.devices.size(), ")");
  TraceAnalysis a;
  a.device = file.devices.empty() ? "cpu" : file.devices[device];
  if (!file.events.empty()) {
    a.start_us = file.events.front().time_us;
    a.end_us = file.events.back().time_us;
  }
  if (file.partial()) a.notes.push_back(file.partial_note());
  if (!file.end_state_recorded) {
    a.notes.push_back(
        "the file has no end state (\"segments\"): blocks allocated before tracing began and never "
        "freed are not counted");
  }

  Replay r(file, device);
  r.start();
  a.peak = r.point(a.start_us, SIZE_MAX);
  size_t memory_events = 0;
  for (const TraceRecord& e : file.events) {
    if (e.device == device) ++a.events;
    if (e.device == device && changes_memory(e.action)) ++memory_events;
  }
  const size_t per_point =
      std::max<size_t>(1, (memory_events + kTimelinePoints - 1) / kTimelinePoints);
  a.timeline.push_back(a.peak);
  TimelinePoint bucket;
  size_t in_bucket = 0;
  for (size_t i = 0; i < file.events.size(); ++i) {
    const TraceRecord& e = file.events[i];
    r.apply(e);
    if (e.device != device) continue;
    if (e.action == TraceAction::oom) a.ooms.push_back(e);
    if (!changes_memory(e.action)) continue;
    const TimelinePoint p = r.point(e.time_us, i);
    if (p.allocated > a.peak.allocated) a.peak = p;
    if (in_bucket == 0 || p.allocated > bucket.allocated) bucket = p;
    if (++in_bucket == per_point) {
      a.timeline.push_back(bucket);
      in_bucket = 0;
    }
  }
  if (in_bucket > 0) a.timeline.push_back(bucket);
  const TimelinePoint end =
      r.point(a.end_us, file.events.empty() ? SIZE_MAX : file.events.size() - 1);
  if (a.timeline.back().event != end.event) a.timeline.push_back(end);
  a.inconsistencies = r.inconsistencies;
  if (a.inconsistencies > 0) {
    a.notes.push_back(
        std::to_string(a.inconsistencies) +
        " events do not match the blocks replayed so far (a free of an unknown block or an "
        "allocation "
        "over a live one): the file was edited, merged from two runs, or the end state is not this "
        "trace's; the numbers may be off");
  }

  if (a.cached_unallocated() < 0) {
    a.notes.push_back("at the peak reserved (" + format_bytes(a.peak.reserved) +
                      ") is below allocated (" + format_bytes(a.peak.allocated) +
                      "): blocks lie outside the segments the trace knows (its "
                      "segment events are missing or it is inconsistent), so its cached but "
                      "unallocated bytes are negative "
                      "and mean nothing");
  }
  a.live_at_peak = live_blocks_after(file, device, a.peak.event);
  std::stable_sort(a.live_at_peak.begin(), a.live_at_peak.end(),
                   [](const LiveBlock& x, const LiveBlock& y) { return x.size > y.size; });
  std::map<std::string, MemoryGroup> by_category, by_scope, by_holder;
  auto count = [](std::map<std::string, MemoryGroup>& groups, const std::string& name,
                  uint64_t bytes) {
    MemoryGroup& g = groups[name];
    g.name = name;
    g.bytes += static_cast<int64_t>(bytes);
    g.blocks += 1;
  };
  for (const LiveBlock& b : a.live_at_peak) {
    count(by_category, category_name(b.category), b.size);
    count(by_scope, b.scope == 0 ? "(top level)" : file.name(b.scope), b.size);
    count(by_holder, b.holders.empty() ? unsaved_group(file, b) : file.name(b.holders.front()),
          b.size);
  }
  a.by_category = sorted_groups(by_category);
  a.by_scope = sorted_groups(by_scope);
  a.by_holder = sorted_groups(by_holder);

  a.phases = phase_spans(file);
  for (const PhaseSpan& p : a.phases) {
    const bool contains =
        a.peak.event != SIZE_MAX && p.begin_event <= a.peak.event && a.peak.event <= p.end_event;
    if (contains) a.peak_phase = p.name;  // spans are in begin order: the last one is innermost
  }
  return a;
}

}  // namespace cg
