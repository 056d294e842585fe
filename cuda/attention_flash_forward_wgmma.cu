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
// padding), the key tiles loaded by a warp of their own into four stages (Note [Forward
// loading warp]); whoever copies fences the async proxy (the MMA reads shared memory
// through it) before it signals the copy done.
// A warpgroup whose 64 rows are all past the tile's end (a DFlash tile of 96 virtual
// rows has 32 such rows, in warpgroup 1 -- half of it) still computes: an MMA is issued
// by the whole warpgroup or not at all. Built only for sm_90a (wgmma is not in sm_90's
// base set); elsewhere the mma.sync kernel runs.
// Issuing the next key tile's S before this tile's softmax (FlashAttention-3's overlap
// within a warpgroup: a second score array, four stages) was built and measured slower on
// the H200 (4.94 against 4.07 ms at the drafter's full rule): ptxas put a wait for the MMA
// pipe (WARPGROUP.DEPBAR) between its MMAs, so the next tile's S no longer ran beside the
// softmax. Also slower in the kernel of a barrier per key tile that came before Note
// [Forward loading warp] (2026-12-04, a build with a switch, three alternating rounds, same
// shape): key tile t + 2 loaded by the compute warps after tile t's MMAs are issued instead
// of after the barrier, into a fourth stage: 2.14-2.17 ms against 2.02-2.03 (full rule), 1.76-1.78 against
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
// 168 that leaves -- 155 since Note [Forward instructions], 152 under Note [Forward loading
// warp] -- and 145 KiB): 12 warps an SM, each key tile loaded for 192 rows instead of 128,
// every CTA still full. The forward went from 2.95-2.99 to 2.38-2.39 ms (283 to 350
// TFLOP/s) under the full rule and from 2.46-2.50 to 1.97-1.98 under the sliding rule
// (attention_bench --which dflash,sliding --heads 32/8 --path flash --repeats 5 --anchors
// sorted, two alternating rounds on the H200; CHUNKGRAD_FLASH_FWD_ROWS=128 keeps two
// warpgroups, any other value three; ctest attention_dense_two_warpgroups runs the
// attention tests so). ncu: 0.80 eligible warps a scheduler, one issue every 2.1 cycles.
// (The first 256 threads loaded the key tiles then; now a warp of its own does: Note
// [Forward loading warp].) One-block tiles keep 128 rows, whose padding a third warpgroup
// would grow.
//
// Note [Forward instructions]: ncu's SASS view of the dense forward (two warpgroups then,
// full rule) counted about 405 instructions a warp a key tile on the compute path and 186
// more in a warp of the 256 threads that then loaded for its 8 copies; 17% of the loop was IMAD. Three things cost
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
#include "cuda/attention_flash_forward_steps.cuh"
#include "cuda/device_math.cuh"
#include "cuda/mbarrier.cuh"
#include "cuda/wgmma.cuh"

