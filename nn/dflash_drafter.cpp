// Why this file exists: construction and the training / inference forwards of the DFlash
// drafter (dflash_drafter.h).
#include "nn/dflash_drafter.h"

#include <algorithm>

#include "autograd/activation_checkpoint.h"
#include "core/factories.h"
#include "ops/attention.h"
#include "ops/elementwise.h"
#include "ops/embedding.h"
#include "ops/join_ops.h"
#include "ops/shape_ops.h"

namespace cg::nn {

// Note [Layer-id rounding]: the public code computes round(1 + i*(L-4)/(n-1)) in Python,
// whose round() takes a half to the even neighbour; C's llround takes it away from zero
// and gave [1, 13, 24] for L = 27, n = 3 where the public drafters use [1, 12, 24]. The
// value is the fraction ((n-1) + i*(L-4)) / (n-1), so the rounding is done exactly in
// integers: a half is a remainder of exactly (n-1)/2.
std::vector<int64_t> dflash_target_layers(int64_t num_target_layers, int64_t n) {
  CG_CHECK(n >= 1, "dflash target layers: need at least 1 feature layer, got ", n);
  CG_CHECK(num_target_layers >= 1, "dflash target layers: the target has no layers");
  if (n == 1) return {num_target_layers / 2};
  CG_CHECK(num_target_layers >= 5,
           "dflash target layers: the rule round(1 + i*(L-4)/(n-1)) needs L >= 5 "
           "target layers for n = ",
           n, " feature layers, got L = ", num_target_layers,
           "; use 1 feature layer or list target_layers explicitly");
  // More layers than [1, L-3] holds would repeat ids ([1, 2, 2, 2, 3, ...] for L = 8,
  // n = 9): the same features under two slots, which an explicit list is refused for too.
  CG_CHECK(n - 1 <= num_target_layers - 4, "dflash target layers: the rule spreads n = ", n,
           " feature layers over layers 1..", num_target_layers - 3, " of L = ", num_target_layers,
           ", which holds only ", num_target_layers - 3,
           " different ones (n would repeat layers); use at most ", num_target_layers - 3,
           " feature layers or list target_layers explicitly");
  const int64_t den = n - 1;
  std::vector<int64_t> ids;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t num = den + i * (num_target_layers - 4);  // >= 0
    int64_t q = num / den;
    const int64_t twice_rem = 2 * (num % den);
    if (twice_rem > den || (twice_rem == den && q % 2 == 1)) ++q;  // half to even
    ids.push_back(q);
  }
  return ids;
}

DrafterAttention parse_drafter_attention(const std::string& name) {
  if (name == "full_attention") return DrafterAttention::full;
  if (name == "sliding_attention") return DrafterAttention::sliding;
  CG_FAIL("DFlash drafter: unknown layer type '", name,
          "'; the layer types are full_attention and sliding_attention");
}

const char* drafter_attention_name(DrafterAttention type) {
  switch (type) {
    case DrafterAttention::full: return "full_attention";
    case DrafterAttention::sliding: return "sliding_attention";
  }
  return "?";
}

ActivationCheckpointing parse_activation_checkpointing(const std::string& name) {
  if (name == "none") return ActivationCheckpointing::none;
  if (name == "layers") return ActivationCheckpointing::layers;
  CG_FAIL("DFlash drafter: unknown activation checkpointing '", name,
          "'; it is none (keep every layer's activations) or layers (recompute each layer in "
          "the backward)");
}

const char* activation_checkpointing_name(ActivationCheckpointing mode) {
  switch (mode) {
    case ActivationCheckpointing::none: return "none";
    case ActivationCheckpointing::layers: return "layers";
  }
  return "?";
}

int64_t DFlashDrafterConfig::parameter_count() const {
  const int64_t H = layers.hidden_size;
  const int64_t n = static_cast<int64_t>(target_layers.size());
  return n * H * H + H + layers.num_layers * layers.layer_parameters() + H;
}

