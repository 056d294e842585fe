// Why this file exists: the pieces the flash attention kernels (forward in
// cuda/attention_flash_forward.cu, backward in cuda/attention_flash_backward.cu) share:
// the tiling of queries and keys under a mask, the causal rule, and the prologue and
// launch of the query-side kernels (Note [Query CTA prologue]); the PTX they issue by hand
// (ldmatrix, mma.sync, cp.async, bulk copies) is in attention_flash_ptx.cuh.
//
// Note [Flash tiles]: a CTA of 4 warps owns a tile of query rows -- 128 in the forward
// (2 m16 slices per warp), 64 in the dq pass -- or of 64 keys (dk/dv, 16 per warp); key
// tiles (forward, dq) are 64 keys.
//   - none / causal: a query tile is consecutive rows of one head. Causal tiles stop at
//     the key tile holding the last row's diagonal; only tiles that cross a diagonal or a
//     range end are masked element by element.
//   - dflash_blocks: every query row of block b -- in every query head that shares a kv
//     head (GQA) -- sees the same keys: [0, anchor_b) and block b's own keys. So a query
//     tile packs "virtual rows" v = head_in_group * block_size + row_in_block of one block
//     and one kv head (group * block_size of them, e.g. 5 * 24 = 120: one forward tile,
//     two dq tiles). The tile then visits exactly its block's two key ranges, starting
//     each range at its first key (not at a multiple of 64): work is proportional to the
//     keys the block sees, and K/V tiles are shared by the whole head group.
//   - dk/dv (backward): a CTA owns 64 keys of one kv head and walks the query tiles that
//     see them: causal rows from the key's diagonal on; for a DFlash context key tile, the
//     blocks whose anchor is past its first key; for a block's own keys, that block.
//   - the sliding DFlash rule: Note [Sliding tiles].
// Rows past the end of a tile are zero-filled (cp.async with src-size 0) and never stored.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/error.h"
#include "cuda/attention_common.cuh"
#include "cuda/attention_flash_ptx.cuh"
#include "cuda/attention_kernels.h"
#include "cuda/cuda_check.h"

