// Why this file exists: the replay behind analyse_trace (see trace/trace_analysis.h).
#include "trace/trace_analysis.h"

#include <algorithm>
#include <map>
#include <unordered_map>
#include <unordered_set>
#include <utility>

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
  std::map<uint64_t, LiveBlock> live;     // by address
  std::map<uint64_t, uint64_t> segments;  // the live segments: address -> size
  int64_t allocated = 0, reserved = 0;
  std::array<int64_t, kNumMemoryCategories> by_category{};
  // Note [Inconsistent events]: an event that does not fit the state replayed so far, by
  // its index in the file, with what is wrong (the first thing found). A block outside
  // every segment cannot be placed at all: such an event is also `skipped`, by this replay
  // and by the memory_viz snapshot (whose viewer replays the same way). Segments are only
  // known with a recorded end state: a rebuilt one lacks the segments of blocks allocated
  // before tracing began, so the segment checks need it.
  std::map<size_t, std::string> inconsistent;
  std::unordered_set<size_t> skipped;

  void add(const LiveBlock& b) {
    allocated += static_cast<int64_t>(b.size);
    by_category[static_cast<int>(b.category)] += static_cast<int64_t>(b.size);
  }
  void remove(const LiveBlock& b) {
    allocated -= static_cast<int64_t>(b.size);
    by_category[static_cast<int>(b.category)] -= static_cast<int64_t>(b.size);
  }
  // (what the forward replay finds replaces what undoing found: it reads in time order)
  void flag(size_t i, const std::string& what, bool forward = true) {
    const TraceRecord& e = file.events[i];
    std::string text = "event " + std::to_string(i) + ", " + action_name(e.action) + " of " +
                       format_bytes(static_cast<int64_t>(e.size)) + " at " +
                       std::to_string(e.addr) + ": " + what;
    if (forward) {
      inconsistent.insert_or_assign(i, std::move(text));
    } else {
      inconsistent.emplace(i, std::move(text));
    }
  }
  bool check_segments() const { return file.end_state_recorded; }
  // Whether [addr, addr + size) lies inside one live segment.
  bool in_a_segment(uint64_t addr, uint64_t size) const {
    auto it = segments.upper_bound(addr);
    if (it == segments.begin()) return false;
    --it;
    const uint64_t offset = addr - it->first;
    return offset <= it->second && size <= it->second - offset;
  }
  // The first entry of `m` (by address, with its size from `size_of`) that overlaps
  // [addr, addr + size), other than one starting at addr; m.end() if none.
  template <typename Map, typename SizeOf>
  static typename Map::const_iterator overlap(const Map& m, uint64_t addr, uint64_t size,
                                              SizeOf size_of) {
    auto it = m.lower_bound(addr);
    if (it != m.begin()) {
      auto before = std::prev(it);
      if (before->first + size_of(before->second) > addr) return before;
    }
    if (it != m.end() && it->first == addr) ++it;
    if (it != m.end() && it->first - addr < size) return it;
    return m.end();
  }
  static uint64_t block_size(const LiveBlock& b) { return b.size; }
  static uint64_t segment_size(uint64_t s) { return s; }

  // The state before the first event: the end state with the events undone, last first
  // (what memory_viz does with a snapshot's segments and trace).
  void start() {
    for (const SegmentRecord& s : file.segments) {
      if (s.device != device) continue;
      reserved += static_cast<int64_t>(s.size);
      segments[s.addr] = s.size;
      for (const BlockRecord& b : s.blocks) {
        if (b.allocated)
          live[b.addr] = LiveBlock{b.addr, b.size, b.requested, b.category, b.scope, {}, true};
      }
    }
    for (size_t i = file.events.size(); i-- > 0;) {
      const TraceRecord& e = file.events[i];
      if (e.device != device) continue;
      switch (e.action) {
        case TraceAction::free:
          if (check_segments() && !in_a_segment(e.addr, e.size)) {
            flag(i, "outside every segment the trace knows then; left out", false);
            skipped.insert(i);
          } else if (live.count(e.addr) > 0) {
            flag(i, "the block is freed again later without an allocation between", false);
          } else if (overlap(live, e.addr, e.size, block_size) != live.end()) {
            flag(i, "it overlaps another block alive then", false);
          } else {
            live.emplace(e.addr,
                         LiveBlock{e.addr, e.size, e.requested, e.category, e.scope, {}, true});
          }
          break;
        case TraceAction::alloc:
          if (check_segments() && !in_a_segment(e.addr, e.size)) {
            flag(i, "outside every segment the trace knows then; left out", false);
            skipped.insert(i);
            break;
          }
          // A rebuilt end state lacks blocks outside the segments the trace saw allocated.
          if (live.erase(e.addr) == 0 && file.end_state_recorded)
            flag(i, "the block is not alive after it (not in the end state, or freed twice)",
                 false);
          break;
        case TraceAction::segment_alloc:
          reserved -= static_cast<int64_t>(e.size);
          if (segments.erase(e.addr) == 0)
            flag(i, "the segment is not alive after it (not in the end state, or freed twice)",
                 false);
          break;
        case TraceAction::segment_free:
          reserved += static_cast<int64_t>(e.size);
          if (segments.count(e.addr) > 0 ||
              overlap(segments, e.addr, e.size, segment_size) != segments.end())
            flag(i, "it overlaps a segment alive then", false);
          segments[e.addr] = e.size;
          break;
        default: break;
      }
    }
    for (const auto& [addr, b] : live) add(b);
  }

  void apply(size_t i) {
    const TraceRecord& e = file.events[i];
    if (e.device != device) return;
    switch (e.action) {
      case TraceAction::alloc: {
        const bool saved = saved_allocs.count(allocs_applied++) > 0;
        if (skipped.count(i) > 0) break;
        if (check_segments() && !in_a_segment(e.addr, e.size)) {
          flag(i, "outside every segment the trace knows then; left out");
          skipped.insert(i);
          break;
        }
        auto it = live.find(e.addr);
        if (it != live.end()) {
          flag(i, "over a block alive at that address");
          remove(it->second);
        } else {
          auto other = overlap(live, e.addr, e.size, block_size);
          if (other != live.end())
            flag(i, "it overlaps the block alive at " + std::to_string(other->first));
        }
        LiveBlock b{
            e.addr,  e.size, e.requested, saved ? MemoryCategory::autograd_saved : e.category,
            e.scope, {},     false};
        add(b);
        live[e.addr] = std::move(b);
        break;
      }
      case TraceAction::free: {
        if (skipped.count(i) > 0) break;
        auto it = live.find(e.addr);
        if (it == live.end()) {
          flag(i, "no block is alive at that address");
          break;
        }
        remove(it->second);
        live.erase(it);
        break;
      }
      case TraceAction::segment_alloc:
        reserved += static_cast<int64_t>(e.size);
        if (segments.count(e.addr) > 0 ||
            overlap(segments, e.addr, e.size, segment_size) != segments.end())
          flag(i, "it overlaps a segment alive then");
        segments[e.addr] = e.size;
        break;
      case TraceAction::segment_free: {
        reserved -= static_cast<int64_t>(e.size);
        if (segments.erase(e.addr) == 0) {
          flag(i, "no segment is alive at that address");
        } else {
          auto block = live.lower_bound(e.addr);
          if (block != live.end() && block->first - e.addr < e.size)
            flag(i, "the block at " + std::to_string(block->first) + " in it is still alive");
        }
        break;
      }
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

// The device that ran out of memory first, when one did (the question a failing run's
// trace is opened for); else the one with the most allocations.
int pick_device(const TraceFile& file) {
  std::vector<size_t> allocs(file.devices.size(), 0);
  for (const TraceRecord& e : file.events) {
    if (e.action == TraceAction::oom) return e.device;
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
    for (size_t i = 0; i <= event; ++i) r.apply(i);
    // A node may save a block after this event (fused saves dh once its loop is done):
    // it holds the block for the block's whole life, so later saves count until it is freed.
    std::unordered_set<uint64_t> freed;
    for (size_t i = event + 1; i < file.events.size(); ++i) {
      const TraceRecord& e = file.events[i];
      if (e.device != device) continue;
      if (e.action == TraceAction::free) freed.insert(e.addr);
      if (e.action == TraceAction::saved && !freed.count(e.addr)) r.apply(i);
    }
  }
  std::vector<LiveBlock> out;
  for (const auto& [addr, b] : r.live) out.push_back(b);
  std::sort(out.begin(), out.end(),
            [](const LiveBlock& a, const LiveBlock& b) { return a.addr < b.addr; });
  return out;
}

std::vector<bool> events_left_out(const TraceFile& file) {
  std::vector<bool> out(file.events.size(), false);
  for (size_t d = 0; d < std::max<size_t>(1, file.devices.size()); ++d) {
    Replay r(file, static_cast<int>(d));
    r.start();
    for (size_t i = 0; i < file.events.size(); ++i) r.apply(i);
    for (size_t i : r.skipped) out[i] = true;
  }
  return out;
}

namespace {

struct BlockGroups {
  std::vector<MemoryGroup> by_category, by_scope, by_holder;  // largest first
};

// Live blocks summed by category, scope and the node that saved each first.
BlockGroups groups_of(const TraceFile& file, const std::vector<LiveBlock>& live) {
  std::map<std::string, MemoryGroup> by_category, by_scope, by_holder;
  auto count = [](std::map<std::string, MemoryGroup>& groups, const std::string& name,
                  uint64_t bytes) {
    MemoryGroup& g = groups[name];
    g.name = name;
    g.bytes += static_cast<int64_t>(bytes);
    g.blocks += 1;
  };
  for (const LiveBlock& b : live) {
    count(by_category, category_name(b.category), b.size);
    count(by_scope, b.scope == 0 ? "(top level)" : file.name(b.scope), b.size);
    count(by_holder, b.holders.empty() ? unsaved_group(file, b) : file.name(b.holders.front()),
          b.size);
  }
  return {sorted_groups(by_category), sorted_groups(by_scope), sorted_groups(by_holder)};
}

// The innermost phase around event `event` ("" if none, or SIZE_MAX).
std::string innermost_phase(const std::vector<PhaseSpan>& phases, size_t event) {
  std::string name;
  for (const PhaseSpan& p : phases) {
    // Spans are in begin order: the last one that contains the event is the innermost.
    if (event != SIZE_MAX && p.begin_event <= event && event <= p.end_event) name = p.name;
  }
  return name;
}

}  // namespace

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
    r.apply(i);
    if (e.device != device) continue;
    if (e.action == TraceAction::oom) {
      if (a.ooms.empty()) {
        a.at_first_oom.emplace();
        a.at_first_oom->event = i;
        a.at_first_oom->point = r.point(e.time_us, i);
      }
      a.ooms.push_back(e);
    }
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
  a.inconsistencies = r.inconsistent.size();
  if (a.inconsistencies > 0) {
    a.notes.push_back(
        std::to_string(a.inconsistencies) +
        (a.inconsistencies == 1 ? " event does" : " events do") +
        " not match the blocks and segments replayed so far (the first: " +
        r.inconsistent.begin()->second +
        "): the file was edited, merged from two runs, or the end state is not this trace's; "
        "the numbers may be off");
  }
  for (const std::string& n : file.notes) a.notes.push_back(n);

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
  BlockGroups at_peak = groups_of(file, a.live_at_peak);
  a.by_category = std::move(at_peak.by_category);
  a.by_scope = std::move(at_peak.by_scope);
  a.by_holder = std::move(at_peak.by_holder);

  a.phases = phase_spans(file);
  a.peak_phase = innermost_phase(a.phases, a.peak.event);
  if (a.at_first_oom) {
    BlockGroups at_oom = groups_of(file, live_blocks_after(file, device, a.at_first_oom->event));
    a.at_first_oom->by_category = std::move(at_oom.by_category);
    a.at_first_oom->by_holder = std::move(at_oom.by_holder);
    a.at_first_oom->phase = innermost_phase(a.phases, a.at_first_oom->event);
  }
  return a;
}

}  // namespace cg
