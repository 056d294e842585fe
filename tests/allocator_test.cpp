// Why this file exists: the caching allocator checked against its spec
// (docs/allocator_notes.md, core/caching_allocator.h), independently of
// its implementation. Every behaviour test runs on each segment source -- the fake,
// host memory and (with a GPU) cuda:0 -- so the CPU and GPU allocators are one design
// in fact, not only in intent. Tests that need a capacity use memory_limit.
#include <algorithm>
#include <array>
#include <cctype>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/segment_source.h"
#include "tests/allocator_test_util.h"

namespace cg::testing {
namespace {

uintptr_t addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

void expect_stat(const Stat& s, int64_t current, int64_t peak, int64_t allocated, int64_t freed,
                 const char* what) {
  EXPECT_EQ(s.current, current) << what << ".current";
  EXPECT_EQ(s.peak, peak) << what << ".peak";
  EXPECT_EQ(s.allocated, allocated) << what << ".allocated";
  EXPECT_EQ(s.freed, freed) << what << ".freed";
}

// True when `text` states `bytes` in some usual way: "3145728", "3 MiB", "3.00 MiB", ...
bool mentions_size(const std::string& text, size_t bytes) {
  std::vector<std::string> forms = {std::to_string(bytes)};
  const std::pair<double, const char*> units[] = {
      {1024.0, "KiB"}, {1024.0 * 1024, "MiB"}, {1024.0 * 1024 * 1024, "GiB"},
      {1024.0, "KB"},  {1024.0 * 1024, "MB"},  {1024.0 * 1024 * 1024, "GB"}};
  for (const auto& [unit, name] : units) {
    const double v = static_cast<double>(bytes) / unit;
    for (const char* fmt : {"%.0f %s", "%.1f %s", "%.2f %s", "%.0f%s", "%.1f%s", "%.2f%s"}) {
      char buf[64];
      std::snprintf(buf, sizeof buf, fmt, v, name);
      forms.emplace_back(buf);
    }
  }
  for (const std::string& f : forms) {
    // not the tail of a longer number ("2 MiB" must not match "22 MiB")
    for (size_t at = text.find(f); at != std::string::npos; at = text.find(f, at + 1)) {
      if (at == 0 ||
          !(std::isdigit(static_cast<unsigned char>(text[at - 1])) || text[at - 1] == '.')) {
        return true;
      }
    }
  }
  return false;
}

// ---- pure functions -------------------------------------------------------------

TEST(AllocatorSizes, RoundSize) {
  EXPECT_EQ(CachingAllocator::round_size(1), 512u);
  EXPECT_EQ(CachingAllocator::round_size(511), 512u);
  EXPECT_EQ(CachingAllocator::round_size(512), 512u);
  EXPECT_EQ(CachingAllocator::round_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::round_size(MiB), MiB);
  EXPECT_EQ(CachingAllocator::round_size(MiB + 1), MiB + 512);
  EXPECT_EQ(CachingAllocator::round_size(11 * MiB + 1), 11 * MiB + 512);
}

TEST(AllocatorSizes, SegmentSizeForPools) {
  auto seg = [](size_t n) {
    return CachingAllocator::segment_size_for(CachingAllocator::round_size(n));
  };
  EXPECT_EQ(seg(1), kSmallBuffer);
  EXPECT_EQ(seg(MiB), kSmallBuffer);      // <= 1 MiB: small pool
  EXPECT_EQ(seg(MiB + 1), kLargeBuffer);  // just above: a 20 MiB segment
  EXPECT_EQ(seg(5 * MiB), kLargeBuffer);
  EXPECT_EQ(seg(10 * MiB - 512), kLargeBuffer);
  EXPECT_EQ(seg(10 * MiB - 1), 10 * MiB);  // rounds to exactly 10 MiB
  EXPECT_EQ(seg(10 * MiB), 10 * MiB);      // from 10 MiB: the request rounded to 2 MiB
  EXPECT_EQ(seg(10 * MiB + 1), 12 * MiB);
  EXPECT_EQ(seg(13 * MiB), 14 * MiB);
  EXPECT_EQ(seg(100 * MiB), 100 * MiB);
}

// ---- the fixture: one allocator over each source --------------------------------

class AllocatorTest : public ::testing::TestWithParam<SourceKind> {
 protected:
  void SetUp() override {
    std::string why;
    if (!source_available(GetParam(), &why)) GTEST_SKIP() << why;
  }

