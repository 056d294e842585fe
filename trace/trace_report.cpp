// Why this file exists: the SVG timelines and the HTML report (see trace/trace_report.h).
#include "trace/trace_report.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>

#include "core/allocator_stats.h"

namespace cg {

std::string xml_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      // (XML 1.0 has no C0 control characters but tab and newlines: a file path holding
      // one made the SVG unreadable)
      default:
        out +=
            (static_cast<unsigned char>(c) < 0x20 && c != '\t' && c != '\n' && c != '\r') ? '?' : c;
    }
  }
  return out;
}

namespace {

// Bottom to top: what a run holds throughout first, what comes and goes on top.
constexpr MemoryCategory kStackOrder[] = {
    MemoryCategory::input,     MemoryCategory::parameter,  MemoryCategory::optimizer_state,
    MemoryCategory::gradient,  MemoryCategory::activation, MemoryCategory::autograd_saved,
    MemoryCategory::temporary, MemoryCategory::unknown};

constexpr double kWidth = 760, kHeight = 280, kLeft = 78, kRight = 150, kTop = 34, kBottom = 36;

std::string escape(const std::string& s) { return xml_escape(s); }

// An SVG id from a trace name (ids cannot hold spaces or quotes).
std::string id_of(const std::string& name) {
  std::string out = "plot-";
  for (char c : name) out += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
  return out;
}

std::string num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

std::string ms(int64_t us) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f ms", static_cast<double>(us) / 1000.0);
  return buf;
}

std::string bytes(int64_t b) { return format_bytes(b); }

struct Axes {
  int64_t t0, t1, y_max;
  double x(int64_t t) const {
    const double span = static_cast<double>(std::max<int64_t>(1, t1 - t0));
    return kLeft + (kWidth - kLeft - kRight) * static_cast<double>(t - t0) / span;
  }
  double y(int64_t b) const {
    return kHeight - kBottom -
           (kHeight - kTop - kBottom) * static_cast<double>(b) / static_cast<double>(y_max);
  }
};

// A step area between two stacked levels: each point holds until the next one.
std::string area_path(const std::vector<TimelinePoint>& pts, const Axes& ax, size_t below_end,
                      size_t upto) {
  auto level = [&](const TimelinePoint& p, size_t n) {
    int64_t sum = 0;
    for (size_t k = 0; k < n; ++k) sum += p.by_category[static_cast<int>(kStackOrder[k])];
    return sum;
  };
  std::ostringstream d;
  for (size_t i = 0; i < pts.size(); ++i) {
    const double x0 = ax.x(pts[i].time_us),
                 x1 = i + 1 < pts.size() ? ax.x(pts[i + 1].time_us) : ax.x(ax.t1);
    const double y = ax.y(level(pts[i], upto));
    d << (i == 0 ? "M" : "L") << num(x0) << "," << num(y) << "L" << num(x1) << "," << num(y);
  }
  for (size_t i = pts.size(); i-- > 0;) {
    const double x0 = ax.x(pts[i].time_us),
                 x1 = i + 1 < pts.size() ? ax.x(pts[i + 1].time_us) : ax.x(ax.t1);
    const double y = ax.y(level(pts[i], below_end));
    d << "L" << num(x1) << "," << num(y) << "L" << num(x0) << "," << num(y);
  }
  d << "Z";
  return d.str();
}

int64_t nice_ceiling(int64_t b) {
  if (b <= 0) return 1 << 20;
  const double mib = static_cast<double>(b) / (1 << 20);
  const double step = std::pow(10.0, std::floor(std::log10(mib)));
  for (double m : {1.0, 1.2, 1.5, 2.0, 2.5, 3.0, 4.0, 5.0, 6.0, 8.0, 10.0}) {
    if (m * step >= mib) return static_cast<int64_t>(std::ceil(m * step * (1 << 20)));
  }
  return b;
}

std::string group_rows(const std::vector<MemoryGroup>& groups, int top) {
  std::ostringstream s;
  int n = 0;
  for (const MemoryGroup& g : groups) {
    if (n++ == top) break;
    s << "<tr><td>" << escape(g.name) << "</td><td class=\"num\">" << bytes(g.bytes)
      << "</td><td class=\"num\">" << g.blocks << "</td></tr>";
  }
  return s.str();
}

}  // namespace

const char* category_colour(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::input: return "#8c8c8c";
    case MemoryCategory::parameter: return "#4e79a7";
    case MemoryCategory::optimizer_state: return "#9c755f";
    case MemoryCategory::gradient: return "#59a14f";
    case MemoryCategory::activation: return "#f28e2b";
    case MemoryCategory::autograd_saved: return "#e15759";
    case MemoryCategory::temporary: return "#edc948";
    case MemoryCategory::unknown: return "#bab0ac";
  }
  return "#bab0ac";
}

