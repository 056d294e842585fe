// Why this file exists: the figure of docs/5_dflash.md, drawn by the library's own mask
// rather than by hand. It resolves AttentionMask::dflash_blocks for a short context and
// two blocks and prints, per query (a block slot), which keys it may see: '#' visible,
// '.' hidden. With --window W it draws the sliding rule of the drafter's sliding layers.
//
//   ./build/examples/dflash_mask_lesson                      # the block rule
//   ./build/examples/dflash_mask_lesson --window 3           # the sliding rule, W = 3
#include <cstdio>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "core/factories.h"
#include "examples/common/program.h"
#include "ops/attention_mask.h"

namespace {

struct Options {
  int64_t context = 8, block = 4, window = 0;
  std::vector<int64_t> anchors = {3, 6};
};

void draw(const Options& o) {
  const int64_t n = static_cast<int64_t>(o.anchors.size());
  const cg::AttentionMask mask = cg::AttentionMask::dflash_blocks(
      o.context, o.block, cg::from_ints(o.anchors, {n}), cg::Tensor(), o.window);
  const int64_t q_len = n * o.block, k_len = o.context + n * o.block;
  const cg::ResolvedAttentionMask r =
      cg::resolve_attention_mask(mask, 1, 1, q_len, k_len, cg::kCPU, "dflash_mask_lesson");
  std::string anchors;
  for (const int64_t a : o.anchors) anchors += (anchors.empty() ? "" : ", ") + std::to_string(a);
  // mask.str() names the anchors tensor by its shape ("anchors [2]"): the values are here.
  std::printf("%s, anchors = {%s}; keys: context 0..%lld, then each block's slots\n",
              mask.str().c_str(), anchors.c_str(), (long long)(o.context - 1));
  std::string header(15, ' ');  // under "block a slot 0 "
  for (int64_t j = 0; j < k_len; ++j) {
    if (j == o.context || (j > o.context && (j - o.context) % o.block == 0)) header += ' ';
    header += j < o.context ? char('0' + j % 10) : char('a' + (j - o.context) / o.block);
  }
  std::printf("%s\n", header.c_str());
  for (int64_t i = 0; i < q_len; ++i) {
    const int64_t b = i / o.block, k = i % o.block;
    const cg::KeyRanges kr = r.key_ranges(0, i);
    std::string row;
    for (int64_t j = 0; j < k_len; ++j) {
      bool seen = false;
      for (int x = 0; x < kr.count; ++x) seen = seen || (kr.begin[x] <= j && j < kr.end[x]);
      if (j == o.context || (j > o.context && (j - o.context) % o.block == 0)) row += ' ';
      row += seen ? '#' : '.';
    }
    const std::string where = o.anchors[b] < 0
                                  ? std::string("(a padded block)")
                                  : "(position " + std::to_string(o.anchors[b] + k) + ")";
    std::printf("block %c slot %lld %s  %s\n", char('a' + b), (long long)k, row.c_str(),
                where.c_str());
  }
}

}  // namespace

int main(int argc, char** argv) {
  Options o;
  cg::program::Program program("dflash_mask_lesson", "draw the DFlash training mask");
  CLI::App& app = program.app();
  app.add_option("--context", o.context, "context keys S")->check(cg::program::integer_in(1, 40));
  app.add_option("--block", o.block, "block size")->check(cg::program::integer_in(1, 16));
  program.given_once(app.add_option("--anchors", o.anchors,
                                    "one anchor per block (at most 26 blocks, a to z), each in "
                                    "0..S; -1 marks a padded block, whose slots see nothing")
                         ->check(cg::program::integer_in(-1, 40))
                         ->expected(1, 26));
  app.add_option("--window", o.window, "0: the block rule; W > 0: the sliding rule")
      ->check(cg::program::integer_in(0, 64));
  return program.run(argc, argv, [&] { draw(o); });
}
