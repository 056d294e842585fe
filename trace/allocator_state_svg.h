// Why this file exists: the allocator's state is easier to see than to read. This draws
// CachingAllocator::snapshot() the way pytorch.org/memory_viz's "Allocator State History"
// does -- one row per segment, its blocks side by side in address order -- as a standalone
// SVG, one panel per moment, so that a scripted sequence (examples/allocator_lesson.cpp)
// becomes one picture for docs/1_tensors_and_the_allocator.md. The picture is drawn from
// the allocator's own snapshot, never by hand, and is deterministic (sizes, no addresses),
// so a test can compare the committed file with what the program draws now.
//
// Note [Three kinds of block]: a block is
// - allocated: a live tensor's bytes;
// - inactive split: free, but its segment also holds other blocks, so the segment cannot
//   go back to the system; the allocator's inactive_split statistics count these, and
//   they are the only free bytes that can become fragmentation in the strict sense;
// - cached free: a whole free segment, kept for the next request until empty_cache().
// Reserved minus allocated is the sum of the last two.
#pragma once

#include <string>
#include <vector>

#include "core/caching_allocator.h"

namespace cg {

enum class BlockState { allocated, inactive_split, cached_free };

// Note [Three kinds of block].
BlockState block_state(const SegmentInfo& segment, const BlockInfo& block);
const char* block_state_name(BlockState s);    // "allocated", "inactive split", "cached free"
const char* block_state_colour(BlockState s);  // the fill used in the picture

// One moment of the allocator: a title ("5. allocate 5 MiB") and its snapshot.
struct AllocatorStatePanel {
  std::string title;
  std::vector<SegmentInfo> segments;
};

// The panels top to bottom, each segment drawn at full width (its size is written beside
// it), blocks proportional to their bytes inside it (at least 4 pixels, so a 1 KiB block
// of a 2 MiB segment shows), with a legend of the three kinds and, per panel, allocated
// and reserved. Hovering a block shows its size and kind.
std::string allocator_state_svg(const std::vector<AllocatorStatePanel>& panels,
                                const std::string& caption);

}  // namespace cg