void DFlashDrafterConfig::validate() const {
  layers.validate();
  // Issue 21 item 4: the drafter's layers are dense Qwen3 (plain norms, ungated attention,
  // full-dim RoPE) even for a Qwen3.5 target; its config must not inherit the target's.
  CG_CHECK(layers.family == "qwen3" && layers.layer_types.empty() && !layers.attn_output_gate &&
               !layers.zero_centred_norm && layers.partial_rotary_factor == 1.0,
           "DFlash drafter: its layers must be dense Qwen3 layers, got ", layers.str(),
           "; build the drafter config with drafter_model_config, which drops a Qwen3.5 "
           "target's hybrid fields");
  CG_CHECK(!target_layers.empty(), "DFlash drafter: target_layers is empty");
  CG_CHECK(mask_token_id >= 0 && mask_token_id < layers.vocab_size,
           "DFlash drafter: mask_token_id ", mask_token_id, " is not in the vocabulary [0, ",
           layers.vocab_size, ")");
  CG_CHECK(layer_types.empty() || static_cast<int64_t>(layer_types.size()) == layers.num_layers,
           "DFlash drafter: layer_types has ", layer_types.size(), " entries for ",
           layers.num_layers, " layers; give one per layer (or none: every layer full)");
  const bool slides = std::find(layer_types.begin(), layer_types.end(),
                                DrafterAttention::sliding) != layer_types.end();
  CG_CHECK(!slides || sliding_window > 0,
           "DFlash drafter: sliding layers need sliding_window > 0, got ", sliding_window);
  CG_CHECK(sliding_window >= 0, "DFlash drafter: sliding_window must be >= 0, got ",
           sliding_window);
}

DFlashDrafter::DFlashDrafter(const DFlashDrafterConfig& config, Tensor embed_weight,
                             Tensor head_weight, InitOptions init)
    : Module("DFlashDrafter"),
      config_(config),
      embed_weight_(std::move(embed_weight)),
      head_weight_(std::move(head_weight)) {
  config.validate();
  set_name("drafter");
  const int64_t H = config.layers.hidden_size;
  const Shape table{config.layers.vocab_size, H};
  CG_CHECK(embed_weight_.defined() && embed_weight_.shape() == table && head_weight_.defined() &&
               head_weight_.shape() == table,
           "DFlash drafter: the target's embedding and lm_head must be ", shape_str(table));
  const int64_t n = static_cast<int64_t>(config.target_layers.size());
  fc = register_module(
      "fc", std::make_unique<Linear>(n * H, H, LinearOptions{.bias = false, .init = init}));
  hidden_norm =
      register_module("hidden_norm", std::make_unique<RMSNorm>(H, config.layers.rms_eps, init));
  layers = register_module("layers", std::make_unique<ModuleList>());
  for (int64_t i = 0; i < config.layers.num_layers; ++i) {
    layers->push_back(std::make_unique<Qwen3DecoderLayer>(config.layers, init));
  }
  norm = register_module("norm", std::make_unique<RMSNorm>(H, config.layers.rms_eps, init));
}

Tensor DFlashDrafter::fuse(const Tensor& features) const {
  auto scope = enter_scope();
  const int64_t want = fc->in_features();
  CG_CHECK(features.defined() && features.dim() == 3 && features.size(2) == want,
           "DFlash drafter: features must be [B, S, ", want, "] (", config_.target_layers.size(),
           " target layers x hidden), got ",
           features.defined() ? shape_str(features.shape()) : "undefined");
  return hidden_norm->forward(fc->forward(features));
}

Tensor DFlashDrafter::embed(const Tensor& ids) const { return embedding(embed_weight_, ids); }

