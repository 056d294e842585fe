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

// "Held: activation 43.21 GiB (812 blocks), optimizer_state 19.34 GiB (30 blocks); by the
// scope each was allocated in, largest first: layers.*/mlp 11.37 GiB (5 blocks), (no
// scope) 8.10 GiB (40 blocks), ... " -- categories largest first, then at most
// `most_scopes` scopes largest first. A block counts for the scope it was allocated in,
// not for the scopes around it; a path's indices are merged ("layers.4" -> "layers.*"),
// so that a stack's like modules add up. "" when nothing is held.
std::string describe_holders(const std::vector<HeldBlock>& blocks, int most_scopes = 3);

}  // namespace cg
