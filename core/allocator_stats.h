// Why this file exists: the numbers users read about memory, with PyTorch's meanings
// (torch.cuda.memory_stats), so that chunkgrad's figures compare one-to-one with theirs.
#pragma once

#include <algorithm>
#include <concepts>
#include <cstdint>
#include <string>
#include <type_traits>

namespace cg {

// One statistic: what it is now, its high-water mark since the last reset_peak, and
// the running totals of increases and decreases (current == allocated - freed).
struct Stat {
  int64_t current = 0;
  int64_t peak = 0;
  int64_t allocated = 0;
  int64_t freed = 0;

  void add(int64_t delta) {
    current += delta;
    if (delta > 0)
      allocated += delta;
    else
      freed -= delta;
    peak = std::max(peak, current);
  }
  void reset_peak() { peak = current; }
};

struct AllocatorStats {
  Stat allocation;       // number of live (allocated) blocks
  Stat segment;          // number of segments taken from the source
  Stat active;           // live blocks + freed blocks waiting for another stream (Note [Streams])
  Stat inactive_split;   // free blocks inside split segments (count; only these can fragment)
  Stat allocated_bytes;  // bytes in live blocks (rounded sizes)
  Stat reserved_bytes;   // bytes in segments
  Stat active_bytes;     // bytes of `active` blocks
  Stat inactive_split_bytes;      // free bytes inside split segments (bytes; as above)
  Stat requested_bytes;           // bytes callers asked for (before rounding)
  int64_t num_alloc_retries = 0;  // mallocs that had to free cached segments and retry
  int64_t num_ooms = 0;           // out-of-memory errors thrown

  void reset_peak();
  std::string str() const;  // multi-line human-readable summary
};

// "512 B", "1.50 GiB", "8.00 EiB": the one byte formatter every report uses. Signed for
// differences of stats (which may be negative), unsigned for sizes (all of 64 bits).
std::string format_bytes(int64_t bytes);
std::string format_bytes(uint64_t bytes);
// Any other integer type goes by its signedness (no ambiguous calls with int or long long).
template <std::integral T>
requires(!std::same_as<T, int64_t> && !std::same_as<T, uint64_t>) std::string
    format_bytes(T bytes) {
  if constexpr (std::is_signed_v<T>)
    return format_bytes(static_cast<int64_t>(bytes));
  else
    return format_bytes(static_cast<uint64_t>(bytes));
}

}  // namespace cg
