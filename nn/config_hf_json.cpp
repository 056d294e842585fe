// Why this file exists: Qwen3Config's reader of a Hugging Face config.json (config.h):
// every field typed, bounded and named in its errors, the RoPE and hybrid/MoE fields, and
// the fields of another family refused. The checks and counts are config.cpp.
#include <algorithm>
#include <filesystem>
#include <limits>
#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/checked_math.h"
#include "core/error.h"
#include "core/json_input.h"
#include "nn/config.h"

namespace cg::nn {

namespace {

using json = nlohmann::json;

// More decoder layers than any model has; a larger count in a config.json is damage.
constexpr int64_t kMaxLayers = 100000;
// The largest size field read (vocab_size, hidden_size, heads, head_dim, intermediate_size):
// 2^24, past every published model's (vocabularies of 262144, hidden sizes of 16384).
constexpr int64_t kMaxModelSize = int64_t{1} << 24;

// An integer field of `text` (`where` names the object in messages), or `fallback` when it
// is absent or null. A size written as 1024.5 (or 1024.0, or "1024") is refused, naming the
// field and the value: nlohmann's get<int64_t>() would truncate it to 1024 and build another
// model than the file describes. An unsigned value past int64 is refused as well.
int64_t integer_field(const json& text, const char* key, const std::string& where,
                      std::optional<int64_t> fallback = std::nullopt) {
  if (!text.contains(key) || text[key].is_null()) {
    CG_CHECK(fallback.has_value(), "Qwen3Config: ", where, " lacks \"", key, "\"");
    return *fallback;
  }
  const json& v = text[key];
  CG_CHECK(v.is_number_integer() &&
               (!v.is_number_unsigned() ||
                v.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())),
           "Qwen3Config: ", where, " has ", key, " = ", describe_json(v),
           "; it must be an integer (a count or a size), so fix the file");
  return v.get<int64_t>();
}

// A number field of `text`, or `fallback` when absent. Anything else (a string "1e-6", null,
// a boolean) is refused naming the field and the value: nlohmann's own type error named
// neither ("a field of the wrong type ([json.exception.type_error.302] ...)").
double number_field(const json& text, const char* key, const std::string& where, double fallback) {
  if (!text.contains(key)) return fallback;
  const json& v = text[key];
  CG_CHECK(v.is_number(), "Qwen3Config: ", where, " has ", key, " = ", describe_json(v),
           "; it must be a number, so fix the file");
  return v.get<double>();
}

// A true/false field of `text`, or `fallback` when absent; anything else ("false", null, 0)
// is refused naming the field and the value.
bool bool_field(const json& text, const char* key, const std::string& where, bool fallback) {
  if (!text.contains(key)) return fallback;
  const json& v = text[key];
  CG_CHECK(v.is_boolean(), "Qwen3Config: ", where, " has ", key, " = ", describe_json(v),
           "; it must be true or false, so fix the file");
  return v.get<bool>();
}

// Note [RoPE fields]: transformers up to 4.x writes the RoPE base as a top-level
// "rope_theta" and its scaling as "rope_scaling" (null, or {"rope_type" (older: "type"):
// "yarn", "factor": 4.0, ...}); transformers 5 writes both into "rope_parameters":
// {"rope_theta": 1000000.0, "rope_type": "default"}. Reading only one layout silently
// computes another model (a transformers-5 Qwen3 ran with base 10000 instead of 1e6 and
// its logits were off by up to 3.9). So both layouts are read, a config where they
// disagree is refused, a config with no rope_theta at all is refused (transformers would
// take its class default, 10000; chunkgrad does not guess a number every logit depends
// on), and any rope type but "default" is refused: chunkgrad implements plain RoPE, and
// yarn, linear, dynamic or llama3 scaling change the frequencies.
// Keys of rope_parameters that the Qwen3.5 family adds and that do not change plain RoPE
// for text (Note [Qwen3.5 config]).
bool is_hybrid_rope_key(const std::string& key) {
  return key == "partial_rotary_factor" || key == "mrope_section" || key == "mrope_interleaved";
}

void check_default_rope_type(const json& rope, const char* field, bool hybrid) {
  for (const char* key : {"rope_type", "type"}) {
    if (!rope.contains(key) || rope[key].is_null()) continue;
    CG_CHECK(rope[key].is_string() && rope[key].get<std::string>() == "default",
             "Qwen3Config: config.json has ", field, ".", key, " = ", describe_json(rope[key]),
             "; chunkgrad implements only the default RoPE (no yarn, linear, dynamic or llama3 "
             "frequency scaling), so it would compute a different model than transformers. "
             "Use a checkpoint without RoPE scaling");
  }
  // A scaling parameter without a type is scaling all the same (transformers infers the
  // type); only the base and the type may be there for plain RoPE.
  for (const auto& [key, value] : rope.items()) {
    if (hybrid && is_hybrid_rope_key(key)) continue;
    CG_CHECK(key == "rope_theta" || key == "rope_type" || key == "type" || value.is_null(),
             "Qwen3Config: config.json has ", field, ".", key, " = ", describe_json(value),
             "; that is a RoPE scaling parameter, and chunkgrad implements only the default "
             "RoPE (no yarn, linear, dynamic or llama3 scaling), so it would compute a different "
             "model than transformers. Use a checkpoint without RoPE scaling");
  }
}

double rope_theta_of(const json& j, bool hybrid) {
  std::optional<double> top, nested;
  if (j.contains("rope_theta") && !j["rope_theta"].is_null()) {
    CG_CHECK(j["rope_theta"].is_number(), "Qwen3Config: \"rope_theta\" must be a number, got ",
             describe_json(j["rope_theta"]));
    top = j["rope_theta"].get<double>();
  }
  if (j.contains("rope_parameters") && !j["rope_parameters"].is_null()) {
    const json& rope = j["rope_parameters"];
    CG_CHECK(rope.is_object(), "Qwen3Config: \"rope_parameters\" must be an object, got ",
             describe_json(rope));
    check_default_rope_type(rope, "rope_parameters", hybrid);
    if (rope.contains("rope_theta") && !rope["rope_theta"].is_null()) {
      CG_CHECK(rope["rope_theta"].is_number(),
               "Qwen3Config: rope_parameters.rope_theta must be a number, got ",
               describe_json(rope["rope_theta"]));
      nested = rope["rope_theta"].get<double>();
    }
  }
  if (j.contains("rope_scaling") && !j["rope_scaling"].is_null()) {
    CG_CHECK(j["rope_scaling"].is_object(),
             "Qwen3Config: \"rope_scaling\" must be null or an "
             "object, got ",
             describe_json(j["rope_scaling"]));
    check_default_rope_type(j["rope_scaling"], "rope_scaling", hybrid);
  }
  CG_CHECK(top || nested,
           "Qwen3Config: config.json gives no RoPE base: neither a top-level "
           "\"rope_theta\" (transformers 4) nor \"rope_parameters\": {\"rope_theta\": ...} "
           "(transformers 5). chunkgrad does not assume one (transformers would take 10000), "
           "since every logit depends on it; add the model's value");
  CG_CHECK(!top || !nested || *top == *nested,
           "Qwen3Config: config.json gives two RoPE bases, "
           "rope_theta = ",
           *top, " and rope_parameters.rope_theta = ", *nested,
           "; which one the model was trained with is unclear, so fix the file");
  return top ? *top : *nested;
}

// Fields chunkgrad's Qwen3 does not implement: when a config asks for them it would compute
// another model, so it is refused rather than loaded (absent or null means the default).
// Note [Fields of another family]: a field of the hybrid or MoE family in a config of
// another model_type was ignored, exit 0 (an outside tester's qwen3 config with
// partial_rotary_factor 0.5, attn_output_gate true or num_experts 8 ran as dense Qwen3, and
// a qwen3_5_text one with attn_output_gate false ran gated all the same). Each is refused
// unless it says what chunkgrad computes for that model_type.
void check_family_fields(const json& j, const std::string& where, const std::string& model_type,
                         bool hybrid, bool moe) {
  const std::string type = model_type.empty() ? std::string("qwen3") : model_type;
  if (j.contains("attn_output_gate")) {
    const bool gate = bool_field(j, "attn_output_gate", where, hybrid);
    CG_CHECK(gate == hybrid, "Qwen3Config: ", where,
             " has attn_output_gate = ", gate ? "true" : "false", ", but a model_type \"", type,
             "\" model ",
             hybrid ? "always gates its attention output (transformers' Qwen3.5 attention has no "
                      "switch)"
                    : "has no attention output gate (that is the qwen3_5 family's)",
             "; remove the field or set it to ", hybrid ? "true" : "false");
  }
  if (!hybrid && j.contains("partial_rotary_factor") && !j["partial_rotary_factor"].is_null()) {
    const double factor = number_field(j, "partial_rotary_factor", where, 1.0);
    CG_CHECK(factor == 1.0, "Qwen3Config: ", where,
             " has partial_rotary_factor = ", describe_json(j["partial_rotary_factor"]),
             ", but a model_type \"", type,
             "\" model rotates every head dim (partial rotary is the qwen3_5 family's); remove "
             "the field or set it to 1");
  }
  if (!moe) {
    for (const char* key : {"num_experts", "num_experts_per_tok", "moe_intermediate_size",
                            "shared_expert_intermediate_size"}) {
      if (!j.contains(key) || j[key].is_null()) continue;
      CG_CHECK(j[key] == 0, "Qwen3Config: ", where, " has ", key, " = ", describe_json(j[key]),
               ", but a model_type \"", type,
               "\" model has dense MLPs (a mixture of experts is model_type qwen3_5_moe or "
               "qwen3_5_moe_text; chunkgrad does not read qwen3_moe); remove the field");
    }
  }
}

void check_supported_architecture(const json& j, bool hybrid) {
  auto present = [&](const char* key) { return j.contains(key) && !j[key].is_null(); };
  if (present("hidden_act")) {
    CG_CHECK(j["hidden_act"] == "silu", "Qwen3Config: hidden_act is ",
             describe_json(j["hidden_act"]), "; chunkgrad's Qwen3 MLP is SwiGLU (silu)");
  }
  if (present("attention_bias")) {
    CG_CHECK(j["attention_bias"] == false, "Qwen3Config: attention_bias is ",
             describe_json(j["attention_bias"]),
             "; chunkgrad's Qwen3 attention has no q/k/v/o biases");
  }
  if (present("use_sliding_window")) {
    CG_CHECK(j["use_sliding_window"] == false, "Qwen3Config: use_sliding_window is ",
             describe_json(j["use_sliding_window"]),
             "; chunkgrad's Qwen3 attention is full causal attention in every layer");
  }
  if (present("layer_types") && !hybrid) {
    CG_CHECK(j["layer_types"].is_array(), "Qwen3Config: layer_types must be an array, got ",
             describe_json(j["layer_types"]));
    for (const json& t : j["layer_types"]) {
      CG_CHECK(t == "full_attention", "Qwen3Config: layer_types lists ", describe_json(t),
               "; chunkgrad's Qwen3 attention is full causal attention in every layer");
    }
  }
}

// Note [Qwen3.5 config]: transformers 5 writes the Qwen3.5 / Qwen3.6 family two ways.
// Qwen3_5ForConditionalGeneration (model_type "qwen3_5") nests the language model's fields
// in "text_config" (model_type "qwen3_5_text") beside a "vision_config" that chunkgrad
// ignores (it never runs vision inputs; the model.visual.* weights are skipped on load), and
// keeps tie_word_embeddings on the OUTER config (an inner one is ignored, as transformers'
// ForConditionalGeneration does). Qwen3_5ForCausalLM (model_type "qwen3_5_text") is flat.
// The text fields are Qwen3's plus:
//   layer_types            "linear_attention" / "full_attention" per layer; when absent,
//                          derived as transformers does from full_attention_interval
//                          (default 4): layer i is full when (i + 1) % interval == 0
//   partial_rotary_factor  at the top of the text config or in rope_parameters (both:
//                          they must agree); default 0.25, transformers' default for the
//                          family. Only the first head_dim * factor dims of a head rotate.
//   rope_parameters        rope_theta (required, as for Qwen3), rope_type "default" only,
//                          and "mrope_section" / "mrope_interleaved", accepted: with text
//                          only, the temporal, height and width position ids are all the
//                          token's position, so M-RoPE (interleaved or not) gives every
//                          frequency the same angle as plain RoPE over the rotary dims.
//   linear_*               the Gated DeltaNet sizes; absent ones take transformers'
//                          Qwen3_5TextConfig defaults (16 key / 32 value heads, dims 128,
//                          conv kernel 4).
// Every layer of this family gates its attention output and zero-centres its RMSNorms
// (attn_output_gate, zero_centred_norm). "qwen3_5_moe" (mixture of experts): Note
// [Qwen3.5-MoE config].
void read_hybrid_fields(const json& text, const std::string& where, Qwen3Config& c) {
  c.family = "qwen3_5";
  c.attn_output_gate = true;
  c.zero_centred_norm = true;
  c.linear_num_key_heads = integer_field(text, "linear_num_key_heads", where, 16);
  c.linear_num_value_heads = integer_field(text, "linear_num_value_heads", where, 32);
  c.linear_key_head_dim = integer_field(text, "linear_key_head_dim", where, 128);
  c.linear_value_head_dim = integer_field(text, "linear_value_head_dim", where, 128);
  c.linear_conv_kernel_dim = integer_field(text, "linear_conv_kernel_dim", where, 4);
  if (text.contains("layer_types") && !text["layer_types"].is_null()) {
    const json& types = text["layer_types"];
    CG_CHECK(types.is_array(), "Qwen3Config: ", where, " has layer_types = ", describe_json(types),
             "; it must be a list of \"full_attention\" / "
             "\"linear_attention\", one per layer");
    for (const json& t : types) {
      CG_CHECK(t.is_string(), "Qwen3Config: ", where, " lists ", describe_json(t),
               " in layer_types; each entry must be \"full_attention\" or \"linear_attention\"");
      c.layer_types.push_back(t.get<std::string>());
    }
  } else {
    const int64_t interval = integer_field(text, "full_attention_interval", where, 4);
    CG_CHECK(interval > 0, "Qwen3Config: ", where, " has full_attention_interval = ", interval,
             "; it must be positive (every interval-th layer is full attention)");
    for (int64_t i = 0; i < c.num_layers; ++i)
      c.layer_types.push_back((i + 1) % interval == 0 ? "full_attention" : "linear_attention");
  }
  std::optional<double> top, nested;
  if (text.contains("partial_rotary_factor") && !text["partial_rotary_factor"].is_null())
    top = number_field(text, "partial_rotary_factor", where, 0.25);
  if (text.contains("rope_parameters") && text["rope_parameters"].is_object()) {
    const json& rope = text["rope_parameters"];
    if (rope.contains("partial_rotary_factor") && !rope["partial_rotary_factor"].is_null())
      nested = number_field(rope, "partial_rotary_factor", where + "'s rope_parameters", 0.25);
    if (rope.contains("mrope_section") && !rope["mrope_section"].is_null()) {
      CG_CHECK(rope["mrope_section"].is_array(), "Qwen3Config: ", where,
               " has rope_parameters.mrope_section = ", describe_json(rope["mrope_section"]),
               "; it must be a list of section sizes");
      for (const json& v : rope["mrope_section"]) {
        CG_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0, "Qwen3Config: ", where,
                 " has rope_parameters.mrope_section entry ", describe_json(v),
                 "; sections are non-negative integers");
      }
    }
    if (rope.contains("mrope_interleaved") && !rope["mrope_interleaved"].is_null()) {
      CG_CHECK(rope["mrope_interleaved"].is_boolean(), "Qwen3Config: ", where,
               " has rope_parameters.mrope_interleaved = ",
               describe_json(rope["mrope_interleaved"]), "; it must be true or false");
    }
  }
  CG_CHECK(!top || !nested || *top == *nested, "Qwen3Config: ", where,
           " gives two partial_rotary_factor values, ", *top, " at the top and ", *nested,
           " in rope_parameters; which one the model was trained with is unclear, so fix the file");
  c.partial_rotary_factor = top ? *top : nested ? *nested : 0.25;
}

