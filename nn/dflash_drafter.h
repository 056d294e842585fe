// Why this file exists: the DFlash drafter as a module -- a small Qwen3-style stack of the
// target's width that predicts a whole block of next tokens in one pass from the target's
// hidden states (docs/dflash_training.md has the public facts):
//
//   features [B, S, n*H]  (outputs of target layers `target_layers`, concatenated)
//     --fc (n*H -> H, no bias)--> hidden_norm (RMSNorm)  = context [B, S, H], once
//   block ids [anchor, MASK, ..., MASK] --target embed_tokens (frozen)--> x [B, N*Bk, H]
//   each layer: pre-norm attention whose keys/values are cat(k_proj(context), k_proj(x))
//               (Q from the block only), residual, post-norm SwiGLU MLP, residual
//   final norm --> hidden [B, N*Bk, H]  --target lm_head (frozen, by the caller)--> logits
//
// The drafter owns no embedding and no lm_head: it holds the target's two tensors (not as
// parameters, so they are neither trained nor saved with the drafter). Parameter names:
// fc.weight, hidden_norm.weight, layers.{i}.<Qwen3DecoderLayer names>, norm.weight.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/qwen3.h"

namespace cg::nn {

// The public rule for which target layers feed the drafter: n layers spread over
// [1, L-3], layer_id(i) = round(1 + i*(L-4)/(n-1)); one layer: L/2. round is Python's
// (half to even), as in the public code: L = 27, n = 3 gives [1, 12, 24], not 13.
// Layer id l is the output of decoder layer l (0-based), i.e. Hugging Face's
// hidden_states[l + 1]. Throws when n < 1, or n > 1 and L < 5 (the rule has no room), or
// n > L - 3 (it would repeat a layer), naming L and n.
std::vector<int64_t> dflash_target_layers(int64_t num_target_layers, int64_t n);

// The attention rule of one drafter layer (the published config's `layer_types`).
enum class DrafterAttention : int8_t {
  full,     // "full_attention": context keys j < anchor, its own block bidirectionally
  sliding,  // "sliding_attention": keys within sliding_window - 1 positions behind the query,
            // causal inside the block (AttentionMask::dflash_blocks with a window)
};
// "full_attention" / "sliding_attention" <-> the enum; parse throws naming the accepted names.
DrafterAttention parse_drafter_attention(const std::string& name);
const char* drafter_attention_name(DrafterAttention type);

// What the training forward keeps for backward. none: every layer's intermediates (the
// fastest step). layers: only each decoder layer's inputs; each layer runs again inside the
// backward, one at a time (autograd/activation_checkpoint.h, Note [Activation
// checkpointing]): less memory, one more forward of the layers. Gradients are the same.
enum class ActivationCheckpointing : int8_t { none, layers };
// "none" / "layers" <-> the enum; parse throws naming the accepted names.
ActivationCheckpointing parse_activation_checkpointing(const std::string& name);
const char* activation_checkpointing_name(ActivationCheckpointing mode);

struct DFlashDrafterConfig {
  // The drafter's own sizes: hidden_size = the target's (the features and the shared
  // embedding/lm_head have that width); heads, head_dim (num_heads * head_dim may differ
  // from hidden_size: 32 x 128 = 4096 at hidden 5120), MLP, RoPE and eps are its own.
  // num_layers = drafter layers; vocab_size = the target's.
  Qwen3Config layers;
  std::vector<int64_t> target_layers;  // target layer ids whose outputs are the features
  int64_t mask_token_id = 0;           // the reserved MASK token (a target vocabulary id)
  // One entry per layer; empty = every layer full.
  std::vector<DrafterAttention> layer_types;
  int64_t sliding_window = 0;  // W of the sliding layers (> 0 when any layer slides)
  // Training only (not the architecture): forward() with the layers checkpointed.
  ActivationCheckpointing activation_checkpointing = ActivationCheckpointing::none;

  DrafterAttention layer_type(size_t layer) const {
    return layer_types.empty() ? DrafterAttention::full : layer_types[layer];
  }
  // fc + hidden_norm + the layers + the final norm, by hand (what the module must add up to;
  // the published 27B layout: 1,730,213,120).
  int64_t parameter_count() const;
  void validate() const;
};

// Per-layer keys and values of the cached context (inference): [B, C, Hkv, hd] each.
struct DrafterLayerCache {
  Tensor k, v;
};

class DFlashDrafter : public Module {
 public:
  // embed_weight [V, H] and head_weight [V, H]: the target's, shared (not copied).
  DFlashDrafter(const DFlashDrafterConfig& config, Tensor embed_weight, Tensor head_weight,
                InitOptions init = {});

  // features [B, S, n*H] -> context [B, S, H].
  Tensor fuse(const Tensor& features) const;
  // Block token ids [B, T] -> embeddings [B, T, H] from the frozen target table.
  Tensor embed(const Tensor& ids) const;

  // Training: x [B, T, H] block embeddings, block_positions i64 [B, T] (anchor + k),
  // mask (AttentionMask::dflash_blocks over S context keys, the full rule), context
  // [B, S, H] at positions 0 .. S-1 -> final-norm hidden [B, T, H]. A sliding layer runs
  // the same anchors under the sliding rule (the mask with sliding_window = W).
  Tensor forward(const Tensor& x, const Tensor& block_positions, const AttentionMask& mask,
                 const Tensor& context) const;

  // Inference: the keys/values layer `i` makes of new context rows [B, n, H] at positions.
  DrafterLayerCache context_keys_values(size_t layer, const Tensor& context,
                                        const Tensor& positions) const;
  // Inference: x [B, T, H], one block whose anchor is the cached length C, attends to
  // every cached context key and to the whole block (bidirectional) in a full layer; in a
  // sliding layer slot k sees keys within W - 1 positions behind it (the cached positions
  // C + k - (W - 1) .. C - 1 and slots <= k), as in training -> final-norm hidden [B, T, H].
  Tensor forward_cached(const Tensor& x, const Tensor& block_positions,
                        const std::vector<DrafterLayerCache>& cache) const;

  const DFlashDrafterConfig& config() const { return config_; }
  // Switches checkpointing for later forwards (a bench times both on one drafter).
  void set_activation_checkpointing(ActivationCheckpointing mode) {
    config_.activation_checkpointing = mode;
  }
  size_t num_layers() const { return layers->size(); }
  Qwen3DecoderLayer& layer(size_t i) const { return layers->at<Qwen3DecoderLayer>(i); }
  const Tensor& head_weight() const { return head_weight_; }
  const Tensor& embed_weight() const { return embed_weight_; }

  Linear* fc;
  RMSNorm* hidden_norm;
  ModuleList* layers;
  RMSNorm* norm;

 private:
  DFlashDrafterConfig config_;
  Tensor embed_weight_, head_weight_;
};

}  // namespace cg::nn
