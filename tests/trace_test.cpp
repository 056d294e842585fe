// Why this file exists: the memory trace checked against core/memory_trace.h -- what an
// event carries (action, size, address, category, scope path), the bounded ring and
// its dropped count, silence when disabled, the JSON form, and that the caching
// allocator reports its blocks and segments through it.
#include <algorithm>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/memory_trace.h"
#include "core/segment_source.h"

namespace cg {
namespace {

constexpr size_t MiB = size_t{1} << 20;

// The trace is process-wide: every test leaves it off and empty.
class TraceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    MemoryTrace::disable();
    MemoryTrace::clear();
  }
  void TearDown() override {
    MemoryTrace::disable();
    MemoryTrace::clear();
  }
};

TEST_F(TraceTest, Names) {
  EXPECT_STREQ(action_name(TraceAction::alloc), "alloc");
  EXPECT_STREQ(action_name(TraceAction::segment_alloc), "segment_alloc");
  EXPECT_STREQ(action_name(TraceAction::segment_free), "segment_free");
  EXPECT_STREQ(action_name(TraceAction::oom), "oom");
  const std::string free_name = action_name(TraceAction::free);
  EXPECT_NE(free_name.find("free"), std::string::npos);
  EXPECT_STREQ(category_name(MemoryCategory::unknown), "unknown");
  EXPECT_STREQ(category_name(MemoryCategory::parameter), "parameter");
  EXPECT_STREQ(category_name(MemoryCategory::gradient), "gradient");
  EXPECT_STREQ(category_name(MemoryCategory::optimizer_state), "optimizer_state");
  EXPECT_STREQ(category_name(MemoryCategory::activation), "activation");
  EXPECT_STREQ(category_name(MemoryCategory::autograd_saved), "autograd_saved");
  EXPECT_STREQ(category_name(MemoryCategory::temporary), "temporary");
  EXPECT_STREQ(category_name(MemoryCategory::input), "input");
}

TEST_F(TraceTest, DisabledRecordsNothing) {
  EXPECT_FALSE(MemoryTrace::enabled());
  MemoryTrace::record(TraceAction::alloc, kCPU, 0x1000, 512, 500);
  EXPECT_TRUE(MemoryTrace::events().empty());
  MemoryTrace::enable(16);
  EXPECT_TRUE(MemoryTrace::enabled());
  MemoryTrace::record(TraceAction::alloc, kCPU, 0x1000, 512, 500);
  MemoryTrace::disable();
  EXPECT_FALSE(MemoryTrace::enabled());
  MemoryTrace::record(TraceAction::free, kCPU, 0x1000, 512, 500);
  const auto events = MemoryTrace::events();
  ASSERT_EQ(events.size(), 1u) << "an event was recorded while disabled";
  EXPECT_EQ(events[0].action, TraceAction::alloc);
}

TEST_F(TraceTest, EventCarriesFieldsCategoryAndScope) {
  MemoryTrace::enable(64);
  EXPECT_EQ(current_category(), MemoryCategory::unknown);
  EXPECT_EQ(current_scope(), "");
  MemoryTrace::record(TraceAction::segment_alloc, cuda_device(2), 0x10000, 2 * MiB, 2 * MiB);
  {
    CategoryGuard cat(MemoryCategory::parameter);
    ScopeGuard a("a");
    EXPECT_EQ(current_scope(), "a");
    {
      ScopeGuard b("b");
      EXPECT_EQ(current_scope(), "a/b");
      EXPECT_EQ(MemoryTrace::scope_name(current_scope_id()), "a/b");
      {
        CategoryGuard inner(MemoryCategory::gradient);
        EXPECT_EQ(current_category(), MemoryCategory::gradient);
        MemoryTrace::record(TraceAction::alloc, cuda_device(2), 0x10200, 1024, 1000);
      }
      EXPECT_EQ(current_category(), MemoryCategory::parameter);
      MemoryTrace::record(TraceAction::free, cuda_device(2), 0x10200, 1024, 1000);
    }
    EXPECT_EQ(current_scope(), "a");
    MemoryTrace::record(TraceAction::alloc, kCPU, 0x20000, 512, 1);
  }
  EXPECT_EQ(current_category(), MemoryCategory::unknown);
  EXPECT_EQ(current_scope(), "");

  const auto ev = MemoryTrace::events();
  ASSERT_EQ(ev.size(), 4u);
  EXPECT_EQ(ev[0].action, TraceAction::segment_alloc);
  EXPECT_EQ(ev[0].device, cuda_device(2));
  EXPECT_EQ(ev[0].addr, 0x10000u);
  EXPECT_EQ(ev[0].size, 2 * MiB);
  EXPECT_EQ(ev[0].category, MemoryCategory::unknown);
  EXPECT_EQ(MemoryTrace::scope_name(ev[0].scope_id), "");

  EXPECT_EQ(ev[1].action, TraceAction::alloc);
  EXPECT_EQ(ev[1].addr, 0x10200u);
  EXPECT_EQ(ev[1].size, 1024u);
  EXPECT_EQ(ev[1].requested, 1000u);
  EXPECT_EQ(ev[1].category, MemoryCategory::gradient);
  EXPECT_EQ(MemoryTrace::scope_name(ev[1].scope_id), "a/b");

  EXPECT_EQ(ev[2].action, TraceAction::free);
  EXPECT_EQ(ev[2].category, MemoryCategory::parameter);
  EXPECT_EQ(MemoryTrace::scope_name(ev[2].scope_id), "a/b");

  EXPECT_EQ(ev[3].device, kCPU);
  EXPECT_EQ(ev[3].category, MemoryCategory::parameter);
  EXPECT_EQ(MemoryTrace::scope_name(ev[3].scope_id), "a");
  for (size_t i = 1; i < ev.size(); ++i) EXPECT_GE(ev[i].time_us, ev[i - 1].time_us);
  EXPECT_GE(ev[0].time_us, 0);
  EXPECT_LE(ev.back().time_us, MemoryTrace::now_us());
  EXPECT_EQ(MemoryTrace::dropped(), 0u);
}

