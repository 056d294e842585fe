// Why this file exists: Qwen3Config::from_hf_json for the Qwen3.5 / Qwen3.6 family as
// transformers 5 writes it (issue 21 item 1): the nested Qwen3_5ForConditionalGeneration
// layout and the flat Qwen3_5ForCausalLM one, the fields that may live in two places or be
// absent, one test per refusal (each asserting that its message names the field), the
// hybrid parameter counts, and item 4: a drafter built for such a target, and the config
// it exports, carry none of the target's hybrid fields.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "nn/config.h"
#include "nn/dflash_drafter.h"
#include "tests/error_helpers.h"
#include "train/drafter_export.h"
#include "train/drafter_model.h"

namespace cg {
namespace {

using json = nlohmann::json;

// A tiny text config as transformers 5 writes a Qwen3_5TextConfig (flat layout).
json text_config() {
  return json::parse(R"({
    "model_type": "qwen3_5_text", "architectures": ["Qwen3_5ForCausalLM"],
    "attention_bias": false, "attention_dropout": 0.0, "head_dim": 16, "hidden_act": "silu",
    "hidden_size": 32, "intermediate_size": 64, "max_position_embeddings": 512,
    "num_attention_heads": 4, "num_hidden_layers": 4, "num_key_value_heads": 2,
    "rms_norm_eps": 1e-06, "tie_word_embeddings": false, "vocab_size": 256,
    "layer_types": ["linear_attention", "linear_attention", "linear_attention", "full_attention"],
    "linear_conv_kernel_dim": 4, "linear_key_head_dim": 8, "linear_value_head_dim": 8,
    "linear_num_key_heads": 2, "linear_num_value_heads": 4,
    "rope_parameters": {"rope_theta": 10000000.0, "rope_type": "default",
                        "partial_rotary_factor": 0.25, "mrope_section": [1, 1, 0],
                        "mrope_interleaved": true},
    "dtype": "float32", "transformers_version": "5.17.0"})");
}

// The same language model inside a Qwen3_5ForConditionalGeneration config.
json nested_config() {
  json t = text_config();
  t.erase("architectures");
  t.erase("tie_word_embeddings");
  return json{{"model_type", "qwen3_5"},
              {"architectures", {"Qwen3_5ForConditionalGeneration"}},
              {"text_config", t},
              {"vision_config", {{"model_type", "qwen3_5_vision"}, {"depth", 2}}},
              {"image_token_id", 248056},
              {"tie_word_embeddings", true},
              {"transformers_version", "5.17.0"}};
}

void expect_tiny_hybrid(const nn::Qwen3Config& c) {
  EXPECT_EQ(c.family, "qwen3_5");
  EXPECT_EQ(c.vocab_size, 256);
  EXPECT_EQ(c.hidden_size, 32);
  EXPECT_EQ(c.num_layers, 4);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 2);
  EXPECT_EQ(c.head_dim, 16);
  EXPECT_EQ(c.rope_theta, 1e7);
  EXPECT_EQ(c.partial_rotary_factor, 0.25);
  EXPECT_EQ(c.rotary_dim(), 4);
  EXPECT_TRUE(c.attn_output_gate);
  EXPECT_TRUE(c.zero_centred_norm);
  EXPECT_EQ(c.linear_num_key_heads, 2);
  EXPECT_EQ(c.linear_num_value_heads, 4);
  EXPECT_EQ(c.linear_key_head_dim, 8);
  EXPECT_EQ(c.linear_value_head_dim, 8);
  EXPECT_EQ(c.linear_conv_kernel_dim, 4);
  EXPECT_TRUE(c.is_linear_layer(0) && c.is_linear_layer(2));
  EXPECT_FALSE(c.is_linear_layer(3));
}

TEST(Qwen35Config, ReadsTheFlatTextLayout) {
  const nn::Qwen3Config c = nn::Qwen3Config::from_hf_json(text_config());
  expect_tiny_hybrid(c);
  EXPECT_FALSE(c.tie_embeddings);
}

