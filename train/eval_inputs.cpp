// Why this file exists: the target, the drafter folder and the prompts of `chunkgrad eval`
// (eval_inputs.h).
#include "train/eval_inputs.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>

#include <nlohmann/json.hpp>

#include "core/error.h"
#include "core/factories.h"
#include "core/json_input.h"
#include "train/feature_target.h"
#include "train/regenerate.h"
#include "train/tokenizer.h"

namespace cg::train {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<int64_t> prompt_before_last_response(const std::vector<int64_t>& ids,
                                                 const std::vector<uint8_t>& loss_mask) {
  size_t end = loss_mask.size();
  while (end > 0 && loss_mask[end - 1] == 0) --end;
  if (end == 0) return ids;  // no response marked: the whole line is the prompt
  size_t start = end;
  while (start > 0 && loss_mask[start - 1] == 1) --start;
  return {ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(start)};
}

std::vector<EvalPrompt> read_eval_prompts(const std::vector<std::string>& files, int64_t vocab_size,
                                          int64_t limit) {
  CG_CHECK(!files.empty(), "--data: give at least one JSONL file");
  ChatData data;
  try {
    data = read_chat_data(files, {.encode = {}, .vocab_size = vocab_size, .strict = true});
  } catch (const Error& e) { CG_FAIL("--data ", e.message()); }
  return eval_prompts(data, limit);
}

std::vector<EvalPrompt> eval_prompts(const ChatData& data, int64_t limit) {
  std::vector<std::string> order;  // datasets in the order they first appear
  std::map<std::string, std::vector<std::vector<int64_t>>> by_dataset;
  for (const DataSample& s : data.samples) {
    const std::vector<uint8_t>& mask = s.sequence.loss_mask;
    const bool whole = std::find(mask.begin(), mask.end(), 0) == mask.end();
    std::vector<int64_t> prompt =
        prompt_before_last_response(s.sequence.ids, whole ? std::vector<uint8_t>{} : mask);
    CG_CHECK(!prompt.empty(), "--data ", s.where(),
             ": loss_mask marks the response from the first id on, which leaves no prompt "
             "(set loss_mask to 0 on the prompt's ids)");
    auto& group = by_dataset[s.dataset];
    if (group.empty()) order.push_back(s.dataset);
    if (limit <= 0 || static_cast<int64_t>(group.size()) < limit)
      group.push_back(std::move(prompt));
  }
  std::vector<EvalPrompt> out;
  for (const std::string& name : order) {
    for (auto& ids : by_dataset[name]) out.push_back({name, std::move(ids)});
  }
  return out;
}

EvalTarget load_eval_target(const std::string& dir, Device device, DType dtype, bool read_eos) {
  CG_CHECK(dtype == DType::f32 || dtype == DType::bf16, "--dtype: the target runs in f32 or bf16");
  FeatureTarget loaded = load_feature_target(dir, device, dtype);  // Note [Eval target dtype]
  EvalTarget t;
  t.kind = loaded.kind;
  t.lm = std::move(loaded.lm);
  if (!read_eos) return t;
  t.eos_ids = t.kind == "chunkgrad run" ? std::vector<int64_t>{ByteTokenizer::kEos}
                                        : eos_ids_of_folder(dir);
  const int64_t vocab = t.lm->config().vocab_size;
  for (const int64_t id : t.eos_ids) {
    CG_CHECK(id < vocab, "--target ", dir, ": eos_token_id ", id,
             " (generation_config.json or config.json) is outside the vocabulary (0 .. ", vocab - 1,
             "); fix the file, or give --eos-id");
  }
  return t;
}

PublicDrafter public_drafter_from_config(const json& c, const std::string& where) {
  CG_CHECK(c.is_object(), where, ": config.json is not a JSON object");
  auto field = [&](const char* name) -> const json& {
    const json* v = draft_value(c, name);
    CG_CHECK(v && !v->is_null(), where, ": config.json has no ", name,
             " (a DFlash drafter config carries it; docs/export.md)");
    return *v;
  };
  auto integer = [&](const char* name) {
    const json& v = field(name);
    CG_CHECK(v.is_number_integer(), where, ": config.json ", name, " must be an integer, got ",
             describe_json(v));
    return v.get<int64_t>();
  };
  auto number = [&](const json& v, const char* name) {
    CG_CHECK(v.is_number(), where, ": config.json ", name, " must be a number, got ",
             describe_json(v));
    return v.get<double>();
  };
  const json* arch = c.contains("architectures") ? &c["architectures"] : nullptr;
  CG_CHECK(arch && arch->is_array() && !arch->empty() && (*arch)[0] == "DFlashDraftModel", where,
           ": config.json architectures is ", arch ? describe_json(*arch) : std::string("missing"),
           "; a DFlash drafter folder says [\"DFlashDraftModel\"] (chunkgrad export writes one)");
  // The published drafters' layers are Qwen3's (q/k norms, no biases): another model_type
  // names layers this code does not compute.
  CG_CHECK(!c.contains("model_type") || c["model_type"] == "qwen3", where,
           ": config.json model_type is ", describe_json(c.value("model_type", json())),
           "; a DFlash drafter's layers are Qwen3's (\"qwen3\", as chunkgrad export writes)");
  PublicDrafter d;
  nn::Qwen3Config& L = d.config.layers;
  L.hidden_size = integer("hidden_size");
  L.vocab_size = integer("vocab_size");
  L.num_layers = integer("num_hidden_layers");
  L.num_heads = integer("num_attention_heads");
  L.num_kv_heads =
      draft_value(c, "num_key_value_heads") ? integer("num_key_value_heads") : L.num_heads;
  CG_CHECK(L.num_heads > 0, where, ": config.json num_attention_heads must be > 0");
  // Without head_dim, engines take hidden / heads (docs/export.md).
  L.head_dim = draft_value(c, "head_dim") ? integer("head_dim") : L.hidden_size / L.num_heads;
  L.intermediate_size = integer("intermediate_size");
  L.rms_eps = c.contains("rms_norm_eps") ? number(c["rms_norm_eps"], "rms_norm_eps") : 1e-6;
  const json* theta = c.contains("rope_theta") ? &c["rope_theta"] : nullptr;
  if (!theta && c.contains("rope_parameters") && c["rope_parameters"].is_object() &&
      c["rope_parameters"].contains("rope_theta"))
    theta = &c["rope_parameters"]["rope_theta"];  // transformers 5 writes it there
  CG_CHECK(theta, where, ": config.json has no rope_theta (the drafter's own RoPE base)");
  L.rope_theta = number(*theta, "rope_theta");
  L.tie_embeddings = false;
  const json& layers = field("target_layer_ids");
  CG_CHECK(layers.is_array() && !layers.empty(), where,
           ": config.json target_layer_ids must be a non-empty array, got ", describe_json(layers));
  for (const json& l : layers) {
    CG_CHECK(l.is_number_integer() && l.get<int64_t>() >= 0, where,
             ": config.json target_layer_ids holds ", describe_json(l),
             "; layer ids are integers >= 0");
    // The same features under two slots: refused here as drafter.target_layers is in train.
    CG_CHECK(std::find(d.config.target_layers.begin(), d.config.target_layers.end(),
                       l.get<int64_t>()) == d.config.target_layers.end(),
             where, ": config.json target_layer_ids lists layer ", l.get<int64_t>(), " twice");
    d.config.target_layers.push_back(l.get<int64_t>());
  }
  const json* mask = draft_value(c, "mask_token_id");
  CG_CHECK(mask && mask->is_number_integer(), where,
           ": config.json dflash_config.mask_token_id is ",
           mask ? describe_json(*mask) : std::string("missing"),
           "; set it to the MASK token id the drafter was trained with (Qwen3: 151669)");
  d.config.mask_token_id = mask->get<int64_t>();
  if (c.contains("layer_types") && c["layer_types"].is_array()) {
    for (const json& t : c["layer_types"]) {
      CG_CHECK(t.is_string(), where, ": config.json layer_types holds ", describe_json(t));
      try {
        d.config.layer_types.push_back(nn::parse_drafter_attention(t.get<std::string>()));
      } catch (const Error& e) { CG_FAIL(where, ": config.json layer_types: ", e.message()); }
    }
    CG_CHECK(static_cast<int64_t>(d.config.layer_types.size()) == L.num_layers, where,
             ": config.json layer_types has ", d.config.layer_types.size(),
             " entries for num_hidden_layers ", L.num_layers);
  }
  const bool slides = std::find(d.config.layer_types.begin(), d.config.layer_types.end(),
                                nn::DrafterAttention::sliding) != d.config.layer_types.end();
  if (slides) d.config.sliding_window = integer("sliding_window");
  d.info.block_size = integer("block_size");
  // (train's drafter.block_size range: a block of 100000 slots made every proposal hang)
  CG_CHECK(d.info.block_size >= 2 && d.info.block_size <= 4096, where,
           ": config.json block_size is ", d.info.block_size,
           "; a drafter block holds the anchor and at least one drafted token (2 to 4096)");
  // draft_value reads dflash_config's first; a top-level one that disagrees is a damaged
  // or hand-edited file, and engines differ in which they read.
  if (c.contains("dflash_config") && c["dflash_config"].is_object() &&
      c["dflash_config"].contains("block_size") && c.contains("block_size")) {
    CG_CHECK(c["block_size"] == c["dflash_config"]["block_size"], where,
             ": config.json block_size is ", describe_json(c["block_size"]),
             " at the top level but ", describe_json(c["dflash_config"]["block_size"]),
             " in dflash_config; make them agree");
  }
  d.info.num_target_layers = integer("num_target_layers");
  // Optional, but a non-integer is refused rather than skipped (a context length of
  // 40960.5 is a damaged file, not an absent field).
  if (c.contains("max_position_embeddings") && !c["max_position_embeddings"].is_null())
    d.info.max_position_embeddings = integer("max_position_embeddings");
  return d;  // validated when the drafter is made (load_drafter_for_target)
}

std::vector<std::string> drafter_target_mismatches(const PublicDrafter& d,
                                                   const nn::Qwen3Config& target) {
  std::vector<std::string> out;
  const nn::Qwen3Config& L = d.config.layers;
  auto line = [&](const std::string& field, int64_t drafter, int64_t there, const char* what) {
    if (drafter != there)
      out.push_back(field + " " + std::to_string(drafter) + " in the drafter's config.json, " +
                    std::to_string(there) + " in the target (" + what + ")");
  };
  line("hidden_size", L.hidden_size, target.hidden_size,
       "the drafter reads the target's hidden "
       "states and shares its embedding and lm_head");
  line("vocab_size", L.vocab_size, target.vocab_size, "the drafter shares the target's lm_head");
  line("num_target_layers", d.info.num_target_layers, target.num_layers,
       "the drafter was trained on a target of another depth");
  for (int64_t l : d.config.target_layers) {
    if (l >= target.num_layers)
      out.push_back("target_layer_ids holds " + std::to_string(l) + ", beyond the target's " +
                    std::to_string(target.num_layers) + " decoder layers (0 .. " +
                    std::to_string(target.num_layers - 1) + ")");
  }
  if (d.config.mask_token_id < 0 || d.config.mask_token_id >= target.vocab_size)
    out.push_back("mask_token_id " + std::to_string(d.config.mask_token_id) +
                  " is outside the target's vocabulary (0 .. " +
                  std::to_string(target.vocab_size - 1) + ")");
  return out;
}

PublicDrafter load_drafter_for_target(const std::string& dir, const nn::Qwen3ForCausalLM& target) {
  const std::string where = "--drafter " + dir;
  const fs::path config_path = fs::path(dir) / "config.json";
  CG_CHECK(fs::exists(config_path), where,
           ": no config.json; give a folder in the public DFlash layout "
           "(config.json + model.safetensors, as `chunkgrad export` writes)");
  PublicDrafter d = public_drafter_from_config(
      parse_untrusted_json(read_text_file(config_path.string(), where), where + "/config.json"),
      where);
  const std::vector<std::string> bad = drafter_target_mismatches(d, target.config());
  if (!bad.empty()) {
    std::string lines;
    for (const std::string& b : bad) lines += (lines.empty() ? "" : "; ") + b;
    CG_FAIL(where, ": the drafter does not fit the target (", bad.size(), " field(s)): ", lines,
            "; use the drafter trained for this target");
  }
  const Tensor embed = target.model->embed_tokens->weight.detach();
  const Tensor head = target.lm_head->weight.detach();
  Generator gen(0);  // every weight is overwritten by the folder's
  try {
    d.drafter = std::make_unique<nn::DFlashDrafter>(d.config, embed, head,
                                                    nn::InitOptions{.generator = &gen});
  } catch (const Error& e) { CG_FAIL(where, ": config.json: ", e.message()); }
  load_public_drafter(*d.drafter, d.info, dir, "--drafter");  // its errors name the folder
  d.drafter->to(embed.device());
  if (embed.dtype() != DType::f32) d.drafter->to(embed.dtype());
  d.drafter->eval();
  d.drafter->freeze();
  return d;
}

}  // namespace cg::train
