// Why this file exists: a block's category, scope and stream belong to the block for its
// whole life (Note [Block owner], Note [Streams] in core/caching_allocator.h). Before,
// free events took the category active at free time: in a 300-step trace 1200 gradient
// blocks were freed as "unknown" and 300 activation blocks as "temporary" (issue 8, item
// 15). The stream id is recorded in blocks and events and keys best fit, so that a second
// stream later is a change in one place (issue 7).
#include <algorithm>
#include <memory>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/caching_allocator.h"
#include "core/factories.h"
#include "core/memory_trace.h"
#include "core/segment_source.h"

namespace cg {
namespace {

constexpr size_t MiB = size_t{1} << 20;

class TraceBlockOwner : public ::testing::Test {
 protected:
  void SetUp() override {
    MemoryTrace::disable();
    MemoryTrace::clear();
    MemoryTrace::enable(1024);
  }
  void TearDown() override {
    MemoryTrace::disable();
    MemoryTrace::clear();
  }
  static std::vector<TraceEvent> events_of(TraceAction action) {
    std::vector<TraceEvent> out;
    for (const TraceEvent& e : MemoryTrace::events()) {
      if (e.action == action) out.push_back(e);
    }
    return out;
  }
};

TEST_F(TraceBlockOwner, FreeEventCarriesTheBlocksOwnCategoryAndScope) {
  CachingAllocator a(std::make_unique<FakeSegmentSource>(64 * MiB, kCPU));
  void* grad = nullptr;
  void* act = nullptr;
  {
    ScopeGuard s("layer1");
    CategoryGuard c(MemoryCategory::gradient);
    grad = a.allocate(1000);
  }
  {
    ScopeGuard s("layer2");
    CategoryGuard c(MemoryCategory::activation);
    act = a.allocate(3000);
  }
  a.free(grad);  // no guard at all: the old code said "unknown", scope ""
  {
    ScopeGuard s("elsewhere");
    CategoryGuard c(MemoryCategory::temporary);
    a.free(act);  // under another guard: the old code said "temporary", "elsewhere"
  }
  const auto frees = events_of(TraceAction::free);
  ASSERT_EQ(frees.size(), 2u);
  EXPECT_EQ(frees[0].addr, reinterpret_cast<uint64_t>(grad));
  EXPECT_EQ(frees[0].category, MemoryCategory::gradient);
  EXPECT_EQ(MemoryTrace::scope_name(frees[0].scope_id), "layer1");
  EXPECT_EQ(frees[1].addr, reinterpret_cast<uint64_t>(act));
  EXPECT_EQ(frees[1].category, MemoryCategory::activation);
  EXPECT_EQ(MemoryTrace::scope_name(frees[1].scope_id), "layer2");
  // Each free matches its alloc in everything but the action and time.
  const auto allocs = events_of(TraceAction::alloc);
  ASSERT_EQ(allocs.size(), 2u);
  for (size_t i = 0; i < 2; ++i) {
    EXPECT_EQ(allocs[i].category, frees[i].category);
    EXPECT_EQ(allocs[i].scope_id, frees[i].scope_id);
    EXPECT_EQ(allocs[i].size, frees[i].size);
    EXPECT_EQ(allocs[i].requested, frees[i].requested);
    EXPECT_EQ(allocs[i].stream, frees[i].stream);
  }
  // A free block is nobody's: the snapshot shows it as unknown again.
  for (const SegmentInfo& seg : a.snapshot()) {
    for (const BlockInfo& b : seg.blocks) {
      EXPECT_FALSE(b.allocated);
      EXPECT_EQ(b.category, MemoryCategory::unknown);
    }
  }
}

TEST_F(TraceBlockOwner, TensorFreedOutsideItsGuardKeepsItsCategory) {
  // What a training step does: gradients made under a guard, dropped at zero_grad.
  Tensor g;
  {
    CategoryGuard c(MemoryCategory::gradient);
    ScopeGuard s("net/fc1");
    g = zeros({64, 64});
  }
  MemoryTrace::clear();
  g = Tensor();
  const auto frees = events_of(TraceAction::free);
  ASSERT_EQ(frees.size(), 1u);
  EXPECT_EQ(frees[0].category, MemoryCategory::gradient);
  EXPECT_EQ(MemoryTrace::scope_name(frees[0].scope_id), "net/fc1");
}

TEST_F(TraceBlockOwner, BlocksAndEventsCarryTheirStream) {
  CachingAllocator a(std::make_unique<FakeSegmentSource>(64 * MiB, kCPU));
  void* p0 = a.allocate(1000);  // default stream
  void* p1 = a.allocate(1000, /*stream=*/1);
  std::vector<StreamId> seen;
  for (const SegmentInfo& seg : a.snapshot()) {
    for (const BlockInfo& b : seg.blocks) {
      if (b.allocated) {
        EXPECT_EQ(b.stream, b.addr == reinterpret_cast<uint64_t>(p1) ? 1u : 0u);
        seen.push_back(b.stream);
      } else {
        // A split remainder keeps its segment's stream.
        const bool in_p1_segment = seg.blocks.front().addr == reinterpret_cast<uint64_t>(p1);
        EXPECT_EQ(b.stream, in_p1_segment ? 1u : 0u);
      }
    }
  }
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<StreamId>{0, 1}));
  a.free(p1);
  a.free(p0);
  a.empty_cache();

