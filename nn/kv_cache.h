// Why this file exists: decoding one token at a time must not recompute the keys and
// values of the whole prefix on every step -- that would make target-only decoding
// quadratic and any "speedup" of speculative decoding over it meaningless. The cache
// keeps, per decoder layer, the keys (after k_norm and RoPE) and values of every position
// seen so far, in buffers allocated once for max_length positions: appending a token
// writes into them, and rejecting speculative tokens is truncate(), which only moves the
// length back (nothing is freed or copied).
//
//   cg::nn::KVCache cache = lm.make_cache(/*max_length=*/512);
//   auto out = lm.forward_cached(prompt_ids, cache);      // positions 0 .. P-1
//   auto step = lm.forward_cached(next_id, cache);        // position P
//   cache.truncate(P);                                     // forget position P
//
// Layout per layer: keys and values [B, Hkv, max_length, hd] each (heads before
// positions, so one head's keys are consecutive rows, as attention reads them). The
// visible part is a narrowed view [B, Hkv, length, hd]. All B rows share one length.
//
// Protocol (Attention::forward_cached): every layer calls write(layer, k, v) for the n
// new positions, which stores them at length() .. length()+n-1 and returns the views of
// positions 0 .. length()+n-1; after the last layer the model calls advance(n). Until
// then length() is unchanged, so every layer writes at the same place.
//
// Hybrid targets (Qwen3.5 / Qwen3.6, config.layer_types): a Gated DeltaNet layer has no
// keys or values. Its entry is its recurrent state [B, Hv, dk, dv] (f32) and its conv
// state (the last K-1 conv inputs, [B, K-1, C] in the model dtype), both after length()
// positions; GatedDeltaNet::forward_cached reads them (recurrent_state, conv_state) and
// hands the new ones over with write_linear. truncate() on such a cache is
// Note [DeltaNet rollback].
//
// Note [DeltaNet rollback]: a recurrent state cannot drop positions the way a key buffer
// does, so rolling back rejected speculative tokens recomputes instead: each
// forward_cached call keeps, per DeltaNet layer, the state and conv history from before
// the call (the tensors it replaced: nothing is copied) and the call's own inputs to the
// recurrence -- in_proj_qkv's output before the conv (from which the conv, q, k and v are
// recomputed exactly and the new conv history is cut), g and beta -- plus the layer's
// conv weight. truncate(L) with L inside the last call's span [start, length()) replays
// the conv and the gated delta rule over the accepted L - start positions from that
// snapshot: bit for bit the state a call of only those positions would have produced
// (the same ops on the same values; the tests check it), with no per-token snapshots.
// The accepted prefix stays the snapshot's span, so truncating again within it works.
// Truncating further back than the last call's start is refused (that state is gone),
// except truncate(0) = clear(), which zeroes every state. Speculative decoding
// (train/speculative_decoding.cpp) truncates once after each verify call, inside it.
// Memory per DeltaNet layer and batch row, beyond the state itself: a second state
// (Hv dk dv fp32; 2 MiB at Hv = 32, dk = dv = 128) and (C + 2 Hv) values per position of
// the last call (C = 2 Hk dk + Hv dv; 16 KiB a position in bf16 at Hk = 16, Hv = 32,
// dk = dv = 128), held until the next call replaces them. The replay costs one call's
// conv and recurrence over the accepted positions only.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/config.h"

namespace cg::nn {

// The sizes of one Gated DeltaNet layer (config.linear_*): the layer (nn/gated_deltanet.h)
// and its cache entry share them.
struct GatedDeltaShape {
  int64_t num_k_heads = 0, num_v_heads = 0, k_head_dim = 0, v_head_dim = 0, conv_kernel = 0;
  int64_t key_dim() const { return num_k_heads * k_head_dim; }
  int64_t value_dim() const { return num_v_heads * v_head_dim; }
  int64_t conv_dim() const { return 2 * key_dim() + value_dim(); }  // q | k | v channels
  static GatedDeltaShape of(const Qwen3Config& config);
};

// What GatedDeltaNet::forward_cached hands the cache after running n new positions.
struct LinearLayerWrite {
  Tensor final_state;  // [B, Hv, dk, dv] f32: the recurrent state after the n positions
  Tensor mixed_qkv;    // [B, n, C] in_proj_qkv's output (before the conv), the cache's dtype
  Tensor g, beta;      // [B, n, Hv] the call's gates (g f32)
  Tensor conv_weight;  // the layer's conv weight (replayed by truncate)
};

struct KVCacheOptions {
  int64_t batch = 1;
  DType dtype = DType::f32;  // the model's parameter dtype
  Device device{};
};

class KVCache {
 public:
  // Room for max_length positions of every layer of `config`; allocated here, once. A
  // Gated DeltaNet layer (config.is_linear_layer) gets zero states instead of buffers.
  KVCache(const Qwen3Config& config, int64_t max_length, KVCacheOptions options = {});
  // Move-only: a copy would share the buffers and let two decoders overwrite each other.
  KVCache(KVCache&&) = default;
  KVCache& operator=(KVCache&&) = default;
  KVCache(const KVCache&) = delete;
  KVCache& operator=(const KVCache&) = delete;

