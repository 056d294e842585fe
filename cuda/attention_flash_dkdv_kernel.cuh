// Why this file exists: the kernel of the flash dk/dv pass (attention_flash_dkdv.cu holds
// its launch and the choices around it: tile rows, stages, the fused dq, wgmma; its shared
// memory is in attention_flash_dkdv_layout.cuh, the fused dq's share of a tile in
// attention_flash_dkdv_dq.cuh), apart so that each file reads in one sitting. Included by
// attention_flash_dkdv.cu only.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>

#include "cuda/attention_flash_backward.cuh"
#include "cuda/attention_flash_common.cuh"
#include "cuda/attention_flash_dkdv_dq.cuh"
#include "cuda/attention_flash_dkdv_dq_wgmma.cuh"
#include "cuda/attention_flash_dkdv_gemms.cuh"
#include "cuda/attention_flash_dkdv_layout.cuh"
#include "cuda/attention_flash_key_tiles.cuh"
#include "cuda/attention_kernels.h"
#include "cuda/device_math.cuh"
#include "cuda/wgmma.cuh"

namespace cg::cuda::flash {

// The kernel's Notes [Fused dq] and [Descriptors once a tile] are in
// cuda/attention_flash_dkdv.cu, with the pass's others.

// Sliding: the sliding DFlash rule (a template flag, so the other rules' kernels carry
// none of its per-element work or registers).
// Wg: 0 mma.sync; 1 the four GEMMs on the warpgroup MMA, 2 also overlapped (Note [wgmma
// dk/dv]). KW: warpgroups a CTA, each 64 keys of the CTA's KW * 64 (Note [128-key CTAs]).
// Behind: the fused dq of each query tile in the next tile's step, under its S^T and dP^T
// (Note [dq one tile behind]), and the walk's next query tile loaded at the step's end,
// under its dV and dK (Note [Loads under dK]); otherwise (0) the dq after a barrier of its
// own and the loads at the step's start. Behind 1: that dq on mma.sync; 2: on the warpgroup
// MMA (Note [wgmma dq]).
template <typename T, int HD, int QT, bool Sliding, bool FusedDq, int NS, int Wg, int KW = 1,
          int Behind = 0>
__global__ void __launch_bounds__(kThreads* KW) flash_dkdv_kernel(BwdArgs a) {
  static_assert(NS == 2 || NS == 3, "two or three query-tile stages");
  static_assert(!Behind || (FusedDq && Wg == 2 && NS == 3),
                "the dq behind: the overlapped wgmma kernel, three stages");
  static_assert(!FusedDq || QT == kDqTileRows || (QT == 48 && Behind == 2),
                "the fused dq splits a 32-row tile over 4 warps (the wgmma dq: also 48 rows)");
  static_assert(HD % (2 * KW * kDqChunk) == 0, "a warp's dq columns are whole chunks");
  static_assert(!Wg || HD == 128, "the wgmma dk/dv takes head dim 128");
  static_assert(KW == 1 || (KW == 2 && Wg && FusedDq), "128-key CTAs: wgmma and the fused dq");
  static_assert(Behind != 2 || (KW == 2 && HD == 128), "the wgmma dq: a warpgroup 64 columns");
  constexpr int NT = kThreads * KW, KT = kTile * KW;  // threads, keys
  if (batch_of_block() >= a.s.B) return;              // Note [Batch grid]
  constexpr int LD = HD + kPad;
  // Rows of the K, V, Q and dO tiles in shared memory: padded for ldmatrix, or (Wg) the
  // swizzle's 128 bytes a column block, so every tile stays 1024-byte aligned.
  constexpr int LDT = Wg ? HD : LD;
  extern __shared__ __align__(16) unsigned char smem_dyn[];
  // (Wg: the swizzled tiles must start 1024-byte aligned; the launch adds the slack.)
  unsigned char* smem_raw =
      Wg ? smem_dyn + ((1024u - (smem_addr(smem_dyn) & 1023u)) & 1023u) : smem_dyn;
  T* sK = reinterpret_cast<T*>(smem_raw);  // (KT, LD)
  T* sV = sK + KT * LDT;                   // (KT, LD)
  T* sQ = sV + KT * LDT;                   // (NS, QT, LD)
  T* sG = sQ + NS * QT * LDT;              // (NS, QT, LD)
  // Behind 2: two dS tiles (QT, KT) for wgmma (Note [wgmma dq]), 1024-byte aligned here
  constexpr int kDsWg = Behind == 2 ? 2 * kDsTileElems<QT, KT> : 0;
  float* sL = reinterpret_cast<float*>(sG + NS * QT * LDT + kDsWg);  // (NS, QT) lse
  float* sD = sL + NS * QT;                                          // (NS, QT) delta
  int* sSlot = reinterpret_cast<int*>(sD + NS * QT);  // (NS, QT) slot in the block (dflash)
  constexpr int LDS = QT + kPad;
  // (Behind ? 2 : 1, KT, LDS) dS^T (Note [Fused dq]; two: Note [dq one tile behind]), or
  // Behind 2 the dS tiles above; a dS buffer's elements.
  T* sdS = Behind == 2 ? sG + NS * QT * LDT : reinterpret_cast<T*>(sSlot + NS * QT);
  constexpr int kDsBuf = Behind == 2 ? kDsTileElems<QT, KT> : KT * LDS;
  // (KW kWarps, kDqWarpFloats) fp32 dq a warp (Note [dq bulk reduce]), 16-byte aligned;
  // Behind 2: (2, KW, kDqStagingFloats) a warpgroup's tile twice (Note [dq staging twice])
  float* sdQ = Behind == 2 ? reinterpret_cast<float*>(sSlot + NS * QT)
                           : reinterpret_cast<float*>(sdS + (Behind ? 2 : 1) * KT * LDS);
  static_assert(Behind != 2 || (2 * KT + 2 * NS * QT) * HD * 2 % 1024 == 0,
                "the dS tiles start 1024-byte aligned (the swizzle's period)");
  static_assert(Behind != 2 || (2 * KT + 2 * NS * QT) * HD * 2 + kDsWg * 2 + 3 * NS * QT * 4 +
                                       2 * KW * kDqStagingFloats<HD, QT, KW> * 4 <=
                                   dkdv_smem_bytes<HD, QT, FusedDq, NS, KW, Behind>(),
                "the wgmma dq's layout fits the bytes the launch asks for");
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  const bool bulk = FusedDq && a.dq_bulk;
#else
  const bool bulk = false;
#endif
  // warp: in warpgroup wg, whose 64 keys from kb are its MMAs' rows (Note [128-key CTAs])
  // (lane 0's value, broadcast: the compiler then holds wg, and the descriptors of this
  // warpgroup's K and V, in uniform registers -- Note [Descriptors once a tile])
  const int wg =
      KW == 1 ? 0 : __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / kThreads, 0);
  const int warp = KW == 1 ? threadIdx.x / 32 : threadIdx.x / 32 % kWarps, lane = threadIdx.x % 32;
  // Every kv head's key tile t before any head's tile t + 1: the heavy tiles (causal's
  // first keys, DFlash's first context keys) start first.
  const AttnShape& s = a.s;
  const int64_t b = batch_of_block(), hk = blockIdx.x % s.Hkv;  // Note [Batch grid]
  const AttnMaskArgs& m = a.m;
  const int64_t group = s.Hq / s.Hkv;
  KeyTileWork w = key_tile_work<QT>(s, m, a.ctx_parts, a.ctx_key_tile,
                                    blockIdx.x / s.Hkv + a.key_tile_base, a.ctx_ranges, b);
  // The 128-key CTAs take DFlash context keys only (Note [128-key CTAs]): known here, the
  // other modes' code and registers leave their kernels (Note [48-row query tiles]).
  if constexpr (KW == 2) w.mode = 2;
  const int64_t kb = w.j0 + wg * kTile;  // this warpgroup's first key
  const T* sKw = sK + wg * kTile * LDT;  // and its rows of K and V
  const T* sVw = sV + wg * kTile * LDT;
  if constexpr (Wg) {  // per warpgroup (kTile, 64) x 2 column blocks, swizzled (Note [wgmma])
    const T* kg = head_rows<T>(a.k, b, hk);
    const T* vg = head_rows<T>(a.v, b, hk);
    for (int c = threadIdx.x; c < KT * 16; c += NT) {
      const int r = c / 16, x = c % 16;
      const bool ok = w.j0 + r < w.jend;
      const uint32_t at = (r / kTile) * kTile * HD * 2 + (x / 8) * kTile * 128 +
                          wgmma::swizzle128_offset(r % kTile, x % 8);
      cp_async16(smem_addr(sK) + at, ok ? kg + (w.j0 + r) * a.k.ss + x * 8 : kg, ok);
      cp_async16(smem_addr(sV) + at, ok ? vg + (w.j0 + r) * a.v.ss + x * 8 : vg, ok);
    }
  } else {
    load_kv_tile_async<T, HD>(sK, sV, a.k, a.v, head_rows<T>(a.k, b, hk), head_rows<T>(a.v, b, hk),
                              w.j0, w.jend);
  }

