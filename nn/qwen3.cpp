// Why this file exists: construction (HF names, tying) and forwards of the Qwen3-style
// decoder (qwen3.h).
#include "nn/qwen3.h"

#include <set>

#include "autograd/grad_mode.h"
#include "ops/elementwise.h"
#include "ops/shape_ops.h"
#include "ops/swiglu.h"

namespace cg::nn {

// ---- Qwen3MLP --------------------------------------------------------------------

Qwen3MLP::Qwen3MLP(int64_t hidden_size, int64_t intermediate_size, InitOptions init)
    : Module("Qwen3MLP") {
  const LinearOptions no_bias{.bias = false, .init = init};
  gate_proj = register_module("gate_proj",
                              std::make_unique<Linear>(hidden_size, intermediate_size, no_bias));
  up_proj =
      register_module("up_proj", std::make_unique<Linear>(hidden_size, intermediate_size, no_bias));
  down_proj = register_module("down_proj",
                              std::make_unique<Linear>(intermediate_size, hidden_size, no_bias));
}

Tensor Qwen3MLP::forward(const Tensor& x) const {
  auto scope = enter_scope();
  return down_proj->forward(swiglu(gate_proj->forward(x), up_proj->forward(x)));
}

// ---- Qwen3DecoderLayer -----------------------------------------------------------

Qwen3DecoderLayer::Qwen3DecoderLayer(const Qwen3Config& config, InitOptions init, int64_t index)
    : Module("Qwen3DecoderLayer") {
  // Hugging Face's registration order, so named_parameters() lists as HF does.
  if (config.is_linear_layer(index)) {
    linear_attn = register_module("linear_attn", std::make_unique<GatedDeltaNet>(config, init));
  } else {
    self_attn = register_module("self_attn", std::make_unique<Attention>(config, init));
  }
  if (config.is_moe()) {
    moe = register_module("mlp", std::make_unique<SparseMoeBlock>(config, init));
  } else {
    mlp = register_module(
        "mlp", std::make_unique<Qwen3MLP>(config.hidden_size, config.intermediate_size, init));
  }
  const bool zc = config.zero_centred_norm;  // Note [Zero-centred RMSNorm], layers.cpp
  input_layernorm = register_module(
      "input_layernorm", std::make_unique<RMSNorm>(config.hidden_size, config.rms_eps, init, zc));
  post_attention_layernorm =
      register_module("post_attention_layernorm",
                      std::make_unique<RMSNorm>(config.hidden_size, config.rms_eps, init, zc));
}

Tensor Qwen3DecoderLayer::forward(const Tensor& x, const Tensor& positions,
                                  const AttentionMask& mask,
                                  const AttentionContext& context) const {
  auto scope = enter_scope();
  const Tensor normed = input_layernorm->forward(x);
  Tensor mixed;
  if (linear_attn) {
    // A Gated DeltaNet is causal by construction: it can serve a causal LM only.
    CG_CHECK(mask.kind() == AttentionMask::Kind::causal && !context.hidden.defined(),
             "Qwen3DecoderLayer '", name(),
             "': a linear_attention (Gated DeltaNet) layer runs "
             "causally over its own tokens only; it cannot take another attention mask or "
             "DFlash context");
    mixed = linear_attn->forward(normed);
  } else {
    mixed = self_attn->forward(normed, positions, mask, context);
  }
  const Tensor h = x + mixed;
  return h + feed_forward(post_attention_layernorm->forward(h));
}

Tensor Qwen3DecoderLayer::forward_cached(const Tensor& x, KVCache& cache, int64_t layer,
                                         const Tensor& positions, const AttentionMask& mask) const {
  auto scope = enter_scope();
  const Tensor normed = input_layernorm->forward(x);
  const Tensor h =
      x + (linear_attn ? linear_attn->forward_cached(normed, cache, layer)
                       : self_attn->forward_cached(normed, cache, layer, positions, mask));
  return h + feed_forward(post_attention_layernorm->forward(h));
}

Tensor Qwen3DecoderLayer::feed_forward(const Tensor& x) const {
  return moe ? moe->forward(x) : mlp->forward(x);
}

// ---- Qwen3Model ------------------------------------------------------------------

Qwen3Model::Qwen3Model(const Qwen3Config& config, InitOptions init) : Module("Qwen3Model") {
  config.validate();
  embed_tokens = register_module(
      "embed_tokens", std::make_unique<Embedding>(config.vocab_size, config.hidden_size, init));
  layers = register_module("layers", std::make_unique<ModuleList>());
  for (int64_t i = 0; i < config.num_layers; ++i) {
    layers->push_back(std::make_unique<Qwen3DecoderLayer>(config, init, i));
  }
  norm = register_module("norm", std::make_unique<RMSNorm>(config.hidden_size, config.rms_eps, init,
                                                           config.zero_centred_norm));
}

namespace {
void check_ids(const Tensor& ids) {
  CG_CHECK(
      ids.defined() && ids.dim() == 2 && (ids.dtype() == DType::i64 || ids.dtype() == DType::i32),
      "Qwen3Model: ids must be i64 [B, S], got ",
      ids.defined() ? dtype_name(ids.dtype()) + std::string(" ") + shape_str(ids.shape())
                    : std::string("undefined"));
}

void check_capture_layers(const std::vector<int64_t>& capture_layers, int64_t num_layers) {
  for (int64_t id : capture_layers) {
    CG_CHECK(id >= 0 && id < num_layers, "Qwen3Model: capture_layers asks for layer ", id,
             " but the model has layers 0..", num_layers - 1);
  }
}

// Stores h (the output of layer i) in every slot of `out` that asked for layer i.
void capture(const std::vector<int64_t>& capture_layers, int64_t i, const Tensor& h,
             std::vector<Tensor>& out) {
  for (size_t c = 0; c < capture_layers.size(); ++c) {
    if (capture_layers[c] == i) out[c] = h;
  }
}
}  // namespace

DecoderOutput Qwen3Model::forward(const Tensor& ids, const DecoderForwardOptions& options) const {
  auto scope = enter_scope();
  check_ids(ids);
  return run_layers(embed_tokens->forward(ids), options);
}

DecoderOutput Qwen3Model::forward_cached(const Tensor& ids, KVCache& cache,
                                         const CachedForwardOptions& options) const {
  auto scope = enter_scope();
  NoGradGuard no_grad;
  check_ids(ids);
  const int64_t n = static_cast<int64_t>(layers->size());
  check_capture_layers(options.capture_layers, n);
  CG_CHECK(ids.size(1) >= 1,
           "Qwen3Model::forward_cached: ids must hold at least one new "
           "position, got ",
           shape_str(ids.shape()));
  CG_CHECK(ids.size(0) == cache.batch(), "Qwen3Model::forward_cached: ids ", shape_str(ids.shape()),
           " has batch ", ids.size(0), " but the cache was made for ", cache.batch());
  CG_CHECK(cache.num_layers() == n, "Qwen3Model::forward_cached: the cache has ",
           cache.num_layers(), " layers but the model has ", n,
           "; make it with this model's make_cache");
  DecoderOutput out;
  out.layer_hidden.resize(options.capture_layers.size());
  Tensor h = embed_tokens->forward(ids);
  const Tensor positions = RotaryEmbedding::positions(cache.length(), ids.size(1), ids.device());
  for (int64_t i = 0; i < n; ++i) {
    h = layer(static_cast<size_t>(i)).forward_cached(h, cache, i, positions);
    capture(options.capture_layers, i, h, out.layer_hidden);
  }
  cache.advance(ids.size(1));
  if (options.last_logits_only) h = narrow(h, 1, ids.size(1) - 1, 1);
  out.hidden = norm->forward(h);
  return out;
}

DecoderOutput Qwen3Model::forward_embeddings(const Tensor& embeddings,
                                             const DecoderForwardOptions& options) const {
  auto scope = enter_scope();
  return run_layers(embeddings, options);
}

DecoderOutput Qwen3Model::run_layers(const Tensor& embeddings,
                                     const DecoderForwardOptions& options) const {
  const int64_t n = static_cast<int64_t>(layers->size());
  check_capture_layers(options.capture_layers, n);
  DecoderOutput out;
  out.layer_hidden.resize(options.capture_layers.size());
  Tensor h = embeddings;
  for (int64_t i = 0; i < n; ++i) {
    h = layer(static_cast<size_t>(i)).forward(h, options.positions, options.mask);
    capture(options.capture_layers, i, h, out.layer_hidden);
  }
  out.hidden = norm->forward(h);
  return out;
}

// ---- Qwen3ForCausalLM ------------------------------------------------------------

Qwen3ForCausalLM::Qwen3ForCausalLM(const Qwen3Config& config, InitOptions init)
    : Module("Qwen3ForCausalLM"), config_(config) {
  set_name("lm");
  model = register_module("model", std::make_unique<Qwen3Model>(config, init));
  LinearOptions head{.bias = false, .init = init};
  if (config.tie_embeddings) head.shared_weight = model->embed_tokens->weight;
  lm_head = register_module("lm_head",
                            std::make_unique<Linear>(config.hidden_size, config.vocab_size, head));
}

DecoderOutput Qwen3ForCausalLM::forward(const Tensor& ids,
                                        const DecoderForwardOptions& options) const {
  auto scope = enter_scope();
  DecoderOutput out = model->forward(ids, options);
  if (options.logits) out.logits = lm_head->forward(out.hidden);
  return out;
}

DecoderOutput Qwen3ForCausalLM::forward_cached(const Tensor& ids, KVCache& cache,
                                               const CachedForwardOptions& options) const {
  auto scope = enter_scope();
  NoGradGuard no_grad;
  DecoderOutput out = model->forward_cached(ids, cache, options);
  if (options.logits) out.logits = lm_head->forward(out.hidden);
  return out;
}

KVCache Qwen3ForCausalLM::make_cache(int64_t max_length, int64_t batch) const {
  const Tensor& w = model->embed_tokens->weight;
  return KVCache(config_, max_length, {.batch = batch, .dtype = w.dtype(), .device = w.device()});
}

}  // namespace cg::nn
