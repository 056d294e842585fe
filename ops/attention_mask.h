// Why this file exists: attention needs to know which keys each query may see, and for
// DFlash training the dense [Sq, Sk] boolean answer is exactly what runs out of memory
// (512 blocks x 16 slots against 4K context keys is 8192 x 12288 per head). So a mask is
// either a compact rule -- none, causal, DFlash blocks -- that the kernel turns into at
// most two visible key ranges per query row, or, when nothing else fits, a dense boolean
// tensor. Both go through one resolved form (ResolvedAttentionMask) that kernels read.
//
//   auto mask = cg::AttentionMask::dflash_blocks(/*context_len=*/S, /*block_size=*/16,
//                                                anchors /* [N] or [B, N] i64 */);
//   cg::Tensor out = cg::scaled_dot_product_attention(q, k, v, mask);
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace cg {

class AttentionMask {
 public:
  enum class Kind : int8_t { none, causal, dflash_blocks, dense };

  // Every query sees every key.
  static AttentionMask none();
  // Query i sees keys j <= i + (Sk - Sq): aligned to the bottom-right corner, as in
  // FlashAttention, so that the last query sees every key. With Sq == Sk this is the
  // usual lower triangle; with Sq > Sk the first Sq - Sk rows see nothing (output 0).
  static AttentionMask causal();
  // DFlash training (docs/dflash_training.md). Queries are N blocks of
  // block_size tokens (Sq = N * block_size); keys are context_len context keys followed
  // by the N * block_size block keys (Sk = context_len + N * block_size). A query of
  // block b sees context key j iff j < anchors[b], and every key of its own block b
  // (bidirectional); never another block.
  //   anchors: i64 [N] (shared by the batch) or [B, N], each in [0, context_len], or
  //            negative for a padded block.
  //   padded:  optional bool of the anchors' shape; true marks a padded block.
  // A padded block sees nothing: its output is 0 and its gradients are 0.
  //   sliding_window: 0 = the full rule above. W > 0 = the sliding rule of the drafter's
  //            sliding layers (docs/dflash_training.md): slot k of block b (position
  //            anchor_b + k) sees context keys anchor_b + k - (W - 1) <= j < anchor_b and
  //            the slots k' of its own block with k - (W - 1) <= k' <= k (causal inside
  //            the block, every key within W - 1 positions behind the query).
  static AttentionMask dflash_blocks(int64_t context_len, int64_t block_size, const Tensor& anchors,
                                     const Tensor& padded = Tensor(), int64_t sliding_window = 0);
  // An explicit mask: bool, broadcastable to [B, Hq, Sq, Sk], true = may attend.
  // Costs O(Sk) per query row whatever it allows; prefer a rule where one fits.
  static AttentionMask dense(const Tensor& allowed);

  Kind kind() const { return kind_; }
  int64_t context_len() const { return context_len_; }
  int64_t block_size() const { return block_size_; }
  int64_t sliding_window() const { return sliding_window_; }  // 0 = full rule
  const Tensor& anchors() const { return anchors_; }
  const Tensor& padded() const { return padded_; }
  const Tensor& allowed() const { return allowed_; }
  std::string str() const;  // "causal", "dflash_blocks(S=4096, block_size=16, N=8)", ...

 private:
  Kind kind_ = Kind::none;
  int64_t context_len_ = 0, block_size_ = 0, sliding_window_ = 0;
  Tensor anchors_, padded_, allowed_;
};

// The keys one query row may see: ranges [begin[r], end[r]) for r < count, ascending and
// disjoint. A dense mask gives the single range [0, Sk), refined per key by allows().
struct KeyRanges {
  std::array<int64_t, 2> begin{}, end{};
  int count = 0;
  int64_t total() const {
    int64_t n = 0;
    for (int r = 0; r < count; ++r) n += end[r] - begin[r];
    return n;
  }
};

// A mask checked against the shapes of one attention call, in the form kernels read:
// plain numbers and host vectors, plus the dense bool tensor when there is one. The
// DFlash anchors are copied here (N values per batch row), so a later in-place change
// to the caller's anchors cannot change what backward sees.
struct ResolvedAttentionMask {
  AttentionMask::Kind kind = AttentionMask::Kind::none;
  int64_t batch = 0, heads = 0, q_len = 0, k_len = 0;  // B, Hq, Sq, Sk

  // dflash_blocks: visible_context[b * context_batch_stride + block] is the number of
  // context keys the block sees (its anchor), or -1 for a padded block.
  int64_t context_len = 0, block_size = 0, num_blocks = 0;
  int64_t sliding_window = 0;  // 0 = full rule; W = the sliding rule (AttentionMask::dflash_blocks)
  std::vector<int64_t> visible_context;
  int64_t context_batch_stride = 0;  // 0 when one set of anchors serves every batch row
  // Whether every batch row's anchors ascend, padded blocks skipped (the trainer sorts
  // them; the CUDA forward packs blocks densely then: Note [Dense DFlash rows]).
  bool anchors_ascend = false;

  // dense: the bool tensor and its element strides at [B, Hq, Sq, Sk] (0 = broadcast).
  Tensor allowed;
  std::array<int64_t, 4> allowed_strides{};

  KeyRanges key_ranges(int64_t b, int64_t i) const {
    KeyRanges r;
    switch (kind) {
      case AttentionMask::Kind::none:
      case AttentionMask::Kind::dense:
        if (k_len > 0) r = {{0, 0}, {k_len, 0}, 1};
        break;
      case AttentionMask::Kind::causal: {
        const int64_t end = std::min(k_len, i + (k_len - q_len) + 1);
        if (end > 0) r = {{0, 0}, {end, 0}, 1};
        break;
      }
      case AttentionMask::Kind::dflash_blocks: {
        const int64_t block = i / block_size;
        const int64_t anchor = visible_context[b * context_batch_stride + block];
        if (anchor < 0) break;  // padded: nothing
        const int64_t block_begin = context_len + block * block_size;
        if (sliding_window == 0) {  // full rule: [0, anchor) and the whole block
          if (anchor > 0) {
            r.begin[r.count] = 0;
            r.end[r.count++] = anchor;
          }
          r.begin[r.count] = block_begin;
          r.end[r.count++] = block_begin + block_size;
          break;
        }
        // Sliding rule: slot k at position anchor + k sees positions > anchor + k - W.
        const int64_t k = i % block_size;
        const int64_t first_context = std::max<int64_t>(0, anchor + k - (sliding_window - 1));
        if (first_context < anchor) {
          r.begin[r.count] = first_context;
          r.end[r.count++] = anchor;
        }
        r.begin[r.count] = block_begin + std::max<int64_t>(0, k - (sliding_window - 1));
        r.end[r.count++] = block_begin + k + 1;
        break;
      }
    }
    return r;
  }
  // Dense masks only: whether query (b, h, i) may see key j.
  bool allows(const bool* data, int64_t b, int64_t h, int64_t i, int64_t j) const {
    return data[b * allowed_strides[0] + h * allowed_strides[1] + i * allowed_strides[2] +
                j * allowed_strides[3]];
  }
};

// Checks `mask` against an attention call of these sizes and resolves it. Throws, naming
// `op`, when the rule's sizes don't match (dflash: Sq != N * block_size, Sk !=
// context_len + N * block_size), an anchor is out of range, or a dense mask is not bool,
// not on `device` (q's), or doesn't broadcast to [B, Hq, Sq, Sk]. DFlash anchors may live
// on any device: they are copied to the host here.
ResolvedAttentionMask resolve_attention_mask(const AttentionMask& mask, int64_t batch,
                                             int64_t heads, int64_t q_len, int64_t k_len,
                                             Device device, const char* op);

}  // namespace cg
