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
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/tensor.h"
#include "nn/config.h"

namespace cg::nn {

struct KVCacheOptions {
  int64_t batch = 1;
  DType dtype = DType::f32;  // the model's parameter dtype
  Device device{};
};

class KVCache {
 public:
  // Room for max_length positions of every layer of `config`; allocated here, once.
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
  int64_t num_kv_heads() const { return num_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  size_t nbytes() const;  // every layer's keys and values (the whole preallocation)

  // Drops positions >= length (rejected speculative tokens). length <= length().
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

 private:
  void check_layer(int64_t layer, const char* what) const;

  std::vector<Tensor> keys_, values_;  // per layer [B, Hkv, max_length, hd]
  int64_t length_ = 0, max_length_ = 0, batch_ = 1, num_kv_heads_ = 0, head_dim_ = 0;
  DType dtype_ = DType::f32;
  Device device_{};
};

}  // namespace cg::nn
