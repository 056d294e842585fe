// Why this file exists: the shared memory of a flash dk/dv CTA -- its size, the fused dq's
// rows, and the row table that maps a DFlash block's packed query rows (Note [Row table])
// -- apart from the kernel (attention_flash_dkdv_kernel.cuh), which lays its tiles out in
// this order, and read by the launch (attention_flash_dkdv.cu) for the bytes to ask for.
#pragma once

#include <cstdint>

#include "cuda/attention_flash_common.cuh"
#include "cuda/attention_kernels.h"

namespace cg::cuda::flash {

// A warp's fp32 rows of dq in shared memory (Note [dq bulk reduce]): its HD / (2 KW)
// dims and 8 of padding (rows 16-byte aligned; a half-warp's float2 stores hit distinct
// banks). KW: warpgroups (of 64 keys) a CTA (Note [128-key CTAs]).
template <int HD, int KW>
constexpr int kDqLd = HD / (2 * KW) + 8;

template <int HD, int QT, bool FusedDq, int NS, int KW = 1>
__host__ __device__ constexpr int dkdv_smem_bytes() {
  // K, V (KW kTile keys); Q, dO x NS; L, D, slot x NS; with FusedDq dS^T (KW kTile, QT +
  // kPad) and dq (KW kWarps, 16, kDqLd); every part a multiple of 16 bytes, as the total
  // is, so the row table (Note [Row table]) may follow.
  return ((2 * KW * kTile + 2 * NS * QT) * (HD + kPad) * 2 + 3 * NS * QT * 4 +
          (FusedDq ? KW * kTile * (QT + kPad) * 2 + KW * kWarps * 16 * kDqLd<HD, KW> * 4 : 0) +
          15) /
         16 * 16;
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
  int64_t l;     // offset in lse, delta and dq rows: hh Sq + slot
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
