// Why this file exists: the flash attention backward on tensor cores (FlashAttention-2's
// recipe; for the causal and unmasked rules with dq in its own pass instead of fp32
// atomics: deterministic, and no dq accumulator buffer; under DFlash masks dq is taken in
// the dk/dv pass with atomics, Note [Fused dq] in attention_flash_dkdv.cu). Before the
// passes, delta = rowsum(dO * O) (launch_attention_delta).
//   - dq pass: a CTA per query tile, like the forward (same tiles, same key ranges):
//     S = Q K^T, P = exp(S * scale - lse), dP = dO V^T, dS = P (dP - delta), dQ += dS K.
//   - dk/dv pass: a CTA per 64 keys (128 under DFlash masks on Hopper) of one kv head,
//     walking every query tile that sees them (Note [Flash tiles]), across the query heads
//     of its GQA group, so each dk/dv row is written once: S^T = K Q^T, P^T,
//     dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - delta), dK += dS^T Q.
// Both recompute P from lse: no [Sq, Sk] buffer. Accumulation is fp32 in registers; P
// and dS are rounded to bf16/f16 as mma operands (as in FlashAttention).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "core/error.h"
#include "cuda/attention_flash_backward.cuh"
#include "cuda/attention_flash_common.cuh"
#include "cuda/attention_flash_dkdv_layout.cuh"
#include "cuda/attention_kernels.h"
#include "cuda/cuda_check.h"

namespace cg::cuda {

namespace flash {
namespace {

// lse * log2 e, with rows that see nothing (-inf) made +inf so that every p is 0.
__device__ inline float lse_log2(const float* lse, int64_t row) {
  const float L = lse[row];
  return L == -INFINITY ? INFINITY : L * kLog2e;
}

// ---------------------------------------------------------------------------------------
// dq pass

template <int HD>
constexpr int dq_smem_bytes() {
  return 6 * kTile * (HD + kPad) * 2;  // Q, dO, then K and V in two stages
}

template <typename T, int HD>
__global__ void __launch_bounds__(kThreads) flash_dq_kernel(BwdArgs a) {
  if (batch_of_block() >= a.s.B) return;  // Note [Batch grid]
  constexpr int LD = HD + kPad;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // (kTile, LD)
  T* sG = sQ + kTile * LD;                 // (kTile, LD) grad_out
  T* sK = sG + kTile * LD;                 // (2, kTile, LD)
  T* sV = sK + 2 * kTile * LD;             // (2, kTile, LD)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const AttnShape& s = a.s;

  // Note [Query CTA prologue]: the forward's, with dO's rows loaded beside Q's.
  const QueryCta<T> cta = query_cta_of<T>(a, kTile);
  load_first_tiles<T, kTile, HD>(cta, a, sQ, &a.g, sG, sK, sV);
  const int64_t b = cta.b, ntiles = cta.key_tiles;
  const QueryTile& qt = cta.qt;

  int64_t h0 = 0, i0 = 0, h1 = 0, i1 = 0;
  const int r0 = warp * 16 + lane / 4;
  const bool ok0 = qt.row(r0, h0, i0), ok1 = qt.row(r0 + 8, h1, i1);
  int64_t hw, iw;
  const bool warp_active = qt.row(warp * 16, hw, iw);
  const CausalRule causal = causal_rule(s, a.m);
  const SlidingRule& sliding = cta.sliding;  // Note [Sliding tiles]
  const int64_t row0 = (b * s.Hq + h0) * s.Sq + i0, row1 = (b * s.Hq + h1) * s.Sq + i1;
  const float L0 = ok0 ? lse_log2(a.lse, row0) : INFINITY;
  const float L1 = ok1 ? lse_log2(a.lse, row1) : INFINITY;
  const float D0 = ok0 ? a.delta[row0] : 0.f, D1 = ok1 ? a.delta[row1] : 0.f;

  uint32_t qf[HD / 16][4];
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks) {
    ldsm_x4(qf[ks], smem_addr(sQ + (warp * 16 + lane % 16) * LD + ks * 16 + (lane / 16) * 8));
  }
  float dq[HD / 8][4];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) dq[n][0] = dq[n][1] = dq[n][2] = dq[n][3] = 0.f;

