// Why this file exists: Qwen3Config::from_hf_json against the config.json layouts that
// transformers writes (issue 8, item 8). A transformers-5 checkpoint keeps the RoPE base
// under "rope_parameters"; reading only the top-level "rope_theta" silently ran the model
// with base 10000. Fields that change the numbers are read from either layout or refused,
// never guessed.
#include <gtest/gtest.h>

#include <filesystem>

#include <limits>

#include <nlohmann/json.hpp>

#include "nn/config.h"
#include "nn_test_util.h"
#include "tests/error_helpers.h"

namespace cg {
namespace {

using json = nlohmann::json;

// A tiny Qwen3 config.json as transformers 4.x saves it (keys it always writes).
json hf4_config() {
  return json::parse(R"({
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": false, "attention_dropout": 0.0,
    "bos_token_id": null, "eos_token_id": null, "head_dim": 16, "hidden_act": "silu",
    "hidden_size": 32, "initializer_range": 0.02, "intermediate_size": 64,
    "max_position_embeddings": 64, "max_window_layers": 28, "model_type": "qwen3",
    "num_attention_heads": 4, "num_hidden_layers": 2, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "rope_scaling": null, "rope_theta": 1000000.0,
    "sliding_window": null, "tie_word_embeddings": true, "torch_dtype": "bfloat16",
    "transformers_version": "4.51.0", "use_cache": true, "use_sliding_window": false,
    "vocab_size": 256})");
}

// The same model as transformers 5 saves it: RoPE under "rope_parameters", layer_types.
json hf5_config() {
  json j = hf4_config();
  j.erase("rope_theta");
  j.erase("rope_scaling");
  j.erase("torch_dtype");
  j["dtype"] = "bfloat16";
  j["rope_parameters"] = {{"rope_theta", 1000000.0}, {"rope_type", "default"}};
  j["layer_types"] = {"full_attention", "full_attention"};
  j["transformers_version"] = "5.0.0";
  return j;
}

TEST(NnConfig, ReadsTransformers4And5Layouts) {
  for (const json& j : {hf4_config(), hf5_config()}) {
    const nn::Qwen3Config c = nn::Qwen3Config::from_hf_json(j);
    EXPECT_EQ(c.rope_theta, 1e6) << j["transformers_version"];  // was 10000 for 5.x
    EXPECT_EQ(c.vocab_size, 256);
    EXPECT_EQ(c.hidden_size, 32);
    EXPECT_EQ(c.num_layers, 2);
    EXPECT_EQ(c.num_heads, 4);
    EXPECT_EQ(c.num_kv_heads, 2);
    EXPECT_EQ(c.head_dim, 16);
    EXPECT_EQ(c.intermediate_size, 64);
    EXPECT_EQ(c.rms_eps, 1e-6);
    EXPECT_TRUE(c.tie_embeddings);
  }
  // Both layouts at once are fine when they agree, and rope_scaling {"rope_type": "default"}
  // (or the older {"type": "default"}) is plain RoPE.
  json both = hf5_config();
  both["rope_theta"] = 1000000.0;
  both["rope_scaling"] = {{"type", "default"}};
  EXPECT_EQ(nn::Qwen3Config::from_hf_json(both).rope_theta, 1e6);
  json from_file = hf5_config();
  testing_nn::TempDir dir;
  testing_nn::write_bytes(dir.file("config.json"), from_file.dump(2));
  EXPECT_EQ(nn::Qwen3Config::from_hf_file(dir.file("config.json")).rope_theta, 1e6);
  // A model's folder means its config.json (target.hf_config may name either); a folder
  // without one is refused, naming it.
  EXPECT_EQ(nn::Qwen3Config::from_hf_file(dir.str()).rope_theta, 1e6);
  const std::string sub = dir.file("no_config");
  std::filesystem::create_directories(sub);
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_file(sub), "is a folder without a config.json",
                   sub.c_str());
}

TEST(NnConfig, RefusesWhatWouldChangeTheNumbers) {
  json no_base = hf5_config();
  no_base["rope_parameters"].erase("rope_theta");
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(no_base), "no RoPE base", "rope_parameters",
                   "10000");
  json none = hf4_config();
  none.erase("rope_theta");
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(none), "no RoPE base");

  json disagree = hf5_config();
  disagree["rope_theta"] = 10000.0;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(disagree), "two RoPE bases", "10000", "1e+06");

  json yarn5 = hf5_config();
  yarn5["rope_parameters"]["rope_type"] = "yarn";
  yarn5["rope_parameters"]["factor"] = 4.0;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(yarn5), "rope_parameters.rope_type", "\"yarn\"",
                   "only the default RoPE");
  json yarn4 = hf4_config();
  yarn4["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(yarn4), "rope_scaling.rope_type");
  json linear_old = hf4_config();
  linear_old["rope_scaling"] = {{"type", "linear"}, {"factor", 2.0}};
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(linear_old), "rope_scaling.type", "\"linear\"");
  // A scaling factor without a type is still scaling (transformers infers the type).
  json untyped = hf4_config();
  untyped["rope_scaling"] = {{"factor", 8.0}, {"original_max_position_embeddings", 4096}};
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(untyped), "rope_scaling.factor", "scaling");
  json untyped5 = hf5_config();
  untyped5["rope_parameters"]["factor"] = 8.0;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(untyped5), "rope_parameters.factor");
  json bad_type = hf4_config();
  bad_type["rope_theta"] = "1e6";
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(bad_type), "rope_theta\" must be a number");

  json no_head_dim = hf4_config();
  no_head_dim.erase("head_dim");
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(no_head_dim), "lacks \"head_dim\"");

  json bias = hf4_config();
  bias["attention_bias"] = true;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(bias), "attention_bias is true");
  json gelu = hf4_config();
  gelu["hidden_act"] = "gelu";
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(gelu), "hidden_act is \"gelu\"");
  json sliding = hf4_config();
  sliding["use_sliding_window"] = true;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(sliding), "use_sliding_window is true");
  json layer_types = hf5_config();
  layer_types["layer_types"][1] = "sliding_attention";
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(layer_types), "\"sliding_attention\"");
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(json::array()), "must be a JSON object");
}

