// Why this file exists: the fused dq's share of a dk/dv CTA's work on one query tile (Note
// [Fused dq] in attention_flash_dkdv.cu) -- each warp's dS^T into shared memory,
// then the tile's dq product dS K and its write into the fp32 dq buffer (Notes [dq bulk
// reduce], [dq first writers], [dq tile order]) -- apart from the dk/dv math, so that the
// kernel's file stays about the walk and its four GEMMs. Included by that file only.
#pragma once

#include <cstdint>

#include "cuda/attention_flash_backward.cuh"
#include "cuda/attention_flash_common.cuh"
#include "cuda/attention_flash_dkdv_layout.cuh"
#include "cuda/attention_kernels.h"
#include "cuda/wgmma.cuh"

namespace cg::cuda::flash {

// A warp's 16 keys of dS^T (keys by the tile's QT rows, packed A fragments) into sdS, rows
// key0 .. key0 + 15 of the CTA's (KT, QT + kPad) tile.
template <typename T, int QT>
__device__ __forceinline__ void store_ds_t(T* sdS, int key0, int lane,
                                           const uint32_t (&pd)[QT / 16][4]) {
  constexpr int LDS = QT + kPad;
#pragma unroll
  for (int kk = 0; kk < QT / 16; ++kk) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      *reinterpret_cast<uint32_t*>(sdS + (key0 + lane / 4 + 8 * (e & 1)) * LDS + kk * 16 +
                                   (lane % 4) * 2 + 8 * (e >> 1)) = pd[kk][e];
    }
  }
}

// The same rows of sdS as zeros: the warp's keys are past the tile's end, or dead.
template <typename T, int QT>
__device__ __forceinline__ void zero_ds_t(T* sdS, int key0, int lane) {
  constexpr int LDS = QT + kPad;
#pragma unroll
  for (int e = 0; e < QT / 4; ++e) {
    *reinterpret_cast<uint32_t*>(sdS + (key0 + lane / 2) * LDS + (lane % 2) * (QT / 2) + 2 * e) =
        0u;
  }
}

// After the barrier that completes sdS: rows 16 mh .. + 15 of query tile cqt of block blk,
// dims ch NC .. + NC - 1 (the CTA's KW * 4 warps split 32 rows x HD) -- dS (rows x KT
// keys, sdS transposed) times K (KT keys x HD, sK: padded rows, or Wg the 128-byte
// swizzle) -- stored or added into a.dq_acc (Note [dq tile order]; tiles: a block's 32-row
// tiles, the walk's seg_tiles). bulk: through the warp's staging in sdQ and one bulk copy
// (Note [dq bulk reduce]); otherwise float2 stores or atomics, skipping rows past
// packed_rows.
template <typename T, int HD, int QT, int KW, int Wg>
__device__ __forceinline__ void add_dq_tile(const BwdArgs& a, const T* sdS, const T* sK, float* sdQ,
                                            bool bulk, int64_t b, int64_t hk, int64_t blk,
                                            int64_t cqt, int64_t tiles, int packed_rows) {
  static_assert(QT == kDqTileRows, "the CTA's warps split a 32-row tile's dq");
  constexpr int KT = kTile * KW, LD = HD + kPad, LDS = QT + kPad, NC = HD / (2 * KW);
  const int lane = threadIdx.x % 32, wq = threadIdx.x / 32, mh = wq & 1, ch = wq >> 1;
  float dqa[NC / 8][4];  // (16 rows, NC dims) as m16n8 accumulators
#pragma unroll
  for (int n = 0; n < NC / 8; ++n) dqa[n][0] = dqa[n][1] = dqa[n][2] = dqa[n][3] = 0.f;
#pragma unroll
  for (int ks = 0; ks < KT / 16; ++ks) {
    uint32_t fa[4];
    ldsm_x4_trans(fa, smem_addr(sdS + (ks * 16 + (lane / 16) * 8 + lane % 8) * LDS + mh * 16 +
                                ((lane / 8) % 2) * 8));
#pragma unroll
    for (int dd = 0; dd < NC / 16; ++dd) {
      uint32_t fb[4];
      const int kr = ks * 16 + lane % 8 + ((lane / 8) % 2) * 8;  // key row of K
      const int kc = ch * NC + dd * 16 + (lane / 16) * 8;        // first column
      ldsm_x4_trans(fb, Wg ? smem_addr(sK) + (kr / kTile) * kTile * HD * 2 +
                                 (kc / 64) * kTile * 128 +
                                 wgmma::swizzle128_offset(kr % kTile, (kc % 64) / 8)
                           : smem_addr(sK + kr * LD + kc));
      mma<T>(dqa[2 * dd], fa, fb[0], fb[1]);
      mma<T>(dqa[2 * dd + 1], fa, fb[2], fb[3]);
    }
  }
  // This warp's 16 x NC piece of the tile in dq_acc (Note [dq tile order]).
  float* dq_tile = a.dq_acc + dq_tile_base<HD>(a.s, a.m, b, hk, blk, cqt, tiles);
  if (bulk) {  // Note [dq bulk reduce]
    // (the warp's NC / 32 chunks, as in dq_acc: a tile of 2 NC columns' first 16 rows)
    float* sq = sdQ + wq * kDqWarpFloats<HD, KW>;
    if (lane == 0) bulk_wait_read();  // the last tile's reduction has read them
    __syncwarp();
#pragma unroll
    for (int half = 0; half < 2; ++half) {
#pragma unroll
      for (int n = 0; n < NC / 8; ++n) {
        const int r = half * 8 + lane / 4, c = n * 8 + (lane % 4) * 2;
        *reinterpret_cast<float2*>(sq + dq_tile_offset<2 * NC>(r, c)) =
            make_float2(dqa[n][2 * half], dqa[n][2 * half + 1]);
      }
    }
    fence_shared_for_async();
    __syncwarp();
    if (lane == 0 && a.dq_store) {  // Note [dq first writers]
      bulk_store_f32(dq_tile + dq_tile_offset<HD>(mh * 16, ch * NC), smem_addr(sq),
                     kDqWarpFloats<HD, KW> * 4);
    } else if (lane == 0) {
      bulk_reduce_add_f32(dq_tile + dq_tile_offset<HD>(mh * 16, ch * NC), smem_addr(sq),
                          kDqWarpFloats<HD, KW> * 4);
    }
  }
#pragma unroll
  for (int half = 0; half < 2 && !bulk; ++half) {
    const int rr = mh * 16 + half * 8 + lane / 4;
    if (static_cast<int>(cqt) * QT + rr >= packed_rows) continue;
#pragma unroll
    for (int n = 0; n < NC / 8; ++n) {
      float* dst = dq_tile + dq_tile_offset<HD>(rr, ch * NC + n * 8 + (lane % 4) * 2);
      if (a.dq_store) {  // Note [dq first writers]
        *reinterpret_cast<float2*>(dst) = make_float2(dqa[n][2 * half], dqa[n][2 * half + 1]);
        continue;
      }
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
      atomicAdd(reinterpret_cast<float2*>(dst),
                make_float2(dqa[n][2 * half], dqa[n][2 * half + 1]));
#else
      atomicAdd(dst, dqa[n][2 * half]);
      atomicAdd(dst + 1, dqa[n][2 * half + 1]);
#endif
    }
  }
}

}  // namespace cg::cuda::flash
