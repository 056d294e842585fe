// Why this file exists: the preallocated per-layer key/value buffers of kv_cache.h, and
// the Gated DeltaNet layers' states with their rollback (Note [DeltaNet rollback]).
#include "nn/kv_cache.h"

#include <string>

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "core/views.h"
#include "nn/gated_deltanet.h"
#include "ops/join_ops.h"

namespace cg::nn {

GatedDeltaShape GatedDeltaShape::of(const Qwen3Config& c) {
  return {.num_k_heads = c.linear_num_key_heads,
          .num_v_heads = c.linear_num_value_heads,
          .k_head_dim = c.linear_key_head_dim,
          .v_head_dim = c.linear_value_head_dim,
          .conv_kernel = c.linear_conv_kernel_dim};
}

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
  CG_CHECK(config.layer_types.empty() ||
               static_cast<int64_t>(config.layer_types.size()) == config.num_layers,
           "KVCache: layer_types has ", config.layer_types.size(), " entries for ",
           config.num_layers, " layers; give one per layer (or none)");
  linear_shape_ = GatedDeltaShape::of(config);
  for (int64_t l = 0; l < config.num_layers; ++l) {
    const bool linear = config.is_linear_layer(l);
    is_linear_.push_back(linear);
    keys_.push_back(linear ? Tensor() : empty(shape, t));
    values_.push_back(linear ? Tensor() : empty(shape, t));
    linear_.emplace_back();
    if (linear) reset_linear(linear_.back());
  }
}

bool KVCache::is_linear_layer(int64_t layer) const {
  check_layer(layer, "is_linear_layer");
  return is_linear_[static_cast<size_t>(layer)];
}

size_t KVCache::nbytes() const {
  size_t n = 0;
  for (size_t l = 0; l < keys_.size(); ++l) {
    if (is_linear_[l]) {
      n += linear_[l].recurrent.nbytes() + linear_[l].conv.nbytes();
    } else {
      n += keys_[l].nbytes() + values_[l].nbytes();
    }
  }
  return n;
}

void KVCache::reset_linear(LinearEntry& entry) const {
  const GatedDeltaShape& s = linear_shape_;
  entry = LinearEntry{};
  entry.recurrent = zeros({batch_, s.num_v_heads, s.k_head_dim, s.v_head_dim},
                          {.dtype = DType::f32, .device = device_});
  entry.conv =
      zeros({batch_, s.conv_kernel - 1, s.conv_dim()}, {.dtype = dtype_, .device = device_});
  entry.seen = 0;
}

void KVCache::truncate(int64_t length) {
  CG_CHECK(length >= 0 && length <= length_, "KVCache::truncate: length must be in [0, ", length_,
           "] (the cached length; the cache cannot grow by truncating), got ", length);
  if (length == length_) return;
  // Note [DeltaNet rollback]: check every DeltaNet layer before changing any.
  for (size_t l = 0; l < linear_.size(); ++l) {
    if (!is_linear_[l] || length == 0) continue;
    const int64_t start = linear_[l].call_start;
    CG_CHECK(start >= 0 && length >= start, "KVCache::truncate(", length, "): layer ", l,
             " is a Gated DeltaNet layer, whose state rolls back only within its last "
             "forward_cached call (positions ",
             start < 0 ? std::string("none")
                       : std::to_string(start) + ".." + std::to_string(length_ - 1),
             "; Note [DeltaNet rollback] in nn/kv_cache.h); truncate right after the call that "
             "wrote the rejected positions, or clear() and run the kept tokens again");
  }
  for (size_t l = 0; l < linear_.size(); ++l) {
    if (!is_linear_[l]) continue;
    if (length == 0) {
      reset_linear(linear_[l]);
    } else {
      roll_back(linear_[l], length - linear_[l].call_start);
    }
    linear_[l].seen = length;
  }
  length_ = length;
}

