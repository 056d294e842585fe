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
  const uint32_t mlp = scope_id_of("holders_test/mlp");
  const uint32_t attn = scope_id_of("holders_test/attention");
  const uint32_t norm = scope_id_of("holders_test/norm");
  const std::vector<HeldBlock> blocks = {
      {4 * MiB, MemoryCategory::parameter, 0},     {30 * MiB, MemoryCategory::activation, head},
      {2 * MiB, MemoryCategory::activation, mlp},  {8 * MiB, MemoryCategory::activation, mlp},
      {6 * MiB, MemoryCategory::activation, attn}, {1 * MiB, MemoryCategory::temporary, norm},
  };
  EXPECT_EQ(describe_holders(blocks),
            "Held: activation 46.00 MiB (4 blocks), parameter 4.00 MiB (1 block), temporary "
            "1.00 MiB (1 block); the largest scopes: holders_test/head 30.00 MiB, "
            "holders_test/mlp 10.00 MiB, holders_test/attention 6.00 MiB. ");
  EXPECT_EQ(describe_holders(blocks, 1).find("holders_test/mlp"), std::string::npos);
  EXPECT_EQ(describe_holders({}), "");
  // Only top-level blocks: categories, no scope list.
  EXPECT_EQ(describe_holders({{2 * MiB, MemoryCategory::optimizer_state, 0}}),
            "Held: optimizer_state 2.00 MiB (1 block). ");
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
  EXPECT_NE(e.find("Held: parameter 40.00 MiB (1 block), activation 30.00 MiB (1 block); the "
                   "largest scopes: holders_test/model 40.00 MiB, holders_test/head_loss "
                   "30.00 MiB. "),
            std::string::npos)
      << e;
  EXPECT_EQ(e.find("temporary"), std::string::npos) << e;
  EXPECT_NE(e.find("Lower the batch"), std::string::npos) << e;
  a.free(logits);
  a.free(weights);
}

}  // namespace
}  // namespace cg::testing