TEST(Qwen35Config, ReadsTheNestedLayoutWithTheOuterTie) {
  const nn::Qwen3Config c = nn::Qwen3Config::from_hf_json(nested_config());
  expect_tiny_hybrid(c);
  EXPECT_TRUE(c.tie_embeddings);  // the outer config's
  json inner_says_no = nested_config();
  inner_says_no["text_config"]["tie_word_embeddings"] = false;  // ignored, as transformers does
  EXPECT_TRUE(nn::Qwen3Config::from_hf_json(inner_says_no).tie_embeddings);
  json untied = nested_config();
  untied.erase("tie_word_embeddings");
  EXPECT_FALSE(nn::Qwen3Config::from_hf_json(untied).tie_embeddings);
}

TEST(Qwen35Config, DerivesLayerTypesFromTheInterval) {
  json j = text_config();
  j.erase("layer_types");
  j["num_hidden_layers"] = 8;
  nn::Qwen3Config c = nn::Qwen3Config::from_hf_json(j);  // default interval 4
  const std::vector<std::string> every4{"linear_attention", "linear_attention", "linear_attention",
                                        "full_attention",   "linear_attention", "linear_attention",
                                        "linear_attention", "full_attention"};
  EXPECT_EQ(c.layer_types, every4);
  j["full_attention_interval"] = 2;
  c = nn::Qwen3Config::from_hf_json(j);
  for (int64_t i = 0; i < 8; ++i) EXPECT_EQ(c.is_linear_layer(i), i % 2 == 0) << i;
}

TEST(Qwen35Config, PartialRotaryFactorAtTheTopOrDefault) {
  json top = text_config();
  top["rope_parameters"].erase("partial_rotary_factor");
  top["partial_rotary_factor"] = 0.5;
  EXPECT_EQ(nn::Qwen3Config::from_hf_json(top).rotary_dim(), 8);
  json absent = text_config();
  absent["rope_parameters"].erase("partial_rotary_factor");
  EXPECT_EQ(nn::Qwen3Config::from_hf_json(absent).partial_rotary_factor, 0.25);  // transformers'
  json both = text_config();
  both["partial_rotary_factor"] = 0.25;  // agreeing: fine
  EXPECT_EQ(nn::Qwen3Config::from_hf_json(both).rotary_dim(), 4);
  json plain = text_config();  // no M-RoPE fields at all: the same model
  plain["rope_parameters"].erase("mrope_section");
  plain["rope_parameters"].erase("mrope_interleaved");
  EXPECT_EQ(nn::Qwen3Config::from_hf_json(plain).rotary_dim(), 4);
}

TEST(Qwen35Config, DenseQwen3StaysDense) {
  json j = text_config();
  for (const char* k : {"layer_types", "linear_conv_kernel_dim", "linear_key_head_dim",
                        "linear_value_head_dim", "linear_num_key_heads", "linear_num_value_heads"})
    j.erase(k);
  j["model_type"] = "qwen3";
  j["rope_parameters"] = {{"rope_theta", 1e6}, {"rope_type", "default"}};
  const nn::Qwen3Config c = nn::Qwen3Config::from_hf_json(j);
  EXPECT_EQ(c.family, "qwen3");
  EXPECT_FALSE(c.attn_output_gate || c.zero_centred_norm);
  EXPECT_EQ(c.rotary_dim(), 16);
  EXPECT_TRUE(c.layer_types.empty());
  EXPECT_EQ(c.str().find("family"), std::string::npos);  // Qwen3 str() unchanged
}

TEST(Qwen35Config, StrShowsTheHybridFields) {
  const std::string s = nn::Qwen3Config::from_hf_json(text_config()).str();
  for (const char* word :
       {"family qwen3_5", "3 linear_attention + 1 full_attention", "layer_types [L,L,L,F]",
        "gated attention", "zero-centred norms", "rotary_dim 4", "deltanet 2 k / 4 v heads"})
    EXPECT_NE(s.find(word), std::string::npos) << word << " not in " << s;
}

// ---- refusals: one per message, each naming its field ------------------------------

