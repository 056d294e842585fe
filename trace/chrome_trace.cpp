// Why this file exists: the Perfetto / Chrome trace export (see trace/chrome_trace.h).
#include "trace/chrome_trace.h"

#include <nlohmann/json.hpp>

#include "trace/trace_analysis.h"

namespace cg {

nlohmann::json chrome_trace(const TraceFile& file) {
  nlohmann::json events = nlohmann::json::array();
  const int64_t t0 = file.events.empty() ? 0 : file.events.front().time_us;
  events.push_back({{"name", "process_name"},
                    {"ph", "M"},
                    {"pid", 0},
                    {"args", {{"name", "chunkgrad phases"}}}});
  const size_t devices = std::max<size_t>(1, file.devices.size());
  for (size_t d = 0; d < devices; ++d) {
    const int pid = static_cast<int>(d) + 1;
    const TraceAnalysis a = analyse_trace(file, static_cast<int>(d));
    events.push_back({{"name", "process_name"},
                      {"ph", "M"},
                      {"pid", pid},
                      {"args", {{"name", "chunkgrad memory (" + a.device + ")"}}}});
    for (const TimelinePoint& p : a.timeline) {
      const int64_t ts = p.time_us - t0;
      events.push_back({{"name", "memory"},
                        {"ph", "C"},
                        {"ts", ts},
                        {"pid", pid},
                        {"tid", 0},
                        {"args", {{"allocated", p.allocated}, {"reserved", p.reserved}}}});
      nlohmann::json by_category = nlohmann::json::object();
      for (int c = 0; c < kNumMemoryCategories; ++c) {
        by_category[category_name(static_cast<MemoryCategory>(c))] = p.by_category[c];
      }
      events.push_back({{"name", "allocated by category"},
                        {"ph", "C"},
                        {"ts", ts},
                        {"pid", pid},
                        {"tid", 0},
                        {"args", std::move(by_category)}});
    }
    for (const TraceRecord& e : a.ooms) {
      events.push_back({{"name", "out of memory"},
                        {"ph", "i"},
                        {"s", "g"},
                        {"ts", e.time_us - t0},
                        {"pid", pid},
                        {"tid", 0},
                        {"args", {{"requested_bytes", e.size}, {"scope", file.name(e.scope)}}}});
    }
    if (d == 0) {
      for (const PhaseSpan& p : a.phases) {
        events.push_back({{"name", p.name},
                          {"cat", "phase"},
                          {"ph", "X"},
                          {"ts", p.begin_us - t0},
                          {"dur", p.end_us - p.begin_us},
                          {"pid", 0},
                          {"tid", p.depth}});
      }
    }
  }
  return {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

}  // namespace cg
