// Why this file exists: the Qwen3Config checks, hand parameter counts and config.json
// reader (config.h).
#include "nn/config.h"

#include <optional>
#include <sstream>

#include <nlohmann/json.hpp>

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
  positive(intermediate_size, "intermediate_size");
  CG_CHECK(num_heads % num_kv_heads == 0, "Qwen3Config: num_heads (", num_heads,
           ") must be a multiple of num_kv_heads (", num_kv_heads, ") for grouped-query attention");
  CG_CHECK(head_dim % 2 == 0, "Qwen3Config: head_dim must be even for rotary embeddings, got ",
           head_dim);
  CG_CHECK(rope_theta > 0.0, "Qwen3Config: rope_theta must be positive, got ", rope_theta);
  CG_CHECK(rms_eps >= 0.0, "Qwen3Config: rms_eps must be >= 0, got ", rms_eps);
}

std::string Qwen3Config::str() const {
  std::ostringstream out;
  out << "Qwen3Config(vocab " << vocab_size << ", hidden " << hidden_size << ", layers "
      << num_layers << ", heads " << num_heads << "/" << num_kv_heads << " kv, head_dim "
      << head_dim << ", mlp " << intermediate_size << ", rope_theta " << rope_theta << ", rms_eps "
      << rms_eps << (tie_embeddings ? ", tied" : "") << ")";
  return out.str();
}

int64_t Qwen3Config::attention_parameters() const {
  const int64_t q = hidden_size * num_heads * head_dim;
  const int64_t kv = 2 * hidden_size * num_kv_heads * head_dim;
  const int64_t o = num_heads * head_dim * hidden_size;
  return q + kv + o + 2 * head_dim;  // + q_norm, k_norm
}

int64_t Qwen3Config::mlp_parameters() const { return 3 * hidden_size * intermediate_size; }

int64_t Qwen3Config::layer_parameters() const {
  return attention_parameters() + mlp_parameters() + 2 * hidden_size;
}

int64_t Qwen3Config::total_parameters() const {
  const int64_t embed = vocab_size * hidden_size;
  return embed + num_layers * layer_parameters() + hidden_size + (tie_embeddings ? 0 : embed);
}

namespace {

using json = nlohmann::json;

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
void check_default_rope_type(const json& rope, const char* field) {
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
    CG_CHECK(key == "rope_theta" || key == "rope_type" || key == "type" || value.is_null(),
             "Qwen3Config: config.json has ", field, ".", key, " = ", describe_json(value),
             "; that is a RoPE scaling parameter, and chunkgrad implements only the default "
             "RoPE (no yarn, linear, dynamic or llama3 scaling), so it would compute a different "
             "model than transformers. Use a checkpoint without RoPE scaling");
  }
}

double rope_theta_of(const json& j) {
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
    check_default_rope_type(rope, "rope_parameters");
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
    check_default_rope_type(j["rope_scaling"], "rope_scaling");
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
void check_supported_architecture(const json& j) {
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
  if (present("layer_types")) {
    CG_CHECK(j["layer_types"].is_array(), "Qwen3Config: layer_types must be an array, got ",
             describe_json(j["layer_types"]));
    for (const json& t : j["layer_types"]) {
      CG_CHECK(t == "full_attention", "Qwen3Config: layer_types lists ", describe_json(t),
               "; chunkgrad's Qwen3 attention is full causal attention in every layer");
    }
  }
}

}  // namespace

Qwen3Config Qwen3Config::from_hf_json(const nlohmann::json& j) {
  CG_CHECK(j.is_object(), "Qwen3Config: config.json must be a JSON object, got ", describe_json(j));
  auto need = [&](const char* key) -> const nlohmann::json& {
    CG_CHECK(j.contains(key) && !j.at(key).is_null(), "Qwen3Config: config.json lacks \"", key,
             "\"");
    return j.at(key);
  };
  check_supported_architecture(j);
  Qwen3Config c;
  try {
    c.vocab_size = need("vocab_size").get<int64_t>();
    c.hidden_size = need("hidden_size").get<int64_t>();
    c.num_layers = need("num_hidden_layers").get<int64_t>();
    c.num_heads = need("num_attention_heads").get<int64_t>();
    // transformers' own rule for a missing or null num_key_value_heads: one per head.
    c.num_kv_heads = j.contains("num_key_value_heads") && !j["num_key_value_heads"].is_null()
                         ? j["num_key_value_heads"].get<int64_t>()
                         : c.num_heads;
    // No default: transformers' Qwen3Config would take 128, Llama-style code
    // hidden_size / num_attention_heads; a guess either way changes the model.
    c.head_dim = need("head_dim").get<int64_t>();
    c.intermediate_size = need("intermediate_size").get<int64_t>();
    c.rope_theta = rope_theta_of(j);
    c.rms_eps = j.value("rms_norm_eps", 1e-6);  // transformers' Qwen3 default (4.x and 5)
    c.tie_embeddings = j.value("tie_word_embeddings", false);  // likewise
  } catch (const nlohmann::json::exception& e) {
    CG_FAIL("Qwen3Config: config.json has a field of the wrong type (", e.what(), ")");
  }
  c.validate();
  return c;
}

Qwen3Config Qwen3Config::from_hf_file(const std::string& path) {
  // Bounded parse (json_input.h): a hostile config.json is an error, never a crash.
  return from_hf_json(
      parse_untrusted_json(read_text_file(path, "Qwen3Config"), "Qwen3Config: '" + path + "'"));
}

}  // namespace cg::nn