TEST_F(TraceTest, SameScopePathSameId) {
  uint32_t first = 0, second = 0;
  {
    ScopeGuard a("x");
    ScopeGuard b("y");
    first = current_scope_id();
  }
  {
    ScopeGuard a("x");
    ScopeGuard b("y");
    second = current_scope_id();
  }
  EXPECT_EQ(first, second);
  EXPECT_EQ(MemoryTrace::scope_name(first), "x/y");
}

TEST_F(TraceTest, RingOverwritesOldestAndCountsDropped) {
  MemoryTrace::enable(4);
  for (uint64_t i = 0; i < 10; ++i) MemoryTrace::record(TraceAction::alloc, kCPU, i, 512, 512);
  auto ev = MemoryTrace::events();
  ASSERT_EQ(ev.size(), 4u);
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(ev[i].addr, 6 + i) << "oldest first";
  EXPECT_EQ(MemoryTrace::dropped(), 6u);

  MemoryTrace::clear();
  EXPECT_TRUE(MemoryTrace::events().empty());
  EXPECT_EQ(MemoryTrace::dropped(), 0u);
  MemoryTrace::record(TraceAction::alloc, kCPU, 42, 512, 512);
  ASSERT_EQ(MemoryTrace::events().size(), 1u);

  MemoryTrace::enable(8);  // enabling again clears
  EXPECT_TRUE(MemoryTrace::events().empty());
  EXPECT_EQ(MemoryTrace::dropped(), 0u);
  for (uint64_t i = 0; i < 8; ++i) MemoryTrace::record(TraceAction::alloc, kCPU, i, 512, 512);
  EXPECT_EQ(MemoryTrace::events().size(), 8u);
  EXPECT_EQ(MemoryTrace::dropped(), 0u);
  MemoryTrace::record(TraceAction::alloc, kCPU, 8, 512, 512);
  EXPECT_EQ(MemoryTrace::events().front().addr, 1u);
  EXPECT_EQ(MemoryTrace::dropped(), 1u);
}

TEST_F(TraceTest, ToJsonShape) {
  MemoryTrace::enable(2);
  {
    CategoryGuard cat(MemoryCategory::activation);
    ScopeGuard s("net");
    ScopeGuard t("fc1");
    MemoryTrace::record(TraceAction::alloc, kCPU, 0x100, 512, 300);
    MemoryTrace::record(TraceAction::alloc, kCPU, 0x300, 1024, 1000);
  }
  MemoryTrace::record(TraceAction::free, kCPU, 0x300, 1024, 1000);
  const nlohmann::json j = MemoryTrace::to_json();
  ASSERT_TRUE(j.is_object());
  ASSERT_TRUE(j.contains("events"));
  ASSERT_TRUE(j["events"].is_array());
  ASSERT_EQ(j["events"].size(), 2u);
  ASSERT_TRUE(j.contains("dropped"));
  EXPECT_EQ(j["dropped"].get<uint64_t>(), 1u);
  for (const auto& e : j["events"]) {
    for (const char* key :
         {"action", "time_us", "addr", "size", "requested", "device", "category", "scope"}) {
      EXPECT_TRUE(e.contains(key)) << "event lacks '" << key << "': " << e.dump();
    }
  }
  const auto& e0 = j["events"][0];
  EXPECT_EQ(e0["action"], "alloc");
  EXPECT_EQ(e0["addr"].get<uint64_t>(), 0x300u);
  EXPECT_EQ(e0["size"].get<uint64_t>(), 1024u);
  EXPECT_EQ(e0["requested"].get<uint64_t>(), 1000u);
  EXPECT_EQ(e0["category"], "activation");
  EXPECT_EQ(e0["scope"], "net/fc1");
  const auto& e1 = j["events"][1];
  EXPECT_EQ(e1["action"], action_name(TraceAction::free));
  EXPECT_EQ(e1["category"], "unknown");
  EXPECT_EQ(e1["scope"], "");
  EXPECT_LE(e0["time_us"].get<int64_t>(), e1["time_us"].get<int64_t>());
}