  for (int64_t t = 0; t < ntiles; ++t) {
    const KeyTileStep<T> kt = key_tile_step<T, HD>(cta, a, sK, sV, t);
    const int64_t j0 = kt.j0, jend = kt.jend;
    if (warp_active) {
      const T *tK = kt.tK, *tV = kt.tV;
      float p[kTile / 8][4], dp[kTile / 8][4];
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) {
        p[n][0] = p[n][1] = p[n][2] = p[n][3] = 0.f;
        dp[n][0] = dp[n][1] = dp[n][2] = dp[n][3] = 0.f;
      }
#pragma unroll
      for (int ks = 0; ks < HD / 16; ++ks) {
        uint32_t ga[4];
        ldsm_x4(ga, smem_addr(sG + (warp * 16 + lane % 16) * LD + ks * 16 + (lane / 16) * 8));
#pragma unroll
        for (int np = 0; np < kTile / 16; ++np) {
          const int off =
              (np * 16 + lane % 8 + (lane / 16) * 8) * LD + ks * 16 + ((lane / 8) % 2) * 8;
          uint32_t kb[4], vb[4];
          ldsm_x4(kb, smem_addr(tK + off));
          ldsm_x4(vb, smem_addr(tV + off));
          mma<T>(p[2 * np], qf[ks], kb[0], kb[1]);
          mma<T>(p[2 * np + 1], qf[ks], kb[2], kb[3]);
          mma<T>(dp[2 * np], ga, vb[0], vb[1]);
          mma<T>(dp[2 * np + 1], ga, vb[2], vb[3]);
        }
      }
      // p = exp(scale s - lse) where visible; ds = p (dp - delta), kept in p.
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int64_t j = j0 + n * 8 + (lane % 4) * 2 + (e & 1);
          const int64_t i = e < 2 ? i0 : i1;
          const bool vis = j < jend && !causal.hides(j, i) && !sliding.hides(j, i);
          const float pe = vis ? exp2f(p[n][e] * a.scale_log2 - (e < 2 ? L0 : L1)) : 0.f;
          p[n][e] = pe * (dp[n][e] - (e < 2 ? D0 : D1));
        }
      }
#pragma unroll
      for (int kk = 0; kk < kTile / 16; ++kk) {
        const uint32_t da[4] = {pack2<T>(p[2 * kk][0], p[2 * kk][1]),
                                pack2<T>(p[2 * kk][2], p[2 * kk][3]),
                                pack2<T>(p[2 * kk + 1][0], p[2 * kk + 1][1]),
                                pack2<T>(p[2 * kk + 1][2], p[2 * kk + 1][3])};
#pragma unroll
        for (int dd = 0; dd < HD / 16; ++dd) {
          uint32_t kb[4];
          ldsm_x4_trans(kb, smem_addr(tK + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * LD +
                                      dd * 16 + (lane / 16) * 8));
          mma<T>(dq[2 * dd], da, kb[0], kb[1]);
          mma<T>(dq[2 * dd + 1], da, kb[2], kb[3]);
        }
      }
    }
    cp_async_wait_all();
    __syncthreads();
  }

  T* out = static_cast<T*>(a.dq);
  const int col = (lane % 4) * 2;
  if (ok0) {
    T* dst = out + row0 * HD + col;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dst + n * 8) = pack2<T>(dq[n][0] * a.scale, dq[n][1] * a.scale);
    }
  }
  if (ok1) {
    T* dst = out + row1 * HD + col;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dst + n * 8) = pack2<T>(dq[n][2] * a.scale, dq[n][3] * a.scale);
    }
  }
}

// ---------------------------------------------------------------------------------------
// launchers

