// Why this file exists: one struct holds the sizes of a Qwen3-style decoder, shared by
// the target model and the DFlash drafter, and reads the Hugging Face config.json of a
// real checkpoint so that the model built from it matches its weights by name and shape.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace cg::nn {

struct Qwen3Config {
  int64_t vocab_size = 151936;
  int64_t hidden_size = 4096;
  int64_t num_layers = 36;            // num_hidden_layers
  int64_t num_heads = 32;             // num_attention_heads
  int64_t num_kv_heads = 8;           // num_key_value_heads (grouped-query attention)
  int64_t head_dim = 128;             // need not equal hidden_size / num_heads (Qwen3 does not)
  int64_t intermediate_size = 12288;  // the SwiGLU MLP's inner size
  double rope_theta = 1e6;
  double rms_eps = 1e-6;
  bool tie_embeddings = false;  // lm_head shares embed_tokens' weight
  // config.json's max_position_embeddings, the context the model was trained for; 0 when
  // the file names none. Nothing is cut to it: the programs warn past it (as transformers).
  int64_t max_position_embeddings = 0;

  // ---- the Qwen3.5 / Qwen3.6 hybrid family (issue 21); defaults are Qwen3 dense ----
  // "qwen3" (dense Qwen3), "qwen3_5" (hybrid: Gated DeltaNet + gated full attention).
  std::string family = "qwen3";
  // One entry per layer: "full_attention" or "linear_attention" (Gated DeltaNet). Empty:
  // every layer is full attention (Qwen3).
  std::vector<std::string> layer_types{};
  bool attn_output_gate = false;       // q_proj emits [query, gate] per head (Qwen3.5)
  bool zero_centred_norm = false;      // RMSNorm scale (1 + w) instead of w (Qwen3.5)
  double partial_rotary_factor = 1.0;  // the first head_dim * factor dims rotate
  // Gated DeltaNet sizes (linear_attention layers; transformers' field names).
  int64_t linear_num_key_heads = 16;
  int64_t linear_num_value_heads = 32;
  int64_t linear_key_head_dim = 128;
  int64_t linear_value_head_dim = 128;
  int64_t linear_conv_kernel_dim = 4;

  // ---- mixture of experts (model_type "qwen3_5_moe", family "qwen3_5"): every layer's MLP is
  // a sparse MoE block (nn/moe.h) instead of Qwen3MLP; intermediate_size is unused (0).
  // num_experts 0: the dense MLP. transformers' field names; Note [Qwen3.5-MoE config].
  int64_t num_experts = 0;
  int64_t num_experts_per_tok = 0;              // top-k; the router always renormalises
  int64_t moe_intermediate_size = 0;            // each routed expert's SwiGLU inner size
  int64_t shared_expert_intermediate_size = 0;  // the shared expert's inner size
  bool is_moe() const { return num_experts > 0; }

  // True when layer i is a Gated DeltaNet layer.
  bool is_linear_layer(int64_t i) const {
    return !layer_types.empty() && layer_types[static_cast<size_t>(i)] == "linear_attention";
  }
  // How many of each head's dims rotate (head_dim when partial_rotary_factor is 1).
  int64_t rotary_dim() const {
    return static_cast<int64_t>(static_cast<double>(head_dim) * partial_rotary_factor);
  }

  // Throws naming the first inconsistent field (sizes positive, heads % kv_heads == 0,
  // head_dim even; for the hybrid fields: one known layer type per layer, rotary_dim even
  // and positive, value heads a multiple of key heads, a known family; for MoE: positive
  // sizes, 1 <= num_experts_per_tok <= num_experts, family "qwen3_5").
  void validate() const;
  std::string str() const;

  // Parameter counts by hand (what the modules must add up to).
  int64_t attention_parameters() const;         // q (twice as wide when gated),k,v,o + q/k norms
  int64_t linear_attention_parameters() const;  // one Gated DeltaNet (nn/gated_deltanet.h)
  int64_t mlp_parameters() const;               // gate, up, down; for MoE moe_parameters()
  // router [E, H] + experts (gate_up [E, 2I, H], down [E, H, I]) + shared expert + its gate
  int64_t moe_parameters() const;
  int64_t layer_parameters() const;         // a full-attention layer: attention + mlp + two norms
  int64_t linear_layer_parameters() const;  // a linear-attention layer: DeltaNet + mlp + norms
  int64_t total_parameters() const;         // embed + layers + final norm (+ lm_head unless tied)

  // From a Hugging Face config.json (num_hidden_layers, num_attention_heads, ...), as
  // transformers 4 or 5 writes it: the RoPE base from "rope_theta" or from
  // "rope_parameters" (Note [RoPE fields] in config.cpp). Refused with a clear error rather
  // than guessed: a missing head_dim or RoPE base, RoPE scaling other than "default", and
  // architecture options chunkgrad does not implement (attention biases, sliding windows,
  // an activation other than silu). Absent num_key_value_heads, rms_norm_eps and
  // tie_word_embeddings take transformers' Qwen3 defaults (num_attention_heads, 1e-6, false).
  // Also the Qwen3.5 / Qwen3.6 family (model_type "qwen3_5" with the language model in
  // "text_config", "qwen3_5_text" flat): Note [Qwen3.5 config] in config.cpp says what is
  // read, what is defaulted and what is refused; its mixture-of-experts form ("qwen3_5_moe"
  // / "qwen3_5_moe_text"): Note [Qwen3.5-MoE config].
  static Qwen3Config from_hf_json(const nlohmann::json& json);
  // The config.json model_types from_hf_json reads, in one place for its error and for the
  // programs' help ("qwen3, qwen3_5, ..."); an absent model_type reads as qwen3.
  static const std::vector<std::string>& hf_model_types();
  // a config.json, or a model's folder holding one
  static Qwen3Config from_hf_file(const std::string& path);
  // A wrapper config (Qwen3_5ForConditionalGeneration: model_type qwen3_5 / qwen3_5_moe)
  // whose top-level hidden_size, num_hidden_layers, layer_types or rope_theta disagree with
  // its text_config's: one line naming each, for a warning ("" when none). from_hf_json
  // reads text_config only, as transformers does (Note [Qwen3.5 config]).
  static std::string ignored_wrapper_fields(const nlohmann::json& json);
};

}  // namespace cg::nn
