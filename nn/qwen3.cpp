// Why this file exists: construction (HF names, tying) and forwards of the Qwen3-style
// decoder (qwen3.h).
#include "nn/qwen3.h"

#include <set>

#include "ops/elementwise.h"
#include "ops/swiglu.h"

namespace cg::nn {

// ---- Qwen3MLP --------------------------------------------------------------------

Qwen3MLP::Qwen3MLP(int64_t hidden_size, int64_t intermediate_size, InitOptions init)
    : Module("Qwen3MLP") {
  const LinearOptions no_bias{.bias = false, .init = init};
  gate_proj = register_module("gate_proj",
                              std::make_unique<Linear>(hidden_size, intermediate_size, no_bias));
  up_proj = register_module("up_proj",
                            std::make_unique<Linear>(hidden_size, intermediate_size, no_bias));
  down_proj = register_module("down_proj",
                              std::make_unique<Linear>(intermediate_size, hidden_size, no_bias));
}

Tensor Qwen3MLP::forward(const Tensor& x) const {
  auto scope = enter_scope();
  return down_proj->forward(swiglu(gate_proj->forward(x), up_proj->forward(x)));
}

// ---- Qwen3DecoderLayer -----------------------------------------------------------

Qwen3DecoderLayer::Qwen3DecoderLayer(const Qwen3Config& config, InitOptions init)
    : Module("Qwen3DecoderLayer") {
  // Hugging Face's registration order, so named_parameters() lists as HF does.
  self_attn = register_module("self_attn", std::make_unique<Attention>(config, init));
  mlp = register_module(
      "mlp", std::make_unique<Qwen3MLP>(config.hidden_size, config.intermediate_size, init));
  input_layernorm = register_module(
      "input_layernorm", std::make_unique<RMSNorm>(config.hidden_size, config.rms_eps, init));
  post_attention_layernorm =
      register_module("post_attention_layernorm",
                      std::make_unique<RMSNorm>(config.hidden_size, config.rms_eps, init));
}

Tensor Qwen3DecoderLayer::forward(const Tensor& x, const Tensor& positions,
                                  const AttentionMask& mask,
                                  const AttentionContext& context) const {
  auto scope = enter_scope();
  const Tensor h = x + self_attn->forward(input_layernorm->forward(x), positions, mask, context);
  return h + mlp->forward(post_attention_layernorm->forward(h));
}

// ---- Qwen3Model ------------------------------------------------------------------

Qwen3Model::Qwen3Model(const Qwen3Config& config, InitOptions init) : Module("Qwen3Model") {
  config.validate();
  embed_tokens = register_module(
      "embed_tokens", std::make_unique<Embedding>(config.vocab_size, config.hidden_size, init));
  layers = register_module("layers", std::make_unique<ModuleList>());
  for (int64_t i = 0; i < config.num_layers; ++i) {
    layers->push_back(std::make_unique<Qwen3DecoderLayer>(config, init));
  }
  norm = register_module("norm",
                         std::make_unique<RMSNorm>(config.hidden_size, config.rms_eps, init));
}

DecoderOutput Qwen3Model::forward(const Tensor& ids, const DecoderForwardOptions& options) const {
  auto scope = enter_scope();
  CG_CHECK(ids.defined() && ids.dim() == 2 &&
               (ids.dtype() == DType::i64 || ids.dtype() == DType::i32),
           "Qwen3Model: ids must be i64 [B, S], got ",
           ids.defined() ? dtype_name(ids.dtype()) + std::string(" ") + shape_str(ids.shape())
                         : std::string("undefined"));
  return run_layers(embed_tokens->forward(ids), options);
}

DecoderOutput Qwen3Model::forward_embeddings(const Tensor& embeddings,
                                             const DecoderForwardOptions& options) const {
  auto scope = enter_scope();
  return run_layers(embeddings, options);
}

DecoderOutput Qwen3Model::run_layers(const Tensor& embeddings,
                                     const DecoderForwardOptions& options) const {
  const int64_t n = static_cast<int64_t>(layers->size());
  for (int64_t id : options.capture_layers) {
    CG_CHECK(id >= 0 && id < n, "Qwen3Model: capture_layers asks for layer ", id,
             " but the model has layers 0..", n - 1);
  }
  DecoderOutput out;
  out.layer_hidden.resize(options.capture_layers.size());
  Tensor h = embeddings;
  for (int64_t i = 0; i < n; ++i) {
    h = layer(static_cast<size_t>(i)).forward(h, options.positions, options.mask);
    for (size_t c = 0; c < options.capture_layers.size(); ++c) {
      if (options.capture_layers[c] == i) out.layer_hidden[c] = h;
    }
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
  lm_head = register_module(
      "lm_head", std::make_unique<Linear>(config.hidden_size, config.vocab_size, head));
}

DecoderOutput Qwen3ForCausalLM::forward(const Tensor& ids,
                                        const DecoderForwardOptions& options) const {
  auto scope = enter_scope();
  DecoderOutput out = model->forward(ids, options);
  if (options.logits) out.logits = lm_head->forward(out.hidden);
  return out;
}

}  // namespace cg::nn
