// Why this file exists: Qwen3 self-attention, and the one change DFlash makes to it --
// keys and values from extra "context" hidden states (the target model's fused
// features) placed before the block's own keys. Both go through the same k_proj/v_proj,
// k-norm and RoPE, so a drafter layer is this module with a context argument.
//
//   x [B, S, hidden] --q_proj--> [B, S, Hq, hd] --q_norm--> RoPE(positions) --+
//   x          --k_proj/v_proj--> [B, S, Hkv, hd], k_norm, RoPE(positions)    |
//   context [B, C, hidden] --k_proj/v_proj--> k_norm, RoPE(context_positions)  |
//   K = cat(k_ctx, k_x) on the sequence dim, V likewise  [B, C + S, Hkv, hd]    |
//   out = o_proj(sdpa(Q, K, V, mask))  [B, S, hidden]  <---------------------+
//
// Parameters (Hugging Face names): q_proj [Hq*hd, hidden], k_proj/v_proj [Hkv*hd,
// hidden], o_proj [hidden, Hq*hd], all without bias; q_norm/k_norm [hd]. No norm on v.
//
// Note [Gated attention]: the Qwen3.5 family's full-attention layers (config
// attn_output_gate) make q_proj twice as wide, [Hq*2*hd, hidden], and view its output per
// head as [B, S, Hq, 2*hd]: in each head the first hd values are the query, the next hd
// that head's gate (NOT the first and second half of the whole output: that reading loads
// without error and computes another model). The attention output [B, S, Hq*hd] is
// multiplied by sigmoid(gate) before o_proj. Their norms are zero-centred (layers.h), and
// only the first rotary_dim() = hd * partial_rotary_factor dims of each q/k head rotate,
// with frequencies over rotary_dim; the rest pass through unchanged, as in transformers'
// apply_rotary_pos_emb. The KV cache stores keys after k_norm and rotary.
#pragma once

#include "nn/config.h"
#include "nn/kv_cache.h"
#include "nn/layers.h"
#include "ops/attention_mask.h"

namespace cg::nn {

// Extra keys and values for attention (DFlash context injection).
struct AttentionContext {
  Tensor hidden;     // [B, C, hidden]; undefined = no context
  Tensor positions;  // i64 [C] or [B, C]; undefined = 0 .. C-1
};

class Attention : public Module {
 public:
  Attention(const Qwen3Config& config, InitOptions init = {});

  // x [B, S, hidden] -> [B, S, hidden].
  //   positions  i64 [S] or [B, S] for RoPE; undefined = 0 .. S-1
  //   mask       over [B, Hq, S, C + S] keys (context keys first), passed through to
  //              scaled_dot_product_attention (causal aligns to the bottom right, so
  //              with a context every query sees all of it)
  Tensor forward(const Tensor& x, const Tensor& positions = {},
                 const AttentionMask& mask = AttentionMask::none(),
                 const AttentionContext& context = {}) const;

  // Decoding with a KV cache (kv_cache.h): x [B, n, hidden] holds the n positions after
  // the cache.length() cached ones, at RoPE positions cache.length() .. +n-1. Their keys
  // and values are written into `layer`'s slots of the cache (the caller advances it
  // after the last layer); each new query sees every cached key and the new keys up to
  // its own (causal). -> [B, n, hidden]. An inference path: call it under NoGradGuard.
  // positions: those RoPE positions as i64 [n] (or [B, n]: each row its own, a ragged
  // batch) when the caller already made them (one tensor for every layer of a step);
  // undefined: made here. mask: over [B, Hq, n, length + n]; a ragged batch passes a
  // dense one that hides each row's padding slots (Note [Ragged batch],
  // train/batched_decode.cpp).
  Tensor forward_cached(const Tensor& x, KVCache& cache, int64_t layer,
                        const Tensor& positions = {},
                        const AttentionMask& mask = AttentionMask::causal()) const;

  // k (after k_norm and RoPE) and v of `hidden` in [B, L, Hkv, hd] layout -- what the
  // forward concatenates; exposed for references and KV caches.
  std::pair<Tensor, Tensor> keys_values(const Tensor& hidden, const Tensor& positions) const;

  int64_t num_heads() const { return num_heads_; }
  int64_t num_kv_heads() const { return num_kv_heads_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t rotary_dim() const { return rotary_dim_; }
  bool output_gate() const { return output_gate_; }

  Linear* q_proj;
  Linear* k_proj;
  Linear* v_proj;
  Linear* o_proj;
  RMSNorm* q_norm;
  RMSNorm* k_norm;
  RotaryEmbedding* rotary_emb;  // over rotary_dim() dims (Note [Gated attention])

 private:
  // q [B, S, Hq, hd] after q_norm, before rotary; gate [B, S, Hq*hd] (undefined ungated).
  std::pair<Tensor, Tensor> queries_and_gate(const Tensor& x) const;
  // Rotary on the first rotary_dim_ dims of each head of x [B, S, H, hd].
  Tensor rotate(const Tensor& x, const Tensor& positions) const;
  // out [B, S, Hq*hd] -> o_proj(out * sigmoid(gate)) (no gate: o_proj(out)).
  Tensor project_output(const Tensor& out, const Tensor& gate) const;

  int64_t hidden_, num_heads_, num_kv_heads_, head_dim_, rotary_dim_;
  bool output_gate_;
};

}  // namespace cg::nn
