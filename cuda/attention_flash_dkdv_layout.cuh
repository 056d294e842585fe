// Why this file exists: the memory layouts of the flash dk/dv pass -- its CTA's shared
// memory (its size, the fused dq's pieces, the row table that maps a DFlash block's packed
// query rows: Note [Row table]) and the fused dq's buffer, added to in bulk (Note [dq bulk
// reduce], Note [dq tile order]) -- apart from the kernel (attention_flash_dkdv_kernel.cuh),
// which lays its tiles out in this order, and read by the launch (attention_flash_dkdv.cu)
// for the bytes to ask for and by the last kernel that turns the buffer into dq.
#pragma once

#include <cstdint>

#include "cuda/attention_flash_common.cuh"
#include "cuda/attention_kernels.h"

namespace cg::cuda::flash {

// Note [dq bulk reduce]: the fused dq's atomics were about 3.2 ms of the 12.45 ms backward of the
// 27B-class step's attention (H200, 32/8 heads, 1024 x 24 over 4096 keys: the backward with them
// compiled out ran 9.22 ms): every (key tile, query tile) adds 32 rows x HD fp32 values to dq, as
// float2 atomics of 8 bytes each. On sm_90 each warp instead stores its 16 rows x HD / (2 KW) of
// the product to its own shared memory and lane 0 adds them (the first writers of Note [dq first
// writers] store them) with one bulk reduction (cp.reduce.async.bulk .add.f32, in L2, as
// FlashAttention-3 adds its dq; the buffer is in the pass's own order, Note [dq tile order], so the
// piece is contiguous there too), read by the copy engine while the warp goes on to the next tile;
// the lane waits for the read before the piece is stored again. The order of the additions still
// varies (Note [Fused dq]). H200, same shape, bf16, one run: backward 12.31 -> 11.87 ms (full
// rule), 10.39 -> 10.01 (sliding, W 2048) with a reduction a row. CHUNKGRAD_FLASH_DQ_BULK=0 keeps
// the atomics (read once; for benchmarks).

// Note [dq tile order]: the fused dq's fp32 buffer (Note [Fused dq]) is not dq's [B, Hq,
// Sq, hd] but the order the dk/dv pass produces it in, so that a warp adds its whole share
// of a query tile with one bulk reduction (Note [dq bulk reduce]) instead of one a row:
//   [B][Hkv][block][tile of 32 packed rows][column pair of 64][row half mh][chunk of 32]
//   [16 rows][32]
// where packed row v = head_in_group * block_size + slot (Note [Flash tiles]) and tile
// t = v / 32 (a block's last tile is padded to 32 rows; its padding stays unread). A warp
// of the pass holds rows 16 mh .. + 15 of a tile and NC = HD / (2 KW) of its columns, i.e.
// NC / 32 consecutive chunks: 16 x NC floats in one piece (NC is 32 or 64, never more: a
// chunk or a pair), and a warpgroup of the wgmma dq (Note [wgmma dq]) holds a pair's two
// row halves, 32 x 64 floats in one piece, added with one bulk reduction of 8 KB (a 48-row
// tile, Note [48-row query tiles]: two, of 8 and 4 KB; two of 4 KB when the row halves came
// first; ncu, H200, 2026-12-05: the issue of each is a loop over the warp's lanes behind a
// scoreboard wait, 3 to 4% of the pass's warp samples). Inside a 16 x 32 chunk, column c of
// row r sits at c ^ 8 (r % 4) so that a half-warp's float2 stores of four rows into
// the shared-memory copy hit distinct banks; the last kernel (dq = scale * buffer) reads
// through the same map. Measured with ncu before this order: one bulk reduction a row made
// the compiler loop over the 16 lanes (ELECT, R2UR, UBLKRED a lane), 16% of the pass's
// warp samples.
constexpr int kDqTileRows = 32;
constexpr int kDqChunk = 32;  // columns of a chunk

// The buffer's floats: every block of every kv head padded to whole 32-row tiles.
inline int64_t dq_tile_order_floats(const AttnShape& s, const AttnMaskArgs& m) {
  const int64_t tiles = ((s.Hq / s.Hkv) * m.block_size + kDqTileRows - 1) / kDqTileRows;
  return s.B * s.Hkv * m.num_blocks * tiles * kDqTileRows * s.hd;
}

// Where tile t of block blk, kv head hk, batch row b starts in the buffer; tiles: a block's
// tiles, ceil(group * block_size / 32), when the caller has it (the dk/dv pass's walk
// does: there the division was recomputed for every query tile).
template <int HD>
__host__ __device__ inline int64_t dq_tile_base(const AttnShape& s, const AttnMaskArgs& m,
                                                int64_t b, int64_t hk, int64_t blk, int64_t t,
                                                int64_t tiles = 0) {
  if (tiles == 0) tiles = ((s.Hq / s.Hkv) * m.block_size + kDqTileRows - 1) / kDqTileRows;
  return (((b * s.Hkv + hk) * m.num_blocks + blk) * tiles + t) * (kDqTileRows * HD);
}

// Row rr (0 .. 31) and column c of a tile, relative to its base.
template <int HD>
__host__ __device__ constexpr int dq_tile_offset(int rr, int c) {
  static_assert(HD % (2 * kDqChunk) == 0, "whole column pairs");
  const int r = rr % 16;
  return (((c / (2 * kDqChunk)) * 2 + rr / 16) * 2 + (c / kDqChunk) % 2) * (16 * kDqChunk) +
         r * kDqChunk + ((c % kDqChunk) ^ (8 * (r % 4)));
}

// A warp's fp32 dq floats in shared memory (Note [dq bulk reduce]): 16 rows x HD / (2 KW)
// columns in the order of Note [dq tile order]. KW: warpgroups (of 64 keys) a CTA (Note
// [128-key CTAs]).
template <int HD, int KW>
constexpr int kDqWarpFloats = 16 * (HD / (2 * KW));

// A warpgroup's fp32 dq of one query tile for the wgmma dq (Note [wgmma dq]): QT rows x its
// HD / KW columns, staged for one bulk reduction a run (one of two buffers: Note [dq
// staging twice]).
template <int HD, int QT, int KW>
constexpr int kDqStagingFloats = QT*(HD / KW);

template <int HD, int QT, bool FusedDq, int NS, int KW = 1, int Behind = 0>
__host__ __device__ constexpr int dkdv_smem_bytes() {
  // K, V (KW kTile keys); Q, dO x NS; L, D, slot x NS; with FusedDq dS^T (KW kTile, QT +
  // kPad; two of them when the dq runs a tile behind: Note [dq one tile behind]) and dq (KW
  // kWarps, kDqWarpFloats); every part a multiple of 16 bytes, as the total is, so the row
  // table (Note [Row table]) may follow.
  constexpr int padded = ((2 * KW * kTile + 2 * NS * QT) * (HD + kPad) * 2 + 3 * NS * QT * 4 +
                          (FusedDq ? (Behind ? 2 : 1) * KW * kTile * (QT + kPad) * 2 +
                                         KW * kWarps * kDqWarpFloats<HD, KW> * 4
                                   : 0) +
                          15) /
                         16 * 16;
  // Behind 2 (Note [wgmma dq]): the tiles unpadded in the 128-byte swizzle, two dS tiles
  // (QT, KW kTile), L, D, slot x NS, and the dq staging twice (Note [dq staging twice]).
  constexpr int wgmma_dq = ((2 * KW * kTile + 2 * NS * QT) * HD * 2 + 2 * QT * KW * kTile * 2 +
                            3 * NS * QT * 4 + 2 * KW * kDqStagingFloats<HD, QT, KW> * 4 + 15) /
                           16 * 16;
  return Behind == 2 && wgmma_dq > padded ? wgmma_dq : padded;
}

// Note [Row table]: under a DFlash mask every block packs its group * block_size query rows
// the same way (virtual row v = head_in_group * block_size + slot: Note [Flash tiles]), so
// where row v of any block lives, relative to the block's first row of the group's first
// head, is one table a CTA fills once in shared memory. A query tile's loads then take a
// table entry and one add per operand, where working the row out anew cost a 32-bit
// division and three 64-bit multiply-adds per operand for every row of every tile, in the
// loads that stand between a tile's barrier and its math. Groups of up to kRowTableRows
// rows (the 27B-class drafter's: 4 x 24 = 96; 32 bytes a row) take it; larger ones work
// rows out as before, in the same kernel, which then carries the table's registers too.
// H200, 32/8 heads, 1024 x 24 over 4096 context keys, bf16 hd 128 (bench/attention_bench,
// one run, with Note [Dead warp tiles]): the dk/dv-only backward 8.97 ms (full rule) and
// 7.24 ms (sliding, W 2048) with the table; 10.80 and 8.79 with kRowTableRows = 0, i.e.
// groups past the table pay about 20% (9.44 and 7.85 before either change); ncu counted
// 2.74 and 2.23 G instructions with the table against 3.41 and 2.76 before.
struct RowOffsets {
  int64_t q, g;  // element offsets in Q and dO: hh sh + slot ss (each operand's strides)
  int64_t l;     // offset in the lse and delta rows: hh Sq + slot
  int slot, pad;
};
constexpr int kRowTableRows = 512;

// The row table's bytes for a launch (0: rows are worked out in the kernel).
inline int row_table_bytes(const AttnShape& s, const AttnMaskArgs& m, int qt) {
  if (m.kind != AttnMaskKind::dflash) return 0;
  const int64_t rows = (s.Hq / s.Hkv) * m.block_size;
  if (rows > kRowTableRows) return 0;
  return static_cast<int>((rows + qt - 1) / qt * qt) * static_cast<int>(sizeof(RowOffsets));
}

}  // namespace cg::cuda::flash