// An outside tester: a model_type that is not a string, a Qwen3 layer_types of the wrong
// length and a negative max_position_embeddings loaded silently.
TEST(NnConfig, RefusesWhatAnOutsideTesterSlippedThrough) {
  EXPECT_EQ(nn::Qwen3Config::from_hf_json(hf4_config()).max_position_embeddings, 64);
  json no_max = hf4_config();
  no_max.erase("max_position_embeddings");
  EXPECT_EQ(nn::Qwen3Config::from_hf_json(no_max).max_position_embeddings, 0);
  json type_int = hf4_config();
  type_int["model_type"] = 3;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(type_int), "model_type 3", "must be a string");
  json short_types = hf5_config();
  short_types["layer_types"] = {"full_attention"};
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(short_types), "1 layer_types",
                   "num_hidden_layers = 2");
  json huge = hf4_config();
  huge["hidden_size"] = int64_t{1} << 40;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(huge), "hidden_size = 1099511627776",
                   "past any model's");
  json negative = hf4_config();
  negative["max_position_embeddings"] = -1;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(negative), "max_position_embeddings = -1",
                   "must be positive");
}

// An outside tester: a qwen3 config with the hybrid or MoE family's fields ran as dense Qwen3,
// exit 0 (Note [Fields of another family]); and a number or a boolean of the wrong JSON type
// gave "a field of the wrong type ([json.exception.type_error.302] ...)", naming no field.
TEST(NnConfig, RefusesFieldsOfAnotherFamilyAndNamesWrongTypes) {
  json partial = hf4_config();
  partial["partial_rotary_factor"] = 0.5;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(partial), "partial_rotary_factor = 0.5",
                   "model_type \"qwen3\" model rotates every head dim");
  partial["partial_rotary_factor"] = 1.0;
  EXPECT_EQ(nn::Qwen3Config::from_hf_json(partial).rotary_dim(), 16);
  json gate = hf4_config();
  gate["attn_output_gate"] = true;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(gate), "attn_output_gate = true",
                   "has no attention output gate", "set it to false");
  gate["attn_output_gate"] = false;
  EXPECT_FALSE(nn::Qwen3Config::from_hf_json(gate).attn_output_gate);
  json experts = hf4_config();
  experts["num_experts"] = 8;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(experts), "num_experts = 8", "dense MLPs");
  // Wrong JSON types: the field and the value.
  const std::pair<const char*, json> wrong[] = {{"partial_rotary_factor", "0.5"},
                                                {"rms_norm_eps", "1e-6"},
                                                {"rms_norm_eps", nullptr},
                                                {"tie_word_embeddings", "false"},
                                                {"attn_output_gate", 1}};
  for (const auto& [key, value] : wrong) {
    json j = hf4_config();
    j[key] = value;
    const std::string want = std::string(key) + " = " + (value.is_null() ? "null" : value.dump());
    EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(j), want.c_str(), "config.json has",
                     "so fix the file");
  }
}

// A size written as a non-integer number is refused with one line naming the field and the
// value: get<int64_t>() truncated vocab_size 1024.5 to 1024 and built another model.
TEST(NnConfig, RefusesNonIntegerSizes) {
  json j = hf4_config();
  j["vocab_size"] = 1024.5;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(j), "config.json has vocab_size = 1024.5",
                   "must be an integer");
  for (const char* key : {"hidden_size", "num_hidden_layers", "num_attention_heads",
                          "num_key_value_heads", "head_dim", "intermediate_size"}) {
    json k = hf4_config();
    k[key] = 2.0;  // integral, but a float: transformers would not build a model from it either
    const std::string want = std::string(key) + " = 2.0";
    EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(k), want.c_str(), "must be an integer");
  }
  json text = hf4_config();
  text["vocab_size"] = "256";
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(text), "vocab_size = \"256\"",
                   "must be an integer");
  json huge = hf4_config();
  huge["vocab_size"] = std::numeric_limits<uint64_t>::max();
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(huge), "vocab_size = 18446744073709551615",
                   "must be an integer");
}

TEST(NnConfig, TransformersDefaultsForFieldsItDefinesThem) {
  // num_key_value_heads absent or null: one kv head per head (transformers' rule);
  // rms_norm_eps and tie_word_embeddings absent: transformers' Qwen3 defaults.
  json j = hf4_config();
  j["num_key_value_heads"] = nullptr;
  j.erase("rms_norm_eps");
  j.erase("tie_word_embeddings");
  const nn::Qwen3Config c = nn::Qwen3Config::from_hf_json(j);
  EXPECT_EQ(c.num_kv_heads, 4);
  EXPECT_EQ(c.rms_eps, 1e-6);
  EXPECT_FALSE(c.tie_embeddings);
}

}  // namespace
}  // namespace cg