namespace cg::cuda::flash {

constexpr int kWarps = 4;
constexpr int kThreads = 32 * kWarps;
constexpr int kTile = 64;  // query rows (forward, dq) or keys (dk/dv) per CTA
constexpr int kPad = 8;    // elements of padding per smem row: ldmatrix without bank conflicts
constexpr float kLog2e = 1.4426950408889634f;

// Copies R rows of HD elements into smem [R][HD + kPad]; row_of(r) gives a row's global
// address, or nullptr for a row past the tile's end (zero-filled).
template <typename T, int R, int HD, typename RowOf>
__device__ inline void load_rows_async(T* smem, const void* any_valid, RowOf row_of) {
  constexpr int kChunks = HD / 8;  // 16-byte chunks per row
  for (int c = threadIdx.x; c < R * kChunks; c += kThreads) {
    const int r = c / kChunks, x = c % kChunks;
    const T* src = row_of(r);
    cp_async16(smem_addr(smem + r * (HD + kPad) + x * 8),
               src != nullptr ? static_cast<const void*>(src + x * 8) : any_valid, src != nullptr);
  }
}

// Rows [j0, j0 + kTile) of one head's K and V (rows past jend zero-filled) into
// smem (kTile, HD + kPad) each: the key tiles of the forward and the dq pass.
template <typename T, int HD>
__device__ inline void load_kv_tile_async(T* sK, T* sV, const AttnOperand& k, const AttnOperand& v,
                                          const T* kbase, const T* vbase, int64_t j0,
                                          int64_t jend) {
  load_rows_async<T, kTile, HD>(sK, k.data, [&](int r) -> const T* {
    return j0 + r < jend ? kbase + (j0 + r) * k.ss : nullptr;
  });
  load_rows_async<T, kTile, HD>(sV, v.data, [&](int r) -> const T* {
    return j0 + r < jend ? vbase + (j0 + r) * v.ss : nullptr;
  });
}

// Row 0 of head h in batch b of operand x (its rows follow at stride x.ss).
template <typename T>
__device__ inline const T* head_rows(const AttnOperand& x, int64_t b, int64_t h) {
  return static_cast<const T*>(x.data) + b * x.sb + h * x.sh;
}

// Query row (b, h, i) of operand x.
template <typename T>
__device__ inline const T* query_row(const AttnOperand& x, int64_t b, int64_t h, int64_t i) {
  return head_rows<T>(x, b, h) + i * x.ss;
}

// The causal rule every flash kernel masks with: query row i sees keys up to its
// diagonal i + (Sk - Sq) (aligned bottom-right, as PyTorch's is_causal with a KV cache).
struct CausalRule {
  bool causal = false;
  int64_t diag = 0;  // Sk - Sq
  __device__ bool hides(int64_t j, int64_t i) const { return causal && j > i + diag; }
};
__device__ inline CausalRule causal_rule(const AttnShape& s, const AttnMaskArgs& m) {
  return CausalRule{m.kind == AttnMaskKind::causal, s.Sk - s.Sq};
}

// Note [Sliding tiles]: under the sliding DFlash rule (window W > 0) slot k of block b,
// at position anchor_b + k, sees only positions anchor_b + k - (W - 1) .. anchor_b + k:
// context keys j >= anchor_b + k - (W - 1) (and j < anchor_b) and its own block's slots
// k - (W - 1) .. k. A packed query tile holds rows of one block with different slots k
// (the virtual rows run over the slots once per head of the group), so its rows see
// different keys. The tile visits the union of its rows' ranges -- with kmin, kmax the
// smallest and largest slot among its rows: context keys [anchor + kmin - (W - 1),
// anchor) and block slots [kmin - (W - 1), kmax] (clipped at 0) -- and masks element by
// element (SlidingRule::hides). A context key tile is left unmasked only when it starts at
// or after anchor + kmax - (W - 1), where every row sees all of it; block tiles are always
// masked (causal). Inverted for the dk/dv pass: context key j is seen by block b iff
// anchor_b - (W - 1) <= j < anchor_b (slot 0 reaches furthest back; the block size plays
// no part), and block slot k' by the slots k' .. k' + W - 1 of its block.
struct SlidingRule {  // positions in 32 bits: Sk < 2^31 (checked at launch)
  bool on = false;
  int w1 = 0;  // W - 1
  int context_len = 0;
  int query_shift = 0;    // query row i is at position i + query_shift (anchor - block's row 0)
  int key_shift = 0;      // block key j is at position j + key_shift (anchor - block's key 0)
  int unmasked_from = 0;  // anchor + kmax - (W - 1): context tiles from here see all keys
  __device__ bool hides(int64_t j, int64_t i) const {
    if (!on) return false;
    const int jj = static_cast<int>(j);
    const int d = static_cast<int>(i) + query_shift - (jj < context_len ? jj : jj + key_shift);
    return d < 0 || d > w1;
  }
  // Whether the key tile starting at j0 (all context keys or all block keys) needs masks.
  __device__ bool masks_tile(int64_t j0) const {
    return on && (j0 >= context_len || j0 < unmasked_from);
  }
};

// Hides (-inf) the scores of a query-side kernel's key tile that its rows may not see:
// sc[n][e] (an m16n8 C fragment per n) is key j0 + 8 n + 2 (lane % 4) + e % 2 of query row
// ir[e / 2]; keys past jend, past the causal diagonal or outside the sliding window.
template <int N>
__device__ inline void mask_scores(float (&sc)[N][4], const int (&ir)[2], int64_t j0, int64_t jend,
                                   const CausalRule& causal, const SlidingRule& sliding, int lane) {
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int64_t j = j0 + n * 8 + (lane % 4) * 2 + (e & 1);
      const int64_t i = ir[e / 2];  // (Sq < 2^31: checked at launch)
      if (j >= jend || causal.hides(j, i) || sliding.hides(j, i)) sc[n][e] = -INFINITY;
    }
  }
}

// Which (head, query row) row r of a query tile is (Note [Flash tiles]).
struct QueryTile {
  bool packed = false;    // dflash: virtual rows of one block across a head group
  int64_t head = 0;       // standard: the head; packed: the group's first head
  int64_t first = 0;      // standard: first query row; packed: first virtual row
  int64_t block_row = 0;  // packed: the block's first query row
  int64_t limit = 0;      // standard: Sq; packed: group * block_size
  int64_t block_size = 1;

  __device__ bool row(int r, int64_t& h, int64_t& i) const {
    const int64_t x = first + r;
    if (x >= limit) return false;
    if (!packed) {
      h = head;
      i = x;
    } else {
      h = head + x / block_size;
      i = block_row + x % block_size;
    }
    return true;
  }
};

