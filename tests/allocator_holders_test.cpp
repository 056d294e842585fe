// Why this file exists: an out-of-memory message names what held the memory (issue 19),
// by the blocks' categories and scopes (core/allocator_holders.h). The sentence on its
// own, then inside a real error from an allocator under a limit, where freed and cached
// blocks must not count.
#include <cstdint>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "core/allocator_holders.h"
#include "core/caching_allocator.h"
#include "core/error.h"
#include "core/memory_trace.h"
#include "core/segment_source.h"
#include "tests/allocator_test_util.h"

namespace cg::testing {
namespace {

uint32_t scope_id_of(const std::string& name) {
  ScopeGuard scope(name);
  return current_scope_id();
}

TEST(AllocatorHolders, CategoriesLargestFirstThenTheLargestScopes) {
  const uint32_t head = scope_id_of("holders_test/head");
  const uint32_t mlp0 = scope_id_of("holders_test/layers.0/mlp");
  const uint32_t mlp1 = scope_id_of("holders_test/layers.1/mlp");
  const uint32_t attn = scope_id_of("holders_test/layers.0/attention");
  const uint32_t norm = scope_id_of("holders_test/norm.weight2");  // no index: kept
  const std::vector<HeldBlock> blocks = {
      {4 * MiB, MemoryCategory::parameter, 0},     {30 * MiB, MemoryCategory::activation, head},
      {2 * MiB, MemoryCategory::activation, mlp0}, {8 * MiB, MemoryCategory::activation, mlp1},
      {6 * MiB, MemoryCategory::activation, attn}, {1 * MiB, MemoryCategory::temporary, norm},
  };
  // The two layers' mlp add up (10 MiB); the top-level block is "(no scope)".
  EXPECT_EQ(describe_holders(blocks),
            "Held: activation 46.00 MiB (4 blocks), parameter 4.00 MiB (1 block), temporary "
            "1.00 MiB (1 block); by the scope each was allocated in, largest first: "
            "holders_test/head 30.00 MiB (1 block), holders_test/layers.*/mlp 10.00 MiB (2 "
            "blocks), holders_test/layers.*/attention 6.00 MiB (1 block). ");
  EXPECT_NE(describe_holders(blocks, 5).find("(no scope) 4.00 MiB (1 block), "
                                             "holders_test/norm.weight2 1.00 MiB (1 block). "),
            std::string::npos)
      << describe_holders(blocks, 5);
  EXPECT_EQ(describe_holders(blocks, 1).find("layers"), std::string::npos);
  EXPECT_EQ(describe_holders({}), "");
  EXPECT_EQ(describe_holders({{2 * MiB, MemoryCategory::optimizer_state, 0}}),
            "Held: optimizer_state 2.00 MiB (1 block); by the scope each was allocated in, "
            "largest first: (no scope) 2.00 MiB (1 block). ");
}

// Under a 100 MiB limit: parameters and a saved activation live, a freed temporary cached.
// The error names the live ones only, with the scopes they were allocated in.
TEST(AllocatorHolders, AnOutOfMemoryErrorNamesWhatHeldTheMemory) {
  AllocatorConfig config;
  config.memory_limit = 100 * MiB;
  CachingAllocator a(make_source(SourceKind::fake, size_t{2} << 30), config);
  void* weights = nullptr;
  void* logits = nullptr;
  {
    CategoryGuard category(MemoryCategory::parameter);
    ScopeGuard scope("holders_test/model");
    weights = a.allocate(40 * MiB);
  }
  {
    CategoryGuard category(MemoryCategory::activation);
    ScopeGuard scope("holders_test/head_loss");
    logits = a.allocate(30 * MiB);
    CategoryGuard temporary(MemoryCategory::temporary);
    a.free(a.allocate(22 * MiB));  // cached, not held
  }
  std::string e;
  try {
    a.allocate(64 * MiB);
  } catch (const OutOfMemoryError& error) { e = error.what(); }
  ASSERT_NE(e, "") << "no out-of-memory error";
  EXPECT_NE(e.find("Held: parameter 40.00 MiB (1 block), activation 30.00 MiB (1 block); by the "
                   "scope each was allocated in, largest first: holders_test/model 40.00 MiB (1 "
                   "block), holders_test/head_loss 30.00 MiB (1 block). "),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find("temporary"), std::string::npos) << e;
  EXPECT_NE(e.find("Lower the batch"), std::string::npos) << e;
  a.free(logits);
  a.free(weights);
}

// A 5 MiB request takes a 20 MiB segment, more than a 16 MiB limit however little is held:
// the message says so before what is held.
TEST(AllocatorHolders, ASegmentLargerThanTheLimitIsSaidToBe) {
  AllocatorConfig config;
  config.memory_limit = 16 * MiB;
  CachingAllocator a(make_source(SourceKind::fake, size_t{2} << 30), config);
  std::string e;
  try {
    a.allocate(5 * MiB);
  } catch (const OutOfMemoryError& error) { e = error.what(); }
  EXPECT_NE(e.find("The segment this request needs (20.00 MiB) is alone larger than the memory "
                   "limit. "),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find("Held:"), std::string::npos) << e;  // nothing is
}

}  // namespace
}  // namespace cg::testing
