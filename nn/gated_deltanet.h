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
//
// Note [DeltaNet padding]: transformers zeroes padded positions' inputs before in_proj
// (apply_mask_to_padding_states), because a padding token BEFORE real ones would flow
// into the recurrent and conv state. This layer takes no mask; where chunkgrad pads:
//   - feature buckets (train/target_forward.cpp, train/drafter_data.cpp) pad AFTER each
//     sample: a causal recurrence never lets a later position reach an earlier one, so the
//     real positions are exact and the padded ones are cut off;
//   - decode_batched right-aligns rows (padding before real tokens), but padding never runs
//     through a layer there: prompts prefill alone, each step feeds every row a real token,
//     and padding slots get zero keys directly; each row's DeltaNet states are copied as
//     they are when the batch is rebuilt (Note [Ragged batch], train/batched_decode.cpp).
// Zeroed inputs at the start of a sequence would in fact be exact here too (k = 0 and
// v = 0 leave a zero state zero; zero conv inputs equal the zero history).
#pragma once

#include "nn/config.h"
#include "nn/kv_cache.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "ops/gated_delta.h"

namespace cg::nn {

// The layer's recurrence from in_proj_qkv's output: causal conv + SiLU over the q|k|v
// channels (after `history` [B, K-1, C], or zeros), split into q, k, v in that order,
// the gated delta rule with l2norm(q, k) and q scaled by k_head_dim^-0.5, from `state`
// (undefined: zeros). mixed_qkv [B, n, C]; g, beta [B, n, Hv]. Records no graph.
GatedDeltaResult gated_delta_from_projections(const GatedDeltaShape& shape, const Tensor& mixed_qkv,
                                              const Tensor& conv_weight, const Tensor& history,
                                              const Tensor& g, const Tensor& beta,
                                              const Tensor& state);

class GatedDeltaNet : public Module {
 public:
  // Sizes from config.linear_* and hidden_size; eps from rms_eps. Init as transformers':
  // the Linears as every Linear here, conv1d as PyTorch's Conv1d (uniform +-1/sqrt(K)),
  // A_log = log(uniform(0.01, 16)), dt_bias and norm.weight ones.
  GatedDeltaNet(const Qwen3Config& config, InitOptions init = {});
  // x [B, S, hidden] -> [B, S, hidden], from an empty state (prefill, features). A frozen
  // target's layer: throws while grad mode is on and a parameter or x requires grad
  // (freeze() the model or run under cg::NoGradGuard).
  Tensor forward(const Tensor& x) const;
  // x [B, n, hidden], the n positions after cache.length(): reads and updates the layer's
  // recurrent and conv state in `cache` (Note [DeltaNet rollback], nn/kv_cache.h). Turns
  // grad mode off itself, like Qwen3Model::forward_cached. The model calls
  // cache.advance(n) after its last layer, as for attention layers.
  Tensor forward_cached(const Tensor& x, KVCache& cache, int64_t layer) const;
  const GatedDeltaShape& shape() const { return shape_; }

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
  struct Gates {
    Tensor g, beta;  // [B, S, Hv]: g f32, beta the model dtype
  };
  Gates gates_of(const Tensor& x) const;
  // The gated RMSNorm with z = in_proj_z(x), then out_proj: [B, S, Hv, dv] -> [B, S, hidden].
  Tensor output_of(const Tensor& core, const Tensor& x) const;
  void check_input(const Tensor& x, const char* what) const;

  GatedDeltaShape shape_;
  int64_t hidden_ = 0;
  double eps_ = 1e-6;
};

}  // namespace cg::nn
