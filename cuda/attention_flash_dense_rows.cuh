// Why this file exists: the query tiles of the Hopper forward (attention_flash_forward_wgmma.cu)
// under the DFlash rule, packed densely across blocks (Note [Dense DFlash rows]), and the
// per-row key rule that packing needs; kept apart from attention_flash_common.cuh, whose
// one-block tiles the other query-side kernels still use.
#pragma once

#include <cstdint>

#include "cuda/attention_flash_common.cuh"

namespace cg::cuda::flash {

// Note [Dense DFlash rows]: a one-block query tile (Note [Flash tiles]) holds group *
// block_size virtual rows, 4 * 24 = 96 at the drafter's 32/8 heads, so a 128-row CTA of the
// wgmma forward computed 25% padding, and the whole CTA's per-key-tile work (loads,
// barriers, the padded warpgroup's softmax) was spread over 96 useful rows. Dense tiles
// number the virtual rows of all blocks of a kv head in one run -- x = q * group *
// block_size + head_in_group * block_size + slot, block num_blocks - 1 - q (last block
// first, as before: sorted anchors put the heaviest blocks first) -- and cut that run into
// CTAs of R rows (192 since Note [Three warpgroups]; 128 before), so every CTA but the last
// is full and a CTA holds the rows of up to ceil(R / (group * block_size)) + 1 blocks.
//   - Its keys: the union of its blocks' ranges, as at most two ranges of a KeyPlan: the
//     context [min lo, max anchor) and the blocks' own keys, contiguous for consecutive
//     blocks. The trainer's anchors are sorted, so consecutive blocks' anchors differ by
//     a few keys (about 4 at 1024 anchors over 4096) and the union is about one block's.
//   - Its masks: each row carries its own ranges (RowKeys) and a key tile is masked element
//     by element in a warp unless it lies inside every one of that warp's rows' context
//     ranges (the block keys' tile is always masked).
//   - Only where the anchors ascend (AttnMaskArgs::anchors_sorted): shuffled anchors (as
//     attention_bench's default) make the union span the farthest of a CTA's anchors and
//     most tiles masked, which measured 1.7x slower than one-block tiles (6.77 against 4.07
//     ms at the drafter's full rule); they take one-block tiles.
//   - A padded block (anchor -1) contributes no keys and its rows see none (lse -inf, zero
//     output, as a one-block tile with no key tiles gives).
// A CTA loads keys some of its rows do not see (a neighbour's block keys, a padded block's
// keys between them, context keys past a row's anchor up to the CTA's largest); their P is
// 0, so their V must be finite, as for any flash kernel's masked keys (the one-block tiles
// load only keys every row sees, bar the sliding window's edges).
// Positions and row numbers run in 32 bits (the launch falls back to the one-block tiles
// otherwise).

// The keys one DFlash query row sees: context keys [ctx_lo, ctx_hi) and block keys
// [blk_lo, blk_hi) (ops/attention_mask.h's rules). Empty for padded blocks and for rows
// past the run's end.
struct RowKeys {
  int ctx_lo = 0, ctx_hi = 0, blk_lo = 0, blk_hi = 0;
  __device__ bool sees(int j) const {
    return (j >= ctx_lo && j < ctx_hi) || (j >= blk_lo && j < blk_hi);
  }
};

// Row `slot` of block `block` in batch row b. (The rule of attn::key_ranges again, in 32
// bits: filled from key_ranges, the kernel took 5 more registers and the forward 3.12-3.15
// ms at the drafter's full rule, against 2.94-2.96 in the H200 calls before and after.)
__device__ inline RowKeys dflash_row_keys(const AttnMaskArgs& m, int64_t b, int block, int slot) {
  RowKeys k;
  const int anchor = static_cast<int>(attn::dflash_anchor(m, b, block));
  if (anchor < 0) return k;
  const int bs = static_cast<int>(m.block_size);
  const int kb = static_cast<int>(m.context_len) + block * bs;
  k.ctx_hi = anchor;
  k.blk_lo = kb;
  k.blk_hi = kb + bs;
  if (m.sliding_window > 0) {  // slot k at position anchor + k sees positions > anchor + k - W
    const int w1 = static_cast<int>(m.sliding_window - 1);
    k.ctx_lo = max(0, anchor + slot - w1);
    k.blk_lo = kb + max(0, slot - w1);
    k.blk_hi = kb + slot + 1;
  }
  return k;
}

// The rows of one dense CTA (Note [Dense DFlash rows]).
struct DenseRows {
  int first = 0;      // the CTA's first virtual row
  int total = 0;      // num_blocks * per_block
  int per_block = 1;  // group * block_size
  int head0 = 0;      // the kv head's first query head
  int block_size = 1, num_blocks = 0;
  // Row r of the CTA: false past the run's end, else its block, slot, head and query row.
  __device__ bool row(int r, int& block, int& slot, int64_t& h, int64_t& i) const {
    const int x = first + r;
    if (x >= total) return false;
    const int q = x / per_block, w = x - q * per_block;
    const int hg = w / block_size;
    block = num_blocks - 1 - q;
    slot = w - hg * block_size;
    h = head0 + hg;
    i = static_cast<int64_t>(block) * block_size + slot;
    return true;
  }
  __device__ bool row(int r, int64_t& h, int64_t& i) const {
    int block = 0, slot = 0;
    return row(r, block, slot, h, i);
  }
};

// Whether a DFlash launch takes dense tiles: its anchors ascend (else neighbouring blocks
// may see far apart key ranges, and a CTA would walk their union) and every position and
// row number fits 32 bits.
inline bool dense_rows_pay(const AttnShape& s, const AttnMaskArgs& m) {
  const int64_t group = s.Hq / s.Hkv;
  return m.kind == AttnMaskKind::dflash && m.anchors_sorted && s.Sk < (int64_t{1} << 30) &&
         m.num_blocks * group * m.block_size < (int64_t{1} << 30);
}

// CTAs per kv head of a dense launch of `rows` rows each.
inline int64_t dense_tiles(const AttnShape& s, const AttnMaskArgs& m, int rows) {
  const int64_t total = m.num_blocks * (s.Hq / s.Hkv) * m.block_size;
  return (total + rows - 1) / rows;
}

template <typename T>
struct DenseCta {
  int64_t b = 0;  // batch (Note [Batch grid])
  DenseRows rows;
  KeyPlan kp;
  const T* kbase = nullptr;  // row 0 of the kv head's K
  const T* vbase = nullptr;  // and V
  int64_t key_tiles = 0;     // kp.total_tiles()
};

// The dense CTA of blockIdx (tile * Hkv + kv head, batch) holding `rows` rows: its rows and
// the union of their blocks' key ranges.
template <typename T, typename Args>
__device__ inline DenseCta<T> dense_cta_of(const Args& a, int rows) {
  const AttnShape& s = a.s;
  const AttnMaskArgs& m = a.m;
  DenseCta<T> c;
  c.b = batch_of_block();
  const int unit = static_cast<int>(blockIdx.x % s.Hkv),
            tile = static_cast<int>(blockIdx.x / s.Hkv);
  const int group = static_cast<int>(s.Hq / s.Hkv);
  DenseRows& d = c.rows;
  d.block_size = static_cast<int>(m.block_size);
  d.num_blocks = static_cast<int>(m.num_blocks);
  d.per_block = group * d.block_size;
  d.total = d.num_blocks * d.per_block;
  d.first = tile * rows;
  d.head0 = unit * group;
  c.kbase = head_rows<T>(a.k, c.b, unit);
  c.vbase = head_rows<T>(a.v, c.b, unit);
  // Blocks [lo, hi] hold the CTA's rows (its first row is in the highest).
  const int last = min(d.first + rows, d.total) - 1;
  const int hi = d.num_blocks - 1 - d.first / d.per_block,
            lo = d.num_blocks - 1 - last / d.per_block;
  const int w1 = static_cast<int>(m.sliding_window > 0 ? m.sliding_window - 1 : 0);
  int ctx_lo = INT32_MAX, ctx_hi = 0;
  bool any = false;
  for (int blk = lo; blk <= hi; ++blk) {
    const int anchor = static_cast<int>(attn::dflash_anchor(m, c.b, blk));
    if (anchor < 0) continue;
    any = true;
    const int from = m.sliding_window > 0 ? max(0, anchor - w1) : 0;
    if (from < anchor) {
      ctx_lo = min(ctx_lo, from);
      ctx_hi = max(ctx_hi, anchor);
    }
  }
  if (!any) return c;  // every block padded: no keys, no key tiles
  if (ctx_lo < ctx_hi) { c.kp.add(ctx_lo, ctx_hi); }
  c.kp.add(m.context_len + static_cast<int64_t>(lo) * d.block_size,
           m.context_len + static_cast<int64_t>(hi + 1) * d.block_size);
  c.key_tiles = c.kp.total_tiles();
  return c;
}

// Hides (-inf) the scores of a key tile that this thread's two rows may not see: sc[n][e]
// (an m16n8 C fragment per n) is key j0 + 8 n + 2 (lane % 4) + e % 2 of row rk[e / 2].
// Keys from jend (the end of the tile's range) on were zero-filled, not loaded: a context
// tile's tail may reach block keys that a row sees, so they are hidden whatever the row.
// Branch-free: key j lies in [lo, hi) when (unsigned)(j - lo) < hi - lo, and j is this
// lane's first key plus a constant c = 8 n + e % 2, so each test is an add and a compare
// (written with RowKeys::sees, short-circuit tests of every key took about 600
// instructions a tile, a branch each, where the sliding rule's window edges mask a tile
// or two of every CTA; Note [Forward instructions] in attention_flash_forward_wgmma.cu).
template <int N>
__device__ inline void mask_dense_scores(float (&sc)[N][4], const RowKeys (&rk)[2], int j0,
                                         int jend, int lane) {
  const int j_lane = j0 + (lane % 4) * 2;
  const int left = jend - j_lane;  // keys j_lane + c with c < left are before jend
  uint32_t ctx_off[2], ctx_w[2], blk_off[2], blk_w[2];
#pragma unroll
  for (int hf = 0; hf < 2; ++hf) {
    ctx_off[hf] = static_cast<uint32_t>(j_lane - rk[hf].ctx_lo);
    ctx_w[hf] =
        static_cast<uint32_t>(max(rk[hf].ctx_hi - rk[hf].ctx_lo, 0));  // W < slot + 1: empty
    blk_off[hf] = static_cast<uint32_t>(j_lane - rk[hf].blk_lo);
    blk_w[hf] = static_cast<uint32_t>(max(rk[hf].blk_hi - rk[hf].blk_lo, 0));
  }
#pragma unroll
  for (int n = 0; n < N; ++n) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int c = n * 8 + (e & 1), hf = e / 2;
      const uint32_t uc = static_cast<uint32_t>(c);
      const bool keep =
          (c < left) & ((ctx_off[hf] + uc < ctx_w[hf]) | (blk_off[hf] + uc < blk_w[hf]));
      sc[n][e] = keep ? sc[n][e] : -INFINITY;
    }
  }
}

}  // namespace cg::cuda::flash