TEST_F(TraceTest, GuardsArePerThread) {
  CategoryGuard cat(MemoryCategory::optimizer_state);
  ScopeGuard scope("main");
  MemoryCategory seen = MemoryCategory::parameter;
  std::string seen_scope = "?";
  std::thread t([&] {
    seen = current_category();
    seen_scope = current_scope();
  });
  t.join();
  EXPECT_EQ(seen, MemoryCategory::unknown);
  EXPECT_EQ(seen_scope, "");
  EXPECT_EQ(current_category(), MemoryCategory::optimizer_state);
}

TEST_F(TraceTest, ConcurrentRecordsAllArrive) {
  MemoryTrace::enable(1 << 16);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([t] {
      ScopeGuard s("worker" + std::to_string(t));
      for (uint64_t i = 0; i < 1000; ++i) {
        MemoryTrace::record(TraceAction::alloc, kCPU, (uint64_t(t) << 32) | i, 512, 512);
      }
    });
  }
  for (auto& th : threads) th.join();
  const auto ev = MemoryTrace::events();
  ASSERT_EQ(ev.size(), 4000u);
  std::set<uint64_t> addrs;
  for (const auto& e : ev) {
    addrs.insert(e.addr);
    EXPECT_EQ(MemoryTrace::scope_name(e.scope_id), "worker" + std::to_string(e.addr >> 32));
  }
  EXPECT_EQ(addrs.size(), 4000u);
}

// The allocator is the trace's main writer: blocks and segments, with the caller's
// category and scope, and an oom entry before it throws.
TEST_F(TraceTest, AllocatorRecordsBlocksSegmentsAndOom) {
  const Device dev = cuda_device(1);  // a fake source can claim any device
  CachingAllocator a(std::make_unique<FakeSegmentSource>(64 * MiB, dev));
  MemoryTrace::enable(1024);
  void* p = nullptr;
  {
    CategoryGuard cat(MemoryCategory::activation);
    ScopeGuard s("layer3");
    ScopeGuard t("attn");
    p = a.allocate(1000);
  }
  a.free(p);
  a.empty_cache();
  a.set_memory_limit(4 * MiB);
  EXPECT_THROW(a.allocate(12 * MiB), OutOfMemoryError);

  const auto ev = MemoryTrace::events();
  auto find = [&](TraceAction act) {
    return std::find_if(ev.begin(), ev.end(), [&](const TraceEvent& e) { return e.action == act; });
  };
  auto seg_alloc = find(TraceAction::segment_alloc);
  auto alloc = find(TraceAction::alloc);
  auto free = find(TraceAction::free);
  auto seg_free = find(TraceAction::segment_free);
  auto oom = find(TraceAction::oom);
  ASSERT_NE(seg_alloc, ev.end());
  ASSERT_NE(alloc, ev.end());
  ASSERT_NE(free, ev.end());
  ASSERT_NE(seg_free, ev.end());
  ASSERT_NE(oom, ev.end());
  EXPECT_LT(seg_alloc, alloc);
  EXPECT_LT(alloc, free);
  EXPECT_LT(free, seg_free);
  EXPECT_LT(seg_free, oom);

  EXPECT_EQ(seg_alloc->size, 2 * MiB);
  EXPECT_EQ(seg_alloc->device, dev);
  EXPECT_EQ(alloc->addr, reinterpret_cast<uint64_t>(p));
  EXPECT_EQ(alloc->size, 1024u);
  EXPECT_EQ(alloc->requested, 1000u);
  EXPECT_EQ(alloc->device, dev);
  EXPECT_EQ(alloc->category, MemoryCategory::activation);
  EXPECT_EQ(MemoryTrace::scope_name(alloc->scope_id), "layer3/attn");
  EXPECT_EQ(free->addr, alloc->addr);
  EXPECT_EQ(free->size, 1024u);
  EXPECT_EQ(seg_free->addr, seg_alloc->addr);
  EXPECT_EQ(seg_free->size, 2 * MiB);
  EXPECT_EQ(oom->size, 12 * MiB);
  EXPECT_EQ(oom->addr, 0u);
  EXPECT_EQ(ev.size(), 5u) << "unexpected extra events";
}

}  // namespace
}  // namespace cg
