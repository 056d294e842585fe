// Why this file exists: the four GEMMs of the flash dk/dv pass's step (Note [wgmma dk/dv]
// in attention_flash_dkdv.cu) -- S^T = K Q^T and dP^T = V dO^T (keys by the tile's rows),
// dV += P^T dO and dK += dS^T Q -- on mma.sync (Wg 0) or the warpgroup MMA, and the
// packing of a score tile into A fragments, apart from the kernel
// (attention_flash_dkdv_kernel.cuh) so that it reads as the walk. Included by it only.
#pragma once

#include <cstdint>

#include "cuda/attention_flash_common.cuh"
#include "cuda/wgmma.cuh"

namespace cg::cuda::flash {

// The kernel's shared-memory tiles: padded rows of HD + kPad (Wg 0), or the 128-byte
// swizzle in 64-row column blocks (Wg; Note [wgmma]). warp: the warp in its warpgroup.

// acc (16 keys x QT rows) = rows warp*16.. of sA (keys) times the tile's rows of tB.
template <typename T, int HD, int QT, int Wg>
__device__ __forceinline__ void dkdv_key_by_row(const T* sA, const T* tB, float (&acc)[QT / 8][4],
                                                int warp, int lane, bool issue_only = false) {
  constexpr int LD = HD + kPad;
#pragma unroll
  for (int n = 0; n < QT / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
  if constexpr (Wg) {  // 64 keys x QT rows for the warpgroup; acc is the D fragment
    float(&d)[QT / 2] = reinterpret_cast<float(&)[QT / 2]>(acc);
    // Note [Descriptors once a tile]
    const uint64_t da0 = wgmma::desc_sw128(smem_addr(sA), 16, 1024);
    const uint64_t db0 = wgmma::desc_sw128(smem_addr(tB), 16, 1024);
    wgmma::fence_operands(d);
    wgmma::fence();
#pragma unroll
    for (int ks = 0; ks < HD / 16; ++ks) {
      const uint32_t col = (ks % 4) * 32u;  // within column block ks / 4
      const uint64_t da = wgmma::desc_advance(da0, (ks / 4) * kTile * 128 + col);
      const uint64_t db = wgmma::desc_advance(db0, (ks / 4) * QT * 128 + col);
      if constexpr (QT == 32 || QT == 48) {
        wgmma::mma_m64nQk16_ss<T>(d, da, db, 1);
      } else {
        wgmma::mma_m64n64k16_ss<T>(d, da, db, 1);
      }
    }
    wgmma::commit_and_wait(d, issue_only);
  } else {
#pragma unroll
    for (int ks = 0; ks < HD / 16; ++ks) {
      uint32_t fa[4];
      ldsm_x4(fa, smem_addr(sA + (warp * 16 + lane % 16) * LD + ks * 16 + (lane / 16) * 8));
#pragma unroll
      for (int np = 0; np < QT / 16; ++np) {
        uint32_t fb[4];
        ldsm_x4(fb, smem_addr(tB + (np * 16 + lane % 8 + (lane / 16) * 8) * LD + ks * 16 +
                              ((lane / 8) % 2) * 8));
        mma<T>(acc[2 * np], fa, fb[0], fb[1]);
        mma<T>(acc[2 * np + 1], fa, fb[2], fb[3]);
      }
    }
  }
}

// out (16 keys x HD) += pk (16 keys x QT rows, packed A fragments) times tB (QT x HD).
template <typename T, int HD, int QT, int Wg>
__device__ __forceinline__ void dkdv_accumulate(const uint32_t (&pk)[QT / 16][4], const T* tB,
                                                float (&out)[HD / 8][4], int lane,
                                                bool issue_only = false) {
  constexpr int LD = HD + kPad;
  if constexpr (Wg) {  // B = the tile's rows (the K dimension) x HD: MN-major
    float(&d)[HD / 2] = reinterpret_cast<float(&)[HD / 2]>(out);
    const uint64_t db0 = wgmma::desc_sw128(smem_addr(tB), QT * 128, 1024);
    wgmma::fence_operands(d);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < QT / 16; ++kk) {
      wgmma::mma_m64n128k16_rs<T>(d, pk[kk], wgmma::desc_advance(db0, kk * 16 * 128));
    }
    wgmma::commit_and_wait(d, issue_only);
  } else {
#pragma unroll
    for (int kk = 0; kk < QT / 16; ++kk) {
#pragma unroll
      for (int dd = 0; dd < HD / 16; ++dd) {
        uint32_t fb[4];
        ldsm_x4_trans(fb, smem_addr(tB + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * LD +
                                    dd * 16 + (lane / 16) * 8));
        mma<T>(out[2 * dd], pk[kk], fb[0], fb[1]);
        mma<T>(out[2 * dd + 1], pk[kk], fb[2], fb[3]);
      }
    }
  }
}

// Scores (16 keys x QT rows, C fragments) as packed 16-bit A fragments of the same keys:
// the C layout of two n8 blocks is the A layout of one k16 step.
template <typename T, int QT>
__device__ __forceinline__ void dkdv_pack(const float (&acc)[QT / 8][4],
                                          uint32_t (&pk)[QT / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < QT / 16; ++kk) {
    pk[kk][0] = pack2<T>(acc[2 * kk][0], acc[2 * kk][1]);
    pk[kk][1] = pack2<T>(acc[2 * kk][2], acc[2 * kk][3]);
    pk[kk][2] = pack2<T>(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
    pk[kk][3] = pack2<T>(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
  }
}

}  // namespace cg::cuda::flash