template <typename T, int HD>
void launch_dq_typed(const BwdArgs& a, cudaStream_t stream) {
  launch_query_kernel(flash_dq_kernel<T, HD>, a, kTile, dq_smem_bytes<HD>(), stream);
}

}  // namespace

void launch_flash_dq(DType dtype, const BwdArgs& a, cudaStream_t stream) {
  dispatch_flash(dtype, a.s.hd, [&]<typename T, int HD>() { launch_dq_typed<T, HD>(a, stream); });
}

// ---------------------------------------------------------------------------------------
// Note [Fused dq] (attention_flash_dkdv_kernel.cuh): the choice and the last step

bool fused_dq(const AttnShape& s, const AttnMaskArgs& m, bool want_dq, bool want_dkdv) {
  static const int forced = [] {  // Note [Fused dq] (attention_flash_dkdv_kernel.cuh)
    const char* e = std::getenv("CHUNKGRAD_FLASH_FUSED_DQ");
    const std::string v = e != nullptr ? e : "";
    return v == "1" ? 1 : v == "0" ? 0 : -1;
  }();
  if (!want_dq || !want_dkdv || m.kind != AttnMaskKind::dflash) return false;
  return forced != 0;
}

// Note [dq bulk reduce] (attention_flash_dkdv_layout.cuh): whether the fused dq's partials
// go by bulk reductions; CHUNKGRAD_FLASH_DQ_BULK=0 keeps the atomics (for benchmarks; read
// at every call, so that a test may turn it off). The kernel takes atomics anyway where the
// device code predates sm_90. (The buffer's 16-byte alignment, which the bulk copies need,
// is checked at the launch.)
bool dq_bulk() {
  const char* e = std::getenv("CHUNKGRAD_FLASH_DQ_BULK");
  return e == nullptr || std::string(e) != "0";
}

namespace {
// dq [B, Hq, Sq, HD] = scale * dq_acc, read through Note [dq tile order]: a CTA per
// (batch row, head, block), a thread per 8 columns of one of the block's rows (two float4
// loads, one 16-byte store): 8 consecutive columns from a multiple of 8 stay consecutive
// under the tile's swizzle, which flips bits 3 and 4 of the column. Why 8: at 2 columns a
// thread the kernel moved about 2 TB/s on the H200 (Note [The backward's other kernels]).
template <typename T, int HD>
__global__ void dq_from_acc_kernel(BwdArgs a) {
  const AttnShape& s = a.s;
  const int64_t nb = a.m.num_blocks, x = blockIdx.x, blk = x % nb, bh = x / nb;
  const int64_t h = bh % s.Hq, b = bh / s.Hq, group = s.Hq / s.Hkv;
  const int bs = static_cast<int>(a.m.block_size), hh = static_cast<int>(h % group);
  const float k = a.scale;
  T* out = static_cast<T*>(a.dq) + (bh * s.Sq + blk * bs) * HD;
  // A padded block's rows were never written: dq 0 (Note [dq first writers]).
  const bool padded = attn::dflash_anchor(a.m, b, blk) < 0;
  for (int p = threadIdx.x; p < bs * (HD / 8); p += blockDim.x) {
    const int slot = p / (HD / 8), c = (p % (HD / 8)) * 8;
    if (padded) {
      *reinterpret_cast<uint4*>(out + slot * HD + c) = make_uint4(0, 0, 0, 0);
      continue;
    }
    const int v = hh * bs + slot;  // packed row (Note [Flash tiles])
    const float4* src = reinterpret_cast<const float4*>(
        a.dq_acc + dq_tile_base<HD>(s, a.m, b, h / group, blk, v / kDqTileRows) +
        dq_tile_offset<HD>(v % kDqTileRows, c));
    const float4 lo = __ldg(src), hi = __ldg(src + 1);
    *reinterpret_cast<uint4*>(out + slot * HD + c) =
        make_uint4(pack2<T>(lo.x * k, lo.y * k), pack2<T>(lo.z * k, lo.w * k),
                   pack2<T>(hi.x * k, hi.y * k), pack2<T>(hi.z * k, hi.w * k));
  }
}
}  // namespace

