// Why this file exists: the flash attention forward on tensor cores (FlashAttention-2's
// recipe): a CTA holds 128 query rows (32 per warp), streams K/V tiles of 64 keys through
// shared memory (cp.async, two stages, so the next tile loads while this one computes),
// keeps an online softmax per row and writes out and lse once. No [Sq, Sk] buffer; each
// tile visits only the keys its rows may see (Note [Flash tiles]).
//
// Per warp (2 x 16 query rows), per key tile: S = Q K^T (32 x 64, fp32 registers), masked,
// P = exp2(S * scale * log2 e - m), rounded to bf16/f16 and fed straight back as the A
// operand of O += P V (the C-fragment layout of m16n8k16 is the A layout of the next mma).
// On Hopper in an sm_90a build, head dim 128 runs the warpgroup-MMA kernel instead
// (attention_flash_forward_wgmma.cu, Note [wgmma forward]); this one runs everywhere else.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "core/error.h"
#include "cuda/attention_flash_common.cuh"
#include "cuda/attention_flash_forward.cuh"
#include "cuda/attention_kernels.h"
#include "cuda/cuda_check.h"

namespace cg::cuda {

namespace {

using namespace flash;

// Each warp owns MT m16 slices (16 * MT query rows): every K/V fragment read from shared
// memory feeds MT mma instead of one (the forward is bound by ldmatrix traffic and
// latency, not by the tensor cores).
constexpr int kForwardMTiles = 2;
constexpr int kForwardRows = 16 * kWarps * kForwardMTiles;  // query rows per CTA

template <int HD>
constexpr int fwd_smem_bytes() {
  return (kForwardRows + 4 * kTile) * (HD + kPad) * 2;  // Q, then K and V in two stages
}

template <typename T, int HD>
__global__ void __launch_bounds__(kThreads) flash_forward_kernel(FwdArgs a) {
  if (batch_of_block() >= a.s.B) return;  // Note [Batch grid]
  constexpr int LD = HD + kPad, MT = kForwardMTiles, BM = kForwardRows;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);  // (BM, LD)
  T* sK = sQ + BM * LD;                    // (2, kTile, LD)
  T* sV = sK + 2 * kTile * LD;             // (2, kTile, LD)
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const AttnShape& s = a.s;

  const QueryCta<T> cta = query_cta_of<T>(a, BM);  // Note [Query CTA prologue]
  load_first_tiles<T, BM, HD>(cta, a, sQ, nullptr, nullptr, sK, sV);
  const int64_t b = cta.b, ntiles = cta.key_tiles;
  const QueryTile& qt = cta.qt;

  // This thread's rows: slice mt, half hf -> tile row warp * 16 * MT + mt * 16 + hf * 8 + lane / 4.
  // (Only the query index is kept, as 32 bits, for the causal test: registers are scarce.)
  const int row_base = warp * 16 * MT + lane / 4;
  int ir[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      int64_t h = 0, i = 0;
      qt.row(row_base + mt * 16 + hf * 8, h, i);
      ir[mt][hf] = static_cast<int>(i);
    }
  }
  int64_t hw, iw;
  const bool warp_active = qt.row(warp * 16 * MT, hw, iw);  // valid rows are a prefix
  const CausalRule causal = causal_rule(s, a.m);
  const SlidingRule& sliding = cta.sliding;  // Note [Sliding tiles]
  int64_t first_i = 0, fh;
  qt.row(0, fh, first_i);

  float o[MT][HD / 8][4];
  float mrow[MT][2], lrow[MT][2];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.f;
    mrow[mt][0] = mrow[mt][1] = -INFINITY;
    lrow[mt][0] = lrow[mt][1] = 0.f;
  }

  for (int64_t t = 0; t < ntiles; ++t) {
    const KeyTileStep<T> kt = key_tile_step<T, HD>(cta, a, sK, sV, t);
    const int64_t j0 = kt.j0, jend = kt.jend;
    if (warp_active) {
      const T *tK = kt.tK, *tV = kt.tV;
      float sc[MT][kTile / 8][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int n = 0; n < kTile / 8; ++n)
          sc[mt][n][0] = sc[mt][n][1] = sc[mt][n][2] = sc[mt][n][3] = 0.f;
      }
#pragma unroll
      for (int ks = 0; ks < HD / 16; ++ks) {
        uint32_t qa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          ldsm_x4(qa[mt], smem_addr(sQ + (warp * 16 * MT + mt * 16 + lane % 16) * LD + ks * 16 +
                                    (lane / 16) * 8));
        }
#pragma unroll
        for (int np = 0; np < kTile / 16; ++np) {
          uint32_t kb[4];
          ldsm_x4(kb, smem_addr(tK + (np * 16 + lane % 8 + (lane / 16) * 8) * LD + ks * 16 +
                                ((lane / 8) % 2) * 8));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma<T>(sc[mt][2 * np], qa[mt], kb[0], kb[1]);
            mma<T>(sc[mt][2 * np + 1], qa[mt], kb[2], kb[3]);
          }
        }
      }
      const bool need_mask =
          j0 + kTile > jend || causal.hides(j0 + kTile - 1, first_i) || sliding.masks_tile(j0);
      uint32_t pa[MT][kTile / 16][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) {
        if (need_mask) mask_scores(sc[mt], ir[mt], j0, jend, causal, sliding, lane);
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
          float mx = -INFINITY;
#pragma unroll
          for (int n = 0; n < kTile / 8; ++n) {
            mx = fmaxf(mx, fmaxf(sc[mt][n][2 * hf], sc[mt][n][2 * hf + 1]));
          }
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float mn = fmaxf(mrow[mt][hf], mx);
          // Nothing seen yet (-inf): keep every term at 0 rather than NaN.
          const float base = mn == -INFINITY ? 0.f : mn * a.scale_log2;
          const float corr = exp2f(mrow[mt][hf] * a.scale_log2 - base);  // -inf -> 0
          mrow[mt][hf] = mn;
          float rs = 0.f;
#pragma unroll
          for (int n = 0; n < kTile / 8; ++n) {
            sc[mt][n][2 * hf] = exp2f(sc[mt][n][2 * hf] * a.scale_log2 - base);
            sc[mt][n][2 * hf + 1] = exp2f(sc[mt][n][2 * hf + 1] * a.scale_log2 - base);
            rs += sc[mt][n][2 * hf] + sc[mt][n][2 * hf + 1];
          }
          lrow[mt][hf] = lrow[mt][hf] * corr + rs;
#pragma unroll
          for (int n = 0; n < HD / 8; ++n) {
            o[mt][n][2 * hf] *= corr;
            o[mt][n][2 * hf + 1] *= corr;
          }
        }
