// Why this file exists: the flash attention forward on tensor cores (FlashAttention-2's
// recipe): a CTA holds 64 query rows in registers, streams K/V tiles of 64 keys through
// shared memory (cp.async, two stages, so the next tile loads while this one computes),
// keeps an online softmax per row and writes out and lse once. No [Sq, Sk] buffer; each
// tile visits only the keys its rows may see (Note [Flash tiles]).
//
// Per warp (16 query rows), per key tile: S = Q K^T (16 x 64, fp32 in registers), masked,
// P = exp2(S * scale * log2 e - m), rounded to bf16/f16 and fed straight back as the A
// operand of O += P V (the C-fragment layout of m16n8k16 is the A layout of the next mma).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "cuda/attention_flash_common.cuh"
#include "cuda/attention_kernels.h"
#include "cuda/cuda_check.h"

namespace cg::cuda {

namespace {

using namespace flash;

struct FwdArgs {
  AttnShape s;
  AttnOperand q, k, v;
  void* out;   // (B, Hq, Sq, hd) contiguous
  float* lse;  // (B, Hq, Sq)
  AttnMaskArgs m;
  float scale, scale_log2;
  int64_t tiles_per_unit, units;
};

template <int HD>
constexpr int fwd_smem_bytes() {
  return (kTile + 4 * kTile) * (HD + kPad) * 2;  // Q, then K and V in two stages
}

template <typename T, int HD>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(FwdArgs a) {
  constexpr int LD = HD + kPad;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // (kTile, LD)
  T* sK = sQ + kTile * LD;                 // (2, kTile, LD)
  T* sV = sK + 2 * kTile * LD;             // (2, kTile, LD)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t b = blockIdx.z;
  const AttnShape& s = a.s;
  const int64_t hk_group = s.Hq / s.Hkv;

  QueryTile qt;
  KeyPlan kp;
  const int64_t unit = blockIdx.x % a.units, tile = blockIdx.x / a.units;
  query_tile_of(s, a.m, a.tiles_per_unit, tile, unit, b, qt, kp);
  const int64_t kv_head = qt.packed ? unit : qt.head / hk_group;
  const T* kbase = static_cast<const T*>(a.k.data) + b * a.k.sb + kv_head * a.k.sh;
  const T* vbase = static_cast<const T*>(a.v.data) + b * a.v.sb + kv_head * a.v.sh;
  const int64_t ntiles = kp.total_tiles();

  auto load_kv = [&](int64_t t, int stage) {
    int64_t j0, jend;
    kp.tile(t, j0, jend);
    load_kv_tile_async<T, HD>(sK + stage * kTile * LD, sV + stage * kTile * LD, a.k, a.v, kbase,
                              vbase, j0, jend);
  };

  load_rows_async<T, kTile, HD>(sQ, a.q.data, [&](int r) -> const T* {
    int64_t h = 0, i = 0;
    return qt.row(r, h, i) ? query_row<T>(a.q, b, h, i) : nullptr;
  });
  if (ntiles > 0) load_kv(0, 0);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();

  // This thread's two rows (r0 = warp * 16 + lane / 4, r1 = r0 + 8).
  int64_t h0 = 0, i0 = 0, h1 = 0, i1 = 0;
  const int r0 = warp * 16 + lane / 4;
  const bool ok0 = qt.row(r0, h0, i0), ok1 = qt.row(r0 + 8, h1, i1);
  int64_t hw, iw;
  const bool warp_active = qt.row(warp * 16, hw, iw);  // valid rows are a prefix
  const bool causal = a.m.kind == AttnMaskKind::causal;
  const int64_t diag = s.Sk - s.Sq;
  int64_t first_i = 0, fh;
  qt.row(0, fh, first_i);

  uint32_t qf[HD / 16][4];
#pragma unroll
  for (int ks = 0; ks < HD / 16; ++ks) {
    ldsm_x4(qf[ks], smem_addr(sQ + (warp * 16 + lane % 16) * LD + ks * 16 + (lane / 16) * 8));
  }
  float o[HD / 8][4];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.f;
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.f, l1 = 0.f;

  for (int64_t t = 0; t < ntiles; ++t) {
    const int stage = t & 1;
    if (t + 1 < ntiles) load_kv(t + 1, stage ^ 1);
    cp_async_commit();
    int64_t j0, jend;
    kp.tile(t, j0, jend);
    if (warp_active) {
      const T* tK = sK + stage * kTile * LD;
      const T* tV = sV + stage * kTile * LD;
      float sc[kTile / 8][4];
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.f;
#pragma unroll
      for (int np = 0; np < kTile / 16; ++np) {
#pragma unroll
        for (int ks = 0; ks < HD / 16; ++ks) {
          uint32_t kb[4];
          ldsm_x4(kb, smem_addr(tK + (np * 16 + lane % 8 + (lane / 16) * 8) * LD + ks * 16 +
                                ((lane / 8) % 2) * 8));
          mma<T>(sc[2 * np], qf[ks], kb[0], kb[1]);
          mma<T>(sc[2 * np + 1], qf[ks], kb[2], kb[3]);
        }
      }
      const bool need_mask = j0 + kTile > jend || (causal && j0 + kTile - 1 > first_i + diag);
      if (need_mask) {
#pragma unroll
        for (int n = 0; n < kTile / 8; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int64_t j = j0 + n * 8 + (lane % 4) * 2 + (e & 1);
            const int64_t i = e < 2 ? i0 : i1;
            if (j >= jend || (causal && j > i + diag)) sc[n][e] = -INFINITY;
          }
        }
      }
      float mx0 = -INFINITY, mx1 = -INFINITY;
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) {
        mx0 = fmaxf(mx0, fmaxf(sc[n][0], sc[n][1]));
        mx1 = fmaxf(mx1, fmaxf(sc[n][2], sc[n][3]));
      }
#pragma unroll
      for (int off = 1; off <= 2; off <<= 1) {
        mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, off));
        mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, off));
      }
      const float mn0 = fmaxf(m0, mx0), mn1 = fmaxf(m1, mx1);
      // Nothing seen yet (-inf): keep every term at 0 rather than NaN.
      const float base0 = mn0 == -INFINITY ? 0.f : mn0 * a.scale_log2;
      const float base1 = mn1 == -INFINITY ? 0.f : mn1 * a.scale_log2;
      const float corr0 = exp2f(m0 * a.scale_log2 - base0);  // m0 = -inf -> 0
      const float corr1 = exp2f(m1 * a.scale_log2 - base1);
      m0 = mn0;
      m1 = mn1;
      float rs0 = 0.f, rs1 = 0.f;
