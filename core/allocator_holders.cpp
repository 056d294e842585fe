// Why this file exists: the "Held: ..." sentence of an out-of-memory message (see
// allocator_holders.h); kept out of caching_allocator.cpp, which is about blocks.
#include "core/allocator_holders.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <utility>

#include "core/allocator_stats.h"

namespace cg {

namespace {

constexpr const char* kTopLevel = "(no scope)";

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

// A scope path with each component's index made a wildcard ("layers.4/mlp" ->
// "layers.*/mlp"), so that the like modules of a stack add up instead of tying.
std::string like_modules(const std::string& path) {
  std::string out;
  size_t i = 0;
  while (i < path.size()) {
    if (path[i] == '.' && i + 1 < path.size() &&
        std::isdigit(static_cast<unsigned char>(path[i + 1]))) {
      size_t j = i + 1;
      while (j < path.size() && std::isdigit(static_cast<unsigned char>(path[j]))) ++j;
      if (j == path.size() || path[j] == '/' || path[j] == '.') {
        out += ".*";
        i = j;
        continue;
      }
    }
    out += path[i++];
  }
  return out;
}

}  // namespace

std::string describe_holders(const std::vector<HeldBlock>& blocks, int most_scopes) {
  std::map<MemoryCategory, Sum> by_category;
  std::map<uint32_t, Sum> by_scope_id;
  for (const HeldBlock& b : blocks) {
    Sum& c = by_category[b.category];
    c.bytes += b.size;
    ++c.blocks;
    Sum& s = by_scope_id[b.scope_id];
    s.bytes += b.size;
    ++s.blocks;
  }
  std::map<std::string, Sum> by_scope;  // one scope_name lookup a scope, not a block
  for (const auto& [id, sum] : by_scope_id) {
    Sum& s = by_scope[id == 0 ? std::string(kTopLevel) : like_modules(MemoryTrace::scope_name(id))];
    s.bytes += sum.bytes;
    s.blocks += sum.blocks;
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
    out += (shown == 0 ? "; by the scope each was allocated in, largest first: " : ", ") + scope +
           " " + format_bytes(uint64_t{sum.bytes}) + " (" + std::to_string(sum.blocks) +
           (sum.blocks == 1 ? " block)" : " blocks)");
    ++shown;
  }
  return out + ". ";
}

}  // namespace cg