TEST(Qwen35Config, RefusesMixedDenseAndMixtureOfExpertsTypes) {
  // A "qwen3_5_moe" config needs its expert sizes (tests/qwen3_5_moe_test.cpp reads them);
  // an outer and inner model_type of different families is refused.
  json moe = text_config();
  moe["model_type"] = "qwen3_5_moe_text";
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(moe), "lacks", "num_experts");
  json nested_moe = nested_config();
  nested_moe["text_config"]["model_type"] = "qwen3_5_moe_text";
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(nested_moe), "model_type", "qwen3_5_moe_text",
                   "\"qwen3_5_text\"");
}

TEST(Qwen35Config, RefusesANestedConfigWithoutTextConfig) {
  json j = nested_config();
  j.erase("text_config");
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(j), "text_config");
}

TEST(Qwen35Config, RefusesAnotherTextConfigType) {
  json j = nested_config();
  j["text_config"]["model_type"] = "llama";
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(j), "text_config", "model_type", "\"llama\"");
  // An outer model_type chunkgrad does not read is refused by name, not loaded as Qwen3.
  json other = j;
  other["model_type"] = "qwen4";
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(other), "model_type \"qwen4\"", "does not read");
}

TEST(Qwen35Config, RefusesLayerTypesOfTheWrongLength) {
  json j = text_config();
  j["layer_types"].erase(0);
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(j), "layer_types has 3 entries",
                   "num_layers is 4");
}

TEST(Qwen35Config, RefusesAnUnknownLayerType) {
  json j = text_config();
  j["layer_types"][1] = "sliding_attention";
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(j), "layer_types[1]", "\"sliding_attention\"");
  json not_list = text_config();
  not_list["layer_types"] = "full_attention";
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(not_list), "layer_types =");
}

TEST(Qwen35Config, RefusesAnOddRotaryDim) {
  json j = text_config();
  j["rope_parameters"]["partial_rotary_factor"] = 0.1875;  // 16 * 0.1875 = 3
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(j), "rotary_dim", "partial_rotary_factor", "even");
}

TEST(Qwen35Config, RefusesTwoPartialRotaryFactors) {
  json j = text_config();
  j["partial_rotary_factor"] = 0.5;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(j), "two partial_rotary_factor", "0.5", "0.25");
}

TEST(Qwen35Config, RefusesRopeScaling) {
  json j = text_config();
  j["rope_parameters"]["rope_type"] = "yarn";
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(j), "rope_parameters.rope_type", "\"yarn\"");
  json factor = text_config();
  factor["rope_parameters"]["factor"] = 4.0;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(factor), "rope_parameters.factor");
}

TEST(Qwen35Config, RefusesABadMropeSection) {
  json j = text_config();
  j["rope_parameters"]["mrope_section"] = "11,11,10";
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(j), "mrope_section");
  json interleaved = text_config();
  interleaved["rope_parameters"]["mrope_interleaved"] = 1.5;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(interleaved), "mrope_interleaved");
}

TEST(Qwen35Config, RefusesValueHeadsNotAMultipleOfKeyHeads) {
  json j = text_config();
  j["linear_num_value_heads"] = 3;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(j), "linear_num_value_heads (3)",
                   "linear_num_key_heads (2)");
}

TEST(Qwen35Config, RefusesANonPositiveInterval) {
  json j = text_config();
  j.erase("layer_types");
  j["full_attention_interval"] = 0;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(j), "full_attention_interval");
}

TEST(Qwen35Config, RefusesAMissingKvHeadCount) {
  json j = nested_config();
  j["text_config"].erase("num_key_value_heads");
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(j), "text_config", "num_key_value_heads");
}

// ---- parameter counts --------------------------------------------------------------

TEST(Qwen35Config, ParameterCountsCountTheGateAndTheDeltaNet) {
  const nn::Qwen3Config c = nn::Qwen3Config::from_hf_json(text_config());
  // Gated q_proj 32 x (4 * 2 * 16), k/v 32 x (2 * 16) each, o 64 x 32, q/k norms 16 each.
  EXPECT_EQ(c.attention_parameters(), 32 * 128 + 2 * 32 * 32 + 64 * 32 + 2 * 16);
  // conv_dim = 2 * 2 * 8 + 4 * 8 = 64: in_proj_qkv 32 x 64, in_proj_z 32 x 32, in_proj_b/a
  // 32 x 4 each, conv1d 64 x 4, dt_bias + A_log 4 each, norm 8, out_proj 32 x 32.
  EXPECT_EQ(c.linear_attention_parameters(),
            32 * 64 + 32 * 32 + 2 * 32 * 4 + 64 * 4 + 2 * 4 + 8 + 32 * 32);
  const int64_t mlp = 3 * 32 * 64, norms = 2 * 32;
  EXPECT_EQ(c.total_parameters(), 2 * 256 * 32 +
                                      3 * (c.linear_attention_parameters() + mlp + norms) +
                                      (c.attention_parameters() + mlp + norms) + 32);
}