void KVCache::roll_back(LinearEntry& e, int64_t m) const {
  NoGradGuard no_grad;
  e.mixed_qkv = raw::narrow(e.mixed_qkv, 1, 0, m);
  e.g = raw::narrow(e.g, 1, 0, m);
  e.beta = raw::narrow(e.beta, 1, 0, m);
  if (m == 0) {
    e.recurrent = e.recurrent_before;
    e.conv = e.conv_before;
    return;
  }
  const GatedDeltaResult r = gated_delta_from_projections(
      linear_shape_, e.mixed_qkv, e.conv_weight, e.conv_before, e.g, e.beta, e.recurrent_before);
  e.recurrent = r.final_state;
  const int64_t keep = linear_shape_.conv_kernel - 1;
  const Tensor inputs = cat({e.conv_before, e.mixed_qkv}, 1);
  e.conv = raw::contiguous(raw::narrow(inputs, 1, inputs.size(1) - keep, keep));
}

void KVCache::check_layer(int64_t layer, const char* what) const {
  CG_CHECK(layer >= 0 && layer < num_layers(), "KVCache::", what, ": layer ", layer,
           " is out of range; the cache has layers 0..", num_layers() - 1);
}

void KVCache::check_attention_layer(int64_t layer, const char* what) const {
  check_layer(layer, what);
  CG_CHECK(!is_linear_[static_cast<size_t>(layer)], "KVCache::", what, ": layer ", layer,
           " is a Gated DeltaNet (linear_attention) layer: it keeps a recurrent and a conv "
           "state, not keys and values (recurrent_state, conv_state, write_linear)");
}

void KVCache::check_linear_layer(int64_t layer, const char* what) const {
  check_layer(layer, what);
  CG_CHECK(is_linear_[static_cast<size_t>(layer)], "KVCache::", what, ": layer ", layer,
           " is a full-attention layer: it keeps keys and values (write, keys, values); "
           "only Gated DeltaNet layers (config.layer_types \"linear_attention\") have states");
}

std::pair<Tensor, Tensor> KVCache::write(int64_t layer, const Tensor& k, const Tensor& v) {
  check_attention_layer(layer, "write");
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
  for (size_t l = 0; l < linear_.size(); ++l) {
    if (!is_linear_[l] || n == 0) continue;
    CG_CHECK(linear_[l].seen == length_ + n, "KVCache::advance(", n, "): Gated DeltaNet layer ", l,
             " did not write positions ", length_, "..", length_ + n - 1,
             " (write_linear or set_linear_state); every layer must run the same new "
             "positions before advance");
  }
  length_ += n;
}

Tensor KVCache::keys(int64_t layer) const {
  check_attention_layer(layer, "keys");
  return raw::narrow(keys_[static_cast<size_t>(layer)], 2, 0, length_);
}

Tensor KVCache::values(int64_t layer) const {
  check_attention_layer(layer, "values");
  return raw::narrow(values_[static_cast<size_t>(layer)], 2, 0, length_);
}

Tensor KVCache::recurrent_state(int64_t layer) const {
  check_linear_layer(layer, "recurrent_state");
  return linear_[static_cast<size_t>(layer)].recurrent;
}

Tensor KVCache::conv_state(int64_t layer) const {
  check_linear_layer(layer, "conv_state");
  return linear_[static_cast<size_t>(layer)].conv;
}

