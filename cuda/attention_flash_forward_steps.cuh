// Why this file exists: the steps of the wgmma flash forward's consumer warpgroups (Note
// [wgmma forward] in attention_flash_forward_wgmma.cu) -- its tile constants, the loads of
// Q and of a key tile into the 128-byte swizzle, the masks of a thread's two rows, the two
// MMAs of a key tile, the online softmax, and the output rows -- apart from the kernel and
// its pipeline, so that each file reads in one sitting. Included by that file only.
#pragma once

#include <cstdint>

#include "cuda/attention_flash_common.cuh"
#include "cuda/attention_flash_dense_rows.cuh"
#include "cuda/attention_flash_forward.cuh"
#include "cuda/device_math.cuh"
#include "cuda/wgmma.cuh"

namespace cg::cuda::flash::forward_wgmma {

constexpr int kWgmmaRows = 128;  // query rows per CTA of one-block tiles (as the mma.sync forward)
constexpr int kDenseRows = 192;  // of dense tiles (Note [Three warpgroups])
constexpr int kWgmmaHD = 128;
constexpr uint32_t kKVBytes = kTile * kWgmmaHD * 2;  // 2 column blocks of (64 keys, 64)
// A CTA of BM query rows: BM / 64 warpgroups; Q as 2 column blocks of (BM rows, 64).
template <int BM>
constexpr int kThreadsOf = BM / 64 * 128;
template <int BM>
constexpr uint32_t kQBytes = BM* kWgmmaHD * 2;

// R rows of 128 elements into the swizzled layout at `dst` (two column blocks of (R, 64));
// row_of(r) is the row's global address or nullptr (zero-filled).
template <typename T, int R, int kThreads, typename RowOf>
__device__ inline void load_rows_sw128(uint32_t dst, const void* any_valid, RowOf row_of) {
  for (int c = threadIdx.x; c < R * 16; c += kThreads) {
    const int r = c / 16, x = c % 16;
    const T* src = row_of(r);
    cp_async16(dst + (x / 8) * R * 128 + wgmma::swizzle128_offset(r, x % 8),
               src != nullptr ? static_cast<const void*>(src + x * 8) : any_valid, src != nullptr);
  }
}

// Key tile t of the CTA's plan into stage `stage` of sK and sV by one warp (Note [Forward
// loading warp]): lane l copies 16-byte chunks x0 + 4 j (x0 = l % 4, j < 4) of rows r0 + 8 k
// (r0 = l / 4, k < 8), so every row of a lane has the same swizzle (r % 8 = r0) and its
// copies step by constants: 64 copies a lane a tile, rows past the range end zero-filled.
template <typename T, typename Cta>
__device__ inline void load_key_tile_warp(const Cta& c, const FwdArgs& a, uint32_t sK, uint32_t sV,
                                          int64_t t, int stage, int lane) {
  int64_t j0, jend;
  c.kp.tile(t, j0, jend);
  const int r0 = lane / 4, x0 = lane % 4;
  const int rows = static_cast<int>(min(jend - j0, int64_t{kTile}));
  // chunk x0 + 4 j: column block j / 2, chunk (x0 + 4 (j % 2)) of its 8, swizzled by r0
  uint32_t at[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    at[j] =
        stage * kKVBytes + (j / 2) * kTile * 128 + wgmma::swizzle128_offset(r0, x0 + 4 * (j % 2));
  }
  const T* kp = c.kbase + (j0 + r0) * a.k.ss + x0 * 8;
  const T* vp = c.vbase + (j0 + r0) * a.v.ss + x0 * 8;
  const int64_t k_step = int64_t{8} * a.k.ss, v_step = int64_t{8} * a.v.ss;
#pragma unroll
  for (int k = 0; k < kTile / 8; ++k) {
    const bool in = r0 + 8 * k < rows;
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t d = at[j] + k * 8 * 128;
      cp_async16(sK + d, in ? static_cast<const void*>(kp + 32 * j) : a.k.data, in);
      cp_async16(sV + d, in ? static_cast<const void*>(vp + 32 * j) : a.v.data, in);
    }
    kp += k_step;
    vp += v_step;
  }
}

// Keeps an A fragment's registers untouched until here: a register operand of an MMA in
// flight may not be reused before its wait (Note [wgmma]).
[[maybe_unused]] __device__ inline void fence_fragment(uint32_t (&pa)[kTile / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
#pragma unroll
    for (int e = 0; e < 4; ++e) asm volatile("" : "+r"(pa[kk][e])::"memory");
  }
}