#pragma unroll
        for (int kk = 0; kk < kTile / 16; ++kk) {
          pa[mt][kk][0] = pack2<T>(sc[mt][2 * kk][0], sc[mt][2 * kk][1]);
          pa[mt][kk][1] = pack2<T>(sc[mt][2 * kk][2], sc[mt][2 * kk][3]);
          pa[mt][kk][2] = pack2<T>(sc[mt][2 * kk + 1][0], sc[mt][2 * kk + 1][1]);
          pa[mt][kk][3] = pack2<T>(sc[mt][2 * kk + 1][2], sc[mt][2 * kk + 1][3]);
        }
      }
#pragma unroll
      for (int kk = 0; kk < kTile / 16; ++kk) {
#pragma unroll
        for (int dp = 0; dp < HD / 16; ++dp) {
          uint32_t vb[4];
          ldsm_x4_trans(vb, smem_addr(tV + (kk * 16 + lane % 8 + ((lane / 8) % 2) * 8) * LD +
                                      dp * 16 + (lane / 16) * 8));
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma<T>(o[mt][2 * dp], pa[mt][kk], vb[0], vb[1]);
            mma<T>(o[mt][2 * dp + 1], pa[mt][kk], vb[2], vb[3]);
          }
        }
      }
    }
    cp_async_wait_all();
    __syncthreads();
  }

  // Row sums across the quad, then out = o / l and lse = m * scale + ln l.
  T* out = static_cast<T*>(a.out.data);
  const int col = (lane % 4) * 2;
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      float l = lrow[mt][hf];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      int64_t h = 0, i = 0;
      if (!qt.row(row_base + mt * 16 + hf * 8, h, i)) continue;
      const float inv = l > 0.f ? 1.f / l : 0.f;
      const int64_t row = (b * s.Hq + h) * s.Sq + i;
      T* dst = out + b * a.out.sb + h * a.out.sh + i * a.out.ss + col;
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) {
        *reinterpret_cast<uint32_t*>(dst + n * 8) =
            pack2<T>(o[mt][n][2 * hf] * inv, o[mt][n][2 * hf + 1] * inv);
      }
      if (lane % 4 == 0) { a.lse[row] = l > 0.f ? mrow[mt][hf] * a.scale + logf(l) : -INFINITY; }
    }
  }
}

template <typename T, int HD>
void launch_forward_typed(const FwdArgs& a, cudaStream_t stream) {
  launch_query_kernel(flash_forward_kernel<T, HD>, a, kForwardRows, fwd_smem_bytes<HD>(), stream);
}

}  // namespace

bool flash_attention_supports(DType dtype, int64_t head_dim, AttnMaskKind kind) {
  return (dtype == DType::bf16 || dtype == DType::f16) && (head_dim == 64 || head_dim == 128) &&
         kind != AttnMaskKind::dense;
}

void launch_flash_attention_forward(DType dtype, const AttnShape& s, AttnOperand q, AttnOperand k,
                                    AttnOperand v, AttnOutput out, float* lse,
                                    const AttnMaskArgs& m, double scale, cudaStream_t stream) {
  CG_CHECK(flash_attention_supports(dtype, s.hd, m.kind),
           "flash attention on cuda takes bf16/f16, head_dim 64 or 128 and masks none, causal "
           "or dflash_blocks; got ",
           dtype_name(dtype), ", head_dim ", s.hd);
  if (s.B * s.Hq * s.Sq == 0) return;
  flash::FwdArgs a{
      s, q, k, v, out, lse, m, static_cast<float>(scale), static_cast<float>(scale) * kLog2e, 0, 0};
  if (flash::launch_flash_forward_wgmma(dtype, a, stream)) return;  // Note [wgmma forward]
  dispatch_flash(dtype, s.hd,
                 [&]<typename T, int HD>() { launch_forward_typed<T, HD>(a, stream); });
}

}  // namespace cg::cuda