  auto stream_of = [](TraceAction action, uint64_t addr) {
    for (const TraceEvent& e : MemoryTrace::events()) {
      if (e.action == action && e.addr == addr) return static_cast<int>(e.stream);
    }
    return -1;
  };
  const auto a1 = reinterpret_cast<uint64_t>(p1), a0 = reinterpret_cast<uint64_t>(p0);
  EXPECT_EQ(stream_of(TraceAction::alloc, a1), 1);
  EXPECT_EQ(stream_of(TraceAction::free, a1), 1);
  EXPECT_EQ(stream_of(TraceAction::segment_alloc, a1), 1);
  EXPECT_EQ(stream_of(TraceAction::segment_free, a1), 1);
  EXPECT_EQ(stream_of(TraceAction::alloc, a0), 0);
  EXPECT_EQ(stream_of(TraceAction::segment_free, a0), 0);

  // The raw JSON export names the stream of every event.
  const nlohmann::json j = MemoryTrace::to_json();
  ASSERT_FALSE(j["events"].empty());
  for (const auto& e : j["events"]) {
    ASSERT_TRUE(e.contains("stream")) << e.dump();
    if (e["action"] == "alloc" && e["addr"].get<uint64_t>() == a1) {
      EXPECT_EQ(e["stream"].get<StreamId>(), 1u);
    }
  }
}

TEST_F(TraceBlockOwner, ABlockOfAnotherStreamIsNeverHandedOut) {
  CachingAllocator a(std::make_unique<FakeSegmentSource>(64 * MiB, kCPU));
  // A free 1000-byte block of stream 1 and an exact-fit request on stream 0: a new
  // segment, not the cached block (which a second stream might still be using).
  void* p1 = a.allocate(1000, 1);
  a.free(p1);
  EXPECT_EQ(a.stats().segment.current, 1);
  void* p0 = a.allocate(1000, kDefaultStream);
  EXPECT_EQ(a.stats().segment.current, 2) << "stream 0 took stream 1's cached segment";
  // Same for the large pool, and the other way round.
  void* big0 = a.allocate(3 * MiB);
  a.free(big0);
  void* big1 = a.allocate(3 * MiB, 1);
  EXPECT_EQ(a.stats().segment.current, 4);
  // Each stream still reuses its own cache: no new segment for these.
  void* again1 = a.allocate(1000, 1);
  void* again0 = a.allocate(3 * MiB, kDefaultStream);
  EXPECT_EQ(again1, p1);
  EXPECT_EQ(again0, big0);
  EXPECT_EQ(a.stats().segment.current, 4);
  // Best fit within a stream ignores other streams' smaller or larger blocks: with
  // streams 0 and 2 around it, a stream-1 request still finds stream 1's block.
  void* s2 = a.allocate(512, 2);
  a.free(again1);
  a.free(s2);
  EXPECT_EQ(a.allocate(600, 1), p1);
  for (void* p : {p0, big1, again0}) a.free(p);
}

}  // namespace
}  // namespace cg