void KVCache::write_linear(int64_t layer, const LinearLayerWrite& w) {
  check_linear_layer(layer, "write_linear");
  const GatedDeltaShape& s = linear_shape_;
  const Shape state_shape{batch_, s.num_v_heads, s.k_head_dim, s.v_head_dim};
  CG_CHECK(w.final_state.defined() && w.final_state.shape() == state_shape &&
               w.final_state.dtype() == DType::f32,
           "KVCache::write_linear: the state must be f32 ", shape_str(state_shape),
           " (the config's linear_* sizes), got ",
           w.final_state.defined() ? dtype_name(w.final_state.dtype()) + std::string(" ") +
                                         shape_str(w.final_state.shape())
                                   : std::string("undefined"));
  CG_CHECK(w.mixed_qkv.defined() && w.mixed_qkv.dim() == 3 && w.mixed_qkv.size(0) == batch_ &&
               w.mixed_qkv.size(2) == s.conv_dim() && w.mixed_qkv.dtype() == dtype_ &&
               w.mixed_qkv.device() == device_,
           "KVCache::write_linear: mixed_qkv must be ", dtype_name(dtype_), " [B=", batch_,
           ", n, C=", s.conv_dim(), "] on ", device_.str(), ", got ",
           w.mixed_qkv.defined()
               ? dtype_name(w.mixed_qkv.dtype()) + std::string(" ") + shape_str(w.mixed_qkv.shape())
               : std::string("undefined"),
           "; make the cache with the model's dtype and device (make_cache)");
  const int64_t n = w.mixed_qkv.size(1);
  CG_CHECK(length_ + n <= max_length_, "KVCache::write_linear: ", n, " new positions after ",
           length_, " cached ones pass max_length ", max_length_,
           "; make the cache longer (prompt + new tokens + one draft block)");
  const Shape gate_shape{batch_, n, s.num_v_heads};
  CG_CHECK(w.g.defined() && w.beta.defined() && w.g.shape() == gate_shape &&
               w.beta.shape() == gate_shape && w.conv_weight.defined(),
           "KVCache::write_linear: g and beta must be ", shape_str(gate_shape),
           " and the conv weight defined");
  LinearEntry& e = linear_[static_cast<size_t>(layer)];
  const int64_t keep = s.conv_kernel - 1;
  const Tensor inputs = cat({e.conv, w.mixed_qkv}, 1);  // every conv input seen, last K-1 kept
  Tensor conv = raw::contiguous(raw::narrow(inputs, 1, inputs.size(1) - keep, keep));
  e.recurrent_before = e.recurrent;
  e.conv_before = e.conv;
  e.recurrent = w.final_state;
  e.conv = conv;
  e.call_start = length_;
  e.mixed_qkv = w.mixed_qkv;
  e.g = w.g;
  e.beta = w.beta;
  e.conv_weight = w.conv_weight;
  e.seen = length_ + n;
}

void KVCache::set_linear_state(int64_t layer, const Tensor& recurrent, const Tensor& conv,
                               int64_t seen) {
  check_linear_layer(layer, "set_linear_state");
  const GatedDeltaShape& s = linear_shape_;
  const Shape state_shape{batch_, s.num_v_heads, s.k_head_dim, s.v_head_dim};
  const Shape conv_shape{batch_, s.conv_kernel - 1, s.conv_dim()};
  CG_CHECK(recurrent.defined() && conv.defined() && recurrent.shape() == state_shape &&
               recurrent.dtype() == DType::f32 && conv.shape() == conv_shape &&
               conv.dtype() == dtype_ && recurrent.device() == device_ && conv.device() == device_,
           "KVCache::set_linear_state: the state must be f32 ", shape_str(state_shape),
           " and the conv state ", dtype_name(dtype_), " ", shape_str(conv_shape), " on ",
           device_.str(), ", got ",
           recurrent.defined()
               ? dtype_name(recurrent.dtype()) + std::string(" ") + shape_str(recurrent.shape())
               : std::string("undefined"),
           " and ",
           conv.defined() ? dtype_name(conv.dtype()) + std::string(" ") + shape_str(conv.shape())
                          : std::string("undefined"));
  CG_CHECK(seen >= length_ && seen <= max_length_, "KVCache::set_linear_state: seen must be in [",
           length_, ", ", max_length_,
           "] (the cached length, or the length the next advance makes), got ", seen);
  LinearEntry& e = linear_[static_cast<size_t>(layer)];
  e = LinearEntry{};
  e.recurrent = raw::contiguous(recurrent);
  e.conv = raw::contiguous(conv);
  e.seen = seen;
}

}  // namespace cg::nn