  // An allocator whose source is counted in counters_. The fake's capacity is large
  // enough never to matter; tests that need a limit set config.memory_limit.
  std::unique_ptr<CachingAllocator> make(AllocatorConfig config = {}) {
    counters_ = std::make_shared<SourceCounters>();
    auto inner = make_source(GetParam(), size_t{2} << 30);
    return std::make_unique<CachingAllocator>(
        std::make_unique<CountingSource>(std::move(inner), counters_), config);
  }

  std::shared_ptr<SourceCounters> counters_;
};

TEST_P(AllocatorTest, ZeroBytesIsNullAndCostsNothing) {
  auto a = make();
  EXPECT_EQ(a->allocate(0), nullptr);
  EXPECT_EQ(a->stats().allocation.allocated, 0);
  EXPECT_EQ(counters_->allocs, 0);
  EXPECT_NO_THROW(a->free(nullptr));
}

TEST_P(AllocatorTest, PoolChoiceBySize) {
  auto a = make();
  void* small = a->allocate(MiB);     // small pool, 2 MiB segment
  void* mid = a->allocate(MiB + 1);   // large pool, 20 MiB segment
  void* big = a->allocate(21 * MiB);  // own segment, rounded to 22 MiB (too big for mid's)
  std::map<uintptr_t, size_t> live = {
      {addr(small), MiB}, {addr(mid), MiB + 1}, {addr(big), 21 * MiB}};
  check_snapshot(*a, live);
  std::map<size_t, bool> sizes;  // segment size -> small_pool
  for (const SegmentInfo& s : a->snapshot()) sizes[s.size] = s.small_pool;
  ASSERT_EQ(sizes.size(), 3u);
  EXPECT_TRUE(sizes.at(kSmallBuffer));
  EXPECT_FALSE(sizes.at(kLargeBuffer));
  EXPECT_FALSE(sizes.at(22 * MiB));
  EXPECT_EQ(a->stats().reserved_bytes.current,
            static_cast<int64_t>(kSmallBuffer + kLargeBuffer + 22 * MiB));
  EXPECT_EQ(counters_->in_use, kSmallBuffer + kLargeBuffer + 22 * MiB);
  for (void* p : {small, mid, big}) a->free(p);
}

TEST_P(AllocatorTest, FreedBlockIsReusedWithoutNewSegment) {
  auto a = make();
  for (size_t n : {size_t{1000}, 3 * MiB, 24 * MiB}) {  // each needs its own segment
    void* p = a->allocate(n);
    const int64_t segs = counters_->allocs;
    a->free(p);
    void* q = a->allocate(n);
    EXPECT_EQ(q, p) << n << " B";
    EXPECT_EQ(counters_->allocs, segs) << n << " B";
    a->free(q);
  }
  EXPECT_EQ(a->stats().segment.allocated, 3);
}

TEST_P(AllocatorTest, SmallPoolSplitsDownTo512) {
  auto a = make();
  void* p1 = a->allocate(MiB);
  void* p2 = a->allocate(MiB - 512);  // leaves exactly 512 B: still split off
  void* p3 = a->allocate(512);        // ... and that is where this goes
  EXPECT_EQ(counters_->allocs, 1);
  EXPECT_EQ(addr(p2), addr(p1) + MiB);
  EXPECT_EQ(addr(p3), addr(p2) + MiB - 512);
  check_snapshot(*a, {{addr(p1), MiB}, {addr(p2), MiB - 512}, {addr(p3), 512}});
  ASSERT_EQ(a->snapshot().size(), 1u);
  EXPECT_EQ(a->snapshot()[0].blocks.size(), 3u);
  // Freed blocks merge back into one 1 MiB run, carved again from its start.
  a->free(p3);
  a->free(p2);
  void* p4 = a->allocate(1024);
  EXPECT_EQ(p4, p2);
  a->free(p4);
  void* p5 = a->allocate(100);
  EXPECT_EQ(p5, p2);
  check_snapshot(*a, {{addr(p1), MiB}, {addr(p5), 100}});
  a->free(p1);
  a->free(p5);
  check_snapshot(*a, {});
}

TEST_P(AllocatorTest, BestFitPicksTheSmallestHole) {
  auto a = make();
  void* x = a->allocate(1024);
  void* y = a->allocate(1024);
  void* z = a->allocate(1024);
  a->free(y);  // a 1 KiB hole between x and z; the segment's big free tail follows z
  void* w = a->allocate(512);
  EXPECT_EQ(w, y);
  check_snapshot(*a, {{addr(x), 1024}, {addr(w), 512}, {addr(z), 1024}});
  for (void* p : {x, w, z}) a->free(p);
}

TEST_P(AllocatorTest, LargePoolSplitsOnlyWhenMoreThan1MiBRemains) {
  auto a = make();
  // 9 + 9 MiB of a 20 MiB segment leave 2 MiB; a 1 MiB + 512 request leaves 1 MiB - 512,
  // not worth a split: the caller gets the whole 2 MiB block.
  void* x = a->allocate(9 * MiB);
  void* y = a->allocate(9 * MiB);
  void* z = a->allocate(MiB + 512);
  EXPECT_EQ(counters_->allocs, 1);
  EXPECT_EQ(addr(z), addr(y) + 9 * MiB);
  EXPECT_EQ(a->stats().allocated_bytes.current, static_cast<int64_t>(20 * MiB));
  EXPECT_EQ(a->stats().requested_bytes.current, static_cast<int64_t>(19 * MiB + 512));
  check_snapshot(*a, {{addr(x), 9 * MiB}, {addr(y), 9 * MiB}, {addr(z), MiB + 512}});
  EXPECT_EQ(a->snapshot()[0].blocks.size(), 3u);
  for (void* p : {x, y, z}) a->free(p);

  // Exactly 1 MiB left over: still no split (the rule is "more than 1 MiB").
  x = a->allocate(9 * MiB);
  y = a->allocate(9 * MiB - 512);
  z = a->allocate(MiB + 512);
  EXPECT_EQ(a->snapshot()[0].blocks.size(), 3u);
  EXPECT_EQ(a->stats().allocated_bytes.current, static_cast<int64_t>(20 * MiB));
  for (void* p : {x, y, z}) a->free(p);

  // 1 MiB + 512 left over: split, and the rest serves the next request exactly.
  x = a->allocate(9 * MiB);
  y = a->allocate(9 * MiB - 1024);
  z = a->allocate(MiB + 512);
  EXPECT_EQ(a->snapshot()[0].blocks.size(), 4u);
  void* w = a->allocate(MiB + 512);
  EXPECT_EQ(addr(w), addr(z) + MiB + 512);
  EXPECT_EQ(counters_->allocs, 1);
  check_snapshot(
      *a,
      {{addr(x), 9 * MiB}, {addr(y), 9 * MiB - 1024}, {addr(z), MiB + 512}, {addr(w), MiB + 512}});
  for (void* p : {x, y, z, w}) a->free(p);
  check_snapshot(*a, {});
}

TEST_P(AllocatorTest, RequestsAtOrAboveMaxSplitSizeAreNotSplit) {
  AllocatorConfig config;
  config.max_split_size = 8 * MiB;
  auto a = make(config);
  void* p = a->allocate(9 * MiB);  // 20 MiB segment; 9 MiB >= max_split_size
  ASSERT_EQ(a->snapshot().size(), 1u);
  EXPECT_EQ(a->snapshot()[0].blocks.size(), 1u) << "a request >= max_split_size was split";
  a->free(p);
}

TEST_P(AllocatorTest, FreeMergesNeighboursInAnyOrder) {
  auto a = make();
  const size_t n = 256 * KiB;
  std::array<int, 3> order = {0, 1, 2};
  do {
    void* b[4];
    for (void*& p : b) p = a->allocate(n);  // b[3] stays live: merging is not "segment empty"
    for (int i = 0; i < 3; ++i) ASSERT_EQ(addr(b[i + 1]), addr(b[i]) + n);
    for (int i : order) a->free(b[i]);
    check_snapshot(*a, {{addr(b[3]), n}});
    // a free run of 3n then b[3], then the free tail
    const std::vector<SegmentInfo> segs = a->snapshot();
    ASSERT_EQ(segs.size(), 1u);
    ASSERT_EQ(segs[0].blocks.size(), 3u) << "order " << order[0] << order[1] << order[2];
    EXPECT_EQ(segs[0].blocks[0].size, 3 * n);
    void* merged = a->allocate(3 * n);
    EXPECT_EQ(merged, b[0]);
    EXPECT_EQ(counters_->allocs, 1);
    a->free(merged);
    a->free(b[3]);
    check_snapshot(*a, {});
    ASSERT_EQ(a->snapshot()[0].blocks.size(), 1u);
  } while (std::next_permutation(order.begin(), order.end()));
}

TEST_P(AllocatorTest, StatsInAScriptedScenario) {
  auto a = make();
  const int64_t k2 = 2 * MiB, k3 = 3 * MiB, k17 = 17 * MiB, k20 = 20 * MiB, k22 = 22 * MiB;

  void* p1 = a->allocate(1000);  // small segment, 1024 B block + (2 MiB - 1024) free
  AllocatorStats s = a->stats();
  expect_stat(s.allocation, 1, 1, 1, 0, "allocation");
  expect_stat(s.active, 1, 1, 1, 0, "active");
  expect_stat(s.segment, 1, 1, 1, 0, "segment");
  expect_stat(s.allocated_bytes, 1024, 1024, 1024, 0, "allocated_bytes");
  expect_stat(s.active_bytes, 1024, 1024, 1024, 0, "active_bytes");
  expect_stat(s.reserved_bytes, k2, k2, k2, 0, "reserved_bytes");
  expect_stat(s.requested_bytes, 1000, 1000, 1000, 0, "requested_bytes");
  EXPECT_EQ(s.inactive_split.current, 1);
  EXPECT_EQ(s.inactive_split_bytes.current, k2 - 1024);

  void* p2 = a->allocate(k3);  // large segment: 3 MiB + 17 MiB free
  s = a->stats();
  expect_stat(s.allocation, 2, 2, 2, 0, "allocation");
  expect_stat(s.segment, 2, 2, 2, 0, "segment");
  expect_stat(s.allocated_bytes, k3 + 1024, k3 + 1024, k3 + 1024, 0, "allocated_bytes");
  expect_stat(s.reserved_bytes, k22, k22, k22, 0, "reserved_bytes");
  expect_stat(s.requested_bytes, k3 + 1000, k3 + 1000, k3 + 1000, 0, "requested_bytes");
  EXPECT_EQ(s.inactive_split.current, 2);
  EXPECT_EQ(s.inactive_split.peak, 2);
  EXPECT_EQ(s.inactive_split_bytes.current, k2 - 1024 + k17);

  a->free(p1);  // the small segment is whole again: cached, no longer "split"
  s = a->stats();
  expect_stat(s.allocation, 1, 2, 2, 1, "allocation");
  expect_stat(s.segment, 2, 2, 2, 0, "segment");
  expect_stat(s.allocated_bytes, k3, k3 + 1024, k3 + 1024, 1024, "allocated_bytes");
  expect_stat(s.reserved_bytes, k22, k22, k22, 0, "reserved_bytes");
  expect_stat(s.requested_bytes, k3, k3 + 1000, k3 + 1000, 1000, "requested_bytes");
  EXPECT_EQ(s.inactive_split.current, 1);
  EXPECT_EQ(s.inactive_split.peak, 2);
  EXPECT_EQ(s.inactive_split_bytes.current, k17);
  EXPECT_EQ(s.inactive_split_bytes.peak, k2 - 1024 + k17);

  void* p3 = a->allocate(k3);  // from the cached 17 MiB: no new segment
  EXPECT_EQ(addr(p3), addr(p2) + k3);
  s = a->stats();
  expect_stat(s.allocation, 2, 2, 3, 1, "allocation");
  expect_stat(s.segment, 2, 2, 2, 0, "segment");
  expect_stat(s.allocated_bytes, 2 * k3, 2 * k3, 2 * k3 + 1024, 1024, "allocated_bytes");
  EXPECT_EQ(s.inactive_split.current, 1);
  EXPECT_EQ(s.inactive_split_bytes.current, k17 - k3);
  check_snapshot(*a, {{addr(p2), k3}, {addr(p3), k3}});

  a->reset_peak_stats();
  s = a->stats();
  for (const Stat* st :
       {&s.allocation, &s.segment, &s.active, &s.inactive_split, &s.allocated_bytes,
        &s.reserved_bytes, &s.active_bytes, &s.inactive_split_bytes, &s.requested_bytes}) {
    EXPECT_EQ(st->peak, st->current);
  }

  a->empty_cache();  // only the small segment is fully free
  s = a->stats();
  expect_stat(s.segment, 1, 2, 2, 1, "segment");
  expect_stat(s.reserved_bytes, k20, k22, k22, k2, "reserved_bytes");
  EXPECT_EQ(counters_->in_use, static_cast<size_t>(k20));
  EXPECT_EQ(s.allocation.current, 2);

  a->free(p2);
  a->free(p3);
  s = a->stats();
  expect_stat(s.allocation, 0, 2, 3, 3, "allocation");
  expect_stat(s.allocated_bytes, 0, 2 * k3, 2 * k3 + 1024, 2 * k3 + 1024, "allocated_bytes");
  expect_stat(s.requested_bytes, 0, 2 * k3, 2 * k3 + 1000, 2 * k3 + 1000, "requested_bytes");
  EXPECT_EQ(s.inactive_split.current, 0);
  EXPECT_EQ(s.inactive_split_bytes.current, 0);
  EXPECT_EQ(s.reserved_bytes.current, k20);

  a->empty_cache();
  s = a->stats();
  expect_stat(s.segment, 0, 2, 2, 2, "segment");
  expect_stat(s.reserved_bytes, 0, k22, k22, k22, "reserved_bytes");
  EXPECT_EQ(counters_->in_use, 0u);
  EXPECT_EQ(counters_->frees, 2);
  EXPECT_EQ(s.num_alloc_retries, 0);
  EXPECT_EQ(s.num_ooms, 0);
  check_stat_consistency(s);
  EXPECT_FALSE(s.str().empty());
}

TEST_P(AllocatorTest, EmptyCacheReturnsOnlyFullyFreeSegments) {
  auto a = make();
  void* s1 = a->allocate(1000);
  void* s2 = a->allocate(1000);      // same small segment
  void* l1 = a->allocate(12 * MiB);  // own segment
  void* l2 = a->allocate(12 * MiB);  // own segment
  EXPECT_EQ(counters_->allocs, 3);
  a->free(s1);  // segment still holds s2
  a->free(l1);  // segment fully free
  a->empty_cache();
  EXPECT_EQ(counters_->frees, 1);
  EXPECT_EQ(counters_->in_use, kSmallBuffer + 12 * MiB);
  check_snapshot(*a, {{addr(s2), 1000}, {addr(l2), 12 * MiB}});
  a->free(s2);
  a->free(l2);
  a->empty_cache();
  EXPECT_EQ(counters_->in_use, 0u);
  EXPECT_TRUE(a->snapshot().empty());
}

TEST_P(AllocatorTest, MemoryLimitThrowsReadableOutOfMemory) {
  AllocatorConfig config;
  config.memory_limit = 4 * MiB;
  auto a = make(config);
  EXPECT_EQ(a->memory_limit(), 4 * MiB);
  void* p = a->allocate(MiB);  // 2 MiB small segment
  std::string message;
  try {
    a->allocate(3 * MiB);  // needs a 20 MiB segment
    ADD_FAILURE() << "no OutOfMemoryError past the memory limit";
  } catch (const OutOfMemoryError& e) { message = e.what(); }
  SCOPED_TRACE("OOM message: " + message);
  EXPECT_TRUE(mentions_size(message, 3 * MiB)) << "requested size missing";
  EXPECT_TRUE(mentions_size(message, 1 * MiB)) << "allocated figure missing";
  EXPECT_TRUE(mentions_size(message, 2 * MiB)) << "reserved figure missing";
  EXPECT_TRUE(mentions_size(message, 4 * MiB)) << "limit missing";
  for (const char* word : {"allocated", "reserved", "limit"}) {
    std::string lower = message;
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    EXPECT_NE(lower.find(word), std::string::npos) << "message does not say '" << word << "'";
  }
  AllocatorStats s = a->stats();
  EXPECT_EQ(s.num_ooms, 1);
  EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(2 * MiB));
  EXPECT_EQ(counters_->in_use, 2 * MiB);
  EXPECT_THROW(a->allocate(12 * MiB), OutOfMemoryError);
  EXPECT_EQ(a->stats().num_ooms, 2);
  // still usable after OOMs
  void* q = a->allocate(512 * KiB);
  check_snapshot(*a, {{addr(p), MiB}, {addr(q), 512 * KiB}});
  a->free(q);
  a->free(p);
}

TEST_P(AllocatorTest, MemoryLimitMayBeReachedExactly) {
  auto a = make();
  a->set_memory_limit(22 * MiB);
  EXPECT_EQ(a->memory_limit(), 22 * MiB);
  void* p = a->allocate(1000);
  void* q = a->allocate(3 * MiB);
  EXPECT_EQ(a->stats().reserved_bytes.current, static_cast<int64_t>(22 * MiB));
  EXPECT_THROW(a->allocate(18 * MiB), OutOfMemoryError);  // a 18 MiB segment would pass it
  a->free(p);
  a->free(q);
  a->set_memory_limit(0);  // no limit again
  void* big = a->allocate(64 * MiB);
  a->free(big);
}

TEST_P(AllocatorTest, LimitReleasesCachedSegmentsAndRetries) {
  AllocatorConfig config;
  config.memory_limit = 21 * MiB;
  auto a = make(config);
  void* p = a->allocate(1000);
  a->free(p);                      // 2 MiB small segment cached
  void* q = a->allocate(3 * MiB);  // 2 + 20 > 21: must give the small segment back first
  AllocatorStats s = a->stats();
  EXPECT_EQ(s.num_alloc_retries, 1);
  EXPECT_EQ(s.num_ooms, 0);
  EXPECT_EQ(s.reserved_bytes.current, static_cast<int64_t>(20 * MiB));
  EXPECT_EQ(s.segment.freed, 1);
  EXPECT_EQ(counters_->frees, 1);
  EXPECT_EQ(counters_->in_use, 20 * MiB);
  check_snapshot(*a, {{addr(q), 3 * MiB}});
  a->free(q);
}

TEST_P(AllocatorTest, SourceRefusalReleasesCacheAndRetries) {
  auto a = make();
  void* p = a->allocate(1000);
  a->free(p);
  counters_->fail_next = 1;  // the source refuses once, as cudaMalloc does when full
  void* q = a->allocate(3 * MiB);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(a->stats().num_alloc_retries, 1);
  EXPECT_EQ(counters_->frees, 1);
  counters_->fail_next = 1000;
  EXPECT_THROW(a->allocate(30 * MiB), OutOfMemoryError);
  EXPECT_EQ(a->stats().num_ooms, 1);
  counters_->fail_next = 0;
  check_snapshot(*a, {{addr(q), 3 * MiB}});
  a->free(q);
}

TEST_P(AllocatorTest, FreeOfUnknownPointerThrows) {
  auto a = make();
  void* p = a->allocate(4096);
  EXPECT_THROW(a->free(static_cast<char*>(p) + 512), Error);  // inside a block
  int on_stack = 0;
  EXPECT_THROW(a->free(&on_stack), Error);
  a->free(p);
  EXPECT_THROW(a->free(p), Error);  // double free
  check_snapshot(*a, {});
}

TEST_P(AllocatorTest, SnapshotTilesSegmentsAndMatchesPointers) {
  auto a = make();
  std::map<uintptr_t, size_t> live;
  std::vector<void*> ptrs;
  for (size_t n :
       {size_t{1}, size_t{700}, 64 * KiB, MiB, MiB + 1, 5 * MiB, 11 * MiB, size_t{513}}) {
    void* p = a->allocate(n);
    ptrs.push_back(p);
    live[addr(p)] = n;
  }
  a->free(ptrs[1]);
  live.erase(addr(ptrs[1]));
  a->free(ptrs[5]);
  live.erase(addr(ptrs[5]));
  check_snapshot(*a, live);
  for (const SegmentInfo& seg : a->snapshot()) {
    for (const BlockInfo& b : seg.blocks) EXPECT_EQ((b.addr - seg.addr) % kMinBlockSize, 0u);
  }
  for (auto [p, n] : live) a->free(reinterpret_cast<void*>(p));
}

TEST_P(AllocatorTest, DestructorReturnsEverySegment) {
  auto a = make();
  a->allocate(1000);
  a->allocate(3 * MiB);
  void* p = a->allocate(12 * MiB);
  a->free(p);
  auto counters = counters_;
  a.reset();
  EXPECT_EQ(counters->in_use, 0u);
  EXPECT_TRUE(counters->live.empty());
}

TEST_P(AllocatorTest, ContentsSurviveNeighbours) {
  auto a = make();
  MemoryAccess mem(GetParam());
  std::vector<std::pair<void*, size_t>> blocks;
  const size_t sizes[] = {1, 511, 512, 513, 4000, 64 * KiB, MiB, MiB + 1, 3 * MiB, 11 * MiB};
  uint64_t tag = 1;
  for (size_t n : sizes) {
    for (int rep = 0; rep < 3; ++rep) {
      void* p = a->allocate(n);
      mem.fill(p, n, tag++);
      blocks.emplace_back(p, n);
    }
  }
  tag = 1;
  for (auto [p, n] : blocks) EXPECT_EQ(mem.check(p, n, tag++), "");
  for (auto [p, n] : blocks) a->free(p);
}

TEST_P(AllocatorTest, ConcurrentThreads) {
  auto a = make();
  const bool host = GetParam() != SourceKind::cuda;
  auto work = [&](int seed) {
    std::mt19937_64 rng(seed);
    std::vector<std::pair<unsigned char*, size_t>> mine;
    for (int i = 0; i < 2000; ++i) {
      if (mine.empty() || rng() % 3 != 0) {
        const size_t n = 1 + rng() % (rng() % 8 == 0 ? 4 * MiB : 16 * KiB);
        auto* p = static_cast<unsigned char*>(a->allocate(n));
        if (host) p[0] = p[n - 1] = static_cast<unsigned char>(seed);
        mine.emplace_back(p, n);
      } else {
        const size_t k = rng() % mine.size();
        auto [p, n] = mine[k];
        if (host && (p[0] != static_cast<unsigned char>(seed) || p[n - 1] != p[0])) {
          ADD_FAILURE() << "thread " << seed << " block overwritten";
        }
        a->free(p);
        mine[k] = mine.back();
        mine.pop_back();
      }
      if (i % 500 == 0) a->stats();
    }
    for (auto [p, n] : mine) a->free(p);
  };
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) threads.emplace_back(work, t + 1);
  for (auto& t : threads) t.join();
  const AllocatorStats s = a->stats();
  EXPECT_EQ(s.allocation.current, 0);
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.requested_bytes.current, 0);
  check_stat_consistency(s);
  a->empty_cache();
  EXPECT_EQ(counters_->in_use, 0u);
}