// Up to two key ranges a tile visits, in key tiles of kTile starting at each begin.
struct KeyPlan {
  // (indexed by constants only, so that the plan stays in registers: a runtime index put it
  // in local memory, which the forward read every key tile)
  int64_t begin[2] = {0, 0}, end[2] = {0, 0};
  int count = 0;
  // Appends the range [lo, hi) (at most two).
  __device__ void add(int64_t lo, int64_t hi) {
    if (count == 0) {
      begin[0] = lo;
      end[0] = hi;
    } else {
      begin[1] = lo;
      end[1] = hi;
    }
    ++count;
  }
  __device__ int64_t tiles0() const {
    return count > 0 ? (end[0] - begin[0] + kTile - 1) / kTile : 0;
  }
  __device__ int64_t total_tiles() const {
    return tiles0() + (count > 1 ? (end[1] - begin[1] + kTile - 1) / kTile : 0);
  }
  // Key tile t of the plan: its first key and the end of its range.
  __device__ void tile(int64_t t, int64_t& j0, int64_t& jend) const {
    const int64_t n0 = tiles0();
    const bool first = t < n0;
    j0 = (first ? begin[0] + t * kTile : begin[1] + (t - n0) * kTile);
    jend = first ? end[0] : end[1];
  }
};

// Grid (x_tiles * units, 1, B) for the query-side kernels (forward, dq); blockIdx.x =
// tile * units + unit, so every head's tile t is launched before any head's tile t + 1.
struct QueryGrid {
  int64_t tiles_per_unit = 0;  // standard: per head; packed: per block
  int64_t x_tiles = 0;         // tiles per unit
  int64_t units = 0;           // Hq (standard) or Hkv (packed)
};

// rows: query rows per tile (a multiple of 16 * kWarps).
inline QueryGrid query_grid(const AttnShape& s, const AttnMaskArgs& m, int64_t rows_per_tile) {
  QueryGrid g;
  if (m.kind == AttnMaskKind::dflash) {
    const int64_t rows = (s.Hq / s.Hkv) * m.block_size;
    g.tiles_per_unit = (rows + rows_per_tile - 1) / rows_per_tile;
    g.x_tiles = g.tiles_per_unit * m.num_blocks;
    g.units = s.Hkv;
  } else {
    g.tiles_per_unit = (s.Sq + rows_per_tile - 1) / rows_per_tile;
    g.x_tiles = g.tiles_per_unit;
    g.units = s.Hq;
  }
  return g;
}

// The key ranges of packed DFlash tile qt of a block anchored at `anchor` (>= 0) whose
// keys start at block_begin; under the sliding rule also the tile's SlidingRule.
__device__ inline void dflash_key_plan(const AttnMaskArgs& m, const QueryTile& qt, int64_t anchor,
                                       int64_t block_begin, int64_t rows_per_tile, KeyPlan& kp,
                                       SlidingRule& sr) {
  const int64_t bs = m.block_size;
  if (m.sliding_window == 0) {  // full rule: [0, anchor) and the whole block
    if (anchor > 0) kp.add(0, anchor);
    kp.add(block_begin, block_begin + bs);
    return;
  }
  // Note [Sliding tiles]: the slots of virtual rows first .. last (one head's slots, or
  // a run that wraps into the next head and so holds slot bs - 1 and slot 0).
  const int64_t last = min(qt.first + rows_per_tile, qt.limit) - 1;
  int64_t kmin = 0, kmax = bs - 1;
  if (qt.first / bs == last / bs) {
    kmin = qt.first % bs;
    kmax = last % bs;
  }
  const int64_t w1 = m.sliding_window - 1;
  const int64_t first_context = max(int64_t{0}, anchor + kmin - w1);
  if (first_context < anchor) { kp.add(first_context, anchor); }
  kp.add(block_begin + max(int64_t{0}, kmin - w1), block_begin + kmax + 1);
  sr.on = true;
  sr.w1 = static_cast<int>(min(w1, int64_t{INT32_MAX}));
  sr.context_len = static_cast<int>(m.context_len);
  sr.query_shift = static_cast<int>(anchor - qt.block_row);
  sr.key_shift = static_cast<int>(anchor - block_begin);
  sr.unmasked_from = static_cast<int>(max(anchor + kmax - w1, int64_t{INT32_MIN}));
}