#pragma unroll
      for (int n = 0; n < kTile / 8; ++n) {
        sc[n][0] = exp2f(sc[n][0] * a.scale_log2 - base0);
        sc[n][1] = exp2f(sc[n][1] * a.scale_log2 - base0);
        sc[n][2] = exp2f(sc[n][2] * a.scale_log2 - base1);
        sc[n][3] = exp2f(sc[n][3] * a.scale_log2 - base1);
        rs0 += sc[n][0] + sc[n][1];
        rs1 += sc[n][2] + sc[n][3];
      }
      l0 = l0 * corr0 + rs0;
      l1 = l1 * corr1 + rs1;
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) {
        o[n][0] *= corr0;
        o[n][1] *= corr0;
        o[n][2] *= corr1;
        o[n][3] *= corr1;
      }
#pragma unroll
      for (int kk = 0; kk < kTile / 16; ++kk) {
        const uint32_t pa[4] = {pack2<T>(sc[2 * kk][0], sc[2 * kk][1]),
                                pack2<T>(sc[2 * kk][2], sc[2 * kk][3]),
                                pack2<T>(sc[2 * kk + 1][0], sc[2 * kk + 1][1]),
                                pack2<T>(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
#pragma unroll
        for (int dp = 0; dp < HD / 16; ++dp) {
          uint32_t vb[4];
          ldsm_x4_trans(vb, smem_addr(tV + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * LD +
                                      dp * 16 + (lane / 16) * 8));
          mma<T>(o[2 * dp], pa, vb[0], vb[1]);
          mma<T>(o[2 * dp + 1], pa, vb[2], vb[3]);
        }
      }
    }
    cp_async_wait_all();
    __syncthreads();
  }

  // Row sums across the quad, then out = o / l and lse = m * scale + ln l.