namespace cg::cuda::flash {

namespace {

using namespace forward_wgmma;  // (cuda/attention_flash_forward_steps.cuh)

// Note [Forward loading warp]: until 2026-12-04 the compute warps loaded the key tiles
// themselves (cp.async, three stages) and a barrier of the whole CTA closed every key tile,
// so that the warpgroups issued their MMAs at the same time and ran their softmax at the
// same time, the tensor pipe idle while the last one finished (ncu, dense full rule: 27% of
// the warp samples at that barrier or at the waits for MMAs, the tensor pipe 48% busy).
// Now a warp of a fourth warpgroup loads, and the warpgroups meet only through shared-memory
// barriers (cuda/mbarrier.cuh), so each may run ahead of the slowest:
//   key tile u lives in stage (u + 1) % NS (stage 0 first holds the zero V of "tile -1");
//   full[s]: the loading warp's 32 lanes arrive once their copies of the tile in s have
//     landed (cp.async.wait_group a tile later, then the proxy fence for wgmma);
//   empty[s]: each consumer warp arrives once its P V of the tile in s is done, in step t
//     for tile t - 1 (the first arrival on stage 0 releases the zero V); the loading warp
//     fills stage s again only after every consumer warp has released it;
//   NS = 4, so that a tile's arrival, posted when the next tile's copies are issued, waits
//     for no warpgroup but the slowest two tiles back.
// Registers are granted a warpgroup at a time (one more warp alone cost 128 threads'
// registers: the launch failed), so the loading warpgroup gives back all but
// kLoaderRegisters a thread (setmaxnreg) and the consumers take them: 152 a thread with
// three warpgroups, 224 with two. And the warpgroups take turns to issue their MMAs
// (kPingpong, as FlashAttention-3's forward does), so that one's softmax runs under the
// others' MMAs. H200, 32/8 heads, 1024 x 24 over 4096 keys, bf16, sorted anchors
// (attention_bench --which dflash,sliding --heads 32/8 --path flash --repeats 5 --anchors
// sorted; three alternating rounds of a build with a switch for each step, one call each):
// the loading warp took the forward from 1.939-1.949 ms to 1.800-1.811 (full rule) and
// from 1.580-1.605 to 1.481-1.507 (sliding); the turns from 1.817-1.826 to 1.780-1.803 and
// from 1.511-1.524 to 1.477-1.496. CHUNKGRAD_FLASH_FWD_PINGPONG=0 drops the turns.
constexpr int kStages = 4;
template <int BM>
constexpr int kCtaThreads = kThreadsOf<BM> + 128;  // the consumers and the loading warpgroup
constexpr int kLoaderRegisters = 56;
// What setmaxnreg has to share: every thread starts with the launch's registers (the file's
// 64 K over the CTA's threads, in units of 8); the consumers take what the loading
// warpgroup gives back. (Asking for more than the pool holds would block setmaxnreg.inc
// for ever.)
template <int BM>
constexpr int kRegisterPool = 65536 / kCtaThreads<BM> / 8 * 8 * kCtaThreads<BM>;
template <int BM>
constexpr int kConsumerRegisters = (kRegisterPool<BM> - 128 * kLoaderRegisters) / kThreadsOf<BM> /
                                   8 * 8;
static_assert(kConsumerRegisters<kDenseRows> == 152 && kConsumerRegisters<kWgmmaRows> == 224,
              "the registers Note [Forward loading warp] states");
template <int BM>
constexpr int kSmemOf = kQBytes<BM> + 2 * kStages* kKVBytes + 1024 + 2 * kStages * 8;

// kDense: the DFlash rule's dense tiles (Note [Dense DFlash rows]); else one-block tiles
// (DFlash) or a head's consecutive rows (none, causal). BM query rows in BM / 64 consumer
// warpgroups, then the loading warpgroup (Note [Forward loading warp]).
// kPingpong: the warpgroups issue their MMAs in turn (FlashAttention-3's ping-pong, over
// BM / 64 warpgroups): warpgroup g waits on named barrier 1 + g before issuing a key tile's
// MMAs and, once issued, lets the next one go (bar.arrive), so that one warpgroup's softmax
// runs under the others' MMAs.
template <typename T, bool kDense, int BM, bool kPingpong>
__global__ void __launch_bounds__(kCtaThreads<BM>, 1) flash_forward_wgmma_kernel(FwdArgs a) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  if (batch_of_block() >= a.s.B) return;  // Note [Batch grid]
  constexpr int HD = kWgmmaHD, NS = kStages, kConsumers = kThreadsOf<BM>;
  extern __shared__ __align__(1024) unsigned char smem_raw[];
  const uint32_t sQ = (smem_addr(smem_raw) + 1023u) & ~1023u;  // (2, BM, 64)
  const uint32_t sK = sQ + kQBytes<BM>;                        // (NS, 2, kTile, 64)
  const uint32_t sV = sK + NS * kKVBytes;                      // (NS, 2, kTile, 64)
  const uint32_t full = sV + NS * kKVBytes;                    // NS barriers of 8 bytes
  const uint32_t empty = full + NS * 8;                        // NS more
  const int lane = threadIdx.x % 32;
  const bool loading = threadIdx.x >= kConsumers;  // the last warpgroup (its first warp loads)
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
  const int64_t b = cta.b;
  const int ntiles = static_cast<int>(cta.key_tiles);  // < 2^31: keys < 2^37
  if (threadIdx.x == 0) {
    for (int st = 0; st < NS; ++st) {
      mbar::init(full + 8 * st, 32);
      mbar::init(empty + 8 * st, kConsumers / 32);
    }
  }
  if (threadIdx.x / 32 == kConsumers / 32) {  // the loading warp: tile 0
    if (ntiles > 0) load_key_tile_warp<T>(cta, a, sK, sV, 0, 1, lane);
    cp_async_commit();
  } else if (!loading) {
    load_rows_sw128<T, BM, kConsumers>(sQ, a.q.data, [&](int r) -> const T* {
      int64_t h = 0, i = 0;
      return row_of(r, h, i) ? query_row<T>(a.q, b, h, i) : nullptr;
    });
    cp_async_commit();
    // The V stage "before" tile 0 (stage 0) holds zeros: the first step's P V (P = 0) adds
    // nothing and every step issues the same MMAs (no branch around them, which would
    // serialize them).
    for (int c = threadIdx.x; c < static_cast<int>(kKVBytes / 16); c += kConsumers) {
      asm volatile("st.shared.v4.u32 [%0], {%1, %1, %1, %1};\n" ::"r"(sV + c * 16), "r"(0u));
    }
    cp_async_wait_all();
    wgmma::fence_proxy_async();
  }
  __syncthreads();  // the barriers are initialized, Q and the zero V stage are in place