// Note [Fuzz]: 10,000 seeded steps of allocate / free / empty_cache. Sizes are skewed
// small (most below 64 KiB, a few up to ~30 MiB) and live bytes are capped so the test
// stays quick and fits anywhere. Each block carries a pattern checked before its free;
// at every step the snapshot, stats and source counters must agree exactly.
TEST_P(AllocatorTest, RandomFuzz) {
  auto a = make();
  MemoryAccess mem(GetParam());
  std::mt19937_64 rng(20240611);
  struct Live {
    size_t n;
    uint64_t tag;
  };
  std::map<uintptr_t, Live> live;
  std::map<uintptr_t, size_t> live_sizes;
  size_t live_bytes = 0;
  uint64_t next_tag = 1;
  const size_t kCap = 256 * MiB;
  auto pick_size = [&]() -> size_t {
    const uint64_t r = rng() % 100;
    if (r < 70) return 1 + rng() % (4 * KiB);
    if (r < 90) return 1 + rng() % (256 * KiB);
    if (r < 97) return 1 + rng() % (4 * MiB);
    return 1 + rng() % (30 * MiB);
  };
  for (int step = 0; step < 10000; ++step) {
    const uint64_t r = rng() % 100;
    const bool must_free = live_bytes > kCap || live.size() > 400;
    if (r == 0) {
      a->empty_cache();
    } else if (!live.empty() && (must_free || r < 45)) {
      auto it = live.begin();
      std::advance(it, static_cast<long>(rng() % live.size()));
      void* p = reinterpret_cast<void*>(it->first);
      const std::string bad = mem.check(p, it->second.n, it->second.tag);
      ASSERT_EQ(bad, "") << "step " << step;
      a->free(p);
      live_bytes -= it->second.n;
      live_sizes.erase(it->first);
      live.erase(it);
    } else {
      const size_t n = pick_size();
      void* p = a->allocate(n);
      ASSERT_NE(p, nullptr);
      ASSERT_EQ(live.count(addr(p)), 0u) << "step " << step << ": address handed out twice";
      const uint64_t tag = next_tag++;
      mem.fill(p, n, tag);
      live[addr(p)] = {n, tag};
      live_sizes[addr(p)] = n;
      live_bytes += n;
    }
    // no two live blocks overlap (by rounded size)
    uintptr_t end = 0;
    for (const auto& [p, l] : live) {
      ASSERT_GE(p, end) << "step " << step << ": live blocks overlap";
      end = p + CachingAllocator::round_size(l.n);
    }
    const AllocatorStats s = a->stats();
    int64_t rounded = 0, requested = 0;
    for (const auto& [p, l] : live) {
      rounded += static_cast<int64_t>(CachingAllocator::round_size(l.n));
      requested += static_cast<int64_t>(l.n);
    }
    // allocated_bytes counts whole blocks: the rounded size, plus at most 1 MiB when a
    // large block was not worth splitting (check_snapshot pins it per block).
    ASSERT_GE(s.allocated_bytes.current, rounded) << "step " << step;
    ASSERT_EQ(s.requested_bytes.current, requested) << "step " << step;
    ASSERT_EQ(s.allocation.current, static_cast<int64_t>(live.size())) << "step " << step;
    ASSERT_GE(s.reserved_bytes.current, s.allocated_bytes.current) << "step " << step;
    ASSERT_EQ(static_cast<size_t>(s.reserved_bytes.current), counters_->in_use) << "step " << step;
    check_stat_consistency(s);
    check_snapshot(*a, live_sizes);
    if (::testing::Test::HasFailure()) FAIL() << "stopped at step " << step;
  }
  for (const auto& [p, l] : live) {
    ASSERT_EQ(mem.check(reinterpret_cast<void*>(p), l.n, l.tag), "");
    a->free(reinterpret_cast<void*>(p));
  }
  AllocatorStats s = a->stats();
  EXPECT_EQ(s.allocated_bytes.current, 0);
  EXPECT_EQ(s.requested_bytes.current, 0);
  EXPECT_EQ(s.allocation.current, 0);
  EXPECT_EQ(s.inactive_split.current, 0);
  a->empty_cache();
  s = a->stats();
  EXPECT_EQ(s.reserved_bytes.current, 0);
  EXPECT_EQ(s.segment.current, 0);
  EXPECT_EQ(counters_->in_use, 0u);
  EXPECT_GT(s.segment.allocated, 1);
}