  int64_t length() const { return length_; }
  int64_t max_length() const { return max_length_; }
  int64_t batch() const { return batch_; }
  int64_t num_layers() const { return static_cast<int64_t>(keys_.size()); }
  bool is_linear_layer(int64_t layer) const;
  int64_t num_kv_heads() const { return num_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  // Every layer's keys and values (the whole preallocation) and DeltaNet states (the
  // current ones; the rollback snapshot is extra, Note [DeltaNet rollback]).
  size_t nbytes() const;

  // Drops positions >= length (rejected speculative tokens). length <= length(). With
  // DeltaNet layers, length must be 0 or inside the last forward_cached call (Note
  // [DeltaNet rollback]); the cache is unchanged when it throws.
  void truncate(int64_t length);
  void clear() { truncate(0); }

  // Stores k, v [B, n, Hkv, hd] (the layout right after k_proj and a view) at positions
  // length() .. length()+n-1 of `layer` and returns that layer's keys and values of
  // positions 0 .. length()+n-1 as views [B, Hkv, length()+n, hd]. Throws when the
  // positions would pass max_length, or the shapes/dtype don't match the cache.
  std::pair<Tensor, Tensor> write(int64_t layer, const Tensor& k, const Tensor& v);

  // After every layer wrote the same n positions: length() += n.
  void advance(int64_t n);

  // The visible keys/values of `layer` [B, Hkv, length(), hd] (views).
  Tensor keys(int64_t layer) const;
  Tensor values(int64_t layer) const;

  // ---- Gated DeltaNet layers ----
  // The state after length() positions: recurrent [B, Hv, dk, dv] f32, conv [B, K-1, C]
  // (the cache's dtype). Read-only; a write replaces them with new tensors.
  Tensor recurrent_state(int64_t layer) const;
  Tensor conv_state(int64_t layer) const;
  // The state after length() + n positions, from the layer's call on those n positions
  // (Note [DeltaNet rollback]: the replaced state and the call's inputs are kept).
  void write_linear(int64_t layer, const LinearLayerWrite& write);
  // Puts in a state made elsewhere: recurrent [B, Hv, dk, dv] f32 and conv [B, K-1, C] in
  // the cache's dtype and device, the state after the cache's first `seen` positions --
  // length(), or length() + n when the next advance(n) makes visible n positions whose
  // keys the caller wrote (a batch assembled from other caches' rows: Note [Ragged batch],
  // train/batched_decode.cpp). Nothing to roll back into: truncate() below `seen` is
  // refused (except to 0) until the next forward_cached call.
  void set_linear_state(int64_t layer, const Tensor& recurrent, const Tensor& conv, int64_t seen);

 private:
  void check_layer(int64_t layer, const char* what) const;
  void check_attention_layer(int64_t layer, const char* what) const;
  void check_linear_layer(int64_t layer, const char* what) const;

  // One DeltaNet layer's entry. The last call (positions call_start .. call_start +
  // mixed_qkv.size(1) - 1) and the state before it: Note [DeltaNet rollback].
  struct LinearEntry {
    Tensor recurrent, conv;
    int64_t seen = 0;         // the positions recurrent and conv summarise
    int64_t call_start = -1;  // -1: no call to roll back into
    Tensor recurrent_before, conv_before, mixed_qkv, g, beta, conv_weight;
  };
  void reset_linear(LinearEntry& entry) const;
  // The entry's state after the first m positions of its last call (m <= the call's n).
  void roll_back(LinearEntry& entry, int64_t m) const;

  std::vector<Tensor> keys_, values_;  // per layer [B, Hkv, max_length, hd]; undefined for
                                       // DeltaNet layers
  std::vector<LinearEntry> linear_;    // per layer; used by DeltaNet layers only
  std::vector<bool> is_linear_;
  GatedDeltaShape linear_shape_{};
  int64_t length_ = 0, max_length_ = 0, batch_ = 1, num_kv_heads_ = 0, head_dim_ = 0;
  DType dtype_ = DType::f32;
  Device device_{};
};

}  // namespace cg::nn