  if (loading) {
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(kLoaderRegisters));
    if (threadIdx.x >= kConsumers + 32) return;
    for (int u = 1; u < ntiles; ++u) {
      const int st = (u + 1) % NS;
      if (u >= NS - 1) mbar::wait(empty + 8 * st, ((u + 1) / NS - 1) & 1);
      load_key_tile_warp<T>(cta, a, sK, sV, u, st, lane);
      cp_async_commit();
      asm volatile("cp.async.wait_group 1;\n" ::: "memory");  // tile u - 1 has landed
      wgmma::fence_proxy_async();
      mbar::arrive(full + 8 * (u % NS));
    }
    if (ntiles > 0) {
      cp_async_wait_all();
      wgmma::fence_proxy_async();
      mbar::arrive(full + 8 * (ntiles % NS));
    }
    return;
  }

  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(kConsumerRegisters<BM>));
  // (wg broadcast from lane 0: the compiler then knows it warp-uniform and keeps the Q
  // descriptors in uniform registers -- Note [Forward instructions])
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0),
            warp = (threadIdx.x / 32) % 4;
  const int row_base = 64 * wg + 16 * warp + lane / 4;
  int64_t hw, iw;
  const bool wg_active = row_of(64 * wg, hw, iw);  // valid rows are a prefix
  const ForwardMasks<kDense> masks = forward_masks_of<kDense>(cta, a, row_base, lane);
  float o[HD / 2];  // o[4n + e]: column 8n + 2 (lane % 4) + e % 2, row hf = e / 2
  float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