// Note [Qwen3.5-MoE config]: Qwen3_5MoeForConditionalGeneration (model_type "qwen3_5_moe",
// the language model in "text_config" with model_type "qwen3_5_moe_text") and the flat
// "qwen3_5_moe_text" are the hybrid family above (Note [Qwen3.5 config]: nesting, tying,
// layer_types, rope) whose every layer's MLP is a sparse MoE block: transformers'
// Qwen3_5MoeDecoderLayer builds one in each layer, so there is no intermediate_size (ignored
// when present, as transformers ignores it), no mlp_only_layers and no decoder_sparse_step
// (refused unless they are trivial: a config that asks for dense layers computes another
// model). Required: num_experts, num_experts_per_tok, moe_intermediate_size,
// shared_expert_intermediate_size (their sizes must match the weights; no guess). The router
// always renormalises its top-k weights (transformers' Qwen3_5MoeTopKRouter has no switch):
// "norm_topk_prob" true or absent is accepted, false refused. router_aux_loss_coef and
// output_router_logits are training-only and ignored.
void read_moe_fields(const json& text, const std::string& where, Qwen3Config& c) {
  auto need = [&](const char* key) {
    CG_CHECK(text.contains(key) && !text[key].is_null(), "Qwen3Config: ", where, " lacks \"", key,
             "\" (a qwen3_5_moe model needs it)");
    return integer_field(text, key, where);
  };
  c.num_experts = need("num_experts");
  c.num_experts_per_tok = need("num_experts_per_tok");
  c.moe_intermediate_size = need("moe_intermediate_size");
  c.shared_expert_intermediate_size = need("shared_expert_intermediate_size");
  c.intermediate_size = 0;
  CG_CHECK(c.num_experts > 0, "Qwen3Config: ", where, " has num_experts = ", c.num_experts,
           "; a qwen3_5_moe model needs at least one expert");
  if (text.contains("norm_topk_prob") && !text["norm_topk_prob"].is_null()) {
    CG_CHECK(text["norm_topk_prob"] == true, "Qwen3Config: ", where,
             " has norm_topk_prob = ", describe_json(text["norm_topk_prob"]),
             ", but transformers' qwen3_5_moe router renormalises the top-k weights regardless; "
             "chunkgrad computes what transformers computes, so set it to true or remove it");
  }
  if (text.contains("mlp_only_layers") && !text["mlp_only_layers"].is_null()) {
    CG_CHECK(text["mlp_only_layers"].is_array() && text["mlp_only_layers"].empty(),
             "Qwen3Config: ", where,
             " has mlp_only_layers = ", describe_json(text["mlp_only_layers"]),
             "; a qwen3_5_moe model has a sparse MoE block in every layer (transformers ignores "
             "the field), so dense layers are not supported: remove it or make it []");
  }
  if (text.contains("decoder_sparse_step") && !text["decoder_sparse_step"].is_null()) {
    CG_CHECK(text["decoder_sparse_step"] == 1, "Qwen3Config: ", where,
             " has decoder_sparse_step = ", describe_json(text["decoder_sparse_step"]),
             "; a qwen3_5_moe model has a sparse MoE block in every layer: remove it or make it 1");
  }
}

}  // namespace

