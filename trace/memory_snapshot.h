// Why this file exists: people already know PyTorch's memory viewer
// (pytorch.org/memory_viz); a chunkgrad trace converted to its snapshot format opens
// there, as JSON (newer viewers) or pickle (every viewer). The viewer's rules, from
// docs/allocator_notes.md, and how they are kept:
// 1. "segments" is the state at the END of the trace (the viewer replays backwards):
//    the trace file's end state (Note [Trace file]).
// 2. A segment's blocks, inactive ones too, tile it in address order: checked when read.
// 3. segment.device is the index of that device's list in "device_traces".
// 4. If any event has a category, one has "unknown": a trailing "snapshot" entry with
//    category "unknown" is added when no event has it.
// 5. Integers: the reader refuses addresses, sizes and times past 2^53 (Note [Trace
//    bounds], trace_file.h); an oom's request past it is written as 2^53 - 1.
// Events of blocks outside every segment are left out (events_left_out, trace_analysis.h).
// A chunkgrad free becomes free_requested then free_completed (there is one stream and no
// deferred free). Frames carry the scope path (filename) and the autograd node that saved
// the block (name), so the viewer's stack column says who held it.
#pragma once

#include <string>

#include <nlohmann/json_fwd.hpp>

#include "trace/trace_file.h"

namespace cg {

// The snapshot as JSON: {"segments": [...], "device_traces": [[...], ...]}.
nlohmann::json memory_viz_snapshot(const TraceFile& file);

// `j` as a Python pickle of dicts, lists, str, int, float, bool and None (protocol 2..4:
// the opcodes used exist since protocol 2). Integers are exact at any size.
std::string to_pickle(const nlohmann::json& j, int protocol = 2);

}  // namespace cg