void launch_flash_dq_from_acc(DType dtype, const BwdArgs& a, cudaStream_t stream) {
  dispatch_flash(dtype, a.s.hd, [&]<typename T, int HD>() {
    const int64_t ctas = a.s.B * a.s.Hq * a.m.num_blocks;
    if (ctas == 0) return;
    CG_CHECK(ctas < (int64_t{1} << 31), "flash attention backward: ", ctas,
             " (batch, head, block) triples are more than one grid takes");
    // A thread per 8 columns of a block's rows where a block has at most 1024 such items
    // (24 x 16 = 384 in the 27B-class step), so that each thread's loads go out at once.
    const int64_t items = a.m.block_size * (HD / 8);
    const int threads = static_cast<int>(std::clamp<int64_t>((items + 31) / 32 * 32, 32, 1024));
    dq_from_acc_kernel<T, HD><<<static_cast<unsigned>(ctas), threads, 0, stream>>>(a);
    CG_CUDA_CHECK(cudaGetLastError());
  });
}

}  // namespace flash

namespace {
// Floats of context-part partial sums (Note [Context key parts]); 0 when the tiles stay
// whole.
size_t context_partial_floats(const AttnShape& s, const AttnMaskArgs& m, bool want_dkdv) {
  const int parts = want_dkdv ? flash::dkdv_context_parts(s, m) : 1;
  if (parts == 1) return 0;
  return 2 * static_cast<size_t>(s.B * parts * s.Hkv * m.context_len * s.hd);
}
// Floats of all context-part scratch: the partial sums, then the parts' block ranges (two
// ints a part, in float-sized slots), rounded up to 4 floats so that what follows keeps
// the scratch's 16-byte alignment (Note [dq bulk reduce]).
size_t context_parts_floats(const AttnShape& s, const AttnMaskArgs& m, bool want_dkdv) {
  const int parts = want_dkdv ? flash::dkdv_context_parts(s, m) : 1;
  if (parts == 1) return 0;
  const int64_t ctx_tiles = (m.context_len + flash::kTile - 1) / flash::kTile;
  const size_t floats =
      context_partial_floats(s, m, want_dkdv) + 2 * static_cast<size_t>(s.B * ctx_tiles * parts);
  return (floats + 3) / 4 * 4;
}
}  // namespace

size_t flash_attention_backward_scratch_bytes(const AttnShape& s, const AttnMaskArgs& m,
                                              bool want_dq, bool want_dkdv) {
  size_t floats = context_parts_floats(s, m, want_dkdv);
  if (flash::fused_dq(s, m, want_dq, want_dkdv)) {  // Note [Fused dq]: after the parts
    floats += static_cast<size_t>(flash::dq_tile_order_floats(s, m));
  }
  return sizeof(float) * floats;
}

