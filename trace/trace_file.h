// Why this file exists: a memory trace on disk is what every reader starts from -- the
// `chunkgrad trace` report, the memory_viz snapshot, the Perfetto file. This writes one
// (the ring buffer's events plus the allocators' state at the end, which is what a
// viewer replays backwards from) and reads one back, refusing bad input with a message
// that says what the file is and what to do, and marking a trace whose ring buffer
// overflowed as partial instead of pretending it is whole.
//
// Note [Trace file]: {"format":"chunkgrad.memory_trace","version":1,"capacity":C,
// "dropped":N,"events":[...], "segments":[{"device","addr","size","small_pool","stream",
// "blocks":[{"addr","size","requested","allocated","category","scope"}]}]}. "segments" is
// the end state; files without it (written by MemoryTrace::to_json alone, or older ones
// without "format") are read too: their end state is rebuilt from the events, which
// misses blocks allocated before tracing began.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "core/device.h"
#include "core/memory_trace.h"

namespace cg {

struct TraceRecord {
  TraceAction action = TraceAction::alloc;
  MemoryCategory category = MemoryCategory::unknown;
  int device = 0;  // index into TraceFile::devices
  StreamId stream = kDefaultStream;
  int64_t time_us = 0;
  uint64_t addr = 0, size = 0, requested = 0;
  uint32_t scope = 0;  // index into TraceFile::names ("" = top level)
  uint32_t label = 0;  // saved: the holder; phases: the phase name (0 = none)
};

struct BlockRecord {
  uint64_t addr = 0, size = 0, requested = 0;
  bool allocated = false;
  MemoryCategory category = MemoryCategory::unknown;
  uint32_t scope = 0;
};

struct SegmentRecord {
  int device = 0;
  uint64_t addr = 0, size = 0;
  bool small_pool = false;
  StreamId stream = kDefaultStream;
  std::vector<BlockRecord> blocks;  // tile the segment, in address order
};

struct TraceFile {
  std::string source;                   // the file's path (or "<json>") for messages
  std::vector<std::string> devices;     // "cpu", "cuda:0", in order of appearance
  std::vector<std::string> names;       // scope paths and labels; names[0] == ""
  std::vector<TraceRecord> events;      // oldest first
  std::vector<SegmentRecord> segments;  // the end state (Note [Trace file])
  bool end_state_recorded = false;      // false: segments were rebuilt from the events
  uint64_t dropped = 0;                 // events the ring buffer overwrote before these
  uint64_t capacity = 0;                // of the ring buffer (0: unknown)
  // What the reader found odd but could read (categories it does not know, blocks that
  // ask for more than they hold): said with every answer, as analyse_trace's notes are.
  std::vector<std::string> notes;
  bool partial() const { return dropped > 0; }
  const std::string& name(uint32_t id) const { return names.at(id); }
  // One line for reports: why the answer covers only part of the run, or "".
  std::string partial_note() const;
};

// The current trace with the end state of the allocators of every device it names.
nlohmann::json memory_trace_file();
// Writes memory_trace_file() to `path`; throws cg::Error naming the path on failure.
void write_memory_trace_file(const std::string& path);

// Throws cg::Error for anything that is not a chunkgrad trace (empty, truncated, foreign
// JSON, an event without a field) or cannot be one (Note [Trace bounds]), naming `source`
// and what is wrong.
TraceFile parse_trace_file(const nlohmann::json& j, const std::string& source = "<json>");
TraceFile read_trace_file(const std::string& path);

MemoryCategory parse_category(const std::string& name);  // unknown for an unknown name

// Note [Trace bounds]: every address, address + size, time and requested byte count a
// trace holds is below 2^53 (kMaxTraceInteger), so that the memory_viz snapshot made from
// it keeps the viewer's rule 5 (JSON integers below 2^53, docs/allocator_notes.md) and no
// block wraps past 2^64. Real ones are far below it (user-space addresses are below 2^48;
// the allocator's largest block is a few TiB on any machine). An "oom" event's size is
// what was refused and may be larger: it is printed exactly, and capped in the snapshot.
// Segments of the end state may not overlap, and a segment's blocks tile it. Anything else
// -- a free of a block the trace never saw, overlapping blocks -- is a note of the
// analysis (trace/trace_analysis.h), not an error: a partial trace is still worth reading.
constexpr uint64_t kMaxTraceInteger = uint64_t{1} << 53;

// `name` for a report line: control characters (C0, DEL and the C1 range U+0080..U+009F)
// become '?', as describe_json shows them, so a scope or label cannot move the cursor,
// colour the terminal or start a fake line of the report.
std::string printable_name(const std::string& name);

}  // namespace cg