// The query tile of CTA (x, unit, b), the key ranges its rows may see and, under the
// sliding DFlash rule, the per-element rule (Note [Sliding tiles]).
__device__ inline void query_tile_of(const AttnShape& s, const AttnMaskArgs& m,
                                     int64_t rows_per_tile, int64_t tiles_per_unit, int64_t x,
                                     int64_t unit, int64_t b, QueryTile& qt, KeyPlan& kp,
                                     SlidingRule& sr) {
  if (m.kind == AttnMaskKind::dflash) {
    const int64_t group = s.Hq / s.Hkv;
    // Last block first: anchors are usually sorted, so the blocks that see the most context
    // keys start first and the light ones fill the last wave (as causal tiles do below).
    const int64_t block = m.num_blocks - 1 - x / tiles_per_unit;
    qt.packed = true;
    qt.head = unit * group;
    qt.first = (x % tiles_per_unit) * rows_per_tile;
    qt.block_row = block * m.block_size;
    qt.limit = group * m.block_size;
    qt.block_size = m.block_size;
    const int64_t anchor = attn::dflash_anchor(m, b, block);
    if (anchor >= 0) {
      dflash_key_plan(m, qt, anchor, m.context_len + block * m.block_size, rows_per_tile, kp, sr);
    }
    return;
  }
  // Causal: later query tiles see more keys; launch them first (x = 0 is the last tile).
  const int64_t t = m.kind == AttnMaskKind::causal ? tiles_per_unit - 1 - x : x;
  qt.head = unit;
  qt.first = t * rows_per_tile;
  qt.limit = s.Sq;
  int64_t end = s.Sk;
  if (m.kind == AttnMaskKind::causal) {
    const int64_t last = min(s.Sq, qt.first + rows_per_tile) - 1;
    end = min(s.Sk, last + (s.Sk - s.Sq) + 1);
  }
  if (end > 0) {
    kp.begin[0] = 0;
    kp.end[0] = end;
    kp.count = 1;
  }
}

// ---- the prologue of the query-side kernels (forward, dq) ----------------------------------
// Note [Query CTA prologue]: a forward or dq CTA first finds its query tile and the key
// ranges the tile's rows see (query_tile_of on blockIdx), the K and V rows of the tile's
// kv head, and how many key tiles it walks; then loads its query-side rows and the first
// key tile. Args is FwdArgs or BwdArgs: both carry s, m, k, v, tiles_per_unit and units.

template <typename T>
struct QueryCta {
  int64_t b = 0;  // batch (Note [Batch grid])
  QueryTile qt;
  KeyPlan kp;
  SlidingRule sliding;       // on only under the sliding DFlash rule
  const T* kbase = nullptr;  // row 0 of the kv head's K
  const T* vbase = nullptr;  // and V
  int64_t key_tiles = 0;     // kp.total_tiles()
};

// Note [Batch grid]: a grid's z dimension holds at most 65535 blocks, so the batch is
// spread over y and z: b = blockIdx.y * gridDim.z + blockIdx.z (batch_grid on the host).
// When B is not a multiple of gridDim.z the last y-row has blocks past the batch: every
// flash kernel's first statement returns from those (no barrier has been reached yet).
__device__ inline int64_t batch_of_block() {
  return static_cast<int64_t>(blockIdx.y) * gridDim.z + blockIdx.z;
}
inline dim3 batch_grid(int64_t x_blocks, int64_t B) {
  const int64_t z = B < 65535 ? B : 65535, y = (B + z - 1) / z;
  CG_CHECK(x_blocks < (int64_t{1} << 31) && y < 65536,
           "scaled_dot_product_attention: too many tiles for one launch on cuda (", x_blocks,
           " blocks per batch entry, batch ", B, ")");
  return dim3(static_cast<unsigned>(x_blocks), static_cast<unsigned>(y), static_cast<unsigned>(z));
}

template <typename T, typename Args>
__device__ inline QueryCta<T> query_cta_of(const Args& a, int64_t rows_per_tile) {
  QueryCta<T> c;
  c.b = batch_of_block();
  const int64_t unit = blockIdx.x % a.units, tile = blockIdx.x / a.units;
  query_tile_of(a.s, a.m, rows_per_tile, a.tiles_per_unit, tile, unit, c.b, c.qt, c.kp, c.sliding);
  const int64_t kv_head = c.qt.packed ? unit : c.qt.head / (a.s.Hq / a.s.Hkv);
  c.kbase = head_rows<T>(a.k, c.b, kv_head);
  c.vbase = head_rows<T>(a.v, c.b, kv_head);
  c.key_tiles = c.kp.total_tiles();
  return c;
}

