// Why this file exists: writing and reading the trace file (see trace/trace_file.h).
#include "trace/trace_file.h"

#include <algorithm>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/json_input.h"

namespace cg {

namespace {

constexpr const char* kFormat = "chunkgrad.memory_trace";
constexpr const char* kHowToWrite =
    "write one with `memory_lesson --trace-dir DIR`, `mlp_demo --trace FILE` or "
    "cg::write_memory_trace_file";

TraceAction parse_action(const std::string& s, const std::string& where) {
  for (TraceAction a : {TraceAction::alloc, TraceAction::free, TraceAction::segment_alloc,
                        TraceAction::segment_free, TraceAction::oom, TraceAction::saved,
                        TraceAction::phase_begin, TraceAction::phase_end}) {
    if (s == action_name(a)) return a;
  }
  CG_FAIL(where, ": unknown action \"", s,
          "\" (expected alloc, free, segment_alloc, segment_free, oom, "
          "saved, phase_begin or phase_end)");
}

// Reads the trace's JSON fields, turning nlohmann's type errors into messages that name the
// file, the event and the field.
struct Reader {
  explicit Reader(TraceFile& t) : out(t) {}
  TraceFile& out;
  std::unordered_map<std::string, uint32_t> name_ids{{"", 0}};
  std::unordered_map<std::string, int> device_ids;

  std::set<std::string> unknown_categories;
  size_t over_requested = 0;  // blocks and events that request more than they hold
  std::string first_over_requested;

