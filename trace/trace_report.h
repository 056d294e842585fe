// Why this file exists: people would rather look than read. This draws analyse_trace's
// answer: a stacked memory timeline by category with the peak marked and labelled, as a
// standalone SVG file (for docs and issues) and as one self-contained HTML report of one
// to three traces -- inline SVG, a small inline script, no network -- with the holders at
// the peak beside each timeline and every timeline on the same byte scale, so that naive,
// chunked and fused compare at a glance.
//
// Note [Report markers]: the report's script adds <div id="report-ok"> with the number of
// drawn areas when it ran to the end, and window.onerror adds <div id="script-error">
// with the message: a headless browser's DOM dump then says whether the page rendered
// without errors (tests/trace_report_chromium_test.sh).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "trace/trace_analysis.h"

namespace cg {

struct ReportTrace {
  std::string name;    // "naive"
  std::string source;  // the file it came from
  TraceAnalysis analysis;
  std::vector<std::string> notes;  // partial trace etc. (analysis.notes)
};

// The timeline as an <svg> element; y_max: the byte scale's top (0: this trace's peak).
// standalone adds the XML namespace so that the text is a valid .svg file.
std::string timeline_svg(const ReportTrace& t, int64_t y_max = 0, bool standalone = true);

// The whole report; top: how many groups and blocks to list per table.
std::string html_report(const std::vector<ReportTrace>& traces, int top = 6);

// A common y scale for several traces: the largest peak, rounded up to a readable number.
int64_t common_scale(const std::vector<ReportTrace>& traces);

// Text for SVG and HTML: & < > " as entities.
std::string xml_escape(const std::string& s);

// Colour of a category in every picture (a fixed palette, so pictures compare).
const char* category_colour(MemoryCategory c);

}  // namespace cg
