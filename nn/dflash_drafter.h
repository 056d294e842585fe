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
#include <vector>

#include "nn/qwen3.h"

namespace cg::nn {

// The public rule for which target layers feed the drafter: n layers spread over
// [1, L-3], layer_id(i) = round(1 + i*(L-4)/(n-1)); one layer: L/2. Throws when n < 1,
// or n > 1 and L < 5 (the rule has no room), naming L and n.
std::vector<int64_t> dflash_target_layers(int64_t num_target_layers, int64_t n);

struct DFlashDrafterConfig {
  Qwen3Config layers;                  // hidden_size = the target's; num_layers = drafter layers
  std::vector<int64_t> target_layers;  // target layer ids whose outputs are the features
  int64_t mask_token_id = 0;           // the reserved MASK token (a target vocabulary id)
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
  // mask (AttentionMask::dflash_blocks over S context keys), context [B, S, H] at
  // positions 0 .. S-1 -> final-norm hidden [B, T, H].
  Tensor forward(const Tensor& x, const Tensor& block_positions, const AttentionMask& mask,
                 const Tensor& context) const;

  // Inference: the keys/values layer `i` makes of new context rows [B, n, H] at positions.
  DrafterLayerCache context_keys_values(size_t layer, const Tensor& context,
                                        const Tensor& positions) const;
  // Inference: x [B, T, H] attends to every cached context key and to the whole block
  // (bidirectional) -> final-norm hidden [B, T, H].
  Tensor forward_cached(const Tensor& x, const Tensor& block_positions,
                        const std::vector<DrafterLayerCache>& cache) const;

  const DFlashDrafterConfig& config() const { return config_; }
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