const std::vector<std::string>& Qwen3Config::hf_model_types() {
  static const std::vector<std::string> types = {"qwen3", "qwen3_5", "qwen3_5_text", "qwen3_5_moe",
                                                 "qwen3_5_moe_text"};
  return types;
}

Qwen3Config Qwen3Config::from_hf_json(const nlohmann::json& j) {
  CG_CHECK(j.is_object(), "Qwen3Config: config.json must be a JSON object, got ", describe_json(j));
  CG_CHECK(!j.contains("model_type") || j["model_type"].is_string(),
           "Qwen3Config: config.json has model_type ", describe_json(j["model_type"]),
           "; it must be a string such as \"qwen3\" (or absent)");
  const std::string model_type =
      j.contains("model_type") ? j["model_type"].get<std::string>() : std::string();
  // A model_type outside the families read here would load as dense Qwen3 and fail on a
  // long list of tensor names (or, worse, load): say so at once. Absent stays Qwen3 (folders
  // written before transformers named it).
  const std::vector<std::string>& known = hf_model_types();
  std::string listed;
  for (size_t i = 0; i < known.size(); ++i)
    listed += (i == 0 ? "" : i + 1 == known.size() ? " and " : ", ") + known[i];
  CG_CHECK(model_type.empty() || std::find(known.begin(), known.end(), model_type) != known.end(),
           "Qwen3Config: config.json has model_type \"", model_type,
           "\", which chunkgrad does not read; it reads ", listed, " checkpoints");
  const bool moe = model_type == "qwen3_5_moe" || model_type == "qwen3_5_moe_text";
  const bool nested = model_type == "qwen3_5" || model_type == "qwen3_5_moe";
  const bool hybrid = nested || model_type == "qwen3_5_text" || model_type == "qwen3_5_moe_text";
  if (nested) {
    CG_CHECK(j.contains("text_config") && j["text_config"].is_object(),
             "Qwen3Config: config.json has model_type \"", model_type,
             "\" but no \"text_config\" object (", model_type,
             "'s ForConditionalGeneration keeps the language model's fields there)");
    const json& inner = j["text_config"];
    if (inner.contains("model_type") && inner["model_type"].is_string()) {
      const std::string inner_type = inner["model_type"].get<std::string>();
      CG_CHECK(inner_type == model_type + "_text",
               "Qwen3Config: config.json's text_config has "
               "model_type \"",
               inner_type, "\"; a \"", model_type, "\" model's text_config is \"", model_type,
               "_text\"");
    }
  }
  const json& t = nested ? j["text_config"] : j;
  const std::string where = nested ? "config.json's text_config" : "config.json";
  auto need = [&](const char* key) { return integer_field(t, key, where); };
  check_supported_architecture(t, hybrid);
  Qwen3Config c;
  try {
    c.vocab_size = need("vocab_size");
    c.hidden_size = need("hidden_size");
    c.num_layers = need("num_hidden_layers");
    // Checked before anything is sized from it (layer_types below has one entry per layer).
    CG_CHECK(c.num_layers > 0 && c.num_layers <= kMaxLayers, "Qwen3Config: ", where,
             " has num_hidden_layers = ", c.num_layers, "; it must be in [1, ", kMaxLayers,
             "] (the file is damaged, or not a model's config)");
    // A Qwen3 layer_types (all full_attention, check_supported_architecture) names each
    // layer once, as the hybrid family's does (checked in validate).
    if (!hybrid && t.contains("layer_types") && t["layer_types"].is_array()) {
      CG_CHECK(static_cast<int64_t>(t["layer_types"].size()) == c.num_layers,
               "Qwen3Config: ", where, " has ", t["layer_types"].size(),
               " layer_types for num_hidden_layers = ", c.num_layers,
               "; give one entry per layer (or none)");
    }
    if (t.contains("max_position_embeddings") && !t["max_position_embeddings"].is_null()) {
      c.max_position_embeddings = integer_field(t, "max_position_embeddings", where);
      CG_CHECK(c.max_position_embeddings > 0, "Qwen3Config: ", where,
               " has max_position_embeddings = ", c.max_position_embeddings,
               "; it must be positive (the context the model was trained for)");
    }
    c.num_heads = need("num_attention_heads");
    // transformers' Qwen3 rule for a missing or null num_key_value_heads: one per head.
    // Its Qwen3.5 class defaults to 4 instead; a guess there is refused.
    c.num_kv_heads = hybrid ? need("num_key_value_heads")
                            : integer_field(t, "num_key_value_heads", where, c.num_heads);
    // No default: transformers' Qwen3Config would take 128, Llama-style code
    // hidden_size / num_attention_heads; a guess either way changes the model.
    c.head_dim = need("head_dim");
    if (!moe) c.intermediate_size = need("intermediate_size");
    c.rope_theta = rope_theta_of(t, hybrid);
    // transformers' default (Qwen3 and Qwen3.5) when absent.
    c.rms_eps = number_field(t, "rms_norm_eps", where, 1e-6);
    // Note [Qwen3.5 config]: a nested model ties by its outer config.
    c.tie_embeddings = nested ? bool_field(j, "tie_word_embeddings", "config.json", false)
                              : bool_field(t, "tie_word_embeddings", where, false);
    check_family_fields(t, where, model_type, hybrid, moe);
    if (hybrid) read_hybrid_fields(t, where, c);
    if (moe) read_moe_fields(t, where, c);
    // Sizes far past any model's are a damaged file, said as one; left to the allocator
    // they were "out of memory ... 4.00 PiB" or a count overflow naming no field.
    // The hybrid and MoE fields too (not read for a dense model: their defaults are small).
    const std::pair<const char*, int64_t> sizes[] = {
        {"vocab_size", c.vocab_size},
        {"hidden_size", c.hidden_size},
        {"num_attention_heads", c.num_heads},
        {"num_key_value_heads", c.num_kv_heads},
        {"head_dim", c.head_dim},
        {"intermediate_size", c.intermediate_size},
        {"linear_num_key_heads", c.linear_num_key_heads},
        {"linear_num_value_heads", c.linear_num_value_heads},
        {"linear_key_head_dim", c.linear_key_head_dim},
        {"linear_value_head_dim", c.linear_value_head_dim},
        {"linear_conv_kernel_dim", c.linear_conv_kernel_dim},
        {"num_experts", c.num_experts},
        {"num_experts_per_tok", c.num_experts_per_tok},
        {"moe_intermediate_size", c.moe_intermediate_size},
        {"shared_expert_intermediate_size", c.shared_expert_intermediate_size}};
    for (const auto& [key, value] : sizes) {
      CG_CHECK(value <= kMaxModelSize, "Qwen3Config: ", where, " has ", key, " = ", value,
               ", past any model's (at most ", kMaxModelSize,
               " here): the file is damaged, or not a model's config");
    }
    if (moe) {
      CG_CHECK(c.num_experts_per_tok <= c.num_experts, "Qwen3Config: ", where,
               " has num_experts_per_tok = ", c.num_experts_per_tok,
               " but num_experts = ", c.num_experts,
               "; each token picks that many distinct experts, so it must be at "
               "most num_experts: the file is damaged, or not a model's config");
    }
    // Note [Checked counts]: each size is bounded, their products are not. (A layer_types
    // of the wrong length is validate()'s to refuse, below.)
    if (c.layer_types.empty() || static_cast<int64_t>(c.layer_types.size()) == c.num_layers) {
      try {
        c.total_parameters();
      } catch (const Error& e) {
        const std::string why = e.message().substr(std::string("Qwen3Config: ").size());
        CG_FAIL("Qwen3Config: ", where, "'s sizes together are past any model's: ", why,
                "; the file is damaged, or not a model's config");
      }
    }
  } catch (const nlohmann::json::exception& e) {
    CG_FAIL("Qwen3Config: ", where, " has a field of the wrong type (", e.what(), ")");
  }
  c.validate();
  return c;
}