  // Row r of query tile (seg, qt): its head, query row and (DFlash) slot in the block,
  // false past the tile's end. (32-bit division: this runs for every row of every tile;
  // the slot falls out of it, where i % block_size would be a 64-bit remainder a row.)
  const int64_t packed64 = group * m.block_size;
  const int bs32 = static_cast<int>(m.block_size), packed_rows = static_cast<int>(packed64);
  // a block's 32-row tiles in the fused dq's buffer (Note [dq tile order])
  [[maybe_unused]] const int64_t dq_tiles32 =
      QT == kDqTileRows ? w.seg_tiles : (packed64 + kDqTileRows - 1) / kDqTileRows;
  // Note [Row table]: filled once, before any query tile is loaded.
  RowOffsets* sRows =
      reinterpret_cast<RowOffsets*>(smem_raw + dkdv_smem_bytes<HD, QT, FusedDq, NS, KW, Behind>());
  const bool table = w.mode != 0 && packed64 <= kRowTableRows;
  if (table) {
    for (int v = threadIdx.x; v < packed_rows; v += NT) {
      const int hh = v / bs32, slot = v - hh * bs32;
      sRows[v] = RowOffsets{hh * a.q.sh + slot * a.q.ss, hh * a.g.sh + slot * a.g.ss,
                            hh * s.Sq + slot, slot, 0};
    }
    __syncthreads();
  }
  auto row_of = [&](int64_t seg, int64_t qt, int r, int64_t& h, int64_t& i, int& slot) -> bool {
    if (w.mode == 0) {
      i = w.qlo + qt * QT + r;
      h = hk * group + seg;
      slot = 0;
      return i < s.Sq;
    }
    const int64_t blk = w.mode == 1 ? w.block : seg;
    const int v = static_cast<int>(qt) * QT + r;
    if (v >= packed_rows) return false;
    const int hh = v / bs32;
    h = hk * group + hh;
    slot = v - hh * bs32;
    i = blk * m.block_size + slot;
    return true;
  };
  // Valid rows of query tile qt (a prefix of its QT rows).
  auto rows_in = [&](int64_t qt) -> int {
    const int64_t left = w.mode == 0 ? s.Sq - (w.qlo + qt * QT) : packed_rows - qt * QT;
    return static_cast<int>(min(static_cast<int64_t>(QT), left));
  };
  // Where segment seg's rows start (Note [Row table]): the offsets of its block's first row
  // of the group's first head in Q, dO and the (b, h, i) rows of lse, delta and dq.
  auto segment_bases = [&](int64_t seg, int64_t& bq, int64_t& bg, int64_t& bl) {
    const int64_t row0 = (w.mode == 1 ? w.block : seg) * m.block_size, h0 = hk * group;
    bq = b * a.q.sb + h0 * a.q.sh + row0 * a.q.ss;
    bg = b * a.g.sb + h0 * a.g.sh + row0 * a.g.ss;
    bl = (b * s.Hq + h0) * s.Sq + row0;
  };
  // Row r of query tile (seg, qt) given its segment's bases: its offsets in Q and dO, its
  // (b, h, i) row and its slot; false past the tile's end.
  auto row_at = [&](int64_t seg, int64_t qt, int r, int64_t bq, int64_t bg, int64_t bl, int64_t& oq,
                    int64_t& og, int64_t& row, int& slot) -> bool {
    if (table) {
      const int v = static_cast<int>(qt) * QT + r;
      if (v >= packed_rows) return false;
      const RowOffsets& o = sRows[v];
      oq = bq + o.q;
      og = bg + o.g;
      row = bl + o.l;
      slot = o.slot;
      return true;
    }
    int64_t h = 0, i = 0;
    if (!row_of(seg, qt, r, h, i, slot)) return false;
    oq = b * a.q.sb + h * a.q.sh + i * a.q.ss;
    og = b * a.g.sb + h * a.g.sh + i * a.g.ss;
    row = (b * s.Hq + h) * s.Sq + i;
    return true;
  };
  // Q, dO rows (16-byte chunks), lse and delta of query tile (seg, qt) into `stage`; each
  // thread maps its rows once for all four.
  auto load_q_tile = [&](int64_t seg, int64_t qt, int stage) {
    // A thread copies chunks x and x + HD / 16 of its rows (Wg: the same place in the tile's
    // two column blocks), so that a row is looked up once for both (Note [Descriptors once a
    // tile]: the lookups and their 64-bit sums were a fifth of the pass's instructions).
    constexpr int kPairs = HD / 16, kRowsPerPass = NT / kPairs;
    constexpr uint32_t kSecond = Wg ? QT * 128 : HD;  // bytes from chunk x to x + HD / 16
    const int x = threadIdx.x % kPairs;
    T* tq = sQ + stage * QT * LDT;
    T* tg = sG + stage * QT * LDT;
    int64_t bq = 0, bg = 0, bl = 0;
    if (table) segment_bases(seg, bq, bg, bl);
    // (Unrolled: the rows' table entries are read together, not each behind the last one's
    // address arithmetic -- ncu counted those waits at 7% of the pass's warp samples.)
    // (48-row tiles: the second pass takes rows 32 .. 47, half of the threads)
    static_assert(QT % kRowsPerPass == 0 || QT == 48, "whole passes over the tile's rows");
#pragma unroll
    for (int pass = 0; pass < (QT + kRowsPerPass - 1) / kRowsPerPass; ++pass) {
      const int r = threadIdx.x / kPairs + pass * kRowsPerPass;
      if (QT % kRowsPerPass != 0 && r >= QT) break;
      int64_t oq = 0, og = 0, row = 0;
      int slot = 0;
      const bool ok = row_at(seg, qt, r, bq, bg, bl, oq, og, row, slot);
      const T* qsrc = static_cast<const T*>(a.q.data) + (ok ? oq + x * 8 : 0);
      const T* gsrc = static_cast<const T*>(a.g.data) + (ok ? og + x * 8 : 0);
      // (Wg: (QT, 64) x 2 column blocks, swizzled; tiles are multiples of 1024 bytes)
      const uint32_t at =
          Wg ? (x / 8) * QT * 128 + wgmma::swizzle128_offset(r, x % 8) : (r * LD + x * 8) * 2;
      cp_async16(smem_addr(tq) + at, qsrc, ok);
      cp_async16(smem_addr(tq) + at + kSecond, qsrc + HD / 2, ok);
      cp_async16(smem_addr(tg) + at, gsrc, ok);
      cp_async16(smem_addr(tg) + at + kSecond, gsrc + HD / 2, ok);
      if (x == 0) {
        if (!ok) row = 0;
        cp_async4(smem_addr(sL + stage * QT + r), a.lse + row, ok);
        cp_async4(smem_addr(sD + stage * QT + r), a.delta + row, ok);
        // The row's slot k (sliding rule). The stage was last read before this step's
        // barrier, and is next read after a later step's.
        if constexpr (Sliding) sSlot[stage * QT + r] = slot;
      }
    }
  };

