// Why this file exists: the "Held: ..." sentence of an out-of-memory message (see
// allocator_holders.h); kept out of caching_allocator.cpp, which is about blocks.
#include "core/allocator_holders.h"

#include <algorithm>
#include <map>
#include <utility>

#include "core/allocator_stats.h"

namespace cg {

namespace {

struct Sum {
  size_t bytes = 0;
  int64_t blocks = 0;
};

// Largest first; ties by name, so that the sentence is the same from run to run.
template <typename Key>
std::vector<std::pair<Key, Sum>> largest_first(const std::map<Key, Sum>& sums, auto name_of) {
  std::vector<std::pair<Key, Sum>> out(sums.begin(), sums.end());
  std::sort(out.begin(), out.end(), [&](const auto& a, const auto& b) {
    if (a.second.bytes != b.second.bytes) return a.second.bytes > b.second.bytes;
    return name_of(a.first) < name_of(b.first);
  });
  return out;
}

}  // namespace

std::string describe_holders(const std::vector<HeldBlock>& blocks, int most_scopes) {
  std::map<MemoryCategory, Sum> by_category;
  std::map<std::string, Sum> by_scope;
  for (const HeldBlock& b : blocks) {
    Sum& c = by_category[b.category];
    c.bytes += b.size;
    ++c.blocks;
    if (b.scope_id == 0) continue;  // top level: no scope to name
    Sum& s = by_scope[MemoryTrace::scope_name(b.scope_id)];
    s.bytes += b.size;
    ++s.blocks;
  }
  if (by_category.empty()) return "";
  std::string out = "Held: ";
  bool first = true;
  for (const auto& [category, sum] :
       largest_first(by_category, [](MemoryCategory c) { return std::string(category_name(c)); })) {
    out += (first ? "" : ", ") + std::string(category_name(category)) + " " +
           format_bytes(uint64_t{sum.bytes}) + " (" + std::to_string(sum.blocks) +
           (sum.blocks == 1 ? " block)" : " blocks)");
    first = false;
  }
  int shown = 0;
  for (const auto& [scope, sum] : largest_first(by_scope, [](const std::string& s) { return s; })) {
    if (shown == most_scopes) break;
    out += (shown == 0 ? "; the largest scopes: " : ", ") + scope + " " +
           format_bytes(uint64_t{sum.bytes});
    ++shown;
  }
  return out + ". ";
}

}  // namespace cg
