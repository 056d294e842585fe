// Why this file exists: the dk/dv pass of the flash attention backward (the overview is
// in attention_flash_backward.cu): a CTA per 64 keys of one kv head (128: Note [128-key
// CTAs]) walks every query tile that sees them (Note [Flash tiles]), across the query heads
// of its GQA group, so each dk/dv row is written once, without atomics: S^T = K Q^T,
// P^T = exp(S^T scale - lse), dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - delta),
// dK += dS^T Q; under DFlash masks also dq += dS K into an fp32 buffer by bulk reductions
// or atomics (Note [Fused dq]). The kernel is in attention_flash_dkdv_kernel.cuh; this file
// chooses its variant and launches it.
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>

#include "core/error.h"
#include "cuda/attention_flash_backward.cuh"
#include "cuda/attention_flash_common.cuh"
#include "cuda/attention_flash_dkdv_kernel.cuh"
#include "cuda/attention_flash_key_tiles.cuh"
#include "cuda/attention_kernels.h"
#include "cuda/compute_stream.h"
#include "cuda/cuda_check.h"

namespace cg::cuda::flash {

namespace {

// Note [dk/dv query tiles]: the pass walks query tiles of QT rows. A DFlash block packs
// group * block_size rows (Note [Flash tiles]); when that is a multiple of 32 but not of
// 64 -- 4 x 24 = 96 in the 27B-class drafter -- 64-row tiles leave a third of the second
// tile empty, so 32-row tiles are taken (less shared memory too: three CTAs a
// multiprocessor instead of two). CHUNKGRAD_FLASH_DKDV_ROWS=32 or 64 forces one size (read
// once; for benchmarks).
int dkdv_query_rows(const AttnShape& s, const AttnMaskArgs& m) {
  static const int forced = [] {
    const char* e = std::getenv("CHUNKGRAD_FLASH_DKDV_ROWS");
    const std::string v = e != nullptr ? e : "";
    return v == "32" ? 32 : v == "64" ? 64 : 0;
  }();
  if (forced != 0) return forced;
  if (m.kind != AttnMaskKind::dflash) return 64;
  const int64_t packed = (s.Hq / s.Hkv) * m.block_size;
  return packed % 64 != 0 && packed % 32 == 0 ? 32 : 64;
}

// Note [dk/dv stages]: the query tiles stream through NS shared-memory stages (cp.async),
// loads issued NS - 1 tiles ahead of the math (NS - 2 with the dq behind, at the end of a
// step: Note [Loads under dK]), one barrier per tile. The pass holds two
// CTAs a multiprocessor by registers (about 240 a thread at hd 128; 8 warps). With the fused
// dq a third stage is the default where two CTAs of it still fit a multiprocessor's shared
// memory (at hd 128: groups of up to 128 packed rows, or past the row table's 512; in
// between, the table makes three stages one CTA a multiprocessor, and two stay): once the
// dq additions went one bulk reduction a warp (Note [dq tile order]), ncu's largest single
// stall was the wait for the next tile's Q and dO (7% of the warp samples, at the cp.async
// wait before the barrier), and loading two tiles ahead took the backward from 11.63 to
// 10.53 ms (full rule) and 9.25 to 8.74 (sliding, W 2048; H200, 32/8 heads, 1024 x 24 over
// 4096 keys, bf16, medians of three alternating runs in one call). Without the fused dq
// (dk and dv only) three stages measured the same as two (7.64 vs 7.59 ms, 6.33 vs 6.37),
// so two stay there. CHUNKGRAD_FLASH_DKDV_STAGES=2 or 3 forces the count at QT = 32 (read
// once; for benchmarks).

// The forced stage count (Note [dk/dv stages]): 2, 3, or 0 when not forced.
int forced_dkdv_stages() {
  static const int forced = [] {
    const char* e = std::getenv("CHUNKGRAD_FLASH_DKDV_STAGES");
    const std::string v = e != nullptr ? e : "";
    return v == "2" ? 2 : v == "3" ? 3 : 0;
  }();
  return forced;
}

// A device's shared-memory limits in bytes, asked of the driver once per device (the
// backward's launches consult them at every call).
struct SmemLimits {
  int per_sm = 0, reserved = 0, per_block = 0;
};
const SmemLimits& smem_limits() {
  static std::once_flag once[kMaxDevices];
  static SmemLimits limits[kMaxDevices];
  int dev = 0;
  CG_CUDA_CHECK(cudaGetDevice(&dev));
  CG_CHECK(dev >= 0 && dev < kMaxDevices, "flash dk/dv: device index ", dev,
           " is out of range [0, ", kMaxDevices, ")");
  std::call_once(once[dev], [dev] {
    SmemLimits& l = limits[dev];
    CG_CUDA_CHECK(
        cudaDeviceGetAttribute(&l.per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev));
    CG_CUDA_CHECK(
        cudaDeviceGetAttribute(&l.reserved, cudaDevAttrReservedSharedMemoryPerBlock, dev));
    CG_CUDA_CHECK(
        cudaDeviceGetAttribute(&l.per_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  });
  return limits[dev];
}

// Whether `ctas` CTAs of `bytes` of dynamic shared memory each fit a multiprocessor of the
// current device (and one CTA the per-block limit).
bool ctas_fit(int ctas, int bytes) {
  const SmemLimits& l = smem_limits();
  return ctas * (bytes + l.reserved) <= l.per_sm && bytes <= l.per_block;
}

// Note [wgmma dk/dv]: on Hopper (wgmma::available()) at head dim 128 the pass's four GEMMs
// -- S^T = K Q^T, dP^T = V dO^T (m64 x QT x 16, both operands from shared memory), dV +=
// P^T dO, dK += dS^T Q (m64 x 128 x 16, P^T and dS^T from registers) -- are warpgroup MMAs:
// the CTA's 4 warps are one warpgroup and its 64 keys the MMA's 64 rows, so the fragments
// are those of the mma.sync kernel (Note [wgmma]) and everything around the GEMMs stays.
// K, V, Q and dO sit in the 128-byte swizzle; the fused dq's ldmatrix reads K through it.
// An MMA is issued by all four warps or none: a tile is computed when any warp has a
// visible key, and a warp with none sets its P to 0 (the mma.sync kernel's dead warps skip
// instead, Note [Dead warp tiles]). The default also overlaps (variant 2, as
// FlashAttention-3's backward does): S^T and dP^T are issued together and P^T is formed
// while dP^T runs; dV += P^T dO runs while dS^T is formed; dK += dS^T Q runs under the
// fused dq, waited at the tile's end. CHUNKGRAD_FLASH_DKDV_WGMMA=0 keeps mma.sync, =1 the
// wgmma kernel without the overlap (read once; for benchmarks).
// (The first version of what is now Note [wgmma dq], the default since 2026-12-05.)
// Measured and dropped (2026-12-03): the fused dq's own GEMM on the warpgroup MMA too, taken
// transposed (dq^T = K^T dS^T: 8 m64n32k16 a warpgroup, K read MN-major where it lies, dS
// stored by stmatrix .trans into a swizzled 32 x 128 tile; the product staged in shared
// memory and added by one bulk reduction a warpgroup and 16-row half). It passed the
// attention tests, but with 128-key CTAs (H200, 32/8 heads, 1024 x 24 over 4096 keys,
// sorted anchors; a build with a switch between the two, three alternating rounds in one
// call) the backward took 10.65-10.75 ms against 10.27-10.38 (full rule) and 9.19-9.20
// against 9.24-9.28 (sliding). That was with dK issued after the dq's MMAs, so that it runs
// under the staging; the first version, dK issued before them, measured 10.71-10.82 against
// 10.29-10.39. Leaving the dq's MMAs in flight into the next tile made ptxas serialize
// every wgmma of the kernel (C7514: "wgmma.mma_async instructions are serialized due to
// non wgmma instructions reading accumulator registers of a wgmma between start and end of
// the pipeline stage").
int dkdv_wgmma(int64_t hd) {
  static const int mode = [] {
    const char* e = std::getenv("CHUNKGRAD_FLASH_DKDV_WGMMA");
    const std::string v = e != nullptr ? e : "";
    return v == "0" ? 0 : v == "1" ? 1 : 2;
  }();
  return hd == 128 && wgmma::available() ? mode : 0;
}

// Note [Fused dq]: under a DFlash mask, when dq and dk/dv are both wanted, dq is taken
// inside the dk/dv pass instead of in a pass of its own (FlashAttention-2's way): after a
// warp has dS^T for its 16 keys and the tile's QT = 32 rows, it stores it to shared memory
// (keys by rows); after a barrier each warp multiplies a 16-row x HD/2 quarter of dS
// (32 rows x 64 keys) by the CTA's K and adds the product into an fp32 dq buffer in scratch
// (Notes [dq bulk reduce], [dq first writers]); a last kernel writes dq = scale * buffer.
// That drops the dq pass's own walk over the keys, which recomputed S and dP (two of its
// three GEMMs), for one GEMM, one barrier and the additions per (key tile, query tile). The
// additions' order varies, so dq may differ in the last bits from run to run (dk, dv do
// not; the causal and unmasked rules keep the two deterministic passes). H200, 32/8 heads,
// 1024 x 24 over 4096 context keys, bf16 hd 128, fwd + bwd (bench/attention_bench): full
// rule 29.24 -> 21.10 ms, sliding (W 2048) 24.68 -> 18.44 ms, in one run. The extra fp32
// buffer is dq's size in fp32 with every block's group * block_size rows padded to whole
// 32-row tiles (Note [dq tile order]; 403 MB at that shape) while the backward runs.
// CHUNKGRAD_FLASH_FUSED_DQ=0 keeps the dq pass (read once; for benchmarks).

// Note [Descriptors once a tile]: the pass is bound by issued instructions (2 warps a
// scheduler, about one issue every 2.6 cycles), so integer work between its MMAs is time.
// ncu's SASS view of the 128-key context grid (H200, 32/8 heads, 1024 x 24 over 4096 keys,
// sliding rule, sorted anchors; 2026-12-04) counted about 1150 instructions a warp a (key
// tile, query tile) step, over half of them integer: 283 in the block of the 20 MMAs, each
// descriptor built from its own address (shift, mask, or, the constant high word, moves to
// uniform registers); 134 deciding whether any of the CTA's 8 warps has a visible key (a
// loop of 64-bit compares); 97 forming P (exp2f's range test and two multiplies around each
// MUFU.EX2, lse * log2 e per element); 83 finding the tile's place in the dq buffer (a
// division recomputed each step). Now a GEMM builds its two descriptors once and advances
// them by a 32-bit add (wgmma::desc_advance), the live-warp test is a closed form, each
// thread scales its 8 rows' lse once and P is one fma and a bare ex2.approx.ftz
// (fast_exp2), and the dq tile's place takes the walk's tile count. The context grid went
// from 2.88 to 2.26 G instructions (full rule 3.46 to 2.80 G) and, at ncu's clocks, from
// 10.76 to 9.15 ms (12.20 to 10.85); the backward (bench/attention_bench --anchors sorted,
// one call each) from 10.17-10.19 to 8.95-8.99 ms under the full rule and from 9.04 to
// 7.69-7.76 under the sliding rule. The forward's wgmma kernel took the same descriptors
// and exp2 and moved little (2.92-2.96 ms against 2.99-3.00). That left about 900 a warp
// a step: 209 in the fused dq's block (32 HMMA and 24 LDSM among swizzled addresses), 192
// in the MMAs' (each descriptor moved to uniform registers: K's and V's depend on the
// warpgroup), about 190 loading the next Q and dO tile. Then a thread loading a query
// tile took two chunks of one row instead of one chunk of two rows (half the row lookups
// and their 64-bit sums) and the warpgroup index is broadcast from lane 0 (so that it is
// known to be warp-uniform: cuobjdump then finds 15 R2UR in the kernel for its 20 HGMMA),
// in one build: the grid 2.00 G instructions (full rule 2.54 G), 8.44 ms at ncu's clocks
// (10.45), the blocks' own key CTAs 574 us (511); the backward 7.14-7.24 ms (8.72-8.74),
// and the sliding rule's forward + backward rate 0.896-0.906x the full rule's (seven runs
// over two calls).

// Note [dq first writers]: with 128-key CTAs (Note [128-key CTAs]) the blocks' own key CTAs run as
// a grid of their own before the context's, and when a block's keys fit one 64-key tile (block_size
// <= 64) each (batch row, block, kv head) is one CTA, which visits every query tile of its block --
// every row of an active block sees some of its own keys -- and whose four warps split each 32-row
// tile's dq into disjoint pieces. Those CTAs are then the first and only writers of their blocks'
// rows of the fp32 dq buffer: they store their products (BwdArgs::dq_store) instead of adding them,
// the context CTAs add on top, and the buffer needs no memset (403 MB at the 27B-class step's
// shape). The rows of a padded block (anchor -1) nobody writes; dq_from_acc gives them 0 without
// reading them. H200, that shape (Note [The backward's other kernels]): the block CTAs 651 us
// against 674 (ncu), the backward 10.14-10.23 ms against 10.22-10.30. CHUNKGRAD_FLASH_DQ_STORE=0
// keeps the memset and the additions (read once; for benchmarks).
bool dq_first_writers(const BwdArgs& a) {
  static const bool off = [] {
    const char* e = std::getenv("CHUNKGRAD_FLASH_DQ_STORE");
    return e != nullptr && std::string(e) == "0";
  }();
  return !off && a.m.block_size <= kTile;
}

// Note [128-key CTAs]: with the overlapped wgmma kernel and the fused dq, a CTA of two
// warpgroups takes 128 context keys (each warpgroup's 64 keys its MMAs' rows, as before),
// both walking the same query tiles: a tile's Q, dO, lse and delta are loaded once for 128
// keys instead of 64, and its dq product (32 rows x HD, dS over all 128 keys times their K,
// split over the 8 warps) is added to the fp32 buffer once instead of twice. The blocks'
// own keys (24 a block in the 27B-class step) stay in 64-key CTAs of one warpgroup,
// launched first as a grid of their own. 256 threads at about 250 registers hold one CTA a
// multiprocessor, whose shared memory then has room for three query-tile stages (about
// 160 KB; 165 KB with the wgmma dq's two staging buffers, Note [dq staging twice]), taken
// wherever they fit. Both warpgroups compute a tile when either has a visible key (Note
// [wgmma dk/dv]): when that choice was each warpgroup's own, ptxas serialized every wgmma
// of the kernel (C7518, "program dependence on compiler-inserted WG.DP in divergent
// path"), and this CTA measured slower than two of 64 keys (12.44
// against 11.87 ms; 11.47 with two stages against 10.53 with three of 64 keys). Without
// the serialization, H200, 32/8 heads, 1024 x 24 over 4096 keys, bf16, the trainer's
// sorted anchors (bench/attention_bench --anchors sorted), four calls: backward 10.25-10.71
// ms against 10.99-11.22 with 64-key CTAs of three stages (full rule), 9.20-9.53 against
// 9.34-9.49 (sliding, W 2048); with two stages 11.05-11.07 and 9.84. With shuffled anchors
// (one call) 10.21 against 10.60 (full) but 9.10 against 8.76 (sliding). The step
// (drafter_step_bench) 751.8 ms against 762.0. CHUNKGRAD_FLASH_DKDV_KEYS=64 keeps 64-key
// CTAs (read once; for benchmarks); CHUNKGRAD_FLASH_DKDV_STAGES applies to the 128-key
// CTAs, while the blocks' own 64-key CTAs beside them keep two stages (they walk about
// three query tiles each; that is how the numbers above were measured). Those block CTAs
// (8192 at that shape, 24 keys each) cost about 0.55 ms of the 10.3 ms backward (Note [The
// backward's other kernels] in attention_flash_backward.cu); on the mma.sync kernel, whose
// warps without keys skip a tile (2 of 4 here), they measured no faster (ncu 694 against
// 674 us; the backward within 0.1 ms either way, three alternating rounds of a build with a
// switch for it, not kept), so they stay on wgmma. Three stages for them (2026-12-03, two
// alternating rounds of a build with a switch, not kept): ncu 636 against 651 us, but the
// backward 10.20-10.22 ms against 10.18 (full rule), 9.03 against 9.02-9.05 (sliding): two
// stay.
bool dkdv_wide_keys(const BwdArgs& a) {
  static const bool off = [] {
    const char* e = std::getenv("CHUNKGRAD_FLASH_DKDV_KEYS");
    return e != nullptr && std::string(e) == "64";
  }();
  return !off && a.s.hd == 128 && dkdv_wgmma(a.s.hd) == 2 && a.dq_acc != nullptr &&
         a.m.kind == AttnMaskKind::dflash && a.m.context_len > 0;
}

// The kernel variant's wgmma mode (Note [wgmma dk/dv]): the overlap's second score tile does
// not fit beside 64-row tiles, so wgmma alone there.
template <int HD, int QT, int KW>
int dkdv_variant(int64_t hd) {
  return KW == 2 ? 2 : HD == 128 ? (QT == 32 ? dkdv_wgmma(hd) : std::min(dkdv_wgmma(hd), 1)) : 0;
}

// A launch's dynamic shared memory: the CTA's, the row table and (wgmma) the slack that
// aligns the swizzled tiles.
template <int HD, int QT, bool FusedDq, int NS, int KW = 1, int Behind = 0>
int dkdv_launch_smem(const BwdArgs& a) {
  return dkdv_smem_bytes<HD, QT, FusedDq, NS, KW, Behind>() + row_table_bytes(a.s, a.m, QT) +
         (dkdv_variant<HD, QT, KW>(a.s.hd) != 0 ? 1024 : 0);
}

// Note [dq one tile behind]: the fused dq of a query tile needs every warp's dS^T of it in
// shared memory, and so a barrier between the last warp's dS^T and the first warp's dq. The
// 128-key CTAs take a tile's dq in the next tile's step instead, from the other of two dS^T
// buffers (10 KB more shared memory), issued right after that step's S^T and dP^T MMAs and
// run under them: the barrier that opens the step, which waits for its Q and dO anyway, also
// completes the dS^T, and one of the step's two barriers is gone. After the walk's last tile
// one more barrier precedes its dq. H200, 32/8 heads, 1024 x 24 over 4096 keys, bf16, sorted
// anchors (bench/attention_bench; 2026-12-04, three alternating rounds in one call): backward
// 8.63-8.71 ms without (full rule), 8.55-8.57 with; sliding rule 7.15-7.16 and 7.10-7.11
// (a later call: 8.67-8.74 and 8.53-8.61, 7.16-7.25 and 7.11-7.17). ncu then put 26% of
// the grid's warp samples in the dq's MMAs and 13% in staging and adding its product (the
// other big shares: the four GEMMs' issue 10%, P 10%, dS and the issue of dV and dK 16%,
// the walk and the next tile's loads 17%). ptxas: 255 registers, 12 bytes of
// spills. Measured and dropped (builds with a switch, same call): the dq after the step's dK
// is issued instead (8.50-8.55, but the sliding rule 7.22-7.23: its rate fell to 0.88x the
// full rule's); and dV and dK left running into the next step, waited after its loads, four
// stages so that those loads do not overwrite the Q and dO they read (no spills; 8.53-8.61,
// 7.15-7.19); the same with the dq under S^T and dP^T (spills; 8.85, 7.30).
// CHUNKGRAD_FLASH_DQ_BEHIND=0 keeps the barrier, and the loads of Note [Loads under dK] at
// the step's start (read once; for benchmarks).
//
// Note [Loads under dK]: the same CTAs load the walk's next query tile (Q, dO, lse and
// delta: about 190 instructions a warp) at the end of a step, after its dK is issued and
// before dV and dK are waited, instead of between the barrier that opens the step and the
// issue of its S^T and dP^T, which waited for them. The stage they fill is the one the last
// step's MMAs read, waited at that step's end, so three stages still do; the tile now has
// one step to land in instead of two. H200, 32/8 heads, 1024 x 24 over 4096 keys, bf16,
// sorted anchors (bench/attention_bench; 2026-12-04, three alternating rounds of a build
// with a switch, one call): backward 8.26-8.36 ms against 8.59-8.62 (full rule), 6.85-6.88
// against 7.10-7.11 (sliding); ptxas: 255 registers, 12 bytes of spills (full), none
// (sliding). Measured and dropped (the call before): the loads right after the S^T and dP^T
// issue, where ptxas injected a wait for their accumulators (C7517) and spilled more: 8.55-8.65
// against 8.58-8.70 (full), 7.18-7.24 against 7.07-7.14 (sliding).
// Measured and dropped (2026-12-05): Q and dO of each query tile by TMA, in the context
// CTAs and the blocks' own key CTAs: thread 0 issued 8-row x 64-column boxes straight into
// the 128-byte swizzle (block_size a multiple of 8 keeps a box in one head), completing on
// a stage mbarrier, the first warp still copying lse, delta and the slot; the issue
// predicated, not branched (inside `if (threadIdx.x == 0)` ptxas serialized every wgmma,
// C7518). It passed the attention tests, but H200, 32/8 heads, 1024 x 24 over 4096 keys,
// sorted anchors (bench/attention_bench, two alternating rounds in one call): backward
// 11.43-11.53 ms against 8.32-8.36 (full rule), 9.26-9.37 against 7.00-7.02 (sliding); with
// TMA in the context CTAs only, 11.47-11.51 and 9.26. Why was not found; a guess, not
// checked: the copies wait in the multiprocessor's bulk-copy unit behind the fused dq's
// bulk reductions (32 KB a step). Timing hacks in the same call (wrong results, not kept)
// bound two parts of the context CTAs' step: with no query tile loaded after the first
// three the backward took 7.49 ms (sliding 6.29), so the loads cost at most about 0.85 ms
// (0.72) of it; with the fused dq left out (its MMAs and its reductions) 5.86 (4.92), so
// the dq costs about 2.5 ms (2.1), 30% of the backward.
bool dq_behind_enabled() {
  static const bool off = [] {
    const char* e = std::getenv("CHUNKGRAD_FLASH_DQ_BEHIND");
    return e != nullptr && std::string(e) == "0";
  }();
  return !off;
}

// Note [wgmma dq]: in the 128-key CTAs the fused dq of a query tile is dq^T = K^T dS^T on
// the warpgroup MMA (attention_flash_dkdv_dq_wgmma.cuh): warpgroup g takes dq's columns
// 64 g .. 64 g + 63 for the tile's 32 rows, eight m64n32k16 MMAs with A = K^T read from K's
// own tile (MN-major: its rows are keys, its 64 columns contiguous) and B = dS, which the
// warps now store by stmatrix .trans as (rows, keys) in the 128-byte swizzle (two 8 KB
// tiles where the mma.sync dq had two padded 10 KB dS^T ones). It is issued behind the
// step's S^T and dP^T as a third MMA group and waited after dK's issue, where it is done;
// its 16 accumulators a thread are then staged in the warpgroup's 8 KB of shared memory, in
// the buffer's order (Note [dq tile order]: a warpgroup's columns are one run of 2048
// floats), and its first thread adds them with one 8 KB bulk reduction after a barrier of
// the warpgroup's own, from one of two staging buffers (Note [dq staging twice]). A step
// whose CTA has no visible key (its dS all zeros) leaves no dq behind it, unless its rows
// must be stored (Note [dq first writers]). The mma.sync dq
// it replaces issued, a warp and a tile, 32 mma.sync and 24 ldmatrix.x4 reading 12 KB of
// shared memory (96 KB a tile for the CTA, against 48 KB here), each mma behind its
// ldmatrix. ptxas (bf16): 230 registers and no spills under the full rule (255 and 12
// bytes of spills before), 236 and none under the sliding rule (255 and none before).
// Issuing the dq before S^T and dP^T (added under them), or after dV, spilled 124 to 192
// bytes; so did issuing it without the branch on whether a tile is behind (136 to 148; the
// branch costs an injected warpgroup.arrive, C7519), and keeping dq^T's registers live
// from one product to the next (84, sliding; its first MMA overwrites them: not zeroed).
// First run on a card 2026-12-05 (an H100; no H200 was lent): correct (the CudaAttention*
// tests with it on, and its own, which count its launches and match the mma.sync dq at
// 8e-3), but slower: the backward 10.30-10.37 ms against the mma.sync dq's 8.70-8.77 (full
// rule) and 8.40-8.42 against 7.24 (sliding). ncu on the H200 the day after found why: 17%
// of its warp samples waited at the barrier that opens a step, behind its first thread's
// wait for the bulk reductions issued at the end of the step before to read their staging.
// With the staging twice (Note [dq staging twice] in attention_flash_dkdv_dq_wgmma.cuh;
// 231 registers under the full rule, 236 sliding, no spills) that share is 2.8%, and it is
// the faster dq: two alternating rounds of attention_bench --which dflash,sliding --heads
// 32/8 --path flash --anchors sorted --repeats 20 in one call (H200) gave forward +
// backward 10.004-10.039 ms (291.2-292.2 TFLOP/s) against 10.144-10.157 (287.8-288.1) under
// the full rule, and 8.033-8.039 (270.5-270.7) against 8.338-8.364 (260.0-260.8) under the
// sliding rule; the backward alone 8.16-8.24 against 8.34-8.38 and 6.56-6.57 against
// 6.88-6.90. So it is the default; CHUNKGRAD_FLASH_DQ_WGMMA=0 keeps the mma.sync dq (read at
// every launch, so that a test may switch it: tests/cuda_attention_dq_wgmma_test.cpp; ctest
// attention_dq_mma_sync runs the attention tests on it). ptxas injects a warpgroup.wait
// (C7517) into every 128-key variant and, into this one, two warpgroup.arrive (C7519) at
// the dq issue's branch; in the SASS that branch closes its MMA group with an empty
// HGMMA.64x8x16, where ncu puts 4.2% of the warp samples (3.7% more at the dq's first MMA).
bool dq_wgmma_enabled() {
  const char* e = std::getenv("CHUNKGRAD_FLASH_DQ_WGMMA");
  return e == nullptr || std::string(e) != "0";
}
// Launches of the wgmma dq's kernels, for the tests: the switch falls back to the
// mma.sync dq silently (no sm_90a build, three stages that do not fit, dq_behind off), and
// a test of it must know that it ran (an outside review's finding).
std::atomic<int64_t> dq_wgmma_launches{0};

// Query-tile stages at QT = 32 (Note [dk/dv stages]): 64-key CTAs, two a multiprocessor.
template <int HD>
int dkdv_stages(const BwdArgs& a) {
  if (forced_dkdv_stages() != 0) return forced_dkdv_stages();
  return a.dq_acc != nullptr && ctas_fit(2, dkdv_launch_smem<HD, 32, true, 3>(a)) ? 3 : 2;
}

// and for 128-key CTAs (Note [128-key CTAs]), one a multiprocessor; wide: their arguments.
template <int HD>
int dkdv_wide_stages(const BwdArgs& wide) {
  if (forced_dkdv_stages() != 0) return forced_dkdv_stages();
  const int bytes = !dq_behind_enabled() ? dkdv_launch_smem<HD, 32, true, 3, 2>(wide)
                    : dq_wgmma_enabled() ? dkdv_launch_smem<HD, 32, true, 3, 2, 2>(wide)
                                         : dkdv_launch_smem<HD, 32, true, 3, 2, 1>(wide);
  return ctas_fit(1, bytes) ? 3 : 2;
}

// Note [48-row query tiles]: the 128-key CTAs' step (Note [128-key CTAs]) spends about as
// many instructions on what it does once a query tile -- the barrier, the walk, the
// visible-key test, the MMAs' descriptors and issue, the dq's place and its reductions --
// as on what it does once a row; and S^T, dP^T and the dq^T are m64n32k16 MMAs, whose
// operands (3 KB from shared memory for 64 K FLOPs) take longer to read than the MMA
// takes to run. A DFlash block of 4 x 24 = 96 packed rows is two tiles of 48 rows as well
// as three of 32 (64-row tiles would leave a third of the second one empty, Note [dk/dv
// query tiles]), so where a group's packed rows are a multiple of 48 and not of 64 the
// 128-key CTAs walk 48-row tiles: the same work in two thirds of the steps, the three
// small GEMMs as m64n48k16. Only the kernel of Notes [dq one tile behind] and [wgmma dq]
// takes them (three stages; a warpgroup stages QT x 64 floats, so the CTA's two staging
// buffers take 48 KB at 48 rows, against 32 KB at 32); the fused dq's buffer keeps
// 32-row tiles (Note [dq tile order]), so a 48-row tile is added as two runs of 16-row
// halves. Registers (ptxas, bf16): the 48-row kernel first spilled 12 bytes under the
// full rule and 568 under the sliding rule at 255; telling the 128-key kernels that their
// tiles are context tiles (the key-tile mode a constant, no causal rule: they are never
// launched for anything else) took them to 250 and 253 registers without spills, and the
// 32-row kernels from 221 and 236 to 218 and 230. Moving the dq^T's issue after P, or
// taking the dq in its own step after a barrier of the CTA, spilled 350 to 800 bytes.
// Measured (an H100, no H200 was lent; 32/8 heads, 1024 x 24 over 4096 keys, bf16, sorted
// anchors; attention_bench --which dflash,sliding --heads 32/8 --path flash --anchors
// sorted --repeats 20, three rounds alternating =32 and =48 in one call, 2026-12-05): the
// backward 8.108-8.147 ms against 8.201-8.217 (full rule) and 6.607-6.620 against
// 6.809-6.880 (sliding); forward + backward 295.4-296.0 TFLOP/s against 292.9-294.0 and
// 264.3-269.3 against 260.6-263.9; the full-scale step (drafter_step_bench --paths fused
// --steps 3 --warmup 1) 732.3 against 734.5 ms, within its spread. Elsewhere, and with
// CHUNKGRAD_FLASH_DKDV_WIDE_ROWS=32 (read at every launch, so that a test may switch it),
// the tiles stay 32 rows; =48 takes 48 wherever the rows are a multiple of 48 (a test's
// switch).
int dkdv_wide_rows(const AttnShape& s, const AttnMaskArgs& m) {
  const char* e = std::getenv("CHUNKGRAD_FLASH_DKDV_WIDE_ROWS");
  const std::string v = e != nullptr ? e : "";
  if (v == "32") return 32;
  const int64_t packed = (s.Hq / s.Hkv) * m.block_size;
  if (packed % 48 != 0 || !dq_behind_enabled() || !dq_wgmma_enabled()) return 32;
  return v == "48" || packed % 64 != 0 ? 48 : 32;
}
// Launches of the 48-row kernel, for the tests (as dq_wgmma_launches).
std::atomic<int64_t> wide48_launches{0};

template <typename T, int HD, int QT, bool FusedDq = false, int NS = 2, int KW = 1>
void launch_dkdv_rows(const BwdArgs& a, int64_t key_tiles, cudaStream_t stream) {
  // (key_tiles counts every part of a split context tile: Note [Context key parts])
  const dim3 grid = batch_grid(key_tiles * a.s.Hkv, a.s.B);  // Note [Batch grid]
  const int wg = dkdv_variant<HD, QT, KW>(a.s.hd);
  int smem = dkdv_launch_smem<HD, QT, FusedDq, NS, KW>(a);
  const bool sl = a.m.sliding_window > 0;
  auto* kernel = sl ? flash_dkdv_kernel<T, HD, QT, true, FusedDq, NS, 0>
                    : flash_dkdv_kernel<T, HD, QT, false, FusedDq, NS, 0>;
  if constexpr (KW == 2) {  // Note [128-key CTAs]
    kernel = sl ? flash_dkdv_kernel<T, HD, QT, true, FusedDq, NS, 2, 2>
                : flash_dkdv_kernel<T, HD, QT, false, FusedDq, NS, 2, 2>;
    if constexpr (NS == 3) {      // (two stages, forced or where three do not fit: without)
      if (dq_behind_enabled()) {  // Note [dq one tile behind]
        kernel = sl ? flash_dkdv_kernel<T, HD, QT, true, FusedDq, NS, 2, 2, 1>
                    : flash_dkdv_kernel<T, HD, QT, false, FusedDq, NS, 2, 2, 1>;
        smem = dkdv_launch_smem<HD, QT, FusedDq, NS, KW, 1>(a);
        if (dq_wgmma_enabled()) {  // Note [wgmma dq]
          dq_wgmma_launches.fetch_add(1, std::memory_order_relaxed);
          kernel = sl ? flash_dkdv_kernel<T, HD, QT, true, FusedDq, NS, 2, 2, 2>
                      : flash_dkdv_kernel<T, HD, QT, false, FusedDq, NS, 2, 2, 2>;
          smem = dkdv_launch_smem<HD, QT, FusedDq, NS, KW, 2>(a);
        }
      }
    }
  } else if constexpr (HD == 128) {
    if (wg == 1) {
      kernel = sl ? flash_dkdv_kernel<T, HD, QT, true, FusedDq, NS, 1>
                  : flash_dkdv_kernel<T, HD, QT, false, FusedDq, NS, 1>;
    } else if constexpr (QT == 32) {
      if (wg == 2) {
        kernel = sl ? flash_dkdv_kernel<T, HD, QT, true, FusedDq, NS, 2>
                    : flash_dkdv_kernel<T, HD, QT, false, FusedDq, NS, 2>;
      }
    }
  }
  CG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<grid, kThreads * KW, smem, stream>>>(a);
  CG_CUDA_CHECK(cudaGetLastError());
}

// The 128-key CTAs on 48-row tiles (Note [48-row query tiles]): three stages, the dq behind
// on the warpgroup MMA.
template <typename T, int HD>
void launch_dkdv_wide48(const BwdArgs& a, int64_t key_tiles, cudaStream_t stream) {
  const dim3 grid = batch_grid(key_tiles * a.s.Hkv, a.s.B);  // Note [Batch grid]
  const int smem = dkdv_launch_smem<HD, 48, true, 3, 2, 2>(a);
  auto* kernel = a.m.sliding_window > 0 ? flash_dkdv_kernel<T, HD, 48, true, true, 3, 2, 2, 2>
                                        : flash_dkdv_kernel<T, HD, 48, false, true, 3, 2, 2, 2>;
  dq_wgmma_launches.fetch_add(1, std::memory_order_relaxed);
  wide48_launches.fetch_add(1, std::memory_order_relaxed);
  CG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  kernel<<<grid, kThreads * 2, smem, stream>>>(a);
  CG_CUDA_CHECK(cudaGetLastError());
}

template <typename T, int HD>
void launch_dkdv_typed(const BwdArgs& a, cudaStream_t stream) {
  const AttnShape& s = a.s;
  int64_t key_tiles;
  if (a.m.kind == AttnMaskKind::dflash) {
    key_tiles = (a.m.context_len + kTile - 1) / kTile * a.ctx_parts +
                a.m.num_blocks * ((a.m.block_size + kTile - 1) / kTile);
  } else {
    key_tiles = (s.Sk + kTile - 1) / kTile;
  }
  if (key_tiles == 0) return;
  CG_CHECK(a.ctx_parts == 1 || (a.m.kind == AttnMaskKind::dflash && a.ctx_partial != nullptr),
           "flash dk/dv: context key parts need a DFlash mask and scratch");
  CG_CHECK(a.m.sliding_window == 0 || s.Sk < (int64_t{1} << 31),
           "scaled_dot_product_attention: the sliding DFlash rule on cuda takes at most 2^31 - 1 "
           "keys, got ",
           s.Sk);
  const int64_t ctx_tiles = (a.m.context_len + kTile - 1) / kTile;
  const bool wide = HD == 128 && dkdv_wide_keys(a);  // Note [128-key CTAs]
  BwdArgs wide_args = a;
  wide_args.ctx_key_tile = 2 * kTile;
  if (a.ctx_parts > 1 && ctx_tiles > 0) {  // Note [Context key parts]
    CG_CHECK(a.ctx_ranges != nullptr, "flash dk/dv: context key parts need their range scratch");
    launch_context_ranges(wide ? wide_args : a, stream);
  }
  if (a.dq_acc != nullptr) {  // Note [Fused dq]
    const bool store_first = wide && dq_first_writers(a);
    if (!store_first) {
      CG_CUDA_CHECK(
          cudaMemsetAsync(a.dq_acc, 0, sizeof(float) * dq_tile_order_floats(s, a.m), stream));
    }
    if constexpr (HD == 128) {
      if (wide) {  // the blocks' keys, then the context's (Note [128-key CTAs])
        BwdArgs block_args = a;
        block_args.key_tile_base = ctx_tiles * a.ctx_parts;
        block_args.dq_store = store_first;
        if (key_tiles > block_args.key_tile_base) {
          launch_dkdv_rows<T, HD, 32, true, 2>(block_args, key_tiles - block_args.key_tile_base,
                                               stream);
        }
        const int64_t wide_tiles = (a.m.context_len + 2 * kTile - 1) / (2 * kTile) * a.ctx_parts;
        if (dkdv_wide_rows(s, a.m) == 48 && forced_dkdv_stages() != 2 &&
            ctas_fit(1, dkdv_launch_smem<HD, 48, true, 3, 2, 2>(wide_args))) {
          launch_dkdv_wide48<T, HD>(wide_args, wide_tiles, stream);  // Note [48-row query tiles]
        } else if (dkdv_wide_stages<HD>(wide_args) == 3) {
          launch_dkdv_rows<T, HD, 32, true, 3, 2>(wide_args, wide_tiles, stream);
        } else {
          launch_dkdv_rows<T, HD, 32, true, 2, 2>(wide_args, wide_tiles, stream);
        }
        return;
      }
    }
    if (dkdv_stages<HD>(a) == 3) {  // Note [dk/dv stages]
      launch_dkdv_rows<T, HD, 32, true, 3>(a, key_tiles, stream);
    } else {
      launch_dkdv_rows<T, HD, 32, true, 2>(a, key_tiles, stream);
    }
  } else if (dkdv_query_rows(s, a.m) == 32) {
    if (dkdv_stages<HD>(a) == 3) {
      launch_dkdv_rows<T, HD, 32, false, 3>(a, key_tiles, stream);
    } else {
      launch_dkdv_rows<T, HD, 32, false, 2>(a, key_tiles, stream);
    }
  } else {
    launch_dkdv_rows<T, HD, 64>(a, key_tiles, stream);
  }
}

}  // namespace

void launch_flash_dkdv(DType dtype, const BwdArgs& a, cudaStream_t stream) {
  dispatch_flash(dtype, a.s.hd, [&]<typename T, int HD>() { launch_dkdv_typed<T, HD>(a, stream); });
  if (a.ctx_parts > 1 && a.m.context_len > 0) launch_context_parts_sum(dtype, a, stream);
}

}  // namespace cg::cuda::flash

namespace cg::cuda {
int64_t flash_dq_wgmma_launches() {
  return flash::dq_wgmma_launches.load(std::memory_order_relaxed);
}
int64_t flash_dkdv_wide48_launches() {
  return flash::wide48_launches.load(std::memory_order_relaxed);
}
}  // namespace cg::cuda