// Note [The backward's other kernels]: what a DFlash backward (CudaKernels::attention_backward
// in cuda_attention.cpp: the delta kernel there, then this function) runs besides the
// context keys' dk/dv CTAs, measured on the H200 at the 27B-class step's shape (32/8 heads,
// 1024 x 24 over 4096 context keys, bf16 hd 128, sorted anchors; bench/attention_bench,
// 2026-12-03). With both dk/dv grids left out (a timing hack with wrong results, not kept)
// the backward took 1.13 ms (full rule) and 1.16 ms (sliding) of its 10.3 and 9.3; with only
// the blocks' own key CTAs left out, 0.55 ms less than whole: about 16% of the backward is
// outside the context keys' CTAs. ncu's times per kernel, at the clocks ncu sets (they put
// the 128-key CTAs at 12.13 ms, so read them as shares), full rule:
//   ncu --metrics gpu__time_duration.sum --launch-count 6
//       -k regex:"delta_kernel|dq_from_acc|context_|flash_dkdv"
//       bench/attention_bench --which dflash --heads 32/8 --path flash --repeats 1
//       --anchors sorted
// delta_kernel 238 us (403 MB of O and dO, read a warp a row), context_ranges_kernel 24 us,
// the block-key dk/dv CTAs 674 us, context_parts_sum_kernel 40 us, dq_from_acc_kernel 302 us
// (403 MB of fp32 read, 201 MB written). That left about 0.5 ms of the 1.13 to what was not
// broken down: the fp32 dq buffer's memset (403 MB; not a kernel), the anchors' upload, the
// lse conversion and the gaps between launches. The delta and dq_from_acc kernels moved 1.7
// and 2.0 TB/s; reading 16 bytes a thread (delta_vec_kernel in attention_rows.cu, and
// dq_from_acc_kernel's float4 loads) they take 130 and 173-182 us (same command, with the
// regex "delta|dq_from_acc|context_|flash_dkdv"), and Note [dq first writers] drops the
// memset (the block CTAs then 651 us: they store). The backward, same bench: 10.27-10.31 ms
// before both changes, 10.10-10.15 in a call with the vector kernels; in a later
// call, three alternating rounds with and without the first writers, 10.14-10.23 against
// 10.22-10.30 (sliding rule 9.01-9.09 against 9.11-9.18). Measured and dropped: the blocks'
// key CTAs on a side stream queued after the context grid, to fill its last wave -- 10.12
// ms in all three rounds against 10.10-10.15, no change. After Note [Descriptors once a
// tile] (2026-12-04) the block CTAs took 511 us (full rule) and 574 us (sliding), the
// context grid 10.45 and 8.44 ms, the delta 127 us, context_parts_sum 39 us.
void launch_flash_attention_backward(DType dtype, const AttnShape& s, AttnOperand q, AttnOperand k,
                                     AttnOperand v, AttnOperand grad_out, const float* lse,
                                     const float* delta, const AttnMaskArgs& m, double scale,
                                     void* dq, void* dk, void* dv, float* scratch,
                                     cudaStream_t stream) {
  CG_CHECK(flash_attention_supports(dtype, s.hd, m.kind),
           "flash attention backward on cuda takes bf16/f16, head_dim 64 or 128 and masks none, "
           "causal or dflash_blocks; got ",
           dtype_name(dtype), ", head_dim ", s.hd);
  flash::BwdArgs a{s,
                   q,
                   k,
                   v,
                   grad_out,
                   lse,
                   delta,
                   dq,
                   dk,
                   dv,
                   m,
                   static_cast<float>(scale),
                   static_cast<float>(scale) * flash::kLog2e,
                   0,
                   0};
  const bool want_dkdv = dk != nullptr || dv != nullptr;
  a.ctx_parts = want_dkdv ? flash::dkdv_context_parts(s, m) : 1;
  const bool fused = flash::fused_dq(s, m, dq != nullptr, want_dkdv);
  CG_CHECK((a.ctx_parts == 1 && !fused) || scratch != nullptr,
           "flash attention backward: this problem needs flash_attention_backward_scratch_bytes() "
           "of scratch and got none");
  a.ctx_partial = scratch;
  if (a.ctx_parts > 1) {  // the parts' block ranges follow their partial sums
    a.ctx_ranges = reinterpret_cast<int*>(scratch + context_partial_floats(s, m, want_dkdv));
  }
  if (fused) {  // Note [Fused dq]
    a.dq_acc = scratch + context_parts_floats(s, m, want_dkdv);
    CG_CHECK(reinterpret_cast<uintptr_t>(a.dq_acc) % 16 == 0 &&
                 reinterpret_cast<uintptr_t>(dq) % 16 == 0,
             "flash attention backward: the scratch and dq must start 16-byte aligned (as the "
             "caching allocator's blocks do) for the fused dq's vector loads and stores");
    a.dq_bulk = flash::dq_bulk();
  }
  if (dq != nullptr && !fused) flash::launch_flash_dq(dtype, a, stream);
  if (want_dkdv) flash::launch_flash_dkdv(dtype, a, stream);
  if (fused) flash::launch_flash_dq_from_acc(dtype, a, stream);
}

}  // namespace cg::cuda