int64_t common_scale(const std::vector<ReportTrace>& traces) {
  int64_t top = 0;
  for (const ReportTrace& t : traces) {
    for (const TimelinePoint& p : t.analysis.timeline) top = std::max(top, p.allocated);
  }
  return nice_ceiling(top);
}

std::string timeline_svg(const ReportTrace& t, int64_t y_max, bool standalone) {
  const TraceAnalysis& a = t.analysis;
  if (y_max <= 0) y_max = common_scale({t});
  const Axes ax{a.start_us, std::max(a.end_us, a.start_us + 1), y_max};
  std::ostringstream s;
  s << "<svg " << (standalone ? "xmlns=\"http://www.w3.org/2000/svg\" " : "")
    << "class=\"timeline\" width=\"" << kWidth << "\" height=\"" << kHeight << "\" viewBox=\"0 0 "
    << kWidth << " " << kHeight << "\" font-family=\"sans-serif\" font-size=\"11\" data-name=\""
    << escape(t.name) << "\" data-t0=\"" << ax.t0 << "\" data-t1=\"" << ax.t1 << "\" data-ymax=\""
    << y_max << "\">\n";
  s << "<rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n";
  s << "<text x=\"" << kLeft << "\" y=\"16\" font-size=\"14\" font-weight=\"bold\">"
    << escape(t.name) << "</text><text x=\"" << kLeft
    << "\" y=\"28\" fill=\"#555\">allocated bytes by category on " << escape(a.device)
    << "; dashed: reserved</text>\n";
  // y grid and labels
  for (int i = 0; i <= 4; ++i) {
    const int64_t b = y_max * i / 4;
    const double y = ax.y(b);
    s << "<line x1=\"" << kLeft << "\" x2=\"" << num(kWidth - kRight) << "\" y1=\"" << num(y)
      << "\" y2=\"" << num(y) << "\" stroke=\"#ddd\"/><text x=\"" << kLeft - 6 << "\" y=\""
      << num(y + 4) << "\" text-anchor=\"end\">" << bytes(b) << "</text>\n";
  }
  s << "<text x=\"" << kLeft << "\" y=\"" << kHeight - 6 << "\">0</text><text x=\""
    << num(kWidth - kRight) << "\" y=\"" << kHeight - 6 << "\" text-anchor=\"end\">"
    << ms(ax.t1 - ax.t0) << "</text>\n";
  // stacked areas
  int legend = 0;
  constexpr size_t kCats = sizeof(kStackOrder) / sizeof(kStackOrder[0]);
  for (size_t k = 0; k < kCats; ++k) {
    const MemoryCategory c = kStackOrder[k];
    bool present = false;
    for (const TimelinePoint& p : a.timeline)
      present = present || p.by_category[static_cast<int>(c)] > 0;
    if (!present) continue;
    s << "<path class=\"area\" data-category=\"" << category_name(c) << "\" fill=\""
      << category_colour(c) << "\" stroke=\"none\" d=\"" << area_path(a.timeline, ax, k, k + 1)
      << "\"><title>" << category_name(c) << "</title></path>\n";
    const double ly = kTop + 14.0 * legend++;
    s << "<rect x=\"" << num(kWidth - kRight + 12) << "\" y=\"" << num(ly)
      << "\" width=\"10\" height=\"10\" fill=\"" << category_colour(c) << "\"/><text x=\""
      << num(kWidth - kRight + 26) << "\" y=\"" << num(ly + 9) << "\">" << category_name(c)
      << "</text>\n";
  }
  // reserved, as a dashed step line
  std::ostringstream r;
  for (size_t i = 0; i < a.timeline.size(); ++i) {
    const TimelinePoint& p = a.timeline[i];
    const double x1 = i + 1 < a.timeline.size() ? ax.x(a.timeline[i + 1].time_us) : ax.x(ax.t1);
    r << (i == 0 ? "M" : "L") << num(ax.x(p.time_us)) << "," << num(ax.y(p.reserved)) << "L"
      << num(x1) << "," << num(ax.y(p.reserved));
  }
  // Reserved is often far above allocated (a 20 MiB segment for a 2 MiB block): the scale
  // is allocated's, and reserved is cut at the top with its maximum written there.
  int64_t reserved_max = 0;
  for (const TimelinePoint& p : a.timeline) reserved_max = std::max(reserved_max, p.reserved);
  s << "<clipPath id=\"" << id_of(t.name) << "\"><rect x=\"" << kLeft << "\" y=\"" << kTop - 2
    << "\" width=\"" << kWidth - kLeft - kRight << "\" height=\"" << kHeight - kTop - kBottom + 2
    << "\"/></clipPath>\n";
  s << "<path class=\"reserved\" clip-path=\"url(#" << id_of(t.name)
    << ")\" fill=\"none\" stroke=\"#333\" stroke-dasharray=\"4 3\" d=\"" << r.str() << "\"/>\n";
  if (reserved_max > y_max) {
    s << "<text x=\"" << num(kWidth - kRight) << "\" y=\"" << kTop - 4
      << "\" text-anchor=\"end\" fill=\"#333\">reserved up to " << bytes(reserved_max)
      << " (above the scale)</text>\n";
  }
  // the phases, as a strip under the time axis (nested ones lower)
  for (const PhaseSpan& p : a.phases) {
    const double x0 = ax.x(std::max(p.begin_us, ax.t0)), x1 = ax.x(std::min(p.end_us, ax.t1));
    const double y = kHeight - kBottom + 3 + 6.0 * std::min(p.depth, 1);
    s << "<rect class=\"phase\" x=\"" << num(x0) << "\" y=\"" << num(y) << "\" width=\""
      << num(std::max(1.0, x1 - x0)) << "\" height=\"" << (p.depth == 0 ? 11 : 5) << "\" fill=\""
      << (p.depth % 2 ? "#cfd8e3" : "#e3e8ef") << "\" stroke=\"white\"><title>" << escape(p.name)
      << "</title></rect>";
    if (p.depth == 0 && x1 - x0 > 40) {
      s << "<text x=\"" << num((x0 + x1) / 2) << "\" y=\"" << num(y + 9)
        << "\" text-anchor=\"middle\" font-size=\"9\">" << escape(p.name) << "</text>";
    }
    s << "\n";
  }
  // the peak
  const double px = ax.x(a.peak.time_us), py = ax.y(a.peak.allocated);
  const bool right_half = px > (kLeft + kWidth - kRight) / 2;
  s << "<line class=\"peak\" x1=\"" << num(px) << "\" x2=\"" << num(px) << "\" y1=\"" << num(kTop)
    << "\" y2=\"" << num(kHeight - kBottom)
    << "\" stroke=\"#c00\" stroke-width=\"1\"/><circle cx=\"" << num(px) << "\" cy=\"" << num(py)
    << "\" r=\"3.5\" fill=\"#c00\"/>\n";
  s << "<text class=\"peak-label\" x=\"" << num(px + (right_half ? -6 : 6)) << "\" y=\""
    << num(std::max(kTop + 10, py - 6)) << "\" text-anchor=\"" << (right_half ? "end" : "start")
    << "\" fill=\"#c00\" font-weight=\"bold\">peak " << bytes(a.peak.allocated) << " at "
    << ms(a.peak.time_us - a.start_us)
    << (a.peak_phase.empty() ? "" : " (" + escape(a.peak_phase) + ")") << "</text>\n";
  if (const MemoryGroup* h = a.top_saved_holder()) {
    s << "<text x=\"" << num(px + (right_half ? -6 : 6)) << "\" y=\""
      << num(std::max(kTop + 22, py + 8)) << "\" text-anchor=\"" << (right_half ? "end" : "start")
      << "\" fill=\"#c00\">held: " << escape(h->name) << " " << bytes(h->bytes) << "</text>\n";
  }
  s << "<text class=\"cursor\" x=\"" << num(kWidth - kRight + 12) << "\" y=\"" << kHeight - 8
    << "\" fill=\"#333\"></text>\n";
  s << "</svg>\n";
  return s.str();
}

