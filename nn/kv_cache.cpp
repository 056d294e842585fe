// Why this file exists: the preallocated per-layer key/value buffers of kv_cache.h.
#include "nn/kv_cache.h"

#include "core/factories.h"
#include "core/views.h"

namespace cg::nn {

KVCache::KVCache(const Qwen3Config& config, int64_t max_length, KVCacheOptions options)
    : max_length_(max_length),
      batch_(options.batch),
      num_kv_heads_(config.num_kv_heads),
      head_dim_(config.head_dim),
      dtype_(options.dtype),
      device_(options.device) {
  config.validate();
  CG_CHECK(max_length > 0,
           "KVCache: max_length must be positive (the longest sequence the "
           "cache will hold: prompt + new tokens + one draft block), got ",
           max_length);
  CG_CHECK(options.batch > 0, "KVCache: batch must be positive, got ", options.batch);
  CG_CHECK(is_floating(options.dtype),
           "KVCache: dtype must be floating (the model's "
           "parameter dtype), got ",
           dtype_name(options.dtype));
  const Shape shape{batch_, num_kv_heads_, max_length_, head_dim_};
  const TensorOptions t{.dtype = dtype_, .device = device_};
  for (int64_t l = 0; l < config.num_layers; ++l) {
    keys_.push_back(empty(shape, t));
    values_.push_back(empty(shape, t));
  }
}

size_t KVCache::nbytes() const {
  size_t n = 0;
  for (size_t l = 0; l < keys_.size(); ++l) n += keys_[l].nbytes() + values_[l].nbytes();
  return n;
}

void KVCache::truncate(int64_t length) {
  CG_CHECK(length >= 0 && length <= length_, "KVCache::truncate: length must be in [0, ", length_,
           "] (the cached length; the cache cannot grow by truncating), got ", length);
  length_ = length;
}

void KVCache::check_layer(int64_t layer, const char* what) const {
  CG_CHECK(layer >= 0 && layer < num_layers(), "KVCache::", what, ": layer ", layer,
           " is out of range; the cache has layers 0..", num_layers() - 1);
}

std::pair<Tensor, Tensor> KVCache::write(int64_t layer, const Tensor& k, const Tensor& v) {
  check_layer(layer, "write");
  const Shape expected_tail{num_kv_heads_, head_dim_};
  CG_CHECK(k.defined() && v.defined() && k.dim() == 4 && k.shape() == v.shape() &&
               k.size(0) == batch_ && k.size(2) == num_kv_heads_ && k.size(3) == head_dim_,
           "KVCache::write: k and v must both be [B=", batch_, ", n, Hkv=", num_kv_heads_,
           ", hd=", head_dim_, "], got k ", k.defined() ? shape_str(k.shape()) : "undefined",
           ", v ", v.defined() ? shape_str(v.shape()) : "undefined");
  CG_CHECK(k.dtype() == dtype_ && v.dtype() == dtype_ && k.device() == device_,
           "KVCache::write: the cache holds ", dtype_name(dtype_), " on ", device_.str(),
           " but k is ", dtype_name(k.dtype()), " on ", k.device().str(),
           "; make the cache with the model's dtype and device (make_cache)");
  const int64_t n = k.size(1), end = length_ + n;
  CG_CHECK(end <= max_length_, "KVCache::write: ", n, " new positions after ", length_,
           " cached ones pass max_length ", max_length_,
           "; make the cache longer (prompt + new tokens + one draft block)");
  // [B, n, Hkv, hd] -> the cache's [B, Hkv, n, hd] slots, a strided copy.
  raw::copy_(raw::narrow(keys_[static_cast<size_t>(layer)], 2, length_, n),
             raw::transpose(k, 1, 2));
  raw::copy_(raw::narrow(values_[static_cast<size_t>(layer)], 2, length_, n),
             raw::transpose(v, 1, 2));
  return {raw::narrow(keys_[static_cast<size_t>(layer)], 2, 0, end),
          raw::narrow(values_[static_cast<size_t>(layer)], 2, 0, end)};
}

void KVCache::advance(int64_t n) {
  CG_CHECK(n >= 0 && length_ + n <= max_length_, "KVCache::advance: ", n, " positions after ",
           length_, " do not fit in max_length ", max_length_);
  length_ += n;
}

Tensor KVCache::keys(int64_t layer) const {
  check_layer(layer, "keys");
  return raw::narrow(keys_[static_cast<size_t>(layer)], 2, 0, length_);
}

Tensor KVCache::values(int64_t layer) const {
  check_layer(layer, "values");
  return raw::narrow(values_[static_cast<size_t>(layer)], 2, 0, length_);
}

}  // namespace cg::nn
