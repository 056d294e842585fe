// Why this file exists: the first stop of the reading path (docs/README.md,
// docs/1_tensors_and_the_allocator.md). A scripted sequence of allocations and frees on a
// fresh caching allocator, printing its segments and blocks after each step: rounding to
// 512 B, the small and large pools, splitting a segment, reusing a cached block, merging
// free neighbours, and why reserved stays above allocated until empty_cache().
//
//   ./build/examples/allocator_lesson
//   ./build/examples/allocator_lesson --svg state.svg     # the picture of every step
//   ./build/examples/allocator_lesson --trace trace.json  # for chunkgrad trace / memory_viz
//
// --svg draws the allocator's own snapshot after each step (trace/allocator_state_svg.h):
// docs/img/allocator_state.svg is this program's output, compared by a test.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/caching_allocator.h"
#include "examples/common/program.h"
#include "trace/allocator_state_svg.h"
#include "trace/trace_file.h"

namespace {

std::vector<cg::AllocatorStatePanel> panels;  // one per step, for --svg

// One line per segment: its size and pool, then its blocks in address order, each as
// size and "used"/"free", and a bar of 40 characters ('#' used, '.' free).
void show(const cg::CachingAllocator& a, const std::string& step) {
  const cg::AllocatorStats s = a.stats();
  std::printf("\n%s\n  allocated %s, reserved %s, cached but unallocated %s, segments %lld\n",
              step.c_str(), cg::format_bytes(s.allocated_bytes.current).c_str(),
              cg::format_bytes(s.reserved_bytes.current).c_str(),
              cg::format_bytes(s.reserved_bytes.current - s.allocated_bytes.current).c_str(),
              static_cast<long long>(s.segment.current));
  panels.push_back({step.substr(0, step.find(':')), a.snapshot()});  // "5. allocate 5 MiB"
  for (const cg::SegmentInfo& seg : panels.back().segments) {
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

struct Options {
  std::string svg, trace;
};

void lesson(const Options& o) {
  // Both files are made ready first: an unwritable path fails before the lesson runs.
  std::unique_ptr<cg::AtomicFile> svg, trace;
  if (!o.svg.empty() && !o.trace.empty())
    cg::program::check_outputs_apart({{o.svg, "--svg"}, {o.trace, "--trace"}});
  if (!o.svg.empty()) svg = std::make_unique<cg::AtomicFile>(o.svg, "--svg");
  if (!o.trace.empty()) trace = std::make_unique<cg::AtomicFile>(o.trace, "--trace");
  if (trace) cg::MemoryTrace::enable();
  cg::CachingAllocator a(cg::make_host_segment_source());
  std::printf(
      "sizes round up to %zu B; requests up to 1 MiB come from 2 MiB segments (small "
      "pool), 1-10 MiB from 20 MiB segments, larger ones get a segment of their own size "
      "rounded to 2 MiB\n",
      cg::kMinBlockSize);
  // In a --trace, each block's scope is its variable's name (memory_viz shows it as the frame).
  auto allocate = [&a](size_t bytes, const char* name) {
    cg::ScopeGuard scope(name);
    return a.allocate(bytes);
  };
  void* x = allocate(1000, "x");
  show(a, "1. allocate 1000 B: rounded to 1 KiB, the first 2 MiB segment is reserved and split");
  void* y = allocate(300 << 10, "y");
  show(a, "2. allocate 300 KiB: split from the same segment, no new memory from the system");
  a.free(x);
  show(a, "3. free the 1000 B block: it goes back to the cache, reserved does not change");
  void* z = allocate(800, "z");
  std::printf("  800 B now reuses the cached block: %s\n", z == x ? "same address" : "new address");
  show(a, "4. allocate 800 B: the cached 1 KiB block again");
  void* big = allocate(5 << 20, "big");
  show(a, "5. allocate 5 MiB: a 20 MiB segment of the large pool");
  void* mid = allocate(12 << 20, "mid");
  show(a, "6. allocate 12 MiB: best fit is the 15 MiB free block of that segment: split again");
  void* huge = allocate((15 << 20) + 1, "huge");
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
  if (svg) {
    svg->write(
        cg::allocator_state_svg(panels, "examples/allocator_lesson: the segments after each step"));
    svg->commit();
  }
  if (trace) {  // after empty_cache(): the end state the viewers replay from is empty
    trace->write(cg::memory_trace_file().dump() + "\n");
    trace->commit();
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  cg::program::Program program("allocator_lesson",
                               "the caching allocator, one allocation and free at a time");
  program.app()
      .add_option("--svg", o.svg, "also draw the segments after each step into this SVG file")
      ->check(cg::program::not_empty());
  program.app()
      .add_option("--trace", o.trace,
                  "also write the steps' allocator events here (chunkgrad trace FILE "
                  "--snapshot-dir DIR makes the file pytorch.org/memory_viz opens)")
      ->check(cg::program::not_empty());
  return program.run(argc, argv, [&] { lesson(o); });
}
