// Why this file exists: the memory_viz snapshot and its pickle encoder (see
// trace/memory_snapshot.h).
#include "trace/memory_snapshot.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "trace/trace_analysis.h"

namespace cg {

namespace {

nlohmann::json frames(const TraceFile& file, uint32_t scope, uint32_t holder,
                      MemoryCategory category) {
  const std::string name = holder != 0 ? "saved by " + file.name(holder)
                                       : std::string("(") + category_name(category) + ")";
  return nlohmann::json::array(
      {{{"filename", scope == 0 ? std::string("<top level>") : file.name(scope)},
        {"line", 0},
        {"name", name}}});
}

// For each alloc and free event: the label of the first node that saved the block
// between its allocation and its free (0 for none).
std::vector<uint32_t> holders_by_event(const TraceFile& file) {
  std::vector<uint32_t> holder(file.events.size(), 0);
  std::map<std::pair<int, uint64_t>, size_t> open;  // (device, addr) -> its alloc event
  for (size_t i = 0; i < file.events.size(); ++i) {
    const TraceRecord& e = file.events[i];
    const auto key = std::make_pair(e.device, e.addr);
    if (e.action == TraceAction::alloc) {
      open[key] = i;
    } else if (e.action == TraceAction::saved) {
      auto it = open.find(key);
      if (it != open.end() && holder[it->second] == 0) holder[it->second] = e.label;
    } else if (e.action == TraceAction::free) {
      auto it = open.find(key);
      if (it != open.end()) {
        holder[i] = holder[it->second];
        open.erase(it);
      }
    }
  }
  return holder;
}

void put_le(std::string& out, uint64_t v, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
}

void put_int(std::string& out, bool negative, uint64_t magnitude, int64_t value) {
  if (!negative && magnitude < 256) {
    out.push_back('K');  // BININT1
    put_le(out, magnitude, 1);
  } else if (!negative && magnitude < 65536) {
    out.push_back('M');  // BININT2
    put_le(out, magnitude, 2);
  } else if (value >= INT32_MIN && value <= INT32_MAX && (negative || magnitude <= INT32_MAX)) {
    out.push_back('J');  // BININT, signed 32-bit
    put_le(out, static_cast<uint32_t>(static_cast<int32_t>(value)), 4);
  } else {
    // LONG1: little-endian two's complement, as few bytes as keep the sign (9 for 2^63..2^64-1).
    std::string bytes;
    if (negative) {
      int64_t v = value;
      do {
        bytes.push_back(static_cast<char>(v & 0xff));
        v >>= 8;
      } while (!(v == -1 && (bytes.back() & 0x80)));
    } else {
      uint64_t v = magnitude;
      do {
        bytes.push_back(static_cast<char>(v & 0xff));
        v >>= 8;
      } while (v != 0 || (bytes.back() & 0x80));
    }
    out.push_back('\x8a');
    out.push_back(static_cast<char>(bytes.size()));
    out += bytes;
  }
}

void encode(std::string& out, const nlohmann::json& j) {
  switch (j.type()) {
    case nlohmann::json::value_t::null: out.push_back('N'); break;
    case nlohmann::json::value_t::boolean: out.push_back(j.get<bool>() ? '\x88' : '\x89'); break;
    case nlohmann::json::value_t::number_unsigned: {
      const uint64_t v = j.get<uint64_t>();
      put_int(out, false, v, v <= INT64_MAX ? static_cast<int64_t>(v) : INT64_MAX);
      break;
    }
    case nlohmann::json::value_t::number_integer: {
      const int64_t v = j.get<int64_t>();
      put_int(out, v < 0, v < 0 ? 0 : static_cast<uint64_t>(v), v);
      break;
    }
    case nlohmann::json::value_t::number_float: {
      const double d = j.get<double>();
      uint64_t bits;
      std::memcpy(&bits, &d, 8);
      out.push_back('G');  // BINFLOAT, big-endian
      for (int i = 7; i >= 0; --i) out.push_back(static_cast<char>((bits >> (8 * i)) & 0xff));
      break;
    }
    case nlohmann::json::value_t::string: {
      const std::string& s = j.get_ref<const std::string&>();
      CG_CHECK(s.size() <= UINT32_MAX, "to_pickle: a string of ", s.size(), " bytes is too long");
      out.push_back('X');  // BINUNICODE: 4-byte length, UTF-8
      put_le(out, s.size(), 4);
      out += s;
      break;
    }
    case nlohmann::json::value_t::array:
      out.push_back(']');  // EMPTY_LIST
      if (!j.empty()) {
        out.push_back('(');  // MARK
        for (const auto& v : j) encode(out, v);
        out.push_back('e');  // APPENDS
      }
      break;
    case nlohmann::json::value_t::object:
      out.push_back('}');  // EMPTY_DICT
      if (!j.empty()) {
        out.push_back('(');
        for (const auto& [k, v] : j.items()) {
          encode(out, nlohmann::json(k));
          encode(out, v);
        }
        out.push_back('u');  // SETITEMS
      }
      break;
    default: CG_FAIL("to_pickle: cannot encode JSON of type ", j.type_name());
  }
}

}  // namespace

std::string to_pickle(const nlohmann::json& j, int protocol) {
  CG_CHECK(protocol >= 2 && protocol <= 4, "to_pickle: protocol ", protocol,
           " is not supported (2, 3 or 4)");
  std::string out;
  out.push_back('\x80');  // PROTO
  out.push_back(static_cast<char>(protocol));
  encode(out, j);
  out.push_back('.');  // STOP
  return out;
}

nlohmann::json memory_viz_snapshot(const TraceFile& file) {
  const std::vector<uint32_t> holder = holders_by_event(file);
  const std::vector<bool> left_out = events_left_out(file);
  const size_t devices = std::max<size_t>(1, file.devices.size());
  nlohmann::json traces = nlohmann::json::array();
  for (size_t d = 0; d < devices; ++d) traces.push_back(nlohmann::json::array());
  bool any_category = false, any_unknown = false;
  for (size_t i = 0; i < file.events.size(); ++i) {
    const TraceRecord& e = file.events[i];
    if (left_out[i]) continue;
    // Rule 5: an oom's request may pass 2^53 (Note [Trace bounds]); the report prints it.
    const uint64_t size = std::min(e.size, kMaxTraceInteger - 1);
    nlohmann::json entry = {{"addr", e.addr},
                            {"size", size},
                            {"stream", e.stream},
                            {"time_us", e.time_us},
                            {"frames", frames(file, e.scope, holder[i], e.category)},
                            {"category", category_name(e.category)}};
    any_category = true;
    any_unknown = any_unknown || e.category == MemoryCategory::unknown;
    nlohmann::json& list = traces[e.device];
    switch (e.action) {
      case TraceAction::alloc:
      case TraceAction::segment_alloc:
      case TraceAction::segment_free:
        entry["action"] = action_name(e.action);
        list.push_back(std::move(entry));
        break;
      case TraceAction::free:
        entry["action"] = "free_requested";
        list.push_back(entry);
        entry["action"] = "free_completed";
        list.push_back(std::move(entry));
        break;
      case TraceAction::oom:
        entry.erase("addr");
        entry["action"] = "oom";
        entry["device_free"] =
            0;  // not recorded: the request was refused by the limit or the source
        list.push_back(std::move(entry));
        break;
      default: break;  // saved and phases are chunkgrad's own; they went into frames above
    }
  }
  if (any_category && !any_unknown) {
    traces[0].push_back({{"action", "snapshot"},
                         {"addr", 0},
                         {"size", 0},
                         {"stream", 0},
                         {"time_us", file.events.empty() ? 0 : file.events.back().time_us},
                         {"frames", nlohmann::json::array()},
                         {"category", "unknown"}});
  }

  // Who held each block at the end (the node that saved it), for the blocks' frames.
  std::vector<std::unordered_map<uint64_t, uint32_t>> end_holder(devices);
  for (size_t d = 0; d < devices; ++d) {
    if (file.events.empty()) break;
    for (const LiveBlock& b :
         live_blocks_after(file, static_cast<int>(d), file.events.size() - 1)) {
      if (!b.holders.empty()) end_holder[d][b.addr] = b.holders.front();
    }
  }
  nlohmann::json segments = nlohmann::json::array();
  for (const SegmentRecord& s : file.segments) {
    uint64_t allocated = 0, requested = 0;
    nlohmann::json blocks = nlohmann::json::array();
    for (const BlockRecord& b : s.blocks) {
      if (b.allocated) {
        allocated += b.size;
        requested += b.requested;
      }
      auto h = end_holder[s.device].find(b.addr);
      blocks.push_back(
          {{"address", b.addr},
           {"size", b.size},
           {"requested_size", b.allocated ? b.requested : 0},
           {"state", b.allocated ? "active_allocated" : "inactive"},
           {"frames",
            b.allocated
                ? frames(file, b.scope, h == end_holder[s.device].end() ? 0 : h->second, b.category)
                : nlohmann::json::array()}});
    }
    segments.push_back({{"device", s.device},
                        {"address", s.addr},
                        {"total_size", s.size},
                        {"allocated_size", allocated},
                        {"active_size", allocated},
                        {"requested_size", requested},
                        {"stream", s.stream},
                        {"segment_type", s.small_pool ? "small" : "large"},
                        {"segment_pool_id", {0, 0}},
                        {"is_expandable", false},
                        {"frames", nlohmann::json::array()},
                        {"blocks", std::move(blocks)}});
  }
  return {{"segments", std::move(segments)}, {"device_traces", std::move(traces)}};
}

}  // namespace cg