  uint32_t name_id(const std::string& raw) {
    const std::string s = printable_name(raw);
    auto [it, inserted] = name_ids.emplace(s, static_cast<uint32_t>(out.names.size()));
    if (inserted) out.names.push_back(s);
    return it->second;
  }
  MemoryCategory category(const nlohmann::json& j) {
    const std::string name = str_or(j, "category", "unknown");
    const MemoryCategory c = parse_category(name);
    if (c == MemoryCategory::unknown && name != "unknown") unknown_categories.insert(name);
    return c;
  }
  void check_requested(uint64_t requested, uint64_t size, const std::string& where) {
    CG_CHECK(requested <= kMaxTraceInteger, where, ": \"requested\" ", requested, " is past 2^53 (",
             kMaxTraceInteger, "): the file is damaged");
    if (requested <= size) return;
    if (over_requested++ == 0) {
      // ("event 3", not "<the file's path>: event 3": the note is printed under the path)
      const std::string prefix = out.source + ": ";
      first_over_requested = (where.rfind(prefix, 0) == 0 ? where.substr(prefix.size()) : where) +
                             " (" + std::to_string(requested) + " of " + std::to_string(size) +
                             " bytes)";
    }
  }
  // Note [Trace bounds]: [addr, addr + size) below 2^53.
  static void check_extent(uint64_t addr, uint64_t size, const std::string& what,
                           const std::string& where) {
    CG_CHECK(addr < kMaxTraceInteger && size <= kMaxTraceInteger - addr, where, ": ", what, " at ",
             addr, " of ", size, " bytes ends past 2^53 (", kMaxTraceInteger,
             "), beyond any address a trace records: the file is damaged");
  }
  int device_id(const std::string& s, const std::string& where) {
    auto it = device_ids.find(s);
    if (it != device_ids.end()) return it->second;
    try {
      Device::parse(s);
    } catch (const Error&) {
      CG_FAIL(where, ": unknown device \"", printable_name(s), "\" (expected ", device_names_help(),
              ")");
    }
    out.devices.push_back(s);
    return device_ids[s] = static_cast<int>(out.devices.size()) - 1;
  }
  static const nlohmann::json& field(const nlohmann::json& j, const char* key,
                                     const std::string& where) {
    CG_CHECK(j.is_object(), where, " is not a JSON object");
    auto it = j.find(key);
    CG_CHECK(it != j.end(), where, " has no \"", key, "\"");
    return *it;
  }
  static uint64_t u64(const nlohmann::json& j, const char* key, const std::string& where) {
    const nlohmann::json& v = field(j, key, where);
    CG_CHECK(v.is_number_unsigned() || (v.is_number_integer() && v.get<int64_t>() >= 0), where,
             ": \"", key, "\" must be a non-negative integer, got ", describe_json(v));
    return v.get<uint64_t>();
  }
  // A block or segment size: at most kMaxAllocation, the largest the allocator hands out.
  // A larger one (2^64 - 1) would wrap the int64 byte counts of the replay into silently
  // wrong peaks. (An "oom" event's request may be larger: it is what was refused.)
  static uint64_t bytes(const nlohmann::json& j, const char* key, const std::string& where) {
    const uint64_t v = u64(j, key, where);
    CG_CHECK(v <= kMaxAllocation, where, ": \"", key, "\" ", v,
             " is larger than any allocation (at most ", kMaxAllocation,
             " bytes): the file is damaged");
    return v;
  }
  static StreamId stream(const nlohmann::json& j, const std::string& where) {
    const uint64_t v = u64(j, "stream", where);
    CG_CHECK(v <= std::numeric_limits<StreamId>::max(), where, ": \"stream\" ", v,
             " is not a stream id (at most ", std::numeric_limits<StreamId>::max(),
             "): the file is damaged");
    return static_cast<StreamId>(v);
  }
  static std::string str(const nlohmann::json& j, const char* key, const std::string& where) {
    const nlohmann::json& v = field(j, key, where);
    CG_CHECK(v.is_string(), where, ": \"", key, "\" must be a string, got ", describe_json(v));
    return v.get<std::string>();
  }
  static std::string str_or(const nlohmann::json& j, const char* key, const std::string& fallback) {
    auto it = j.find(key);
    return it != j.end() && it->is_string() ? it->get<std::string>() : fallback;
  }
};

// Without a recorded end state: the segments that were allocated and not freed, their
// blocks those allocated and not freed, free space between them as inactive blocks.
void rebuild_end_state(TraceFile& t) {
  std::map<std::pair<int, uint64_t>, SegmentRecord> segments;
  std::map<std::pair<int, uint64_t>, BlockRecord> blocks;
  for (const TraceRecord& e : t.events) {
    const auto key = std::make_pair(e.device, e.addr);
    switch (e.action) {
      case TraceAction::segment_alloc:
        segments[key] =
            SegmentRecord{e.device, e.addr, e.size, e.size <= kSmallBuffer, e.stream, {}};
        break;
      case TraceAction::segment_free: segments.erase(key); break;
      case TraceAction::alloc:
        blocks[key] = BlockRecord{e.addr, e.size, e.requested, true, e.category, e.scope};
        break;
      case TraceAction::free: blocks.erase(key); break;
      default: break;
    }
  }
  for (auto& [key, seg] : segments) {
    uint64_t at = seg.addr;
    for (auto it = blocks.lower_bound({seg.device, seg.addr});
         it != blocks.end() && it->first.first == seg.device &&
         it->first.second < seg.addr + seg.size;
         ++it) {
      if (it->second.addr > at)
        seg.blocks.push_back(BlockRecord{at, it->second.addr - at, 0, false, {}, 0});
      seg.blocks.push_back(it->second);
      at = it->second.addr + it->second.size;
    }
    if (at < seg.addr + seg.size)
      seg.blocks.push_back(BlockRecord{at, seg.addr + seg.size - at, 0, false, {}, 0});
    t.segments.push_back(std::move(seg));
  }
}

// The end state's segments of one device never overlap (Note [Trace bounds]): a segment
// listed twice doubled the reserved bytes of every answer.
void check_segments_apart(const TraceFile& t) {
  std::vector<size_t> order(t.segments.size());
  for (size_t i = 0; i < order.size(); ++i) order[i] = i;
  auto key = [&](size_t i) { return std::make_pair(t.segments[i].device, t.segments[i].addr); };
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return key(a) < key(b); });
  for (size_t k = 1; k < order.size(); ++k) {
    const SegmentRecord &prev = t.segments[order[k - 1]], &next = t.segments[order[k]];
    CG_CHECK(prev.device != next.device || prev.addr + prev.size <= next.addr, t.source,
             ": segment ", order[k], " (at ", next.addr, ") overlaps segment ", order[k - 1],
             " (at ", prev.addr, ", ", prev.size, " bytes) on ", t.devices.at(prev.device),
             ": the end state is damaged (an allocator's segments never overlap)");
  }
}

}  // namespace

