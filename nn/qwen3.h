// Why this file exists: the Qwen3-style decoder -- the target model whose hidden states
// DFlash reads, and the building blocks (MLP, DecoderLayer) the drafter stacks. Module
// and parameter names are Hugging Face's Qwen3ForCausalLM names, so a real checkpoint
// loads by name:
//   model.embed_tokens.weight
//   model.layers.{i}.input_layernorm.weight
//   model.layers.{i}.self_attn.{q,k,v,o}_proj.weight, .self_attn.{q,k}_norm.weight
//   model.layers.{i}.post_attention_layernorm.weight
//   model.layers.{i}.mlp.{gate,up,down}_proj.weight
//   model.norm.weight
//   lm_head.weight            (absent when tied: it IS model.embed_tokens.weight)
// A Qwen3.5 / Qwen3.6 target (config.family "qwen3_5") has the same names, except that its
// linear_attention layers hold model.layers.{i}.linear_attn.* (nn/gated_deltanet.h) instead
// of self_attn.*, its self_attn.q_proj is twice as wide (Note [Gated attention],
// attention.h) and its norms are zero-centred (Note [Zero-centred RMSNorm], layers.cpp).
// Checkpoints of that family name the tensors differently on disk: hf_checkpoint_name
// (nn/hf_names.h) maps them. A Qwen3.5-MoE target (config.is_moe()) holds a SparseMoeBlock
// (nn/moe.h) under model.layers.{i}.mlp.* in every layer instead of the Qwen3MLP.
//
//   cg::nn::Qwen3ForCausalLM lm(config, {.generator = &gen});
//   auto out = lm.forward(ids, {.capture_layers = {1, 9, 17, 25, 33}});
//   out.logits;          // [B, S, vocab]
//   out.layer_hidden;    // outputs of decoder layers 1, 9, ... ([B, S, hidden] each)
//
// Decoding with a KV cache (kv_cache.h): forward_cached runs only the new positions.
//   cg::nn::KVCache cache = lm.make_cache(512);
//   auto out = lm.forward_cached(prompt, cache, {.last_logits_only = true});  // [1, 1, vocab]
//   auto next = lm.forward_cached(token, cache);  // appends one position
#pragma once

#include <vector>

#include "nn/attention.h"
#include "nn/config.h"
#include "nn/gated_deltanet.h"
#include "nn/layers.h"
#include "nn/moe.h"

namespace cg::nn {

// down_proj(silu(gate_proj(x)) * up_proj(x)), no biases.
class Qwen3MLP : public Module {
 public:
  Qwen3MLP(int64_t hidden_size, int64_t intermediate_size, InitOptions init = {});
  Tensor forward(const Tensor& x) const;

  Linear* gate_proj;
  Linear* up_proj;
  Linear* down_proj;
};

// Pre-norm block: h = x + attn(input_layernorm(x)); out = h + mlp(post_attention_layernorm(h)).
// attn is self_attn (full attention), or linear_attn (Gated DeltaNet) when
// config.is_linear_layer(index); the other pointer is null. mlp is the Qwen3MLP, or the
// sparse MoE block `moe` when config.is_moe() (then `mlp` is null; both load as "mlp.*"):
// feed_forward runs whichever the layer has.
class Qwen3DecoderLayer : public Module {
 public:
  Qwen3DecoderLayer(const Qwen3Config& config, InitOptions init = {}, int64_t index = 0);
  // x [B, S, hidden]; positions, mask and context as Attention::forward.
  Tensor forward(const Tensor& x, const Tensor& positions = {},
                 const AttentionMask& mask = AttentionMask::none(),
                 const AttentionContext& context = {}) const;
  // x [B, n, hidden] after cache.length() cached positions (Attention::forward_cached;
  // positions and mask go to a full-attention layer, and a Gated DeltaNet runs each row's
  // own recurrence, which has no mask: padding must never reach it, Note [DeltaNet padding]).
  Tensor forward_cached(const Tensor& x, KVCache& cache, int64_t layer,
                        const Tensor& positions = {},
                        const AttentionMask& mask = AttentionMask::causal()) const;

