// Why this file exists: Perfetto (ui.perfetto.dev) and chrome://tracing are what people
// open to see a run on a time axis. This turns a chunkgrad trace into their JSON format:
// counter tracks for allocated and reserved bytes and for allocated bytes per category
// (one "ph":"C" series per args key), a span ("ph":"X") for every phase a training loop
// marked with TracePhase, and an instant ("ph":"i") for every out-of-memory error. The
// counters are those of analyse_trace's timeline (at most ~kTimelinePoints per device,
// the peak always among them), so a long run still gives a file Perfetto opens quickly.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include "trace/trace_file.h"

namespace cg {

// {"traceEvents":[...],"displayTimeUnit":"ms"}; ts in microseconds from the first event.
nlohmann::json chrome_trace(const TraceFile& file);

}  // namespace cg