// Key tile t of the CTA's plan into `stage` of sK and sV (each (2, kTile, HD + kPad)).
template <typename T, int HD, typename Args>
__device__ inline void load_key_tile_async(const QueryCta<T>& c, const Args& a, T* sK, T* sV,
                                           int64_t t, int stage) {
  constexpr int LD = HD + kPad;
  int64_t j0, jend;
  c.kp.tile(t, j0, jend);
  load_kv_tile_async<T, HD>(sK + stage * kTile * LD, sV + stage * kTile * LD, a.k, a.v, c.kbase,
                            c.vbase, j0, jend);
}

// The R rows of the CTA's query tile in operand x (q, grad_out) into smem (R, HD + kPad).
template <typename T, int R, int HD>
__device__ inline void load_query_rows_async(T* smem, const AttnOperand& x, const QueryTile& qt,
                                             int64_t b) {
  load_rows_async<T, R, HD>(smem, x.data, [&](int r) -> const T* {
    int64_t h = 0, i = 0;
    return qt.row(r, h, i) ? query_row<T>(x, b, h, i) : nullptr;
  });
}

// The loads before the first key tile's math: the tile's R query rows of Q into sQ (and of
// grad_out into sG when g is given: the dq pass), key tile 0 into stage 0 of sK and sV;
// then waits for them and syncs the CTA.
template <typename T, int R, int HD, typename Args>
__device__ inline void load_first_tiles(const QueryCta<T>& c, const Args& a, T* sQ,
                                        const AttnOperand* g, T* sG, T* sK, T* sV) {
  load_query_rows_async<T, R, HD>(sQ, a.q, c.qt, c.b);
  if (g != nullptr) load_query_rows_async<T, R, HD>(sG, *g, c.qt, c.b);
  if (c.key_tiles > 0) load_key_tile_async<T, HD>(c, a, sK, sV, 0, 0);
  cp_async_commit();
  cp_async_wait_all();
  __syncthreads();
}

// Step t of a query CTA's walk over its key tiles (two smem stages): starts loading tile
// t + 1 into the other stage, and names tile t's keys [j0, jend) and its K and V in smem.
template <typename T>
struct KeyTileStep {
  int64_t j0 = 0, jend = 0;
  const T* tK = nullptr;
  const T* tV = nullptr;
};
template <typename T, int HD, typename Args>
__device__ inline KeyTileStep<T> key_tile_step(const QueryCta<T>& c, const Args& a, T* sK, T* sV,
                                               int64_t t) {
  const int stage = t & 1;
  if (t + 1 < c.key_tiles) load_key_tile_async<T, HD>(c, a, sK, sV, t + 1, stage ^ 1);
  cp_async_commit();
  KeyTileStep<T> k;
  c.kp.tile(t, k.j0, k.jend);
  k.tK = sK + stage * kTile * (HD + kPad);
  k.tV = sV + stage * kTile * (HD + kPad);
  return k;
}

// Launches a query-side kernel over its grid (query_grid) with `smem` bytes of dynamic
// shared memory and `threads` threads a CTA; `a` is completed with the grid's
// tiles_per_unit and units.
template <typename Args>
void launch_query_kernel(void (*kernel)(Args), Args a, int64_t rows_per_tile, int smem,
                         cudaStream_t stream, int threads = kThreads) {
  const QueryGrid g = query_grid(a.s, a.m, rows_per_tile);
  CG_CHECK(a.s.Sq < (int64_t{1} << 31), "scaled_dot_product_attention: ", a.s.Sq,
           " query rows are too many for one launch on cuda (at most 2^31 - 1)");
  CG_CHECK(a.m.sliding_window == 0 || a.s.Sk < (int64_t{1} << 31),
           "scaled_dot_product_attention: the sliding DFlash rule on cuda takes at most 2^31 - 1 "
           "keys, got ",
           a.s.Sk);
  const dim3 grid = batch_grid(g.x_tiles * g.units, a.s.B);  // Note [Batch grid]
  CG_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
  a.tiles_per_unit = g.tiles_per_unit;
  a.units = g.units;
  kernel<<<grid, threads, smem, stream>>>(a);
  CG_CUDA_CHECK(cudaGetLastError());
}

// Calls f.template operator()<T, HD>() for a flash dtype (bf16, f16) and head dim (64, 128).
template <typename F>
void dispatch_flash(DType dtype, int64_t hd, F&& f) {
  if (dtype == DType::bf16) {
    if (hd == 64)
      f.template operator()<__nv_bfloat16, 64>();
    else
      f.template operator()<__nv_bfloat16, 128>();
  } else {
    if (hd == 64)
      f.template operator()<__half, 64>();
    else
      f.template operator()<__half, 128>();
  }
}

}  // namespace cg::cuda::flash
