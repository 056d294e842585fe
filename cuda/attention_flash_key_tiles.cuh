// Why this file exists: the work of one CTA of the flash dk/dv pass (attention_flash_dkdv.cu)
// -- which key tile it holds and which query tiles, of which segments, see it -- apart
// from the pass's math, so that the walk (Note [Flash tiles], Note [Context key parts])
// reads in one place and the kernel file stays about the kernels.
#pragma once

#include <cstdint>

#include "cuda/attention_flash_common.cuh"
#include "cuda/attention_kernels.h"

namespace cg::cuda::flash {

// The query tiles that see one key tile [j0, jend) of kv head hk (Note [Flash tiles]):
// segments (a query head, or a DFlash block) of seg_tiles tiles of QT rows each.
struct KeyTileWork {
  int mode = 0;  // 0: none/causal; 1: a DFlash block's own keys; 2: DFlash context keys
  int64_t j0 = 0, jend = 0;
  int64_t seg_begin = 0, seg_end = 0, seg_tiles = 0;  // segments [seg_begin, seg_end)
  int64_t block = 0;                                  // mode 1: the block
  int64_t qlo = 0;  // mode 0: first query row that sees j0 (causal)
  int part = 0;     // mode 2: which of the tile's parts (Note [Context key parts])
};

// Note [Context key parts]: a DFlash context key tile is seen by every block anchored past
// it (full rule) or within a window after it (sliding), so one CTA per tile walks up to
// all 1024 blocks of the 27B-class step while the tiles number only 64 per kv head: the
// heaviest CTAs (the first tiles, or under the sliding rule a second wave of equal ones)
// set the pass's time while most multiprocessors idle. So the blocks of each context tile
// are cut into `parts` contiguous ranges, one CTA each (parts of a tile launched together,
// heavy tiles first); each writes its partial dk, dv (fp32, unscaled) to scratch, and a
// second kernel adds the parts in order (the same result every run) into dk and dv.
// Block-key tiles are light and stay whole.
// The parts cut the tile's *active* blocks (those that see it: segment_active) into equal
// counts, not the block indices: the trainer's anchors are sorted, so a tile's active
// blocks are one run of indices -- a suffix under the full rule, a window's worth under the
// sliding rule -- and index ranges of equal length left one part with all of them (256
// blocks, 768 query tiles at 1024 x 24 with 4 parts) beside empty ones: the heaviest CTA
// was as long as an unsplit quarter, and under the sliding rule (about 528 active blocks a
// tile) no shorter than under the full rule. By count the heaviest sliding CTA walks about
// 132 blocks. A warp per (batch row, tile, part) finds the ranges before the pass
// (context_ranges_kernel in attention_flash_context_parts.cu: ballots over the anchors) and
// the pass reads its two ints.
// Measured and dropped: walking a tile's active blocks from the last down, its parts
// interleaved (part p taking every parts-th from the one of rank p), so that the CTAs that
// run together read the same blocks under the full rule. H200, 1024 x 24 over 4096 keys,
// sorted anchors: ncu counted the pass's L2 hit rate at 53% against 26% and its DRAM
// traffic at 21 against 36 GB, yet the backward took 11.21 against 11.17 ms (sliding 9.35
// against 9.46), and with shuffled anchors 11.50 against 10.74: the pass waits on its own
// instructions (two warps a scheduler), not on memory.

// ctx_kt: the keys of a DFlash context tile (kTile, or 2 kTile: Note [128-key CTAs]);
// ranges: the split tiles' block ranges (context_ranges_kernel), or null before they are
// known; b: the batch row.
template <int QT>
__device__ inline KeyTileWork key_tile_work(const AttnShape& s, const AttnMaskArgs& m, int parts,
                                            int ctx_kt, int64_t x, const int* ranges = nullptr,
                                            int64_t b = 0) {
  KeyTileWork w;
  const int64_t group = s.Hq / s.Hkv;
  if (m.kind != AttnMaskKind::dflash) {
    w.j0 = x * kTile;
    w.jend = min(s.Sk, w.j0 + kTile);
    w.seg_end = group;
    if (m.kind == AttnMaskKind::causal) w.qlo = min(s.Sq, max(int64_t{0}, w.j0 - (s.Sk - s.Sq)));
    w.seg_tiles = (s.Sq - w.qlo + QT - 1) / QT;
    return w;
  }
  const int64_t ctx_tiles = (m.context_len + ctx_kt - 1) / ctx_kt;
  w.seg_tiles = (group * m.block_size + QT - 1) / QT;
  if (x < ctx_tiles * parts) {
    w.mode = 2;
    w.part = static_cast<int>(x % parts);
    w.j0 = (x / parts) * ctx_kt;
    w.jend = min(m.context_len, w.j0 + ctx_kt);
    if (parts > 1 && ranges != nullptr) {  // Note [Context key parts]
      const int* r = ranges + (b * ctx_tiles * parts + x) * 2;
      w.seg_begin = r[0];
      w.seg_end = r[1];
    } else {
      w.seg_begin = m.num_blocks * w.part / parts;
      w.seg_end = m.num_blocks * (w.part + 1) / parts;
    }
  } else {
    const int64_t per_block = (m.block_size + kTile - 1) / kTile;
    const int64_t y = x - ctx_tiles * parts;
    w.mode = 1;
    w.block = y / per_block;
    w.j0 = m.context_len + w.block * m.block_size + (y % per_block) * kTile;
    w.jend = min(m.context_len + (w.block + 1) * m.block_size, w.j0 + kTile);
    w.seg_end = 1;
  }
  return w;
}

// (The two Notes below are about the warps of a dk/dv CTA -- 16 keys each -- and are
// applied in attention_flash_dkdv_kernel.cuh.)
// Note [Whole warp tiles]: a warp's 16 context keys are seen by every row of a query tile
// when the tile is full, the keys end inside the tile and before the block's anchor, and
// (sliding rule) start no earlier than anchor + (block_size - 1) - (W - 1), the furthest
// back the block's last slot reaches. Such warps -- all but the tiles at the anchor and,
// under the sliding rule, at the window's far edge -- skip the per-element mask (under the
// sliding rule a shared-memory slot load and two compares each); the branch is uniform
// across the warp. H200, 32/8 heads, 1024 x 24 over 4096 context keys, bf16 hd 128, fwd +
// bwd (bench/attention_bench, one run each): full rule 21.10 -> 18.15 ms, sliding (W 2048)
// 18.55 -> 15.66 ms.

// Note [Dead warp tiles]: a warp whose 16 context keys no row of the query tile sees --
// keys at or past the block's anchor (the anchor's key tile), or under the sliding rule
// keys wholly before anchor - (W - 1), where slot 0 reaches furthest back (the window's
// first tile) -- skips the tile's math: its P and dS are zero, so dk and dv keep their
// values, and with the fused dq it stores zeros as its share of dS^T. The warp's SM
// sub-partition then serves the other CTA's warp. With the bench's anchors (1024 x 24 over
// 4096 keys, W 2048) such warps are 1.2% of the full rule's context warp tiles and 2.3% of
// the sliding rule's; the masked ones 0.6% and 1.9%.

// Whether segment seg of the work has any row that sees the key tile. A context key
// tile [j0, jend) and block seg: the full rule sees it iff anchor > j0; the sliding rule
// also needs anchor - (W - 1) <= jend - 1 (Note [Sliding tiles]).
__device__ inline bool segment_active(const KeyTileWork& w, const AttnMaskArgs& m, int64_t b,
                                      int64_t seg) {
  if (w.mode == 0) return w.seg_tiles > 0;
  if (w.mode == 1) return attn::dflash_anchor(m, b, w.block) >= 0;
  const int64_t anchor = attn::dflash_anchor(m, b, seg);
  return anchor > w.j0 && (m.sliding_window == 0 || anchor - (m.sliding_window - 1) < w.jend);
}

// Note [Context key parts]: narrows a split context tile's [seg_begin, seg_end) to its
// part's share of the active blocks: with n of them, part p takes those of rank
// [n p / parts, n (p + 1) / parts), from the active block of rank n p / parts to just after
// the one of rank n (p + 1) / parts - 1 (an empty share: [0, 0)). The inactive blocks
// before the first and after the last are left out: the walk (next_query_tile) loads every
// block's anchor to skip it, one dependent load after another, and the first part used to
// start at block 0 and the last to run to the end. ncu on the 128-key CTAs (H200, 32/8
// heads, 1024 x 24 over 4096 keys, sorted anchors) put 1.7% (full rule) and 2.5% (sliding)
// of the warp samples in the first part's scan to its first active block; under the sliding
// rule, whose active blocks end where the window does, the last part's scan past its last
// one runs in the walk's loop from block to block, which held 5.1% (2.2% under the full
// rule, which has no such tail). A whole warp calls it (ballots).
__device__ inline void balance_context_part(KeyTileWork& w, const AttnMaskArgs& m, int64_t b,
                                            int parts) {
  // (32-bit counts: the grid has a CTA per block, fewer than 2^31: batch_grid checks it)
  const int lane = threadIdx.x % 32, n_blocks = static_cast<int>(m.num_blocks);
  int active = 0;
#pragma unroll 1
  for (int base = 0; base < n_blocks; base += 32) {
    const int seg = base + lane;
    active += __popc(__ballot_sync(0xffffffffu, seg < n_blocks && segment_active(w, m, b, seg)));
  }
  const int lo = static_cast<int>(int64_t{active} * w.part / parts);
  const int hi = static_cast<int>(int64_t{active} * (w.part + 1) / parts);
  // The active block of rank lo, and just after the one of rank hi - 1; -1 while not found.
  int begin = lo == hi ? 0 : -1, end = lo == hi ? 0 : -1;
  int seen = 0;  // active blocks before `base`
#pragma unroll 1
  for (int base = 0; base < n_blocks && (begin < 0 || end < 0); base += 32) {
    const int seg = base + lane;
    const unsigned ballot =
        __ballot_sync(0xffffffffu, seg < n_blocks && segment_active(w, m, b, seg));
    // Index in this chunk of its r-th active block, r in 1 .. popc(ballot).
    auto nth = [&](int r) -> int {
      unsigned x = ballot;
#pragma unroll 1
      for (int k = 1; k < r; ++k) x &= x - 1;
      return __ffs(static_cast<int>(x)) - 1;
    };
    const int here = __popc(ballot);
    if (begin < 0 && seen + here > lo) begin = base + nth(lo + 1 - seen);
    if (end < 0 && seen + here >= hi) end = base + nth(hi - seen) + 1;
    seen += here;
  }
  w.seg_begin = begin;
  w.seg_end = end;
}

// Advances (seg, qt) to the next query tile of an active segment; false when none is left.
__device__ inline bool next_query_tile(const KeyTileWork& w, const AttnMaskArgs& m, int64_t b,
                                       int64_t& seg, int64_t& qt) {
  ++qt;
  if (seg >= w.seg_begin && qt < w.seg_tiles) return true;
  qt = 0;
  for (++seg; seg < w.seg_end; ++seg) {
    if (segment_active(w, m, b, seg)) return true;
  }
  return false;
}

}  // namespace cg::cuda::flash