  bool is_linear() const { return linear_attn != nullptr; }
  // mlp(x) or moe(x): the layer's feed-forward half, x [..., hidden].
  Tensor feed_forward(const Tensor& x) const;

  RMSNorm* input_layernorm;
  Attention* self_attn = nullptr;
  GatedDeltaNet* linear_attn = nullptr;
  RMSNorm* post_attention_layernorm;
  Qwen3MLP* mlp = nullptr;
  SparseMoeBlock* moe = nullptr;  // registered as "mlp" (Hugging Face's name)
};

struct DecoderForwardOptions {
  Tensor positions{};                            // i64 [S] or [B, S]; undefined = 0 .. S-1
  AttentionMask mask = AttentionMask::causal();  // a causal LM by default
  // Layer ids (0-based) whose outputs to return, in this order; each id in
  // [0, num_layers). The output of layer L-1 is taken before the final norm.
  std::vector<int64_t> capture_layers{};
  bool logits = true;  // Qwen3ForCausalLM only: false skips lm_head (feature extraction)
};

// Note [Cached forward]: forward_cached(ids [B, n], cache) runs the n positions that
// follow the cache.length() cached ones, at positions cache.length() .. +n-1: causal
// among the new tokens, every cached position visible. Each layer's keys and values of
// the new positions are appended to the cache, whose length grows by n. Rejected
// speculative positions are dropped with cache.truncate(length) afterwards. It records no
// autograd graph (it turns grad mode off itself): decoding never trains. The outputs
// cover the n new positions only.
struct CachedForwardOptions {
  std::vector<int64_t> capture_layers{};  // as DecoderForwardOptions: [B, n, hidden] each
  bool logits = true;                     // Qwen3ForCausalLM only
  bool last_logits_only = false;          // lm_head on the last new position: [B, 1, vocab]
};

struct DecoderOutput {
  Tensor hidden;                     // final-norm output [B, S, hidden]
  std::vector<Tensor> layer_hidden;  // one per capture_layers entry
  Tensor logits;                     // [B, S, vocab] (Qwen3ForCausalLM with logits = true)
};

// Embedding, the decoder layers and the final norm (HF's Qwen3Model).
class Qwen3Model : public Module {
 public:
  Qwen3Model(const Qwen3Config& config, InitOptions init = {});
  // ids i64 [B, S].
  DecoderOutput forward(const Tensor& ids, const DecoderForwardOptions& options = {}) const;
  // The same from embeddings [B, S, hidden] (a drafter feeding its own block inputs).
  DecoderOutput forward_embeddings(const Tensor& embeddings,
                                   const DecoderForwardOptions& options = {}) const;
  // Note [Cached forward]. ids i64 [B, n], B == cache.batch(), n >= 1.
  DecoderOutput forward_cached(const Tensor& ids, KVCache& cache,
                               const CachedForwardOptions& options = {}) const;
  Qwen3DecoderLayer& layer(size_t i) const { return layers->at<Qwen3DecoderLayer>(i); }

  Embedding* embed_tokens;
  ModuleList* layers;
  RMSNorm* norm;

 private:
  // The layers and the final norm, inside the caller's scope.
  DecoderOutput run_layers(const Tensor& embeddings, const DecoderForwardOptions& options) const;
};

// Qwen3Model plus lm_head (HF's Qwen3ForCausalLM); its trace scope defaults to "lm".
class Qwen3ForCausalLM : public Module {
 public:
  Qwen3ForCausalLM(const Qwen3Config& config, InitOptions init = {});
  DecoderOutput forward(const Tensor& ids, const DecoderForwardOptions& options = {}) const;
  // Note [Cached forward]; logits [B, n, vocab] (or [B, 1, vocab]) for the new positions.
  DecoderOutput forward_cached(const Tensor& ids, KVCache& cache,
                               const CachedForwardOptions& options = {}) const;
  // An empty cache for this model's layers, dtype and device (its parameters').
  KVCache make_cache(int64_t max_length, int64_t batch = 1) const;
  const Qwen3Config& config() const { return config_; }

  Qwen3Model* model;
  Linear* lm_head;  // its weight is model->embed_tokens->weight when tie_embeddings

 private:
  Qwen3Config config_;
};

}  // namespace cg::nn