std::string Qwen3Config::ignored_wrapper_fields(const nlohmann::json& j) {
  if (!j.is_object() || !j.contains("model_type") ||
      (j["model_type"] != "qwen3_5" && j["model_type"] != "qwen3_5_moe") ||
      !j.contains("text_config") || !j["text_config"].is_object())
    return "";
  const json& t = j["text_config"];
  // text_config's RoPE base may sit in its rope_parameters (transformers 5).
  const auto text_value = [&](const char* key) -> json {
    if (t.contains(key)) return t[key];
    if (std::string(key) == "rope_theta" && t.contains("rope_parameters") &&
        t["rope_parameters"].is_object() && t["rope_parameters"].contains("rope_theta"))
      return t["rope_parameters"]["rope_theta"];
    return nullptr;
  };
  std::string out;
  int fields = 0;
  for (const char* key : {"hidden_size", "num_hidden_layers", "layer_types", "rope_theta"}) {
    if (!j.contains(key) || j[key].is_null()) continue;
    const json inner = text_value(key);
    const bool same = j[key].is_number() && inner.is_number()
                          ? j[key].get<double>() == inner.get<double>()
                          : j[key] == inner;
    if (same) continue;
    ++fields;
    out += std::string(out.empty() ? "" : ", ") + key + " " + describe_json(j[key]) +
           " (text_config: " + (inner.is_null() ? std::string("none") : describe_json(inner)) + ")";
  }
  if (out.empty()) return "";
  return "config.json's top-level " + out + (fields > 1 ? " are" : " is") +
         " not read: a wrapper model (Qwen3_5ForConditionalGeneration style) takes the "
         "language model from text_config only, as transformers does";
}

Qwen3Config Qwen3Config::from_hf_file(const std::string& path) {
  // A model's folder means its config.json, as transformers' from_pretrained reads it.
  std::error_code ec;
  std::string file = path;
  if (std::filesystem::is_directory(path, ec)) {
    file = (std::filesystem::path(path) / "config.json").string();
    CG_CHECK(std::filesystem::is_regular_file(file, ec), "Qwen3Config: '", path,
             "' is a folder without a config.json; give the model's folder or its config.json");
  }
  // Bounded parse (json_input.h): a hostile config.json is an error, never a crash.
  return from_hf_json(
      parse_untrusted_json(read_text_file(file, "Qwen3Config"), "Qwen3Config: '" + file + "'"));
}

}  // namespace cg::nn
