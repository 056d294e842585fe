// Why this file exists: an out-of-memory message must say what held the memory (issue 19:
// "where a path does not fit, the allocator's message names what held the memory"). The
// allocator passes its live blocks here at the error; this file sums them by category and
// by scope into one sentence, which tests can check without an allocator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "core/memory_trace.h"

namespace cg {

// One live block as the allocator knows it: its rounded size, and the category and scope
// that were current when it was allocated (Note [Block owner]).
struct HeldBlock {
  size_t size = 0;
  MemoryCategory category = MemoryCategory::unknown;
  uint32_t scope_id = 0;
};

// "Held: activation 43.21 GiB (812 blocks), optimizer_state 19.34 GiB (30 blocks); the
// largest scopes: drafter/head_loss 11.37 GiB, ... " -- categories largest first, then at
// most `most_scopes` named scopes largest first (blocks allocated at top level have no
// scope and are left out of that list). "" when nothing is held.
std::string describe_holders(const std::vector<HeldBlock>& blocks, int most_scopes = 3);

}  // namespace cg
