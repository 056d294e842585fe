// Why this file exists: the flash attention forward on Hopper's warpgroup MMA (wgmma,
// sm_90a; Note [wgmma] in cuda/wgmma.cuh), head dim 128. Same tiles, key walk, masks and
// online softmax as the mma.sync kernel (attention_flash_forward.cu); only the two GEMMs
// of a key tile change hands, from ldmatrix + mma.sync per warp to one asynchronous MMA
// per warpgroup straight from shared memory.
//
// Note [wgmma forward]: a CTA holds the same 128 query rows as the mma.sync forward, as two
// warpgroups of 64 (warpgroup g: tile rows 64g .. 64g + 63; in it warp w holds rows 16w ..
// 16w + 15). Per key tile of 64 keys:
//   S (64 x 64 per warpgroup)  = Q_g K^T : 8 x m64n64k16, A = Q (K-major), B = K (K-major)
//   O (64 x 128 per warpgroup) += P V    : 4 x m64n128k16, A = P (registers), B = V
//                                          (MN-major: V's rows are the keys)
// Q, K and V sit in shared memory in the 128-byte swizzle wgmma reads (no ldmatrix, no
// padding), loaded by cp.async in two key stages as before; after each load the CTA
// fences the async proxy (the MMA reads shared memory through it) before its barrier.
// A warpgroup whose 64 rows are all past the tile's end (a DFlash tile of 96 virtual
// rows has 32 such rows, in warpgroup 1 -- half of it) still computes: an MMA is issued
// by the whole warpgroup or not at all. Built only for sm_90a (wgmma is not in sm_90's
// base set); elsewhere the mma.sync kernel runs.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "cuda/attention_flash_common.cuh"
#include "cuda/attention_flash_forward.cuh"
#include "cuda/wgmma.cuh"