std::vector<SourceKind> all_sources() {
  std::vector<SourceKind> kinds = {SourceKind::fake, SourceKind::host};
#if defined(CHUNKGRAD_WITH_CUDA)
  kinds.push_back(SourceKind::cuda);  // skipped at run time without a GPU
#endif
  return kinds;
}

INSTANTIATE_TEST_SUITE_P(Sources, AllocatorTest, ::testing::ValuesIn(all_sources()),
                         [](const ::testing::TestParamInfo<SourceKind>& info) {
                           return std::string(source_kind_name(info.param));
                         });

// ---- FakeSegmentSource itself and the allocator's reaction to it -----------------

TEST(AllocatorFakeSource, FailNextMakesAllocatorReleaseCacheAndRetry) {
  auto fake = std::make_unique<FakeSegmentSource>(64 * MiB);
  FakeSegmentSource* f = fake.get();
  CachingAllocator a(std::move(fake));
  void* p = a.allocate(1000);
  a.free(p);
  EXPECT_EQ(f->in_use(), kSmallBuffer);
  f->fail_next(1);
  void* q = a.allocate(3 * MiB);
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(a.stats().num_alloc_retries, 1);
  EXPECT_EQ(f->segment_frees(), 1);
  EXPECT_EQ(f->in_use(), kLargeBuffer);
  f->fail_next(100);
  EXPECT_THROW(a.allocate(30 * MiB), OutOfMemoryError);
  EXPECT_EQ(a.stats().num_ooms, 1);
  f->fail_next(0);
  a.free(q);
  a.empty_cache();
  EXPECT_EQ(f->in_use(), 0u);
  EXPECT_EQ(f->segment_allocs(), f->segment_frees());
}

