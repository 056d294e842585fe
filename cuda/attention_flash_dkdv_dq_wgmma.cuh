// Why this file exists: the fused dq of the 128-key dk/dv CTAs on the warpgroup MMA (Note
// [wgmma dq] in attention_flash_dkdv.cu): dS into shared memory in the layout wgmma reads,
// the product dq^T = K^T dS^T issued asynchronously, and its rows into the fp32 dq buffer,
// apart from the mma.sync dq (attention_flash_dkdv_dq.cuh) that the other dk/dv CTAs keep.
// Included by attention_flash_dkdv_kernel.cuh only.
#pragma once

#include <cstdint>

#include "cuda/attention_flash_backward.cuh"
#include "cuda/attention_flash_common.cuh"
#include "cuda/attention_flash_dkdv_layout.cuh"
#include "cuda/wgmma.cuh"

namespace cg::cuda::flash {

// The dS tile: (QT rows, KT keys) K-major for wgmma's B, in column blocks of 64 keys of
// QT * 128 bytes, 128-byte swizzle (Note [wgmma]); its elements.
template <int QT, int KT>
constexpr int kDsTileElems = QT* KT;

// A warp's 16 keys key0 .. key0 + 15 of dS^T (pd: the A fragments of keys x QT rows) into
// the dS tile, transposed by stmatrix: matrix m of pd[kk] holds keys 8 (m % 2) .. + 7 and
// rows kk 16 + 8 (m / 2) .. + 7, i.e. rows of the tile 8 keys (16 bytes) long.
template <int QT>
__device__ __forceinline__ void store_ds_for_wgmma(uint32_t sds, int key0, int lane,
                                                   const uint32_t (&pd)[QT / 16][4]) {
  const int m = lane / 8, key = key0 + (m % 2) * 8;
  const uint32_t block = sds + (key / 64) * QT * 128;
#pragma unroll
  for (int kk = 0; kk < QT / 16; ++kk) {
    const int row = kk * 16 + (m / 2) * 8 + lane % 8;
    stsm_x4_trans(block + wgmma::swizzle128_offset(row, (key % 64) / 8), pd[kk]);
  }
}

// The same keys as zeros (past the tile's end, or dead): lane r clears row r's 32 bytes
// (and with 48 rows, lanes 0 .. 15 rows 32 .. 47 too).
template <int QT>
__device__ __forceinline__ void zero_ds_for_wgmma(uint32_t sds, int key0, int lane) {
  static_assert(QT == 32 || QT == 48, "a lane a row, or two");
  const uint32_t block = sds + (key0 / 64) * QT * 128;
#pragma unroll
  for (int pass = 0; pass < (QT + 31) / 32; ++pass) {
    const int row = pass * 32 + lane;
    if (row >= QT) break;
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const uint32_t at = block + wgmma::swizzle128_offset(row, (key0 % 64) / 8 + h);
      asm volatile("st.shared.v4.b32 [%0], {%1, %1, %1, %1};\n" ::"r"(at), "r"(0) : "memory");
    }
  }
}

// Issues (does not commit) d = dq^T of warpgroup wg's 64 columns of dq by the tile's QT
// rows: K^T (64 x KT keys, MN-major: K's tile, the warpgroup's column block of each 64-key
// section) times dS^T (KT keys x QT, the dS tile K-major).
template <typename T, int HD, int QT, int KW>
__device__ __forceinline__ void issue_dq_t(float (&d)[QT / 2], uint32_t sk, uint32_t sds, int wg) {
  static_assert(HD == 64 * KW, "a warpgroup a column block of dq");
  constexpr int KT = kTile * KW;
  const uint64_t da0 = wgmma::desc_sw128(sk + wg * kTile * 128, kTile * 128, 1024);
  const uint64_t db0 = wgmma::desc_sw128(sds, 16, 1024);
  // (d is written, not read: its first MMA does not accumulate, so no value of it need
  // stay live from one product to the next)
#pragma unroll
  for (int i = 0; i < QT / 2; ++i) asm volatile("" : "=f"(d[i])::"memory");
  wgmma::fence();
#pragma unroll
  for (int ks = 0; ks < KT / 16; ++ks) {
    // (keys 16 ks ..: section ks / 4 of K, 8-row groups of 1024 bytes; the dS tile's column
    // block ks / 4, 32 bytes a k16 step within it)
    const uint64_t da = wgmma::desc_advance(da0, (ks / 4) * kTile * HD * 2 + (ks % 4) * 2048);
    const uint64_t db = wgmma::desc_advance(db0, (ks / 4) * QT * 128 + (ks % 4) * 32);
    wgmma::mma_m64nQk16_ss<T, true>(d, da, db, ks > 0 ? 1 : 0);
  }
}