#pragma unroll
  for (int off = 1; off <= 2; off <<= 1) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, off);
    l1 += __shfl_xor_sync(0xffffffffu, l1, off);
  }
  T* out = static_cast<T*>(a.out);
  const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
  const int col = (lane % 4) * 2;
  if (ok0) {
    const int64_t row = (b * s.Hq + h0) * s.Sq + i0;
    T* dst = out + row * HD + col;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dst + n * 8) = pack2<T>(o[n][0] * inv0, o[n][1] * inv0);
    }
    if (lane % 4 == 0) a.lse[row] = l0 > 0.f ? m0 * a.scale + logf(l0) : -INFINITY;
  }
  if (ok1) {
    const int64_t row = (b * s.Hq + h1) * s.Sq + i1;
    T* dst = out + row * HD + col;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      *reinterpret_cast<uint32_t*>(dst + n * 8) = pack2<T>(o[n][2] * inv1, o[n][3] * inv1);
    }
    if (lane % 4 == 0) a.lse[row] = l1 > 0.f ? m1 * a.scale + logf(l1) : -INFINITY;
  }
}

template <typename T, int HD>
void launch_forward_typed(const FwdArgs& a, cudaStream_t stream) {
  const QueryGrid g = query_grid(a.s, a.m);
  CG_CHECK(g.x_tiles * g.units < (int64_t{1} << 31) && a.s.B < 65536,
           "scaled_dot_product_attention: too many tiles for one launch on cuda (", g.x_tiles,
           " x ", g.units, " x ", a.s.B, ")");
  constexpr int smem = fwd_smem_bytes<HD>();
  CG_CUDA_CHECK(cudaFuncSetAttribute(flash_forward_kernel<T, HD>,
                                     cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  FwdArgs args = a;
  args.tiles_per_unit = g.tiles_per_unit;
  args.units = g.units;
  const dim3 grid(static_cast<unsigned>(g.x_tiles * g.units), 1, static_cast<unsigned>(a.s.B));
  flash_forward_kernel<T, HD><<<grid, kThreads, smem, stream>>>(args);
  CG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

bool flash_attention_supports(DType dtype, int64_t head_dim, AttnMaskKind kind) {
  return (dtype == DType::bf16 || dtype == DType::f16) && (head_dim == 64 || head_dim == 128) &&
         kind != AttnMaskKind::dense;
}

void launch_flash_attention_forward(DType dtype, const AttnShape& s, AttnOperand q, AttnOperand k,
                                    AttnOperand v, void* out, float* lse, const AttnMaskArgs& m,
                                    double scale, cudaStream_t stream) {
  CG_CHECK(flash_attention_supports(dtype, s.hd, m.kind),
           "flash attention on cuda takes bf16/f16, head_dim 64 or 128 and masks none, causal "
           "or dflash_blocks; got ", dtype_name(dtype), ", head_dim ", s.hd);
  if (s.B * s.Hq * s.Sq == 0) return;
  FwdArgs a{s, q, k, v, out, lse, m, static_cast<float>(scale),
            static_cast<float>(scale) * kLog2e, 0, 0};
  if (dtype == DType::bf16) {
    if (s.hd == 64) launch_forward_typed<__nv_bfloat16, 64>(a, stream);
    else launch_forward_typed<__nv_bfloat16, 128>(a, stream);
  } else {
    if (s.hd == 64) launch_forward_typed<__half, 64>(a, stream);
    else launch_forward_typed<__half, 128>(a, stream);
  }
}

}  // namespace cg::cuda