TEST(AllocatorFakeSource, CapacityBoundsTheAllocator) {
  auto fake = std::make_unique<FakeSegmentSource>(4 * MiB);
  FakeSegmentSource* f = fake.get();
  CachingAllocator a(std::move(fake));
  EXPECT_EQ(f->free_bytes(), static_cast<int64_t>(4 * MiB));
  void* p = a.allocate(MiB);
  void* q = a.allocate(MiB);  // the second half of the same 2 MiB segment
  EXPECT_EQ(f->in_use(), kSmallBuffer);
  void* r = a.allocate(MiB);
  EXPECT_EQ(f->in_use(), 2 * kSmallBuffer);
  EXPECT_EQ(f->free_bytes(), 0);
  EXPECT_THROW(a.allocate(3 * MiB), OutOfMemoryError);
  EXPECT_EQ(a.stats().num_ooms, 1);
  a.free(p);
  a.free(q);
  a.free(r);
  EXPECT_EQ(a.device(), Device{});
  EXPECT_EQ(a.source().name(), "fake");
}

TEST(AllocatorHostSource, SegmentsAreAlignedAndWritable) {
  auto src = make_host_segment_source();
  EXPECT_TRUE(src->device().is_cpu());
  void* p = src->allocate_segment(kSmallBuffer);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(addr(p) % 4096, 0u);
  static_cast<char*>(p)[kSmallBuffer - 1] = 1;
  src->free_segment(p, kSmallBuffer);
}

}  // namespace
}  // namespace cg::testing