// After the wait for issue_dq_t's group: d (rows 16 w + lane / 4 + 8 (e / 2) of the
// warpgroup's 64 columns, by tile rows 8 t + 2 (lane % 4) + e % 2 at d[4 t + e]) added to
// (or, dq_store, stored in) query tile cqt (of QT rows) of block blk in a.dq_acc, whose
// blocks hold tiles32 tiles of 32 rows (Note [dq tile order]). There the warpgroup's
// columns of a 16-row half are one run of 1024 floats, and of a 32-row tile's two halves
// one run of 2048; a tile of 48 rows is three halves, a run of two and one of one (Note
// [48-row query tiles] in attention_flash_dkdv.cu). bulk: staged in sq (read by its
// reductions before the last already: the caller's barrier) half after half, and sent by
// the warpgroup's first thread as one bulk copy a run, after a barrier of the warpgroup's
// own; otherwise atomics (or stores) from registers, skipping rows past packed_rows. (sq:
// one of the warpgroup's two buffers, Note [dq staging twice].)
template <int HD, int QT>
__device__ __forceinline__ void add_dq_t(const BwdArgs& a, const float (&d)[QT / 2], float* sq,
                                         bool bulk, int wg, int64_t b, int64_t hk, int64_t blk,
                                         int64_t cqt, int64_t tiles32, int packed_rows) {
  static_assert((QT == 32 || QT == 48) && kDqTileRows == 32 && kDqChunk == 32,
                "16-row halves of 32-column chunks");
  constexpr int kHalf = 16 * 2 * kDqChunk;  // a warpgroup's floats of a 16-row half
  const int lane = threadIdx.x % 32, w = threadIdx.x / 32 % 4;
  float* dq_block = a.dq_acc + dq_tile_base<HD>(a.s, a.m, b, hk, blk, 0, tiles32);
  const int row0 = static_cast<int>(cqt) * QT;  // the tile's first packed row
  if (!bulk) {
#pragma unroll
    for (int i = 0; i < QT / 2; ++i) {
      const int v = row0 + (i / 4) * 8 + (lane % 4) * 2 + i % 2;
      if (v >= packed_rows) continue;
      const int col = wg * 64 + w * 16 + lane / 4 + 8 * ((i % 4) / 2);
      float* dst = dq_block + (v / kDqTileRows) * (kDqTileRows * HD) +
                   dq_tile_offset<HD>(v % kDqTileRows, col);
      if (a.dq_store) {  // Note [dq first writers]
        *dst = d[i];
      } else {
        atomicAdd(dst, d[i]);
      }
    }
    return;
  }
#pragma unroll
  for (int i = 0; i < QT / 2; ++i) {
    const int row = (i / 4) * 8 + (lane % 4) * 2 + i % 2;
    const int col = w * 16 + lane / 4 + 8 * ((i % 4) / 2);  // within the warpgroup's 64
    const int r = row % 16, c = col % kDqChunk;
    sq[(row / 16) * kHalf + (col / kDqChunk) * 512 + r * kDqChunk + (c ^ (8 * (r % 4)))] = d[i];
  }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  fence_shared_for_async();
  asm volatile("bar.sync %0, 128;\n" ::"r"(1 + wg) : "memory");
  // (predicated, not branched: a branch near wgmma can make ptxas serialize every wgmma
  // of the kernel, C7518)
  const int first = threadIdx.x % 128 == 0, store = a.dq_store ? 1 : 0;
  // The runs: halves [h0, h0 + n0) of one 32-row tile, then the rest, [h0 + n0, h0 + QT / 16).
  const int h0 = row0 / 16;
  const int n0 = QT == 32 ? 2 : 2 - h0 % 2;
#pragma unroll
  for (int run = 0; run < (QT == 32 ? 1 : 2); ++run) {
    const int h = run == 0 ? h0 : h0 + n0, n = run == 0 ? n0 : QT / 16 - n0;
    // (the warpgroup's column pair, from row half h % 2 of tile h / 2: laid out as staged)
    float* dst = dq_block + (h / 2) * (kDqTileRows * HD) + wg * 2 * kHalf + (h % 2) * kHalf;
    const uint32_t src = smem_addr(sq + (h - h0) * kHalf), bytes = n * kHalf * 4;
    asm volatile(
        "{\n.reg .pred p, s, r;\nsetp.ne.b32 p, %2, 0;\nsetp.ne.and.b32 s, %3, 0, p;\n"
        "setp.eq.and.b32 r, %3, 0, p;\n"
        "@s cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %4;\n"
        "@r cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %4;\n}\n" ::"l"(
            dst),
        "r"(src), "r"(first), "r"(store), "r"(bytes)
        : "memory");
  }
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n@p cp.async.bulk.commit_group;\n}\n" ::"r"(first)
      : "memory");
#endif
}

// The warpgroup's first thread commits an empty bulk group (Note [dq staging twice]).
__device__ __forceinline__ void commit_empty_bulk_group() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int first = threadIdx.x % 128 == 0;
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n@p cp.async.bulk.commit_group;\n}\n" ::"r"(first)
      : "memory");
#endif
}

// Note [dq staging twice]: the warpgroup's first thread waits until its bulk copies but the
// last have read their staging, before the barrier after which the warpgroup writes the
// other buffer. With one buffer it waited for the copies issued at the end of the step
// just before, and ncu (H200, full rule, sorted anchors, 2026-12-05) put 17% of the wgmma
// dq kernel's warp samples at that barrier and 5% at the wait itself, against 1.5% at the
// barriers of the mma.sync dq's kernel (whose warps wait a step later, before their own
// staging). Two buffers cost 16 KB of shared memory (24 KB on 48-row tiles; one CTA a
// multiprocessor either way).
__device__ __forceinline__ void wait_dq_t_staging_read() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const int first = threadIdx.x % 128 == 0;
  asm volatile(
      "{\n.reg .pred p;\nsetp.ne.b32 p, %0, 0;\n@p cp.async.bulk.wait_group.read 1;\n}\n" ::"r"(
          first)
      : "memory");
#endif
}

}  // namespace cg::cuda::flash