#pragma unroll
  for (int n = 0; n < HD / 2; ++n) o[n] = 0.f;
  const uint32_t q_slice = sQ + wg * 64 * 128;
  uint32_t pa[kTile / 16][4];  // P of the previous tile (Note [wgmma forward])
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0u;
  // Tile t's stage and tile t - 1's, stepped along; the phase parity of tile t's filling.
  int stage = 1, prev_stage = 0;
  uint32_t parity = 0;
  constexpr int kGroups = BM / 64;
  if (kPingpong && wg == kGroups - 1 && ntiles > 0) {  // the first turn is warpgroup 0's
    asm volatile("bar.arrive 1, 256;\n" ::: "memory");
  }
  float sc[kTile / 2] = {};
  for (int t = 0; t < ntiles; ++t) {
    mbar::wait(full + 8 * stage, parity);
    if constexpr (kPingpong) asm volatile("bar.sync %0, 256;\n" ::"r"(1 + wg) : "memory");
    // (then the next warpgroup's turn: its tile t, or for the last one tile t + 1)
    [[maybe_unused]] const bool pass_turn = wg < kGroups - 1 || t + 1 < ntiles;
    if (wg_active) {
      wgmma::fence_operands(sc);
      wgmma::fence_operands(o);
      wgmma::fence();
      issue_scores<T, BM>(sc, q_slice, sK + stage * kKVBytes);
      wgmma::commit();
      issue_pv<T>(o, pa, sV + prev_stage * kKVBytes);  // (at t = 0: P and the V stage are 0)
      wgmma::commit();
      if (kPingpong && pass_turn) {
        asm volatile("bar.arrive %0, 256;\n" ::"r"(1 + (wg + 1) % kGroups) : "memory");
      }
      wgmma::wait<1>();
      wgmma::fence_operands(sc);
      int64_t j0, jend;
      cta.kp.tile(t, j0, jend);
      masks.apply(sc, j0, jend, lane);
      float corr[2];
      online_softmax(sc, mrow, lrow, corr, a.scale_log2);
      wgmma::wait<0>();
      wgmma::fence_operands(o);
      fence_fragment(pa);
      rescale_and_pack<T>(o, corr, sc, pa);
    } else if (kPingpong && pass_turn) {
      asm volatile("bar.arrive %0, 256;\n" ::"r"(1 + (wg + 1) % kGroups) : "memory");
    }
    __syncwarp();
    if (lane == 0) mbar::arrive(empty + 8 * prev_stage);  // tile t - 1 is read
    prev_stage = stage;
    stage = stage == NS - 1 ? 0 : stage + 1;
    if (stage == 1) parity ^= 1u;  // (tile t + 1 starts the next round of the stages)
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
  store_forward_rows<T>(a, b, o, mrow, lrow, row_base, lane, row_of);
#endif
}

// kDense: the DFlash rule's dense tiles (Note [Dense DFlash rows]) where they pay, unless
// CHUNKGRAD_FLASH_DENSE=0 (for measuring against one-block tiles); else one-block tiles
// (DFlash) or a head's consecutive rows (none, causal).
template <typename T>
void launch_typed(const FwdArgs& a, cudaStream_t stream) {
  static const bool dense_on = [] {
    const char* e = std::getenv("CHUNKGRAD_FLASH_DENSE");
    return e == nullptr || std::string(e) != "0";
  }();
  // Note [Forward loading warp]: CHUNKGRAD_FLASH_FWD_PINGPONG=0 lets the warpgroups issue
  // in any order (read once; for benchmarks).
  static const bool pingpong = [] {
    const char* e = std::getenv("CHUNKGRAD_FLASH_FWD_PINGPONG");
    return e == nullptr || std::string(e) != "0";
  }();
  auto kernel_of = [&]<bool kDense, int BM>() {
    return pingpong ? flash_forward_wgmma_kernel<T, kDense, BM, true>
                    : flash_forward_wgmma_kernel<T, kDense, BM, false>;
  };
  if (!dense_on || !dense_rows_pay(a.s, a.m)) {
    constexpr int BM = kWgmmaRows;
    launch_query_kernel(kernel_of.template operator()<false, BM>(), a, BM, kSmemOf<BM>, stream,
                        kCtaThreads<BM>);
    return;
  }
  static const bool three = [] {
    const char* e = std::getenv("CHUNKGRAD_FLASH_FWD_ROWS");
    return e == nullptr || std::string(e) != "128";
  }();
  // Note [Dense DFlash rows]: blockIdx.x = tile * Hkv + kv head.
  auto launch = [&]<int BM>() {
    auto* kernel = kernel_of.template operator()<true, BM>();
    const dim3 grid = batch_grid(dense_tiles(a.s, a.m, BM) * a.s.Hkv, a.s.B);
    CG_CUDA_CHECK(
        cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, kSmemOf<BM>));
    kernel<<<grid, kCtaThreads<BM>, kSmemOf<BM>, stream>>>(a);
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
