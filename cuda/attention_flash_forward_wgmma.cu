// Why this file exists: the flash attention forward on Hopper's warpgroup MMA (wgmma,
// sm_90a; Note [wgmma] in cuda/wgmma.cuh), head dim 128. Same tiles, key walk, masks and
// online softmax as the mma.sync kernel (attention_flash_forward.cu); only the two GEMMs
// of a key tile change hands, from ldmatrix + mma.sync per warp to one asynchronous MMA
// per warpgroup straight from shared memory.
//
// Note [wgmma forward]: a CTA of one-block tiles holds the same 128 query rows as the
// mma.sync forward, as two warpgroups of 64 (warpgroup g: tile rows 64g .. 64g + 63; in it
// warp w holds rows 16w .. 16w + 15); a dense DFlash CTA holds 192 rows in three (Note
// [Three warpgroups]). Per key tile of 64 keys:
//   S (64 x 64 per warpgroup)  = Q_g K^T : 8 x m64n64k16, A = Q (K-major), B = K (K-major)
//   O (64 x 128 per warpgroup) += P V    : 4 x m64n128k16, A = P (registers), B = V
//                                          (MN-major: V's rows are the keys)
// Q, K and V sit in shared memory in the 128-byte swizzle wgmma reads (no ldmatrix, no
// padding), loaded by cp.async in three key stages; after each load the CTA
// fences the async proxy (the MMA reads shared memory through it) before its barrier.
// A warpgroup whose 64 rows are all past the tile's end (a DFlash tile of 96 virtual
// rows has 32 such rows, in warpgroup 1 -- half of it) still computes: an MMA is issued
// by the whole warpgroup or not at all. Built only for sm_90a (wgmma is not in sm_90's
// base set); elsewhere the mma.sync kernel runs.
// Issuing the next key tile's S before this tile's softmax (FlashAttention-3's overlap
// within a warpgroup: a second score array, four stages) was built and measured slower on
// the H200 (4.94 against 4.07 ms at the drafter's full rule): ptxas put a wait for the MMA
// pipe (WARPGROUP.DEPBAR) between its MMAs, so the next tile's S no longer ran beside the
// softmax. Also slower (2026-12-04, a build with a switch, three alternating rounds, same
// shape): key tile t + 2 loaded after tile t's MMAs are issued instead of after the barrier,
// into a fourth stage: 2.14-2.17 ms against 2.02-2.03 (full rule), 1.76-1.78 against
// 1.66-1.68 (sliding); 166 registers, no spills (the backward's loads moved under its dK
// did pay: Note [Loads under dK] in attention_flash_dkdv.cu). Again after the key plan
// left local memory (Note [Forward instructions]), in case the fourth stage's shared
// memory had squeezed it out of L1: 2.16-2.20 against 1.93-1.94, 1.79-1.85 against
// 1.62-1.63.
//
// Note [Three warpgroups]: with two warpgroups (155 registers, 129 KiB of shared memory) an
// SM runs one CTA, 8 warps, and ncu found the dense DFlash forward bound by latency: 2
// warps a scheduler, 0.57 of them eligible, an instruction issued every 2.5 cycles, the
// tensor pipe 31% busy (the drafter's full rule, 32/8 heads, sorted anchors; 2.91 ms).
// Dense CTAs of 192 rows take a third warpgroup (384 threads, 154 registers under the
// 168 that leaves -- 157 since Note [Forward instructions] -- and 145 KiB): 12 warps an SM, each key tile loaded for 192 rows instead of
// 128, every CTA still full. The forward went from 2.95-2.99 to 2.38-2.39 ms (283 to 350
// TFLOP/s) under the full rule and from 2.46-2.50 to 1.97-1.98 under the sliding rule
// (attention_bench --which dflash,sliding --heads 32/8 --path flash --repeats 5 --anchors
// sorted, two alternating rounds on the H200; CHUNKGRAD_FLASH_FWD_ROWS=128 keeps two
// warpgroups, any other value three; ctest attention_dense_two_warpgroups runs the
// attention tests so). ncu: 0.80 eligible warps a scheduler, one issue every 2.1 cycles. The first
// 256 threads load the key tiles (64 rows of 16 copies do not split over 384); one-block
// tiles keep 128 rows, whose padding a third warpgroup would grow.
//
// Note [Forward instructions]: ncu's SASS view of the dense forward (two warpgroups then,
// full rule) counted about 405 instructions a warp a key tile on the compute path and 186
// more in a loading warp for its 8 copies; 17% of the loop was IMAD. Three things cost
// more than they do: the stages of tiles t and t - 1 as (t + 3) % 3 in 64 bits (a multiply
// by the inverse of 3 and its corrections, twice a tile), which also put the K and V
// descriptors' arithmetic in 64 bits; the warpgroup index, not known to be warp-uniform,
// so that every Q descriptor was a register pair moved to uniform registers (R2UR) before
// its MMA; each copy's address as its own 64-bit product row * stride, under the
// predicate of the row test. Now the stages step along in 32 bits, the warpgroup index is
// lane 0's (broadcast), and a copy's address is the previous one's plus a stride set once.
// And O's rescale (64 multiplies a thread a tile) is skipped when no row of the warp has a
// new maximum: corr is then exactly 1 (set so, not exp2 of a rounding residue). ncu: 796 M
// instructions; the forward 2.105-2.121 ms against 2.37 (full rule), 1.79-1.80 against
// 1.94 (sliding). Last, a masked tile (the anchor's edge, the blocks' keys, and under the
// sliding rule the window's far edge) took about 600 instructions in its per-key tests, a
// branch each; branch-free (mask_dense_scores in attention_flash_dense_rows.cuh) the
// forward took 2.026-2.043 ms (full) and 1.662-1.665 (sliding), three runs in one call
// (attention_bench --which dflash,sliding --heads 32/8 --path flash --repeats 5 --anchors
// sorted, H200). Then the key plan (KeyPlan in attention_flash_common.cuh): its two ranges
// were indexed at run time, which kept the plan in local memory, a 192-byte stack frame a
// thread read at every key tile; indexed by constants the kernel has no stack frame and two
// registers fewer (155): 1.930-1.941 ms against 2.018-2.031 (full), 1.621-1.631 against
// 1.659-1.677 (sliding), three runs in each of two calls a build apart, whose backward, the
// same code, ran 8.26-8.28 and 8.26-8.36 ms (2026-12-04).
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <type_traits>