// Which scores of a key tile this thread's two rows may not see. One-block tiles: the row
// numbers, the causal and sliding rules (Note [Sliding tiles]). Dense tiles: each row's own
// ranges, and the context keys every row of this warp sees, [warp_lo, warp_hi).
template <bool kDense>
struct ForwardMasks {
  int ir[2] = {0, 0};
  int64_t first_i = 0;
  CausalRule causal;
  SlidingRule sliding;
  RowKeys rk[2];
  int warp_lo = 0, warp_hi = 0;

  __device__ void apply(float (&sc)[kTile / 2], int64_t j0, int64_t jend, int lane) const {
    auto& frag = reinterpret_cast<float(&)[kTile / 8][4]>(sc);
    if constexpr (kDense) {
      // Context keys every row of the warp sees need no masks (warp_hi <= jend).
      const int j = static_cast<int>(j0);
      if (j < warp_lo || j + kTile > warp_hi)
        mask_dense_scores(frag, rk, j, static_cast<int>(jend), lane);
    } else {
      if (j0 + kTile > jend || causal.hides(j0 + kTile - 1, first_i) || sliding.masks_tile(j0))
        mask_scores(frag, ir, j0, jend, causal, sliding, lane);
    }
  }
};

// S = Q K^T of a key tile into sc (the first MMA overwrites it), 16 columns of the head dim
// at a time:
// sc[4n + e] is key 8n + 2 (lane % 4) + e % 2 of row hf = e / 2. Issued, not committed.
template <typename T, int BM>
__device__ __forceinline__ void issue_scores(float (&sc)[kTile / 2], uint32_t q_slice,
                                             uint32_t tK) {
  // (one descriptor each, advanced: Note [Descriptors once a tile])
  const uint64_t dq0 = wgmma::desc_sw128(q_slice, 16, 1024);
  const uint64_t dk0 = wgmma::desc_sw128(tK, 16, 1024);
#pragma unroll
  for (int ks = 0; ks < kWgmmaHD / 16; ++ks) {
    const uint32_t col = (ks % 4) * 32u;  // within column block ks / 4
    wgmma::mma_m64n64k16_ss<T>(sc, wgmma::desc_advance(dq0, (ks / 4) * BM * 128 + col),
                               wgmma::desc_advance(dk0, (ks / 4) * kTile * 128 + col), ks > 0);
  }
}

// O += P V of a key tile, keys 16 kk .. 16 kk + 15 at a time. Issued, not committed.
template <typename T>
__device__ __forceinline__ void issue_pv(float (&o)[kWgmmaHD / 2],
                                         const uint32_t (&pa)[kTile / 16][4], uint32_t tV) {
  const uint64_t dv0 = wgmma::desc_sw128(tV, kTile * 128, 1024);
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    wgmma::mma_m64n128k16_rs<T>(o, pa[kk], wgmma::desc_advance(dv0, kk * 16 * 128));
  }
}

