// Why this file exists: the Gated DeltaNet layer of the Qwen3.5 / Qwen3.6 hybrid targets
// (their "linear_attention" layers, three of every four), under Hugging Face's names so a
// checkpoint loads by name (prefix model.layers.{i}.linear_attn. in a text-only checkpoint):
//   in_proj_qkv.weight [2 * Hk * dk + Hv * dv, hidden]   q, k, v in that order
//   in_proj_z.weight   [Hv * dv, hidden]                  the output gate
//   in_proj_b.weight   [Hv, hidden]                       beta = sigmoid(b)
//   in_proj_a.weight   [Hv, hidden]                       g = -exp(A_log) softplus(a + dt_bias)
//   conv1d.weight      [2 * Hk * dk + Hv * dv, 1, K]      causal depthwise, no bias, then SiLU
//   dt_bias [Hv], A_log [Hv]
//   norm.weight        [dv]                               gated RMSNorm: plain w, times SiLU(z)
//   out_proj.weight    [hidden, Hv * dv]
// The recurrence and the conv are ops (ops/gated_delta.h); this module wires them. A frozen
// target's layer: no autograd (the ops refuse inputs that need a gradient).
#pragma once

#include "nn/config.h"
#include "nn/kv_cache.h"
#include "nn/linear.h"
#include "nn/module.h"

namespace cg::nn {

class GatedDeltaNet : public Module {
 public:
  // Sizes from config.linear_* and hidden_size; eps from rms_eps.
  GatedDeltaNet(const Qwen3Config& config, InitOptions init = {});
  // x [B, S, hidden] -> [B, S, hidden], from an empty state (prefill, features).
  Tensor forward(const Tensor& x) const;
  // x [B, n, hidden], the n positions after cache.length(): reads and updates the layer's
  // recurrent and conv state in `cache` (Note [DeltaNet rollback], nn/kv_cache.h).
  Tensor forward_cached(const Tensor& x, KVCache& cache, int64_t layer) const;

  Linear* in_proj_qkv;
  Linear* in_proj_z;
  Linear* in_proj_b;
  Linear* in_proj_a;
  Linear* out_proj;
  Tensor conv1d_weight;  // registered as "conv1d.weight"
  Tensor dt_bias;
  Tensor A_log;
  Tensor norm_weight;  // registered as "norm.weight"

 private:
  int64_t num_k_heads_, num_v_heads_, k_head_dim_, v_head_dim_, conv_kernel_;
  double eps_;
};

}  // namespace cg::nn
