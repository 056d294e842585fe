// Why this file exists: the allocator-state picture (trace/allocator_state_svg.h) must say
// what the allocator holds: each block's kind follows Note [Three kinds of block], every
// block of every segment is drawn (a tiny one too), and the totals beside each panel are
// the snapshot's allocated and reserved bytes.
#include <gtest/gtest.h>

#include <string>

#include "core/caching_allocator.h"
#include "trace/allocator_state_svg.h"

namespace {

size_t count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

TEST(AllocatorStateSvg, BlocksAreAllocatedInactiveSplitOrCachedFree) {
  cg::CachingAllocator a(cg::make_host_segment_source());
  void* small = a.allocate(1000);      // a 1 KiB block of a 2 MiB segment: split
  void* large = a.allocate(12 << 20);  // a segment of its own, rounded to 12 MiB
  a.free(large);                       // a whole free segment
  const std::vector<cg::SegmentInfo> segments = a.snapshot();
  ASSERT_EQ(segments.size(), 2u);
  int allocated = 0, inactive = 0, cached = 0;
  for (const cg::SegmentInfo& s : segments) {
    for (const cg::BlockInfo& b : s.blocks) {
      switch (cg::block_state(s, b)) {
        case cg::BlockState::allocated: ++allocated; break;
        case cg::BlockState::inactive_split: ++inactive; break;
        case cg::BlockState::cached_free: ++cached; break;
      }
    }
  }
  EXPECT_EQ(allocated, 1);                                // the 1 KiB block
  EXPECT_EQ(inactive, 1);                                 // the rest of its segment
  EXPECT_EQ(cached, 1);                                   // the freed 12 MiB segment
  EXPECT_EQ(a.stats().inactive_split.current, inactive);  // the allocator's own count

  const std::string svg =
      cg::allocator_state_svg({{"before", segments}, {"after empty_cache", {}}}, "a <test>");
  EXPECT_EQ(svg.rfind("<svg xmlns=\"http://www.w3.org/2000/svg\"", 0), 0u) << svg;
  EXPECT_NE(svg.find("a &lt;test&gt;"), std::string::npos) << svg;  // the caption is escaped
  // Three legend swatches plus one rect per block, each with its kind in its tooltip.
  for (cg::BlockState s :
       {cg::BlockState::allocated, cg::BlockState::inactive_split, cg::BlockState::cached_free}) {
    EXPECT_EQ(count(svg, std::string("fill=\"") + cg::block_state_colour(s) + "\""), 2u)
        << cg::block_state_name(s) << "\n"
        << svg;
  }
  EXPECT_NE(svg.find("<title>1.00 KiB allocated</title>"), std::string::npos) << svg;
  EXPECT_NE(svg.find("allocated 1.00 KiB, reserved 14.00 MiB"), std::string::npos) << svg;
  EXPECT_NE(svg.find("allocated 0 B, reserved 0 B"), std::string::npos) << svg;
  EXPECT_NE(svg.find("no segments"), std::string::npos) << svg;
  a.free(small);
}

}  // namespace
