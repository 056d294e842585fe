// Why this file exists: the allocator-state picture (see trace/allocator_state_svg.h).
#include "trace/allocator_state_svg.h"

#include <algorithm>
#include <cstdio>
#include <sstream>

#include "core/allocator_stats.h"
#include "trace/trace_report.h"

namespace cg {

namespace {

// Pixels. A segment row: its size and pool on the left, the bar, nothing on the right.
constexpr double kWidth = 760, kLabel = 150, kBar = kWidth - kLabel - 10, kRow = 22,
                 kBarHeight = 16, kTitle = 22, kPanelGap = 10, kMinBlock = 4;

std::string px(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f", v);
  return buf;
}

int64_t sum_bytes(const std::vector<SegmentInfo>& segments, bool allocated_only) {
  int64_t n = 0;
  for (const SegmentInfo& s : segments) {
    if (!allocated_only) n += static_cast<int64_t>(s.size);
    for (const BlockInfo& b : s.blocks)
      if (allocated_only && b.allocated) n += static_cast<int64_t>(b.size);
  }
  return n;
}

// Block x positions inside a bar: proportional to bytes, each at least kMinBlock wide.
// The blocks are laid left to right and the last one ends at the bar's end, so a tiny
// block widened to kMinBlock takes its pixels from the blocks after it.
std::vector<std::pair<double, double>> block_spans(const SegmentInfo& s, double x0) {
  std::vector<std::pair<double, double>> spans;
  double x = x0;
  size_t offset = 0;
  for (size_t i = 0; i < s.blocks.size(); ++i) {
    offset += s.blocks[i].size;
    const double remaining_min = kMinBlock * static_cast<double>(s.blocks.size() - 1 - i);
    double end = x0 + kBar * static_cast<double>(offset) / static_cast<double>(s.size);
    end = std::min(std::max(end, x + kMinBlock), x0 + kBar - remaining_min);
    if (i + 1 == s.blocks.size()) end = x0 + kBar;
    spans.emplace_back(x, end);
    x = end;
  }
  return spans;
}

}  // namespace

BlockState block_state(const SegmentInfo& segment, const BlockInfo& block) {
  if (block.allocated) return BlockState::allocated;
  return segment.blocks.size() > 1 ? BlockState::inactive_split : BlockState::cached_free;
}

const char* block_state_name(BlockState s) {
  switch (s) {
    case BlockState::allocated: return "allocated";
    case BlockState::inactive_split: return "inactive split";
    case BlockState::cached_free: return "cached free";
  }
  return "?";
}

const char* block_state_colour(BlockState s) {
  switch (s) {
    case BlockState::allocated: return "#4e79a7";
    case BlockState::inactive_split: return "#f28e2b";
    case BlockState::cached_free: return "#d0d0d0";
  }
  return "#000000";
}

std::string allocator_state_svg(const std::vector<AllocatorStatePanel>& panels,
                                const std::string& caption) {
  std::ostringstream body;
  double y = 0;
  // Caption and legend.
  body << "<text x=\"0\" y=\"16\" font-size=\"14\" font-weight=\"bold\">" << xml_escape(caption)
       << "</text>\n";
  double lx = 0;
  for (BlockState s :
       {BlockState::allocated, BlockState::inactive_split, BlockState::cached_free}) {
    body << "<rect x=\"" << px(lx) << "\" y=\"26\" width=\"14\" height=\"12\" fill=\""
         << block_state_colour(s) << "\" stroke=\"#555\" stroke-width=\"0.5\"/>";
    body << "<text x=\"" << px(lx + 20) << "\" y=\"36\" font-size=\"12\">" << block_state_name(s)
         << "</text>\n";
    lx += 150;
  }
  body << "<text x=\"" << px(lx) << "\" y=\"36\" font-size=\"11\" fill=\"#555\">"
       << "each segment at full width; its size on the left</text>\n";
  y = 48;
  for (const AllocatorStatePanel& p : panels) {
    y += kTitle;
    body << "<text x=\"0\" y=\"" << px(y - 6) << "\" font-size=\"13\" font-weight=\"bold\">"
         << xml_escape(p.title) << "</text>";
    body << "<text x=\"" << px(kWidth) << "\" y=\"" << px(y - 6)
         << "\" font-size=\"12\" text-anchor=\"end\">allocated "
         << format_bytes(sum_bytes(p.segments, true)) << ", reserved "
         << format_bytes(sum_bytes(p.segments, false)) << "</text>\n";
    if (p.segments.empty()) {
      y += kRow;
      body << "<text x=\"" << px(kLabel) << "\" y=\"" << px(y - 8)
           << "\" font-size=\"12\" fill=\"#555\">no segments: every byte is back with the "
              "system</text>\n";
    }
    for (const SegmentInfo& s : p.segments) {
      y += kRow;
      const double top = y - kRow + (kRow - kBarHeight) / 2;
      body << "<text x=\"0\" y=\"" << px(top + 12) << "\" font-size=\"12\">segment "
           << format_bytes(s.size) << (s.small_pool ? " small" : " large") << "</text>\n";
      const auto spans = block_spans(s, kLabel);
      for (size_t i = 0; i < s.blocks.size(); ++i) {
        const BlockInfo& b = s.blocks[i];
        const BlockState st = block_state(s, b);
        const double x0 = spans[i].first, w = spans[i].second - spans[i].first;
        body << "<rect x=\"" << px(x0) << "\" y=\"" << px(top) << "\" width=\"" << px(w)
             << "\" height=\"" << px(kBarHeight) << "\" fill=\"" << block_state_colour(st)
             << "\" stroke=\"#ffffff\" stroke-width=\"0.6\"><title>" << format_bytes(b.size) << " "
             << block_state_name(st) << "</title></rect>";
        if (w >= 70) {
          body << "<text x=\"" << px(x0 + w / 2) << "\" y=\"" << px(top + 12)
               << "\" font-size=\"11\" text-anchor=\"middle\" fill=\""
               << (st == BlockState::allocated ? "#ffffff" : "#222222") << "\">"
               << format_bytes(b.size) << "</text>";
        }
        body << "\n";
      }
    }
    y += kPanelGap;
  }
  std::ostringstream svg;
  const double width = kWidth + 16;
  svg << "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" << px(width) << "\" height=\""
      << px(y) << "\" viewBox=\"0 0 " << px(width) << " " << px(y)
      << "\" font-family=\"sans-serif\">\n"
      << "<rect x=\"0\" y=\"0\" width=\"" << px(width) << "\" height=\"" << px(y)
      << "\" fill=\"#ffffff\"/>\n<g transform=\"translate(8, 0)\">\n"
      << body.str() << "</g>\n</svg>\n";
  return svg.str();
}

}  // namespace cg