std::string printable_name(const std::string& name) {
  std::string out;
  out.reserve(name.size());
  for (size_t i = 0; i < name.size(); ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    const auto next = i + 1 < name.size() ? static_cast<unsigned char>(name[i + 1]) : 0;
    if (c < 0x20 || c == 0x7F) {
      out += '?';
    } else if (c == 0xC2 && next >= 0x80 && next <= 0x9F) {  // U+0080..U+009F in UTF-8
      out += '?';
      ++i;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

MemoryCategory parse_category(const std::string& name) {
  for (int c = 0; c <= static_cast<int>(MemoryCategory::input); ++c) {
    if (name == category_name(static_cast<MemoryCategory>(c)))
      return static_cast<MemoryCategory>(c);
  }
  return MemoryCategory::unknown;
}

std::string TraceFile::partial_note() const {
  if (!partial()) return "";
  std::ostringstream s;
  s << "PARTIAL: the ring buffer (" << capacity << " events) overflowed and the first " << dropped
    << " events were dropped; the timeline starts at the oldest kept event, and blocks allocated "
       "before it show without their allocation (enable a larger capacity: MemoryTrace::enable(n))";
  return s.str();
}

nlohmann::json memory_trace_file() {
  nlohmann::json j = MemoryTrace::to_json();
  std::vector<std::string> devices;
  for (const auto& e : j["events"]) {
    const std::string d = e["device"].get<std::string>();
    if (std::find(devices.begin(), devices.end(), d) == devices.end()) devices.push_back(d);
  }
  nlohmann::json segments = nlohmann::json::array();
  for (const std::string& d : devices) {
    for (const SegmentInfo& s : allocator_for(Device::parse(d)).snapshot()) {
      nlohmann::json blocks = nlohmann::json::array();
      for (const BlockInfo& b : s.blocks) {
        blocks.push_back({{"addr", b.addr},
                          {"size", b.size},
                          {"requested", b.requested},
                          {"allocated", b.allocated},
                          {"category", category_name(b.category)},
                          {"scope", MemoryTrace::scope_name(b.scope_id)}});
      }
      segments.push_back({{"device", d},
                          {"addr", s.addr},
                          {"size", s.size},
                          {"small_pool", s.small_pool},
                          {"stream", s.blocks.empty() ? kDefaultStream : s.blocks.front().stream},
                          {"blocks", std::move(blocks)}});
    }
  }
  j["segments"] = std::move(segments);
  return j;
}

void write_memory_trace_file(const std::string& path) {
  write_file_atomically(path, memory_trace_file().dump() + "\n", "the trace file");
}

TraceFile parse_trace_file(const nlohmann::json& j, const std::string& source) {
  TraceFile t;
  t.source = source;
  t.names.push_back("");
  Reader r(t);
  CG_CHECK(j.is_object() && j.contains("events"), source,
           " is not a chunkgrad memory trace: it has no \"events\" list",
           j.is_object() && j.contains("traceEvents")
               ? " (it looks like a Chrome/Perfetto trace: open it in ui.perfetto.dev)"
           : j.is_object() && j.contains("device_traces")
               ? " (it looks like a PyTorch memory snapshot: open it in pytorch.org/memory_viz)"
               : "",
           "; ", kHowToWrite);
  if (j.contains("format")) {
    CG_CHECK(j["format"] == kFormat, source, ": format ", describe_json(j["format"]), " is not ",
             kFormat);
    const uint64_t version = Reader::u64(j, "version", source);
    CG_CHECK(version == 1, source, ": trace version ", version,
             " is newer than this reader (1); rebuild chunkgrad");
  }
  const nlohmann::json& events = j["events"];
  CG_CHECK(events.is_array(), source, ": \"events\" must be a list");
  if (j.contains("dropped")) t.dropped = Reader::u64(j, "dropped", source);
  if (j.contains("capacity")) t.capacity = Reader::u64(j, "capacity", source);
  CG_CHECK(t.dropped <= kMaxTraceInteger && t.capacity <= kMaxTraceInteger, source,
           ": \"dropped\" ", t.dropped, " or \"capacity\" ", t.capacity,
           " is past 2^53 (Note [Trace bounds]): the file is damaged");
  t.events.reserve(events.size());
  int64_t last_time = INT64_MIN;
  for (size_t i = 0; i < events.size(); ++i) {
    const nlohmann::json& e = events[i];
    const std::string where = source + ": event " + std::to_string(i);
    TraceRecord rec;
    rec.action = parse_action(Reader::str(e, "action", where), where);
    const nlohmann::json& time = Reader::field(e, "time_us", where);
    CG_CHECK(time.is_number_integer(), where, ": \"time_us\" must be an integer, got ",
             describe_json(time));
    rec.time_us = time.get<int64_t>();
    // (microseconds since the trace began: a negative one is a damaged file, and -2^63
    // made the span printed "over -9223372036854760.00 ms")
    CG_CHECK(rec.time_us >= 0, where, ": time_us ", rec.time_us,
             " is negative: times count from the start of the trace; the file is damaged");
    CG_CHECK(static_cast<uint64_t>(rec.time_us) < kMaxTraceInteger, where, ": time_us ",
             rec.time_us, " is past 2^53 microseconds (285 years): the file is damaged");
    CG_CHECK(rec.time_us >= last_time, where, ": time_us ", rec.time_us,
             " goes back in time (previous ", last_time, "): events must be oldest first");
    last_time = rec.time_us;
    rec.addr = Reader::u64(e, "addr", where);
    if (rec.action == TraceAction::oom) {
      rec.size = Reader::u64(e, "size", where);
      rec.requested = e.contains("requested") ? Reader::u64(e, "requested", where) : rec.size;
    } else {
      rec.size = Reader::bytes(e, "size", where);
      rec.requested = e.contains("requested") ? Reader::bytes(e, "requested", where) : rec.size;
      Reader::check_extent(rec.addr, rec.size, action_name(rec.action), where);
      if (rec.action == TraceAction::alloc || rec.action == TraceAction::free)
        r.check_requested(rec.requested, rec.size, where);
    }
    rec.device = r.device_id(Reader::str_or(e, "device", "cpu"), where);
    rec.stream = e.contains("stream") ? Reader::stream(e, where) : kDefaultStream;
    rec.category = r.category(e);
    rec.scope = r.name_id(Reader::str_or(e, "scope", ""));
    rec.label = r.name_id(Reader::str_or(e, "label", ""));
    t.events.push_back(rec);
  }
  if (j.contains("segments")) {
    const nlohmann::json& segments = j["segments"];
    CG_CHECK(segments.is_array(), source, ": \"segments\" must be a list");
    for (size_t i = 0; i < segments.size(); ++i) {
      const nlohmann::json& s = segments[i];
      const std::string where = source + ": segment " + std::to_string(i);
      SegmentRecord seg;
      seg.device = r.device_id(Reader::str(s, "device", where), where);
      seg.addr = Reader::u64(s, "addr", where);
      seg.size = Reader::bytes(s, "size", where);
      seg.small_pool =
          Reader::field(s, "small_pool", where).is_boolean() && s["small_pool"].get<bool>();
      seg.stream = s.contains("stream") ? Reader::stream(s, where) : kDefaultStream;
      Reader::check_extent(seg.addr, seg.size, "the segment", where);
      const nlohmann::json& blocks = Reader::field(s, "blocks", where);
      CG_CHECK(blocks.is_array(), where, ": \"blocks\" must be a list");
      uint64_t at = seg.addr;
      for (const nlohmann::json& b : blocks) {
        BlockRecord block;
        block.addr = Reader::u64(b, "addr", where);
        block.size = Reader::bytes(b, "size", where);
        block.requested = Reader::bytes(b, "requested", where);
        const nlohmann::json& allocated = Reader::field(b, "allocated", where);
        CG_CHECK(allocated.is_boolean(), where, ": a block's \"allocated\" must be true or false");
        block.allocated = allocated.get<bool>();
        block.category = r.category(b);
        block.scope = r.name_id(Reader::str_or(b, "scope", ""));
        CG_CHECK(block.addr == at, where, ": its blocks do not tile it (a block at ", block.addr,
                 ", expected ", at, ")");
        CG_CHECK(block.size <= seg.addr + seg.size - at, where, ": a block at ", block.addr, " of ",
                 block.size, " bytes runs past the segment's end (", seg.addr + seg.size, ")");
        if (block.allocated) r.check_requested(block.requested, block.size, where);
        at += block.size;
        seg.blocks.push_back(block);
      }
      CG_CHECK(at == seg.addr + seg.size, where, ": its blocks cover ", at - seg.addr, " of its ",
               seg.size, " bytes");
      t.segments.push_back(std::move(seg));
    }
    check_segments_apart(t);
    t.end_state_recorded = true;
  } else {
    rebuild_end_state(t);
  }
  if (!r.unknown_categories.empty()) {
    std::string names;
    int listed = 0;
    for (const std::string& c : r.unknown_categories) {
      if (listed++ == 3) {
        names += ", ...";
        break;
      }
      names += std::string(names.empty() ? "" : ", ") + describe_json(c);
    }
    t.notes.push_back("the file names categories this reader does not know (" + names +
                      "): their blocks are counted as \"unknown\"");
  }
  if (r.over_requested > 0) {
    t.notes.push_back(std::to_string(r.over_requested) +
                      (r.over_requested == 1 ? " block requests more bytes than it holds"
                                             : " blocks request more bytes than they hold") +
                      " (the first: " + printable_name(r.first_over_requested) +
                      "), which no allocator does: the file was edited or is damaged");
  }
  return t;
}

TraceFile read_trace_file(const std::string& path) {
  check_not_a_device(path, "the trace");
  std::ifstream in(path, std::ios::binary);
  CG_CHECK(in.is_open(), "cannot open the trace ", path, " (no such file, or not readable)");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string text = buffer.str();
  CG_CHECK(text.find_first_not_of(" \t\r\n") != std::string::npos, path,
           " is empty: not a chunkgrad memory trace; ", kHowToWrite);
  // A pickle starts with its PROTO opcode, 0x80 (protocol 2 and later): the memory_viz
  // snapshot `--snapshot-dir` writes beside its JSON, or torch.cuda.memory._dump_snapshot's.
  CG_CHECK(static_cast<unsigned char>(text[0]) != 0x80, path,
           " is a Python pickle (a PyTorch memory snapshot, such as `chunkgrad trace "
           "--snapshot-dir` writes: open it in pytorch.org/memory_viz), not a chunkgrad memory "
           "trace; ",
           kHowToWrite);
  // Bounded first (core/json_input.h): a trace nested 100,000 deep is one error line, not
  // a stack overflow where the value is later copied, compared or described.
  check_json_depth(text, path);
  nlohmann::json j;
  try {
    j = parse_json_without_duplicate_keys(text, path);  // Note [Duplicate keys]
  } catch (const nlohmann::json::parse_error& e) {
    // e.byte counts from 1 and is one past the text when the input ended early ("byte 14
    // of 13"): that case is said in words.
    const bool at_end = e.byte > text.size() ||
                        std::string(e.what()).find("unexpected end of input") != std::string::npos;
    if (at_end) {
      CG_FAIL(path, " ends in the middle of its JSON after ", text.size(),
              " bytes (truncated? the run may have been killed while writing it)");
    }
    CG_FAIL(path, " is not JSON (a chunkgrad memory trace is JSON): parse error at byte ", e.byte,
            " of ", text.size());
  }
  return parse_trace_file(j, path);
}

}  // namespace cg