std::string html_report(const std::vector<ReportTrace>& traces, int top) {
  const int64_t scale = common_scale(traces);
  std::ostringstream s;
  s << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>chunkgrad memory "
       "report</title>\n"
       "<script>window.onerror=function(m,src,line){var "
       "d=document.createElement('div');d.id='script-error';"
       "d.textContent='script error: '+m+' (line "
       "'+line+')';(document.body||document.documentElement).appendChild(d);};"
       "</"
       "script>\n<style>body{font-family:sans-serif;margin:1.5em;max-width:1100px}table{border-"
       "collapse:collapse;"
       "margin:0 1.5em .8em 0;display:inline-table;vertical-align:top}td,th{padding:2px "
       "8px;border-bottom:1px solid #eee;"
       "text-align:left}.num{text-align:right}.note{color:#a00}section{margin-bottom:2em}path.area:"
       "hover{opacity:.8}"
       "#script-error{color:#fff;background:#c00;padding:4px}</style></head><body>\n";
  s << "<h1>chunkgrad memory report</h1>\n<p>Allocated bytes over time, stacked by category; the "
       "red line marks the "
       "peak. All timelines share one byte scale (0 to "
    << bytes(scale) << "). Hover a timeline to read its bytes.</p>\n";
  if (traces.size() >= 2) {
    s << "<h2>Side by side</h2><table id=\"comparison\"><tr><th></th>";
    for (const ReportTrace& t : traces) s << "<th>" << escape(t.name) << "</th>";
    auto row = [&](const char* label, auto cell) {
      s << "<tr><td>" << label << "</td>";
      for (const ReportTrace& t : traces) s << "<td class=\"num\">" << cell(t.analysis) << "</td>";
      s << "</tr>";
    };
    row("peak allocated", [](const TraceAnalysis& a) { return bytes(a.peak.allocated); });
    row("reserved at the peak", [](const TraceAnalysis& a) { return bytes(a.peak.reserved); });
    row("cached but unallocated",
        [](const TraceAnalysis& a) { return escape(a.cached_unallocated_text()); });
    row("largest autograd holder", [](const TraceAnalysis& a) {
      const MemoryGroup* h = a.top_saved_holder();
      return h ? escape(h->name) + " " + bytes(h->bytes) : std::string("none");
    });
    s << "</table>\n<p class=\"note\">" << escape(kHolderCounting) << ".</p>\n";
  }
  for (size_t i = 0; i < traces.size(); ++i) {
    const ReportTrace& t = traces[i];
    const TraceAnalysis& a = t.analysis;
    s << "<section class=\"trace\" id=\"trace-" << i << "\"><h2>" << escape(t.name) << " <small>("
      << escape(t.source) << ")</small></h2>\n";
    for (const std::string& n : t.notes) s << "<p class=\"note\">" << escape(n) << "</p>\n";
    s << timeline_svg(t, scale, false);
    s << "<p>Peak <b>" << bytes(a.peak.allocated) << "</b> allocated at "
      << ms(a.peak.time_us - a.start_us)
      << (a.peak_phase.empty() ? "" : " in phase <b>" + escape(a.peak_phase) + "</b>")
      << "; reserved then " << bytes(a.peak.reserved)
      << ", so cached but unallocated (reserved minus allocated: free blocks kept for reuse and "
         "the unused ends of segments, not only fragmentation) "
      << escape(a.cached_unallocated_text()) << ".</p>\n";
    s << "<table class=\"holders\"><tr><th>held at the peak "
         "by</th><th>bytes</th><th>blocks</th></tr>"
      << group_rows(a.by_holder, top) << "</table>";
    s << "<table><tr><th>category</th><th>bytes</th><th>blocks</th></tr>"
      << group_rows(a.by_category, top) << "</table>";
    s << "<table><tr><th>scope</th><th>bytes</th><th>blocks</th></tr>"
      << group_rows(a.by_scope, top) << "</table>\n</section>\n";
  }
  s << "<script>\n(function(){\n"
       "var svgs=document.querySelectorAll('svg.timeline');\n"
       "svgs.forEach(function(svg){var "
       "t0=+svg.dataset.t0,t1=+svg.dataset.t1,ymax=+svg.dataset.ymax;"
       "var cur=svg.querySelector('text.cursor');\n"
       "svg.addEventListener('mousemove',function(ev){var r=svg.getBoundingClientRect();"
       "var "
       "x=(ev.clientX-r.left)*svg.viewBox.baseVal.width/"
       "r.width,y=(ev.clientY-r.top)*svg.viewBox.baseVal.height/r.height;"
       "var fx=(x-"
    << kLeft << ")/(" << kWidth - kLeft - kRight << "),fy=(" << kHeight - kBottom << "-y)/("
    << kHeight - kTop - kBottom
    << ");if(fx<0||fx>1||fy<0||fy>1){cur.textContent='';return;}"
       "cur.textContent=((t0+fx*(t1-t0)-t0)/1000).toFixed(2)+' ms, "
       "'+(fy*ymax/1048576).toFixed(1)+' MiB';});});\n"
       "var ok=document.createElement('div');ok.id='report-ok';"
       "ok.setAttribute('data-areas',document.querySelectorAll('svg.timeline path.area').length);"
       "ok.setAttribute('data-timelines',svgs.length);ok.textContent='report "
       "rendered';ok.style.color='#888';"
       "document.body.appendChild(ok);\n})();\n</script>\n</body></html>\n";
  return s.str();
}

}  // namespace cg