Tensor DFlashDrafter::forward(const Tensor& x, const Tensor& block_positions,
                              const AttentionMask& mask, const Tensor& context) const {
  auto scope = enter_scope();
  const AttentionContext ctx{context,
                             RotaryEmbedding::positions(0, context.size(1), context.device())};
  // The sliding rule over the same anchors, made once for every sliding layer.
  AttentionMask sliding = mask;
  if (config_.sliding_window > 0) {
    CG_CHECK(mask.kind() == AttentionMask::Kind::dflash_blocks && mask.sliding_window() == 0,
             "DFlash drafter: a drafter with sliding layers needs the full-rule dflash_blocks "
             "mask (it derives the sliding rule from its anchors), got ",
             mask.str());
    sliding = AttentionMask::dflash_blocks(mask.context_len(), mask.block_size(), mask.anchors(),
                                           mask.padded(), config_.sliding_window);
  }
  Tensor h = x;
  for (size_t i = 0; i < layers->size(); ++i) {
    const bool slides = config_.layer_type(i) == DrafterAttention::sliding;
    const AttentionMask& rule = slides ? sliding : mask;
    if (config_.activation_checkpointing == ActivationCheckpointing::none) {
      h = layer(i).forward(h, block_positions, rule, ctx);
      continue;
    }
    // The context is an input (it needs its gradient); the positions and the mask need
    // none and ride in the closure, which the checkpoint keeps until the backward.
    const Qwen3DecoderLayer* L = &layer(i);
    CheckpointFunction run_layer = [L, block_positions, rule,
                                    positions = ctx.positions](const std::vector<Tensor>& in) {
      return std::vector<Tensor>{
          L->forward(in[0], block_positions, rule, AttentionContext{in[1], positions})};
    };
    h = checkpoint(run_layer, {h, context}, L->parameters())[0];
  }
  return norm->forward(h);
}

DrafterLayerCache DFlashDrafter::context_keys_values(size_t i, const Tensor& context,
                                                     const Tensor& positions) const {
  auto [k, v] = layer(i).self_attn->keys_values(context, positions);
  return {k, v};
}

// Note [Sliding at inference]: serving engines run a sliding layer as a causal decoder
// with window_left = W - 1; for one block at anchor C that is the training rule with
// anchors [C] over the C cached context keys: slot k sees cached positions from
// C + k - (W - 1) and the slots before it. The cache keeps every context key (the full
// layers need them); the mask, not the cache, bounds what a sliding layer reads.
Tensor DFlashDrafter::forward_cached(const Tensor& x, const Tensor& block_positions,
                                     const std::vector<DrafterLayerCache>& cache) const {
  auto scope = enter_scope();
  CG_CHECK(cache.size() == layers->size(), "DFlash drafter: a cache of ", cache.size(),
           " layers for ", layers->size(), " layers");
  const int64_t B = x.size(0), T = x.size(1);
  Tensor h = x;
  for (size_t i = 0; i < layers->size(); ++i) {
    const Qwen3DecoderLayer& L = layer(i);
    const Attention& a = *L.self_attn;
    const Tensor xn = L.input_layernorm->forward(h);
    Tensor q = view(a.q_proj->forward(xn), {B, T, a.num_heads(), a.head_dim()});
    q = a.rotary_emb->forward(a.q_norm->forward(q), block_positions);
    auto [k, v] = a.keys_values(xn, block_positions);
    if (cache[i].k.defined() && cache[i].k.size(1) > 0) {
      k = cat({cache[i].k, k}, 1);
      v = cat({cache[i].v, v}, 1);
    }
    // One block whose anchor is the cached length C: a full layer sees everything (no
    // mask); a sliding layer the training rule with the window (Note [Sliding at inference]).
    AttentionMask rule = AttentionMask::none();
    if (config_.layer_type(i) == DrafterAttention::sliding) {
      const int64_t C = k.size(1) - T;
      rule =
          AttentionMask::dflash_blocks(C, T, from_ints({C}, {1}), Tensor(), config_.sliding_window);
    }
    Tensor o = scaled_dot_product_attention(transpose(q, 1, 2), transpose(k, 1, 2),
                                            transpose(v, 1, 2), rule);
    o = a.o_proj->forward(reshape(transpose(o, 1, 2), {B, T, a.num_heads() * a.head_dim()}));
    h = h + o;
    h = h + L.mlp->forward(L.post_attention_layernorm->forward(h));
  }
  return norm->forward(h);
}

}  // namespace cg::nn