// ---- item 4: drafters for these targets ----------------------------------------------

TEST(Qwen35Config, DrafterTakesNoneOfTheTargetsHybridFields) {
  const nn::Qwen3Config target = nn::Qwen3Config::from_hf_json(nested_config());
  train::DrafterConfig d;
  d.num_layers = 1;
  d.intermediate_size = 64;
  d.target_layers = {1, 3};
  d.mask_token_id = 250;
  const nn::DFlashDrafterConfig dc = train::drafter_model_config(target, d, 255);
  EXPECT_EQ(dc.layers.family, "qwen3");
  EXPECT_TRUE(dc.layers.layer_types.empty());
  EXPECT_FALSE(dc.layers.attn_output_gate);
  EXPECT_FALSE(dc.layers.zero_centred_norm);
  EXPECT_EQ(dc.layers.partial_rotary_factor, 1.0);
  EXPECT_EQ(dc.layers.rotary_dim(), dc.layers.head_dim);
  EXPECT_EQ(dc.mask_token_id, 250);  // a config field

  const json exported = train::public_drafter_config(dc, {.num_target_layers = 4});
  const std::string text = exported.dump();
  for (const char* leak : {"partial_rotary_factor", "mrope_section", "mrope_interleaved",
                           "rope_parameters", "linear_attention", "linear_num", "text_config"})
    EXPECT_EQ(text.find(leak), std::string::npos) << leak << " leaked into " << text;
  for (const json& t : exported["layer_types"]) EXPECT_EQ(t, "full_attention");
  EXPECT_EQ(exported["rope_theta"], 1e7);  // the drafter's (here the default: the target's)
  EXPECT_EQ(exported["dflash_config"]["mask_token_id"], 250);

  // A drafter config that still carries them is refused where the drafter is built.
  nn::DFlashDrafterConfig leaked = dc;
  leaked.layers.partial_rotary_factor = 0.25;
  EXPECT_ERROR_HAS(leaked.validate(), "dense Qwen3", "partial_rotary_factor");
}

TEST(Qwen35Config, PublishedMaskTokenIdRoundTrips) {
  json big = nested_config();
  big["text_config"]["vocab_size"] = 248320;
  const nn::Qwen3Config target = nn::Qwen3Config::from_hf_json(big);
  train::DrafterConfig d;
  d.num_layers = 1;
  d.intermediate_size = 64;
  d.target_layers = {1, 3};
  d.mask_token_id = 248070;  // the published Qwen3.5 DFlash drafters'
  const nn::DFlashDrafterConfig dc = train::drafter_model_config(target, d, 0);
  EXPECT_EQ(train::public_drafter_config(dc, {})["dflash_config"]["mask_token_id"], 248070);
}

// The family's own integer fields, defaulted ones included, refuse non-integers too
// (text.value("linear_num_key_heads", 16) truncated 2.5 to 2).
TEST(Qwen35Config, RefusesNonIntegerSizes) {
  for (const char* key : {"linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                          "linear_value_head_dim", "linear_conv_kernel_dim"}) {
    json t = text_config();
    t[key] = 2.5;
    const std::string want = "config.json has " + std::string(key) + " = 2.5";
    EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(t), want.c_str(), "must be an integer");
  }
  json interval = text_config();
  interval.erase("layer_types");
  interval["full_attention_interval"] = 4.5;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(interval), "full_attention_interval = 4.5",
                   "must be an integer");
  json nested = nested_config();
  nested["text_config"]["vocab_size"] = 1024.5;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(nested),
                   "config.json's text_config has vocab_size = 1024.5", "must be an integer");
}