namespace cg::cuda::flash {

namespace {

constexpr int kWgmmaThreads = 256;  // 2 warpgroups
constexpr int kWgmmaRows = 128;     // query rows per CTA (as the mma.sync forward)
constexpr int kWgmmaHD = 128;
constexpr uint32_t kQBytes = kWgmmaRows * kWgmmaHD * 2;  // 2 column blocks of (128 rows, 64)
constexpr uint32_t kKVBytes = kTile * kWgmmaHD * 2;      // 2 column blocks of (64 keys, 64)
constexpr int kStages = 3;  // key tiles in shared memory: t - 1 (its V), t, t + 1 (landing)
constexpr int kWgmmaSmem = kQBytes + 2 * kStages * kKVBytes + 1024;  // Q, K, V, alignment

// R rows of 128 elements into the swizzled layout at `dst` (two column blocks of (R, 64));
// row_of(r) is the row's global address or nullptr (zero-filled).
template <typename T, int R, typename RowOf>
__device__ inline void load_rows_sw128(uint32_t dst, const void* any_valid, RowOf row_of) {
  for (int c = threadIdx.x; c < R * 16; c += kWgmmaThreads) {
    const int r = c / 16, x = c % 16;
    const T* src = row_of(r);
    cp_async16(dst + (x / 8) * R * 128 + wgmma::swizzle128_offset(r, x % 8),
               src != nullptr ? static_cast<const void*>(src + x * 8) : any_valid, src != nullptr);
  }
}

// Key tile t of the CTA's plan into stage `stage` of sK and sV.
template <typename T>
__device__ inline void load_key_tile_sw128(const QueryCta<T>& c, const FwdArgs& a, uint32_t sK,
                                           uint32_t sV, int64_t t, int stage) {
  int64_t j0, jend;
  c.kp.tile(t, j0, jend);
  load_rows_sw128<T, kTile>(sK + stage * kKVBytes, a.k.data, [&](int r) -> const T* {
    return j0 + r < jend ? c.kbase + (j0 + r) * a.k.ss : nullptr;
  });
  load_rows_sw128<T, kTile>(sV + stage * kKVBytes, a.v.data, [&](int r) -> const T* {
    return j0 + r < jend ? c.vbase + (j0 + r) * a.v.ss : nullptr;
  });
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

template <typename T>
__global__ void __launch_bounds__(kWgmmaThreads, 1) flash_forward_wgmma_kernel(FwdArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if (batch_of_block() >= a.s.B) return;  // Note [Batch grid]
  constexpr int HD = kWgmmaHD, BM = kWgmmaRows;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // The swizzle is a function of the address: every tile starts 1024-byte aligned.
  const uint32_t sQ = (smem_addr(smem_raw) + 1023u) & ~1023u;  // (2, BM, 64)
  const uint32_t sK = sQ + kQBytes;                            // (kStages, 2, kTile, 64)
  const uint32_t sV = sK + kStages * kKVBytes;                 // (kStages, 2, kTile, 64)
  const int wg = threadIdx.x / 128, warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const AttnShape& s = a.s;

  // Q and key tile 0 (one group), key tile 1 (the next); wait for the first.
  const QueryCta<T> cta = query_cta_of<T>(a, BM);  // Note [Query CTA prologue]
  const int64_t b = cta.b, ntiles = cta.key_tiles;
  load_rows_sw128<T, BM>(sQ, a.q.data, [&](int r) -> const T* {
    int64_t h = 0, i = 0;
    return cta.qt.row(r, h, i) ? query_row<T>(a.q, b, h, i) : nullptr;
  });
  if (ntiles > 0) load_key_tile_sw128<T>(cta, a, sK, sV, 0, 0);
  cp_async_commit();
  if (ntiles > 1) load_key_tile_sw128<T>(cta, a, sK, sV, 1, 1);
  cp_async_commit();
  // The V stage "before" tile 0 holds zeros: the first step's P V (P = 0) adds nothing
  // and every step issues the same MMAs (no branch around them, which would serialize
  // them).
  for (int c = threadIdx.x; c < static_cast<int>(kKVBytes / 16); c += kWgmmaThreads) {
    asm volatile(
        "st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(sV + (kStages - 1) * kKVBytes + c * 16),
        "r"(0u));
  }
  asm volatile("cp.async.wait_group 1;\n" ::: "memory");
  wgmma::fence_proxy_async();
  __syncthreads();
  const QueryTile& qt = cta.qt;

  // This thread's rows: tile row 64 wg + 16 warp + lane / 4 + 8 hf (hf = 0, 1).
  const int row_base = 64 * wg + 16 * warp + lane / 4;
  int ir[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    int64_t h = 0, i = 0;
    qt.row(row_base + hf * 8, h, i);
    ir[hf] = static_cast<int>(i);
  }
  int64_t hw, iw;
  const bool wg_active = qt.row(64 * wg, hw, iw);  // valid rows are a prefix
  const CausalRule causal = causal_rule(s, a.m);
  const SlidingRule& sliding = cta.sliding;  // Note [Sliding tiles]
  int64_t first_i = 0, fh;
  qt.row(0, fh, first_i);

  float o[HD / 2];  // o[4n + e]: column 8n + 2 (lane % 4) + e % 2, row hf = e / 2
  float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
#pragma unroll
  for (int n = 0; n < HD / 2; ++n) o[n] = 0.f;
  const uint32_t q_slice = sQ + wg * 64 * 128;  // this warpgroup's 64 rows, column block 0
  // P of the previous key tile: the A fragment of 16 keys at a time (the C layout of two
  // n8 blocks), multiplied into O while this tile's softmax runs (Note [wgmma forward]).
  uint32_t pa[kTile / 16][4];
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0u;

  int stage = 0;  // key tile t's stage: t % kStages
  for (int64_t t = 0; t < ntiles; ++t) {
    const int prev_stage = stage == 0 ? kStages - 1 : stage - 1;
    int64_t j0, jend;
    cta.kp.tile(t, j0, jend);
    if (wg_active) {
      const uint32_t tK = sK + stage * kKVBytes, prev_V = sV + prev_stage * kKVBytes;
      float sc[kTile / 2];  // sc[4n + e]: key 8n + 2 (lane % 4) + e % 2, row hf = e / 2
#pragma unroll
      for (int n = 0; n < kTile / 2; ++n) sc[n] = 0.f;
      wgmma::fence_operands(sc);
      wgmma::fence_operands(o);
      wgmma::fence();
#pragma unroll
      for (int ks = 0; ks < HD / 16; ++ks) {  // S = Q K^T, 16 columns of the head dim at a time
        const uint32_t col = (ks % 4) * 32u;  // within column block ks / 4
        wgmma::mma_m64n64k16_ss<T>(
            sc, wgmma::desc_sw128(q_slice + (ks / 4) * BM * 128 + col, 16, 1024),
            wgmma::desc_sw128(tK + (ks / 4) * kTile * 128 + col, 16, 1024), 1);
      }
      wgmma::commit();
      // O += P V of the previous tile, keys 16 kk .. 16 kk + 15 at a time (at t = 0: P and
      // the V stage are zeros).
#pragma unroll
      for (int kk = 0; kk < kTile / 16; ++kk) {
        wgmma::mma_m64n128k16_rs<T>(o, pa[kk],
                                    wgmma::desc_sw128(prev_V + kk * 16 * 128, kTile * 128, 1024));
      }
      wgmma::commit();
      wgmma::wait<1>();
      wgmma::fence_operands(sc);

      const bool need_mask =
          j0 + kTile > jend || causal.hides(j0 + kTile - 1, first_i) || sliding.masks_tile(j0);
      if (need_mask) {
        mask_scores(reinterpret_cast<float(&)[kTile / 8][4]>(sc), ir, j0, jend, causal, sliding,
                    lane);
      }
      float corr[2];
#pragma unroll
      for (int hf = 0; hf < 2; ++hf) {
        float mx = -INFINITY;
#pragma unroll
        for (int n = 0; n < kTile / 8; ++n) {
          mx = fmaxf(mx, fmaxf(sc[4 * n + 2 * hf], sc[4 * n + 2 * hf + 1]));
        }
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
        mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
        const float mn = fmaxf(mrow[hf], mx);
        // Nothing seen yet (-inf): keep every term at 0 rather than NaN.
        const float base = mn == -INFINITY ? 0.f : mn * a.scale_log2;
        corr[hf] = exp2f(mrow[hf] * a.scale_log2 - base);  // -inf -> 0
        mrow[hf] = mn;
        float rs = 0.f;
#pragma unroll
        for (int n = 0; n < kTile / 8; ++n) {
          sc[4 * n + 2 * hf] = exp2f(sc[4 * n + 2 * hf] * a.scale_log2 - base);
          sc[4 * n + 2 * hf + 1] = exp2f(sc[4 * n + 2 * hf + 1] * a.scale_log2 - base);
          rs += sc[4 * n + 2 * hf] + sc[4 * n + 2 * hf + 1];
        }
        lrow[hf] = lrow[hf] * corr[hf] + rs;
      }
      // The previous tile's P V is done: O and pa may be touched again.
      wgmma::wait<0>();
      wgmma::fence_operands(o);
      fence_fragment(pa);
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) {
        o[4 * n + 0] *= corr[0];
        o[4 * n + 1] *= corr[0];
        o[4 * n + 2] *= corr[1];
        o[4 * n + 3] *= corr[1];
      }
#pragma unroll
      for (int kk = 0; kk < kTile / 16; ++kk) {
        pa[kk][0] = pack2<T>(sc[8 * kk + 0], sc[8 * kk + 1]);
        pa[kk][1] = pack2<T>(sc[8 * kk + 2], sc[8 * kk + 3]);
        pa[kk][2] = pack2<T>(sc[8 * kk + 4], sc[8 * kk + 5]);
        pa[kk][3] = pack2<T>(sc[8 * kk + 6], sc[8 * kk + 7]);
      }
    }
    // Key tile t + 1 has landed (everyone's copies, for the async proxy); every read of
    // stage t - 1 is done, so tile t + 2 may load there.
    cp_async_wait_all();
    wgmma::fence_proxy_async();
    __syncthreads();
    if (t + 2 < ntiles) load_key_tile_sw128<T>(cta, a, sK, sV, t + 2, prev_stage);
    cp_async_commit();
    stage = stage == kStages - 1 ? 0 : stage + 1;
  }
  if (wg_active && ntiles > 0) {  // the last tile's P V
    const int last_stage = stage == 0 ? kStages - 1 : stage - 1;
    wgmma::fence_operands(o);
    wgmma::fence();
#pragma unroll
    for (int kk = 0; kk < kTile / 16; ++kk) {
      wgmma::mma_m64n128k16_rs<T>(
          o, pa[kk],
          wgmma::desc_sw128(sV + last_stage * kKVBytes + kk * 16 * 128, kTile * 128, 1024));
    }
    wgmma::commit();
    wgmma::wait<0>();
    wgmma::fence_operands(o);
    fence_fragment(pa);
  }

  // Row sums across the quad, then out = o / l and lse = m * scale + ln l.
  T* out = static_cast<T*>(a.out.data);
  const int col = (lane % 4) * 2;
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    float l = lrow[hf];
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    int64_t h = 0, i = 0;
    if (!qt.row(row_base + hf * 8, h, i)) continue;
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
#endif
}

}  // namespace

bool launch_flash_forward_wgmma(DType dtype, const FwdArgs& a, cudaStream_t stream) {
  if (a.s.hd != kWgmmaHD || !wgmma::available()) return false;
  if (dtype == DType::bf16) {
    launch_query_kernel(flash_forward_wgmma_kernel<__nv_bfloat16>, a, kWgmmaRows, kWgmmaSmem,
                        stream, kWgmmaThreads);
  } else {
    launch_query_kernel(flash_forward_wgmma_kernel<__half>, a, kWgmmaRows, kWgmmaSmem, stream,
                        kWgmmaThreads);
  }
  return true;
}

}  // namespace cg::cuda::flash

namespace cg::cuda {

bool wgmma::available() {
#if defined(CHUNKGRAD_SM90A)
  static const bool ok = [] {
    const char* e = std::getenv("CHUNKGRAD_FLASH_WGMMA");
    if (e != nullptr && std::string(e) == "0") return false;
    int dev = 0, major = 0, minor = 0;
    if (cudaGetDevice(&dev) != cudaSuccess) return false;
    cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev);
    cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev);
    return major == 9 && minor == 0;
  }();
  return ok;
#else
  return false;
#endif
}

bool flash_wgmma_built() {
#if defined(CHUNKGRAD_SM90A)
  return true;
#else
  return false;
#endif
}

const char* flash_forward_kernel_name(DType dtype, int64_t head_dim) {
  const bool flash_dtype = dtype == DType::bf16 || dtype == DType::f16;
  return flash_dtype && head_dim == 128 && wgmma::available() ? "wgmma" : "mma.sync";
}

}  // namespace cg::cuda