#include "cuda/attention_flash_common.cuh"
#include "cuda/attention_flash_dense_rows.cuh"
#include "cuda/attention_flash_forward.cuh"
#include "cuda/device_math.cuh"
#include "cuda/wgmma.cuh"

namespace cg::cuda::flash {

namespace {

constexpr int kWgmmaRows = 128;  // query rows per CTA of one-block tiles (as the mma.sync forward)
constexpr int kDenseRows = 192;  // of dense tiles (Note [Three warpgroups])
constexpr int kWgmmaHD = 128;
constexpr uint32_t kKVBytes = kTile * kWgmmaHD * 2;  // 2 column blocks of (64 keys, 64)
constexpr int kStages = 3;  // key tiles in shared memory: t - 1 (its V), t, t + 1 (landing)
[[maybe_unused]] constexpr int kLoadThreads = 256;  // the threads that load a key tile
// A CTA of BM query rows: BM / 64 warpgroups; Q as 2 column blocks of (BM rows, 64).
template <int BM>
constexpr int kThreadsOf = BM / 64 * 128;
template <int BM>
constexpr uint32_t kQBytes = BM* kWgmmaHD * 2;
template <int BM>
constexpr int kSmemOf = kQBytes<BM> + 2 * kStages* kKVBytes + 1024;  // Q, K, V, alignment

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

// Key tile t of the CTA's plan into stage `stage` of sK and sV, by the CTA's first
// kLoadThreads threads (a third warpgroup's threads return). A thread copies the same
// 16 bytes (x = tid % 16) of rows tid / 16 + 16 k, k < 4: rows 16 apart share their
// swizzle (r % 8), so the shared and global addresses step by constants and the only test
// per row is the range end (rows past it are zero-filled from any valid address). Written
// out rather than through load_rows_sw128, whose general loop cost about 25 instructions a
// copy here, 16 copies a thread a tile.
template <typename T, typename Cta>
__device__ inline void load_key_tile_sw128(const Cta& c, const FwdArgs& a, uint32_t sK, uint32_t sV,
                                           int64_t t, int stage) {
  static_assert(kTile * 16 % kLoadThreads == 0 && kLoadThreads % 16 == 0);
  constexpr int kRowStep = kLoadThreads / 16;  // rows between a thread's copies
  if (threadIdx.x >= kLoadThreads) return;
  int64_t j0, jend;
  c.kp.tile(t, j0, jend);
  const int r0 = threadIdx.x / 16, x = threadIdx.x % 16;
  const int rows = static_cast<int>(min(jend - j0, int64_t{kTile}));
  const uint32_t off =
      stage * kKVBytes + (x / 8) * kTile * 128 + wgmma::swizzle128_offset(r0, x % 8);
  // (the row addresses stepped by one 64-bit add each: Note [Forward instructions])
  const T* kp = c.kbase + (j0 + r0) * a.k.ss + x * 8;
  const T* vp = c.vbase + (j0 + r0) * a.v.ss + x * 8;
  const int64_t k_step = int64_t{kRowStep} * a.k.ss, v_step = int64_t{kRowStep} * a.v.ss;
#pragma unroll
  for (int k = 0; k < kTile / kRowStep; ++k) {
    const bool in = r0 + k * kRowStep < rows;
    const uint32_t d = off + k * kRowStep * 128;
    cp_async16(sK + d, in ? static_cast<const void*>(kp) : a.k.data, in);
    cp_async16(sV + d, in ? static_cast<const void*>(vp) : a.v.data, in);
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

// kDense: the DFlash rule's dense tiles (Note [Dense DFlash rows]); else one-block tiles
// (DFlash without kDense) or a head's consecutive rows (none, causal).
template <typename T, bool kDense, int BM>
__global__ void __launch_bounds__(kThreadsOf<BM>, 1) flash_forward_wgmma_kernel(FwdArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if (batch_of_block() >= a.s.B) return;  // Note [Batch grid]
  constexpr int HD = kWgmmaHD, NS = kStages, kThreads = kThreadsOf<BM>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  // The swizzle is a function of the address: every tile starts 1024-byte aligned.
  const uint32_t sQ = (smem_addr(smem_raw) + 1023u) & ~1023u;  // (2, BM, 64)
  const uint32_t sK = sQ + kQBytes<BM>;                        // (NS, 2, kTile, 64)
  const uint32_t sV = sK + NS * kKVBytes;                      // (NS, 2, kTile, 64)
  // (wg broadcast from lane 0: the compiler then knows it warp-uniform and keeps the Q
  // descriptors in uniform registers -- Note [Forward instructions])
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0),
            warp = (threadIdx.x / 32) % 4, lane = threadIdx.x % 32;
  const AttnShape& s = a.s;

  using Cta = std::conditional_t<kDense, DenseCta<T>, QueryCta<T>>;
  const Cta cta = [&] {
    if constexpr (kDense) {
      return dense_cta_of<T>(a, BM);
    } else {
      return query_cta_of<T>(a, BM);  // Note [Query CTA prologue]
    }
  }();
  auto row_of = [&](int r, int64_t& h, int64_t& i) {
    if constexpr (kDense) {
      return cta.rows.row(r, h, i);
    } else {
      return cta.qt.row(r, h, i);
    }
  };
  // Q with key tile 0 (one group), then key tile 1 (the next); wait for the first.
  const int64_t b = cta.b;
  const int ntiles = static_cast<int>(cta.key_tiles);  // < 2^31: keys < 2^37
  load_rows_sw128<T, BM, kThreads>(sQ, a.q.data, [&](int r) -> const T* {
    int64_t h = 0, i = 0;
    return row_of(r, h, i) ? query_row<T>(a.q, b, h, i) : nullptr;
  });
#pragma unroll
  for (int t = 0; t < NS - 1; ++t) {
    if (t < ntiles) load_key_tile_sw128<T>(cta, a, sK, sV, t, t);
    cp_async_commit();
  }
  // The V stage "before" tile 0 (stage NS - 1) holds zeros: the first step's P V (P = 0)
  // adds nothing and every step issues the same MMAs (no branch around them, which would
  // serialize them).
  for (int c = threadIdx.x; c < static_cast<int>(kKVBytes / 16); c += kThreads) {
    asm volatile(
        "st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(sV + (NS - 1) * kKVBytes + c * 16),
        "r"(0u));
  }
  // Tile 0 (and Q) have landed; the loop loads tile t + 2: both are for three stages.
  static_assert(NS == 3);
  asm volatile("cp.async.wait_group 1;\n" ::: "memory");

  wgmma::fence_proxy_async();
  __syncthreads();

  // This thread's rows: tile row 64 wg + 16 warp + lane / 4 + 8 hf (hf = 0, 1).
  const int row_base = 64 * wg + 16 * warp + lane / 4;
  int64_t hw, iw;
  const bool wg_active = row_of(64 * wg, hw, iw);  // valid rows are a prefix
  ForwardMasks<kDense> masks;
  if constexpr (kDense) {
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      int block = 0, slot = 0;
      int64_t h = 0, i = 0;
      if (cta.rows.row(row_base + hf * 8, block, slot, h, i))
        masks.rk[hf] = dflash_row_keys(a.m, b, block, slot);
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
#pragma unroll
    for (int hf = 0; hf < 2; ++hf) {
      int64_t h = 0, i = 0;
      cta.qt.row(row_base + hf * 8, h, i);
      masks.ir[hf] = static_cast<int>(i);
    }
    masks.causal = causal_rule(s, a.m);
    masks.sliding = cta.sliding;
    int64_t fh;
    cta.qt.row(0, fh, masks.first_i);
  }

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
  // The stages of key tiles t and t - 1, stepped along (Note [Forward instructions]).
  int stage = 0, prev_stage = NS - 1;

  float sc[kTile / 2] = {};
  for (int t = 0; t < ntiles; ++t) {
    if (wg_active) {
      wgmma::fence_operands(sc);
      wgmma::fence_operands(o);
      wgmma::fence();
      issue_scores<T, BM>(sc, q_slice, sK + stage * kKVBytes);
      wgmma::commit();
      // O += P V of the previous tile (at t = 0: P and the V stage are zeros).
      issue_pv<T>(o, pa, sV + prev_stage * kKVBytes);
      wgmma::commit();
      wgmma::wait<1>();
      wgmma::fence_operands(sc);
      int64_t j0, jend;
      cta.kp.tile(t, j0, jend);
      masks.apply(sc, j0, jend, lane);
      float corr[2];
      online_softmax(sc, mrow, lrow, corr, a.scale_log2);
      // The previous tile's P V is done: O and pa may be touched again.
      wgmma::wait<0>();
      wgmma::fence_operands(o);
      fence_fragment(pa);
      rescale_and_pack<T>(o, corr, sc, pa);
    }
    // Key tile t + 1 has landed (everyone's copies, for the async proxy); every read of
    // stage t - 1 is done, so tile t + 2 may load there.
    cp_async_wait_all();
    wgmma::fence_proxy_async();
    __syncthreads();
    if (t + 2 < ntiles) load_key_tile_sw128<T>(cta, a, sK, sV, t + 2, prev_stage);
    cp_async_commit();
    prev_stage = stage;
    stage = stage == NS - 1 ? 0 : stage + 1;
  }
  if (wg_active && ntiles > 0) {  // the last tile's P V
    wgmma::fence_operands(o);
    wgmma::fence();
    issue_pv<T>(o, pa, sV + prev_stage * kKVBytes);
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
#endif
}

// Dense DFlash tiles where they pay (Note [Dense DFlash rows]) unless CHUNKGRAD_FLASH_DENSE=0
// (for measuring against one-block tiles).
template <typename T>
void launch_typed(const FwdArgs& a, cudaStream_t stream) {
  static const bool dense_on = [] {
    const char* e = std::getenv("CHUNKGRAD_FLASH_DENSE");
    return e == nullptr || std::string(e) != "0";
  }();
  if (!dense_on || !dense_rows_pay(a.s, a.m)) {
    constexpr int BM = kWgmmaRows;
    launch_query_kernel(flash_forward_wgmma_kernel<T, false, BM>, a, BM, kSmemOf<BM>, stream,
                        kThreadsOf<BM>);
    return;
  }
  static const bool three = [] {
    const char* e = std::getenv("CHUNKGRAD_FLASH_FWD_ROWS");
    return e == nullptr || std::string(e) != "128";
  }();
  // Note [Dense DFlash rows]: blockIdx.x = tile * Hkv + kv head.
  auto launch = [&]<int BM>() {
    auto* kernel = flash_forward_wgmma_kernel<T, true, BM>;
    const dim3 grid = batch_grid(dense_tiles(a.s, a.m, BM) * a.s.Hkv, a.s.B);
    CG_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemOf<BM>));
    kernel<<<grid, kThreadsOf<BM>, kSmemOf<BM>, stream>>>(a);
    CG_CUDA_CHECK(cudaGetLastError());
  };
  if (three) {
    launch.template operator()<kDenseRows>();
  } else {
    launch.template operator()<kWgmmaRows>();
  }
}

}  // namespace

bool launch_flash_forward_wgmma(DType dtype, const FwdArgs& a, cudaStream_t stream) {
  if (a.s.hd != kWgmmaHD || !wgmma::available()) return false;
  if (dtype == DType::bf16) {
    launch_typed<__nv_bfloat16>(a, stream);
  } else {
    launch_typed<__half>(a, stream);
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
