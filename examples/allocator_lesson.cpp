// Why this file exists: the first stop of the reading path (docs/README.md,
// docs/1_tensors_and_the_allocator.md). A scripted sequence of allocations and frees on a
// fresh caching allocator, printing its segments and blocks after each step: rounding to
// 512 B, the small and large pools, splitting a segment, reusing a cached block, merging
// free neighbours, and why reserved stays above allocated until empty_cache().
//
//   ./build/examples/allocator_lesson
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "core/caching_allocator.h"
#include "examples/common/program.h"

namespace {

// One line per segment: its size and pool, then its blocks in address order, each as
// size and "used"/"free", and a bar of 40 characters ('#' used, '.' free).
void show(const cg::CachingAllocator& a, const std::string& step) {
  const cg::AllocatorStats s = a.stats();
  std::printf("\n%s\n  allocated %s, reserved %s, cached but unallocated %s, segments %lld\n",
              step.c_str(), cg::format_bytes(s.allocated_bytes.current).c_str(),
              cg::format_bytes(s.reserved_bytes.current).c_str(),
              cg::format_bytes(s.reserved_bytes.current - s.allocated_bytes.current).c_str(),
              static_cast<long long>(s.segment.current));
  for (const cg::SegmentInfo& seg : a.snapshot()) {
    std::string bar, blocks;
    for (const cg::BlockInfo& b : seg.blocks) {
      const size_t n = std::max<size_t>(1, b.size * 40 / seg.size);
      bar += std::string(n, b.allocated ? '#' : '.');
      blocks += " " + cg::format_bytes(b.size) + (b.allocated ? " used" : " free") + ",";
    }
    blocks.pop_back();
    std::printf("  segment %s (%s pool) [%s]%s\n", cg::format_bytes(seg.size).c_str(),
                seg.small_pool ? "small" : "large", bar.c_str(), blocks.c_str());
  }
}

void lesson() {
  cg::CachingAllocator a(cg::make_host_segment_source());
  std::printf(
      "sizes round up to %zu B; requests up to 1 MiB come from 2 MiB segments (small "
      "pool), 1-10 MiB from 20 MiB segments, larger ones get a segment of their own size "
      "rounded to 2 MiB\n",
      cg::kMinBlockSize);
  void* x = a.allocate(1000);
  show(a, "1. allocate 1000 B: rounded to 1 KiB, the first 2 MiB segment is reserved and split");
  void* y = a.allocate(300 << 10);
  show(a, "2. allocate 300 KiB: split from the same segment, no new memory from the system");
  a.free(x);
  show(a, "3. free the 1000 B block: it goes back to the cache, reserved does not change");
  void* z = a.allocate(800);
  std::printf("  800 B now reuses the cached block: %s\n", z == x ? "same address" : "new address");
  show(a, "4. allocate 800 B: the cached 1 KiB block again");
  void* big = a.allocate(5 << 20);
  show(a, "5. allocate 5 MiB: a 20 MiB segment of the large pool");
  void* mid = a.allocate(12 << 20);
  show(a, "6. allocate 12 MiB: best fit is the 15 MiB free block of that segment: split again");
  void* huge = a.allocate((15 << 20) + 1);
  show(a,
       "7. allocate 15 MiB + 1 B: no free block is large enough: a segment of its own, "
       "rounded up to 16 MiB; the rest (under 1 MiB) is not worth a split, so the whole "
       "16 MiB is allocated");
  for (void* p : {y, z, big, mid, huge}) a.free(p);
  show(a, "8. free everything: neighbours merge back into whole free segments; all still reserved");
  a.empty_cache();
  show(a, "9. empty_cache(): the free segments go back to the system");
  std::printf("\npeak allocated %s, peak reserved %s\n",
              cg::format_bytes(a.stats().allocated_bytes.peak).c_str(),
              cg::format_bytes(a.stats().reserved_bytes.peak).c_str());
}

}  // namespace

int main(int argc, char** argv) {
  cg::program::Program program("allocator_lesson",
                               "the caching allocator, one allocation and free at a time");
  return program.run(argc, argv, [] { lesson(); });
}