// The online softmax of a key tile for this thread's two rows: sc becomes P relative to
// the new running maxima, lrow takes its sums and corr[hf] is what O's row hf is to be
// scaled by.
[[maybe_unused]] __device__ __forceinline__ void online_softmax(float (&sc)[kTile / 2],
                                                                float (&mrow)[2], float (&lrow)[2],
                                                                float (&corr)[2],
                                                                float scale_log2) {
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    float mx = -INFINITY;
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n)
      mx = fmaxf(mx, fmaxf(sc[4 * n + 2 * hf], sc[4 * n + 2 * hf + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float mn = fmaxf(mrow[hf], mx);
    // Nothing seen yet (-inf): keep every term at 0 rather than NaN.
    const float base = mn == -INFINITY ? 0.f : mn * scale_log2;
    // -inf -> 0; exactly 1 where the maximum stays (so O's rescale may be skipped)
    corr[hf] = mn == mrow[hf] ? 1.f : fast_exp2(fmaf(mrow[hf], scale_log2, -base));
    mrow[hf] = mn;
    float rs = 0.f;
#pragma unroll
    for (int n = 0; n < kTile / 8; ++n) {
      sc[4 * n + 2 * hf] = fast_exp2(fmaf(sc[4 * n + 2 * hf], scale_log2, -base));
      sc[4 * n + 2 * hf + 1] = fast_exp2(fmaf(sc[4 * n + 2 * hf + 1], scale_log2, -base));
      rs += sc[4 * n + 2 * hf] + sc[4 * n + 2 * hf + 1];
    }
    lrow[hf] = lrow[hf] * corr[hf] + rs;
  }
}

// O's rows scaled by corr, and P as the A fragments of the next P V (the C layout of two
// n8 blocks is the A layout of one k16 step).
template <typename T>
__device__ __forceinline__ void rescale_and_pack(float (&o)[kWgmmaHD / 2], const float (&corr)[2],
                                                 const float (&sc)[kTile / 2],
                                                 uint32_t (&pa)[kTile / 16][4]) {
  // (skipped when no row of the warp has a new maximum: corr is exactly 1 then, Note
  // [Forward instructions])
  if (__any_sync(0xffffffffu, corr[0] != 1.f || corr[1] != 1.f)) {
#pragma unroll
    for (int n = 0; n < kWgmmaHD / 8; ++n) {
      o[4 * n + 0] *= corr[0];
      o[4 * n + 1] *= corr[0];
      o[4 * n + 2] *= corr[1];
      o[4 * n + 3] *= corr[1];
    }
  }
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    pa[kk][0] = pack2<T>(sc[8 * kk + 0], sc[8 * kk + 1]);
    pa[kk][1] = pack2<T>(sc[8 * kk + 2], sc[8 * kk + 3]);
    pa[kk][2] = pack2<T>(sc[8 * kk + 4], sc[8 * kk + 5]);
    pa[kk][3] = pack2<T>(sc[8 * kk + 6], sc[8 * kk + 7]);
  }
}

// The masks of this thread's two rows (tile rows row_base and row_base + 8) of the CTA.
template <bool kDense, typename Cta>
__device__ inline ForwardMasks<kDense> forward_masks_of(const Cta& cta, const FwdArgs& a,
                                                        int row_base, int lane) {
  ForwardMasks<kDense> masks;
  if constexpr (kDense) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      int block = 0, slot = 0;
      int64_t h = 0, i = 0;
      if (cta.rows.row(row_base + hf * 8, block, slot, h, i))
        masks.rk[hf] = dflash_row_keys(a.m, cta.b, block, slot);
    }
    int lo = max(masks.rk[0].ctx_lo, masks.rk[1].ctx_lo);
    int hi = min(masks.rk[0].ctx_hi, masks.rk[1].ctx_hi);
#pragma unroll
    for (int x = 4; x < 32; x *= 2) {  // lanes 4 apart hold other rows
      lo = max(lo, __shfl_xor_sync(0xffffffffu, lo, x));
      hi = min(hi, __shfl_xor_sync(0xffffffffu, hi, x));
    }
    masks.warp_lo = lo;
    masks.warp_hi = hi;
  } else {
    (void)lane;
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      int64_t h = 0, i = 0;
      cta.qt.row(row_base + hf * 8, h, i);
      masks.ir[hf] = static_cast<int>(i);
    }
    masks.causal = causal_rule(a.s, a.m);
    masks.sliding = cta.sliding;
    int64_t fh;
    cta.qt.row(0, fh, masks.first_i);
  }
  return masks;
}

// This thread's two rows of the output: row sums across the quad, then out = o / l and
// lse = m * scale + ln l.
template <typename T, typename RowOf>
__device__ inline void store_forward_rows(const FwdArgs& a, int64_t b,
                                          const float (&o)[kWgmmaHD / 2], const float (&mrow)[2],
                                          const float (&lrow)[2], int row_base, int lane,
                                          RowOf row_of) {
  constexpr int HD = kWgmmaHD;
  const AttnShape& s = a.s;
  T* out = static_cast<T*>(a.out.data);
  const int col = (lane % 4) * 2;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    float l = lrow[hf];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    int64_t h = 0, i = 0;
    if (!row_of(row_base + hf * 8, h, i)) continue;
    const float inv = l > 0.f ? 1.f / l : 0.f;
    const int64_t row = (b * s.Hq + h) * s.Sq + i;
    T* dst = out + b * a.out.sb + h * a.out.sh + i * a.out.ss + col;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dst + n * 8) =
          pack2<T>(o[4 * n + 2 * hf] * inv, o[4 * n + 2 * hf + 1] * inv);
    }
    if (lane % 4 == 0) a.lse[row] = l > 0.f ? mrow[hf] * a.scale + logf(l) : -INFINITY;
  }
}

}  // namespace cg::cuda::flash::forward_wgmma