  // Note [dk/dv stages]: tile n of the walk goes to stage n % NS; (seg0, qt0) is the tile
  // the math is on, (seg1, qt1) the next, (seg, qt) the last one loaded.
  int64_t seg = w.seg_begin - 1, qt = -1;
  bool have0 = next_query_tile(w, m, b, seg, qt);
  int64_t seg0 = seg, qt0 = qt;
  if (have0) load_q_tile(seg0, qt0, 0);
  cp_async_commit();
  bool have1 = false;
  int64_t seg1 = 0, qt1 = 0;
  if constexpr (NS == 3) {
    have1 = have0 && next_query_tile(w, m, b, seg, qt);
    seg1 = seg;
    qt1 = qt;
    if (have1) load_q_tile(seg1, qt1, 1);
    cp_async_commit();
  }

  const bool warp_active = kb + warp * 16 < w.jend;
  const CausalRule causal = KW == 2 ? CausalRule{} : causal_rule(s, m);
  constexpr bool sliding = Sliding;  // Note [Sliding tiles]; Sk < 2^31 (checked at launch)
  [[maybe_unused]] const int w1 = static_cast<int>(min(m.sliding_window - 1, int64_t{INT32_MAX}));
  const int64_t kj0 = kb + warp * 16 + lane / 4;  // this thread's keys: kj0, kj0 + 8
  float dk[HD / 8][4], dv[HD / 8][4];
#pragma unroll
  for (int n = 0; n < HD / 8; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) dk[n][e] = dv[n][e] = 0.f;
  }

  // Note [dq one tile behind]: the last tile's block and query tile, when its dq is still to
  // be taken, and which of the two dS^T buffers this tile's goes to.
  [[maybe_unused]] bool dq_prev = false;
  [[maybe_unused]] int64_t dq_blk = 0, dq_qt = 0;
  [[maybe_unused]] int dsb = 0;
  [[maybe_unused]] auto dq_behind = [&] {
    if constexpr (Behind == 1) {
      if (dq_prev) {
        add_dq_tile<T, HD, QT, KW, Wg>(a, sdS + (dsb ^ 1) * KT * LDS, sK, sdQ, bulk, b, hk, dq_blk,
                                       dq_qt, w.seg_tiles, packed_rows);
      }
    }
  };
  // Behind 2 (Note [wgmma dq]): the last tile's dq^T, issued as one more MMA group (empty
  // when there is none), waited where the step waits anyway, then added. (Not zeroed: the
  // first MMA of each product overwrites it.)
  [[maybe_unused]] float dqt[QT / 2];
  [[maybe_unused]] auto dq_issue = [&] {
    if constexpr (Behind == 2) {
      if (dq_prev) {
        issue_dq_t<T, HD, QT, KW>(dqt, smem_addr(sK), smem_addr(sdS + (dsb ^ 1) * kDsBuf), wg);
      }
      wgmma::commit();
    }
  };
  // (Note [dq staging twice]: the step's dS buffer's parity picks the staging buffer too,
  // and a step with no dq to add commits an empty bulk group, so that the group before the
  // last is always the one that read the buffer this step writes)
  [[maybe_unused]] auto dq_add = [&] {
    if constexpr (Behind == 2) {
      if (!dq_prev && bulk) commit_empty_bulk_group();
      if (dq_prev) {
        wgmma::fence_operands(dqt);
        add_dq_t<HD, QT>(a, dqt, sdQ + (dsb * KW + wg) * kDqStagingFloats<HD, QT, KW>, bulk, wg, b,
                         hk, dq_blk, dq_qt, dq_tiles32, packed_rows);
      }
    }
  };

  int stage = 0;
  while (have0) {
    // Tile seg0/qt0 has landed (the one loaded after it may still be in flight), and every
    // thread is past the math of the stage the next load overwrites.
    if constexpr (NS == 3) {
      asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    } else {
      cp_async_wait_all();
    }
    if constexpr (Wg) wgmma::fence_proxy_async();  // the MMA reads what cp.async wrote
    if constexpr (Behind == 2) {
      if (bulk) wait_dq_t_staging_read();  // (the staging is rewritten after this barrier)
    }
    __syncthreads();
    const int64_t cseg = seg0, cqt = qt0;
    // The walk's next tile into the stage the last step's MMAs read, which they are done
    // with (Behind: at the step's end, under its dV and dK, Note [Loads under dK]).
    auto load_next = [&] {
      const bool have_next = (NS == 3 ? have1 : have0) && next_query_tile(w, m, b, seg, qt);
      if (have_next)
        load_q_tile(seg, qt, stage == 0 ? NS - 1 : stage - 1);  // (stage + NS - 1) % NS
      cp_async_commit();
      if constexpr (NS == 3) {
        have0 = have1;
        seg0 = seg1;
        qt0 = qt1;
        have1 = have_next;
        seg1 = seg;
        qt1 = qt;
      } else {
        have0 = have_next;
        seg0 = seg;
        qt0 = qt;
      }
    };
    if constexpr (!Behind) load_next();
    // Keys this tile's rows may see: j < jend, causal j <= i + diag, context j < anchor.
    const int64_t anchor = w.mode == 2 ? attn::dflash_anchor(m, b, cseg) : INT64_MAX;
    // Note [Dead warp tiles]: no row of the tile sees any of this warp's 16 keys.
    const int64_t kw0 = kb + warp * 16;
    bool dead = kw0 >= anchor;
    if constexpr (Sliding) dead = dead || (w.mode == 2 && kw0 + 16 <= anchor - w1);
    // Wg: an MMA is the whole warpgroup's, so the CTA computes when any warp is live and
    // a warp that is not keeps P = 0 (Note [wgmma dk/dv]). With two warpgroups (KW 2) both
    // compute when either has a live warp: a branch around wgmma that differs between a
    // CTA's warpgroups makes ptxas serialize every wgmma of the kernel (C7518).
    bool run = warp_active && !dead;
    if constexpr (Wg) {  // whether any of the CTA's KW * 4 warps has a key neither dead nor past
      // the tile: the last warp starting before min(jend, anchor) is the one that reaches
      // furthest into the window (Note [Descriptors once a tile]: a closed form, not a loop).
      const int64_t kend = min(w.jend, anchor);
      run = kend > w.j0;
      if constexpr (Sliding) {
        const int64_t last = w.j0 + min(int64_t{KW * kWarps - 1}, (kend - 1 - w.j0) / 16) * 16;
        run = run && (w.mode != 2 || last + 16 > anchor - w1);
      }
    }
    // P^T and dS^T as A fragments: declared here, where Wg 2's MMAs reading them are waited.
    uint32_t pk[QT / 16][4];
    [[maybe_unused]] uint32_t pk2[QT / 16][4];
    if (run) {
      const T* tQ = sQ + stage * QT * LDT;
      const T* tG = sG + stage * QT * LDT;
      const float* tL = sL + stage * QT;
      const float* tD = sD + stage * QT;
      const int64_t qrow0 = w.qlo + cqt * QT;  // mode 0: query row of tile row 0
      const int nrows = rows_in(cqt);
      // Sliding: key kj0 + 8 * half sits at position rel[half] relative to the anchor;
      // slot k sees it iff 0 <= k - rel <= W - 1.
      [[maybe_unused]] const int* tSlot = sSlot + stage * QT;
      [[maybe_unused]] int rel[2] = {0, 0};
      if constexpr (sliding) {
        const int64_t origin = w.mode == 2 ? anchor : m.context_len + w.block * m.block_size;
        rel[0] = static_cast<int>(kj0 - origin);
        rel[1] = rel[0] + 8;
      }
      // One score-sized accumulator at a time (registers): S^T -> P^T -> dV, then
      // dP^T -> dS^T = P^T (dP^T - delta) -> dK, with P^T kept as packed 16-bit values.
      float acc[QT / 8][4];
      [[maybe_unused]] float acc2[QT / 8][4];  // Wg 2: dP^T, computed while P^T is
      if constexpr (Wg == 2) {
        dkdv_key_by_row<T, HD, QT, Wg>(sKw, tQ, acc, warp, lane, true);
        dkdv_key_by_row<T, HD, QT, Wg>(sVw, tG, acc2, warp, lane, true);
        if constexpr (Behind == 1) dq_behind();  // under S^T and dP^T
        dq_issue();                              // (Behind 2: behind them)
        wgmma::wait<Behind == 2 ? 2 : 1>();
        wgmma::fence_operands(reinterpret_cast<float(&)[QT / 2]>(acc));
      } else {
        dkdv_key_by_row<T, HD, QT, Wg>(sKw, tQ, acc, warp, lane);
      }
      // Note [Whole warp tiles]: every row of the tile sees every one of this warp's keys.
      bool whole = w.mode == 2 && nrows == QT && kw0 + 16 <= w.jend && kw0 + 16 <= anchor;
      if constexpr (sliding) whole = whole && kw0 >= anchor + (m.block_size - 1) - w1;
      // This thread's rows' lse in base 2 (rows n * 8 + (lane % 4) * 2 + h), so that P is one
      // fma and one MUFU.EX2 an element (Note [Descriptors once a tile]).
      float lse2[QT / 8][2];
#pragma unroll
      for (int n = 0; n < QT / 8; ++n) {
#pragma unroll
        for (int h = 0; h < 2; ++h) lse2[n][h] = tL[n * 8 + (lane % 4) * 2 + h] * kLog2e;
      }
      if (Wg && !(warp_active && !dead)) {  // a warp with no visible key: P = 0
#pragma unroll
        for (int n = 0; n < QT / 8; ++n) acc[n][0] = acc[n][1] = acc[n][2] = acc[n][3] = 0.f;
      } else if (whole) {
#pragma unroll
        for (int n = 0; n < QT / 8; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            acc[n][e] = fast_exp2(fmaf(acc[n][e], a.scale_log2, -lse2[n][e & 1]));
          }
        }
      } else {
        // Whether keys kj0 and kj0 + 8 lie before the tile's end and the anchor (once a tile,
        // not a 64-bit compare an element).
        const int64_t kend = min(w.jend, anchor);
        const bool key_in[2] = {kj0 < kend, kj0 + 8 < kend};
#pragma unroll
        for (int n = 0; n < QT / 8; ++n) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int c = n * 8 + (lane % 4) * 2 + (e & 1);  // query row in the tile
            const int64_t j = kj0 + (e < 2 ? 0 : 8);
            bool vis = c < nrows && key_in[e / 2] && !causal.hides(j, qrow0 + c);
            if constexpr (sliding) {
              const int d = tSlot[c] - rel[e / 2];
              vis = vis && d >= 0 && d <= w1;
            }
            // (a visited row always sees a key, so its lse is finite)
            acc[n][e] = vis ? fast_exp2(fmaf(acc[n][e], a.scale_log2, -lse2[n][e & 1])) : 0.f;
          }
        }
      }
      dkdv_pack<T, QT>(acc, pk);
      if constexpr (Wg == 2) {  // dV += P^T dO runs while dS^T is formed
        dkdv_accumulate<T, HD, QT, Wg>(pk, tG, dv, lane, true);
        wgmma::wait<Behind == 2 ? 2 : 1>();  // dP^T (Behind 2: the dq and dV still running)
        wgmma::fence_operands(reinterpret_cast<float(&)[QT / 2]>(acc2));
      } else {
        dkdv_accumulate<T, HD, QT, Wg>(pk, tG, dv, lane);
        dkdv_key_by_row<T, HD, QT, Wg>(sVw, tG, acc, warp, lane);
      }
      float(&dp)[QT / 8][4] = Wg == 2 ? acc2 : acc;
      uint32_t(&pd)[QT / 16][4] = Wg == 2 ? pk2 : pk;  // dS^T, packed
