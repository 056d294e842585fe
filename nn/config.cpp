// Why this file exists: the Qwen3Config checks, description and hand parameter counts
// (config.h); its config.json reader is config_hf_json.cpp.
#include "nn/config.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/json_input.h"

namespace cg::nn {

void Qwen3Config::validate() const {
  auto positive = [](int64_t v, const char* name) {
    CG_CHECK(v > 0, "Qwen3Config: ", name, " must be positive, got ", v);
  };
  positive(vocab_size, "vocab_size");
  positive(hidden_size, "hidden_size");
  positive(num_layers, "num_layers");
  positive(num_heads, "num_heads");
  positive(num_kv_heads, "num_kv_heads");
  positive(head_dim, "head_dim");
  if (!is_moe()) positive(intermediate_size, "intermediate_size");
  CG_CHECK(num_experts >= 0, "Qwen3Config: num_experts must be >= 0 (0: a dense MLP), got ",
           num_experts);
  if (is_moe()) {
    positive(num_experts_per_tok, "num_experts_per_tok");
    positive(moe_intermediate_size, "moe_intermediate_size");
    positive(shared_expert_intermediate_size, "shared_expert_intermediate_size");
    CG_CHECK(num_experts_per_tok <= num_experts, "Qwen3Config: num_experts_per_tok (",
             num_experts_per_tok, ") must be at most num_experts (", num_experts,
             "): each token picks that many distinct experts");
    CG_CHECK(family == "qwen3_5", "Qwen3Config: mixture-of-experts layers exist only in the ",
             "\"qwen3_5\" family (Qwen3.5-MoE), got family \"", family, "\"");
  }
  CG_CHECK(num_heads % num_kv_heads == 0, "Qwen3Config: num_heads (", num_heads,
           ") must be a multiple of num_kv_heads (", num_kv_heads, ") for grouped-query attention");
  CG_CHECK(head_dim % 2 == 0, "Qwen3Config: head_dim must be even for rotary embeddings, got ",
           head_dim);
  CG_CHECK(rope_theta > 0.0, "Qwen3Config: rope_theta must be positive, got ", rope_theta);
  CG_CHECK(rms_eps >= 0.0, "Qwen3Config: rms_eps must be >= 0, got ", rms_eps);
  CG_CHECK(family == "qwen3" || family == "qwen3_5", "Qwen3Config: family must be \"qwen3\" or ",
           "\"qwen3_5\", got \"", family, "\"");
  CG_CHECK(layer_types.empty() || static_cast<int64_t>(layer_types.size()) == num_layers,
           "Qwen3Config: layer_types has ", layer_types.size(), " entries but num_layers is ",
           num_layers, "; give one type per layer");
  bool any_linear = false;
  for (size_t i = 0; i < layer_types.size(); ++i) {
    CG_CHECK(layer_types[i] == "full_attention" || layer_types[i] == "linear_attention",
             "Qwen3Config: layer_types[", i, "] is \"", layer_types[i],
             "\"; chunkgrad knows \"full_attention\" and \"linear_attention\" (Gated DeltaNet)");
    any_linear = any_linear || layer_types[i] == "linear_attention";
  }
  CG_CHECK(partial_rotary_factor > 0.0 && partial_rotary_factor <= 1.0,
           "Qwen3Config: partial_rotary_factor must be in (0, 1], got ", partial_rotary_factor);
  CG_CHECK(rotary_dim() > 0 && rotary_dim() % 2 == 0, "Qwen3Config: rotary_dim = head_dim (",
           head_dim, ") * partial_rotary_factor (", partial_rotary_factor, ") = ", rotary_dim(),
           " must be even and positive (dims rotate in pairs)");
  if (any_linear) {
    positive(linear_num_key_heads, "linear_num_key_heads");
    positive(linear_num_value_heads, "linear_num_value_heads");
    positive(linear_key_head_dim, "linear_key_head_dim");
    positive(linear_value_head_dim, "linear_value_head_dim");
    positive(linear_conv_kernel_dim, "linear_conv_kernel_dim");
    CG_CHECK(linear_num_value_heads % linear_num_key_heads == 0,
             "Qwen3Config: linear_num_value_heads (", linear_num_value_heads,
             ") must be a multiple of linear_num_key_heads (", linear_num_key_heads,
             "): each key head serves a whole group of value heads");
  }
}

std::string Qwen3Config::str() const {
  std::ostringstream out;
  out << "Qwen3Config(vocab " << vocab_size << ", hidden " << hidden_size << ", layers "
      << num_layers << ", heads " << num_heads << "/" << num_kv_heads << " kv, head_dim "
      << head_dim << ", mlp " << intermediate_size << ", rope_theta " << rope_theta << ", rms_eps "
      << rms_eps << (tie_embeddings ? ", tied" : "");
  if (family != "qwen3" || !layer_types.empty() || attn_output_gate || zero_centred_norm ||
      partial_rotary_factor != 1.0) {
    int64_t linear = 0;
    for (int64_t i = 0; i < static_cast<int64_t>(layer_types.size()); ++i)
      linear += is_linear_layer(i) ? 1 : 0;
    out << ", family " << family << ", " << linear << " linear_attention + " << num_layers - linear
        << " full_attention layers";
    if (linear > 0) {
      out << ", layer_types [";
      for (size_t i = 0; i < layer_types.size(); ++i)
        out << (i ? "," : "") << (layer_types[i] == "linear_attention" ? "L" : "F");
      out << "], deltanet " << linear_num_key_heads << " k / " << linear_num_value_heads
          << " v heads x " << linear_key_head_dim << "/" << linear_value_head_dim << ", conv "
          << linear_conv_kernel_dim;
    }
    if (is_moe())
      out << ", moe " << num_experts << " experts top " << num_experts_per_tok << " x "
          << moe_intermediate_size << ", shared expert " << shared_expert_intermediate_size;
    out << (attn_output_gate ? ", gated attention" : "")
        << (zero_centred_norm ? ", zero-centred norms" : "") << ", rotary_dim " << rotary_dim()
        << " (partial_rotary_factor " << partial_rotary_factor << ")";
  }
  out << ")";
  return out.str();
}

namespace {

// Note [Checked counts]: the sizes come from config.json. Each is bounded (kMaxModelSize,
// from_hf_json), but their products are not: 2^24 experts of 2^24 x 2^24 weights is 2^74
// parameters, which wrapped int64 (signed overflow: undefined, in practice a small or
// negative count). The counts below multiply and add through Count, which throws instead;
// from_hf_json calls total_parameters() to say so about the file, naming it.
struct Count {
  int64_t v;
};
Count operator*(Count a, Count b) {
  const std::optional<int64_t> r = checked_mul(a.v, b.v);
  CG_CHECK(r.has_value(), "Qwen3Config: a parameter count overflows 64 bits (", a.v, " x ", b.v,
           ")");
  return {*r};
}
Count operator+(Count a, Count b) {
  const std::optional<int64_t> r = checked_add(a.v, b.v);
  CG_CHECK(r.has_value(), "Qwen3Config: a parameter count overflows 64 bits (", a.v, " + ", b.v,
           ")");
  return {*r};
}

}  // namespace

int64_t Qwen3Config::attention_parameters() const {
  const Count H{hidden_size}, heads{num_heads}, kv_heads{num_kv_heads}, D{head_dim};
  // A gated q_proj emits a query and a gate per head (Note [Gated attention], attention.h).
  const Count q = H * heads * D * Count{attn_output_gate ? 2 : 1};
  const Count kv = Count{2} * H * kv_heads * D;
  const Count o = heads * D * H;
  return (q + kv + o + Count{2} * D).v;  // + q_norm, k_norm
}

int64_t Qwen3Config::mlp_parameters() const {
  return is_moe() ? moe_parameters() : (Count{3} * Count{hidden_size} * Count{intermediate_size}).v;
}

int64_t Qwen3Config::moe_parameters() const {
  const Count H{hidden_size}, E{num_experts};
  return (E * H                                                    // router
          + E * Count{3} * Count{moe_intermediate_size} * H        // gate_up, down
          + Count{3} * Count{shared_expert_intermediate_size} * H  // the shared expert
          + H)                                                     // shared_expert_gate
      .v;
}

int64_t Qwen3Config::layer_parameters() const {
  return (Count{attention_parameters()} + Count{mlp_parameters()} + Count{2} * Count{hidden_size})
      .v;
}

int64_t Qwen3Config::linear_attention_parameters() const {
  const Count H{hidden_size}, value_heads{linear_num_value_heads};
  const Count key_dim = Count{linear_num_key_heads} * Count{linear_key_head_dim};
  const Count value_dim = value_heads * Count{linear_value_head_dim};
  const Count conv_dim = Count{2} * key_dim + value_dim;  // q, k, v
  return (H * conv_dim                                    // in_proj_qkv
          + H * value_dim                                 // in_proj_z
          + Count{2} * H * value_heads                    // in_proj_b, in_proj_a
          + conv_dim * Count{linear_conv_kernel_dim}      // conv1d (depthwise, no bias)
          + Count{2} * value_heads                        // dt_bias, A_log
          + Count{linear_value_head_dim}                  // the gated norm
          + value_dim * H)                                // out_proj
      .v;
}

int64_t Qwen3Config::linear_layer_parameters() const {
  return (Count{linear_attention_parameters()} + Count{mlp_parameters()} +
          Count{2} * Count{hidden_size})
      .v;
}

int64_t Qwen3Config::total_parameters() const {
  const Count embed = Count{vocab_size} * Count{hidden_size};
  Count layers{0};
  for (int64_t i = 0; i < num_layers; ++i)
    layers = layers + Count{is_linear_layer(i) ? linear_layer_parameters() : layer_parameters()};
  return (embed + layers + Count{hidden_size} + (tie_embeddings ? Count{0} : embed)).v;
}

}  // namespace cg::nn
