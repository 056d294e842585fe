// Why this file exists: the Qwen3Config checks, hand parameter counts and config.json
// reader (config.h).
#include "nn/config.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "core/error.h"

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
           ") must be a multiple of num_kv_heads (", num_kv_heads,
           ") for grouped-query attention");
  CG_CHECK(head_dim % 2 == 0, "Qwen3Config: head_dim must be even for rotary embeddings, got ",
           head_dim);
  CG_CHECK(rope_theta > 0.0, "Qwen3Config: rope_theta must be positive, got ", rope_theta);
  CG_CHECK(rms_eps >= 0.0, "Qwen3Config: rms_eps must be >= 0, got ", rms_eps);
}

std::string Qwen3Config::str() const {
  std::ostringstream out;
  out << "Qwen3Config(vocab " << vocab_size << ", hidden " << hidden_size << ", layers "
      << num_layers << ", heads " << num_heads << "/" << num_kv_heads << " kv, head_dim "
      << head_dim << ", mlp " << intermediate_size << ", rope_theta " << rope_theta
      << ", rms_eps " << rms_eps << (tie_embeddings ? ", tied" : "") << ")";
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

Qwen3Config Qwen3Config::from_hf_json(const nlohmann::json& j) {
  auto need = [&](const char* key) -> const nlohmann::json& {
    CG_CHECK(j.contains(key), "Qwen3Config: config.json lacks \"", key, "\"");
    return j.at(key);
  };
  Qwen3Config c;
  try {
    c.vocab_size = need("vocab_size").get<int64_t>();
    c.hidden_size = need("hidden_size").get<int64_t>();
    c.num_layers = need("num_hidden_layers").get<int64_t>();
    c.num_heads = need("num_attention_heads").get<int64_t>();
    c.num_kv_heads = j.value("num_key_value_heads", c.num_heads);
    c.head_dim = j.contains("head_dim") && !j["head_dim"].is_null()
                     ? j["head_dim"].get<int64_t>()
                     : c.hidden_size / c.num_heads;
    c.intermediate_size = need("intermediate_size").get<int64_t>();
    c.rope_theta = j.value("rope_theta", 10000.0);
    c.rms_eps = j.value("rms_norm_eps", 1e-6);
    c.tie_embeddings = j.value("tie_word_embeddings", false);
  } catch (const nlohmann::json::exception& e) {
    CG_FAIL("Qwen3Config: config.json has a field of the wrong type (", e.what(), ")");
  }
  c.validate();
  return c;
}

Qwen3Config Qwen3Config::from_hf_file(const std::string& path) {
  std::ifstream in(path);
  CG_CHECK(in, "Qwen3Config: cannot open '", path, "'");
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    CG_FAIL("Qwen3Config: '", path, "' is not valid JSON (", e.what(), ")");
  }
  return from_hf_json(j);
}

}  // namespace cg::nn