#pragma unroll
      for (int n = 0; n < QT / 8; ++n) {
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int c = n * 8 + (lane % 4) * 2 + (e & 1);
          const float pe = unpack<T>(pk[n / 2][(n % 2) * 2 + e / 2], e & 1);
          dp[n][e] = pe * (dp[n][e] - tD[c]);
        }
      }
      dkdv_pack<T, QT>(dp, pd);
      dkdv_accumulate<T, HD, QT, Wg>(
          pd, tQ, dk, lane, Wg == 2);  // Wg 2: runs on under the fused dq (Behind: waited at once)
      if constexpr (Behind == 2) {
        store_ds_for_wgmma<QT>(smem_addr(sdS + dsb * kDsBuf), wg * kTile + warp * 16, lane, pd);
        wgmma::wait<2>();  // the dq (dV and dK still running)
      } else if constexpr (FusedDq) {
        store_ds_t<T, QT>(sdS + dsb * KT * LDS, wg * kTile + warp * 16, lane, pd);
      }
    } else if constexpr (Behind == 2) {  // keys past the tile's end, or dead: dS = 0
      dq_issue();
      // (no tile to add then, unless it must be stored: Note [dq first writers])
      if (a.dq_store)
        zero_ds_for_wgmma<QT>(smem_addr(sdS + dsb * kDsBuf), wg * kTile + warp * 16, lane);
      wgmma::wait<0>();
    } else if constexpr (FusedDq) {
      if constexpr (Behind) dq_behind();
      zero_ds_t<T, QT>(sdS + dsb * KT * LDS, wg * kTile + warp * 16, lane);
    }
    dq_add();
    if constexpr (FusedDq && !Behind) {
      __syncthreads();
      add_dq_tile<T, HD, QT, KW, Wg>(a, sdS, sK, sdQ, bulk, b, hk, w.mode == 1 ? w.block : cseg,
                                     cqt, w.seg_tiles, packed_rows);
    } else if constexpr (Behind) {  // this tile's dq in the next step (or after the walk)
      dq_prev = Behind == 1 || run || a.dq_store;  // (Behind 2: a tile of zeros adds nothing)
      dq_blk = w.mode == 1 ? w.block : cseg;
      dq_qt = cqt;
      dsb ^= 1;
    }
    if constexpr (Wg == 2) {  // dV and dK, left running under the fused dq (Behind: no dq here)
      if constexpr (Behind) load_next();  // (Behind: under dV and dK)
      if (run) {
        wgmma::wait<0>();
        wgmma::fence_operands(reinterpret_cast<float(&)[HD / 2]>(dv));
        wgmma::fence_operands(reinterpret_cast<float(&)[HD / 2]>(dk));
#pragma unroll
        for (int kk = 0; kk < QT / 16; ++kk) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            asm volatile("" : "+r"(pk[kk][e]), "+r"(pk2[kk][e])::"memory");
          }
        }
      }
    }
    stage = stage == NS - 1 ? 0 : stage + 1;
  }
  if constexpr (Behind) {  // the walk's last tile: every warp's dS^T is stored
    if (dq_prev) {
      if constexpr (Behind == 2) {
        wgmma::fence_proxy_async();  // (the stmatrix stores, before wgmma reads them)
        if (bulk) wait_dq_t_staging_read();
      }
      __syncthreads();
      dq_behind();
      dq_issue();
      if constexpr (Behind == 2) wgmma::wait<0>();
      dq_add();
    }
  }
  cp_async_wait_all();
  if (bulk && lane == 0) bulk_wait_all();  // the reductions have read and added their rows

  const int col = (lane % 4) * 2;
  if (w.mode == 2 && a.ctx_parts > 1) {  // Note [Context key parts]: partial sums, unscaled
    const int64_t plane = s.B * a.ctx_parts * s.Hkv * m.context_len * HD;
    float* pk = a.ctx_partial + ((b * a.ctx_parts + w.part) * s.Hkv + hk) * m.context_len * HD;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int64_t j = kj0 + half * 8;
      if (j >= w.jend) continue;
#pragma unroll
      for (int n = 0; n < HD / 8; ++n) {
        const int64_t at = j * HD + n * 8 + col;
        *reinterpret_cast<float2*>(pk + at) = make_float2(dk[n][2 * half], dk[n][2 * half + 1]);
        *reinterpret_cast<float2*>(pk + plane + at) =
            make_float2(dv[n][2 * half], dv[n][2 * half + 1]);
      }
    }
    return;
  }
  T* dkp = static_cast<T*>(a.dk);
  T* dvp = static_cast<T*>(a.dv);
#pragma unroll
  for (int half = 0; half < 2; ++half) {
    const int64_t j = kj0 + half * 8;
    if (j >= w.jend) continue;
    const int64_t row = (b * s.Hkv + hk) * s.Sk + j;
#pragma unroll
    for (int n = 0; n < HD / 8; ++n) {
      if (dkp != nullptr) {
        *reinterpret_cast<uint32_t*>(dkp + row * HD + n * 8 + col) =
            pack2<T>(dk[n][2 * half] * a.scale, dk[n][2 * half + 1] * a.scale);
      }
      if (dvp != nullptr) {
        *reinterpret_cast<uint32_t*>(dvp + row * HD + n * 8 + col) =
            pack2<T>(dv[n][2 * half], dv[n][2 * half + 1]);
      }
    }
  }
}

}  // namespace cg::cuda::flash
