// Why this file exists: the target prefill benches (target_features_bench.cpp,
// qwen3_5_prefill_bench.cpp) take the same two list options, --shapes SEQxBATCH,... and
// --capture ID,...; one reading of each, with one error wording.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "core/error.h"

namespace bench {

// "2048x4,4096x2" -> {(2048, 4), (4096, 2)}: (sequence length, batch).
inline std::vector<std::pair<int64_t, int64_t>> parse_shapes(const std::string& text) {
  std::vector<std::pair<int64_t, int64_t>> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t x = item.find('x');
    CG_CHECK(x != std::string::npos, "--shapes: '", item, "' is not SEQxBATCH (e.g. 4096x2)");
    out.emplace_back(std::stoll(item.substr(0, x)), std::stoll(item.substr(x + 1)));
  }
  return out;
}

// "1,9,17" -> {1, 9, 17} (layer ids).
inline std::vector<int64_t> parse_ids(const std::string& text) {
  std::vector<int64_t> out;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) out.push_back(std::stoll(item));
  return out;
}

}  // namespace bench