// An outside tester: "attn_output_gate": false (or a non-bool) in a qwen3_5_text config was
// accepted and the model ran gated all the same; num_experts in a dense one was ignored
// (Note [Fields of another family]). A wrong JSON type names the field and the value.
TEST(Qwen35Config, RefusesWhatItCannotHonourAndNamesWrongTypes) {
  json gate = text_config();
  gate["attn_output_gate"] = true;  // what the family does: fine
  EXPECT_TRUE(nn::Qwen3Config::from_hf_json(gate).attn_output_gate);
  gate["attn_output_gate"] = false;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(gate), "attn_output_gate = false",
                   "always gates its attention output", "set it to true");
  gate["attn_output_gate"] = "no";
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(gate), "attn_output_gate = \"no\"",
                   "must be true or false");
  json experts = nested_config();
  experts["text_config"]["num_experts"] = 8;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(experts), "text_config has num_experts = 8",
                   "qwen3_5_moe");
  json partial = text_config();
  partial["rope_parameters"]["partial_rotary_factor"] = "0.25";
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(partial),
                   "rope_parameters has partial_rotary_factor = \"0.25\"", "must be a number");
  json tie = nested_config();
  tie["tie_word_embeddings"] = "true";
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(tie),
                   "config.json has tie_word_embeddings = \"true\"", "must be true or false");
}

// An outside tester: a wrapper's top-level sizes that disagree with text_config were
// ignored without a word (as transformers ignores them). They are still ignored, and named
// for the loaders' one warning line.
TEST(Qwen35Config, NamesTheWrappersIgnoredTopLevelFields) {
  json j = nested_config();
  EXPECT_EQ(nn::Qwen3Config::ignored_wrapper_fields(j), "");
  j["hidden_size"] = 32;         // agrees with text_config: nothing to say
  j["rope_theta"] = 10000000.0;  // agrees with text_config's rope_parameters
  EXPECT_EQ(nn::Qwen3Config::ignored_wrapper_fields(j), "");
  j["hidden_size"] = 4096;
  j["num_hidden_layers"] = 9;
  j["rope_theta"] = 1e6;
  const std::string line = nn::Qwen3Config::ignored_wrapper_fields(j);
  for (const char* part :
       {"hidden_size 4096 (text_config: 32)", "num_hidden_layers 9 (text_config: 4)",
        "rope_theta 1000000.0 (text_config: 10000000.0)",
        "takes the language model from text_config only"})
    EXPECT_NE(line.find(part), std::string::npos) << part << " in " << line;
  EXPECT_EQ(nn::Qwen3Config::from_hf_json(j).hidden_size, 32);            // still text_config's
  EXPECT_EQ(nn::Qwen3Config::ignored_wrapper_fields(text_config()), "");  // flat: nothing
}

// An outside tester: the Gated DeltaNet sizes were not bounded (linear_num_value_heads and
// linear_value_head_dim of 2^40 wrapped their product to 0, signed-overflow UB;
// linear_conv_kernel_dim = 2^62 gave a raw shape error). Each is bounded, naming
// config.json and the field, and products past 64 bits are refused (Note [Checked counts]).
TEST(Qwen35Config, RefusesSizesPastAnyModels) {
  for (const char* key : {"linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim",
                          "linear_value_head_dim", "linear_conv_kernel_dim"}) {
    json t = text_config();
    t[key] = int64_t{1} << 40;
    const std::string want = "config.json has " + std::string(key) + " = 1099511627776";
    EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(t), want.c_str(), "past any model's");
  }
  json kernel = nested_config();
  kernel["text_config"]["linear_conv_kernel_dim"] = int64_t{1} << 62;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(kernel),
                   "text_config has linear_conv_kernel_dim = 4611686018427387904",
                   "past any model's");
  json product = text_config();
  product["hidden_size"] = int64_t{1} << 24;
  product["linear_num_value_heads"] = int64_t{1} << 24;
  product["linear_value_head_dim"] = int64_t{1} << 24;
  EXPECT_ERROR_HAS(nn::Qwen3Config::from_hf_json(product),
                   "config.json's sizes together are past any model's",
                   "a parameter count overflows 64 bits");
}

}  // namespace
}  // namespace cg
