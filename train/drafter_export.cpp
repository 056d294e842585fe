// Why this file exists: the public DFlash drafter layout, written and read
// (drafter_export.h, docs/export.md).
#include "train/drafter_export.h"

#include <algorithm>
#include <cmath>
#include <filesystem>

#include "core/atomic_file.h"
#include "core/error.h"
#include "core/factories.h"
#include "core/json_input.h"
#include "core/views.h"
#include "nn/checkpoint.h"
#include "nn/safetensors.h"
#include "ops/shape_ops.h"
#include "train/drafter_checkpoints.h"
#include "train/drafter_model.h"
#include "train/offline_features.h"
#include "train/target_lm.h"

namespace cg::train {

namespace fs = std::filesystem;
using nlohmann::json;

std::vector<std::string> public_drafter_names(int64_t num_layers) {
  std::vector<std::string> names{"fc.weight", "hidden_norm.weight"};
  static const char* const kLayer[] = {"self_attn.q_proj.weight",        "self_attn.k_proj.weight",
                                       "self_attn.v_proj.weight",        "self_attn.o_proj.weight",
                                       "self_attn.q_norm.weight",        "self_attn.k_norm.weight",
                                       "mlp.gate_proj.weight",           "mlp.up_proj.weight",
                                       "mlp.down_proj.weight",           "input_layernorm.weight",
                                       "post_attention_layernorm.weight"};
  for (int64_t i = 0; i < num_layers; ++i)
    for (const char* n : kLayer) names.push_back("layers." + std::to_string(i) + "." + n);
  names.push_back("norm.weight");
  return names;
}

// Note [Public config fields]: the fields are those of the published drafter configs
// (SpecForge configs/qwen3-8b-dflash.json @b3d2401, qwen3.5-27b-dflash.json @95d22a7; the
// dflash_config block as z-lab's model.py reads it: _draft_value looks in dflash_config
// first, then at the top level). block_size is written at both places (older checkpoints
// keep it at the top, newer ones in dflash_config). Left out on purpose: auto_map (it names
// Python code this folder does not ship), bos/eos ids (the tokenizer's), initializer_range
// and max_window_layers (layer_types says which layers slide). Never written: rope
// scaling, rope_parameters, M-RoPE sections, partial_rotary_factor -- a target's RoPE
// options leaking into a drafter config is a known cause of near-zero acceptance in
// serving (docs/dflash_training.md); the drafter's RoPE is plain, full-dim, its own theta.
json public_drafter_config(const nn::DFlashDrafterConfig& dc, const PublicDrafterInfo& info) {
  const nn::Qwen3Config& L = dc.layers;
  json layer_types = json::array();
  bool slides = false;
  for (int64_t i = 0; i < L.num_layers; ++i) {
    const nn::DrafterAttention t = dc.layer_type(static_cast<size_t>(i));
    slides = slides || t == nn::DrafterAttention::sliding;
    layer_types.push_back(nn::drafter_attention_name(t));
  }
  json c;
  c["architectures"] = {"DFlashDraftModel"};
  c["model_type"] = "qwen3";
  c["dflash_config"] = {{"mask_token_id", dc.mask_token_id},
                        {"target_layer_ids", dc.target_layers},
                        {"block_size", info.block_size}};
  c["block_size"] = info.block_size;
  c["num_target_layers"] = info.num_target_layers;
  c["hidden_size"] = L.hidden_size;
  c["num_hidden_layers"] = L.num_layers;
  c["num_attention_heads"] = L.num_heads;
  c["num_key_value_heads"] = L.num_kv_heads;
  c["head_dim"] = L.head_dim;
  c["intermediate_size"] = L.intermediate_size;
  c["hidden_act"] = "silu";
  c["attention_bias"] = false;
  c["attention_dropout"] = 0.0;
  c["rms_norm_eps"] = L.rms_eps;
  c["vocab_size"] = L.vocab_size;
  c["max_position_embeddings"] = info.max_position_embeddings;
  c["layer_types"] = layer_types;
  c["use_sliding_window"] = slides;
  c["sliding_window"] = slides ? json(dc.sliding_window) : json(nullptr);
  c["rope_theta"] = L.rope_theta;
  c["rope_scaling"] = nullptr;
  c["tie_word_embeddings"] = false;  // the drafter has no embedding or head of its own
  c["dtype"] = "bfloat16";
  c["use_cache"] = true;
  return c;
}

void write_public_drafter(const nn::DFlashDrafter& drafter, const PublicDrafterInfo& info,
                          const std::string& out_dir) {
  const std::vector<std::string> names = public_drafter_names(drafter.config().layers.num_layers);
  safetensors::NamedTensors tensors;
  for (const auto& [name, p] : drafter.named_parameters()) {
    CG_CHECK(std::find(names.begin(), names.end(), name) != names.end(),
             "export: the drafter has a "
             "parameter '",
             name, "' that the public DFlash layout has no name for");
    tensors.emplace_back(name, raw::to_dtype(p.detach(), DType::bf16));
  }
  CG_CHECK(tensors.size() == names.size(), "export: the drafter has ", tensors.size(),
           " parameters, the public layout ", names.size());
  CG_CHECK(!fs::exists(out_dir) || fs::is_directory(out_dir), "export: ", out_dir,
           " is a file, not a folder; give an empty or new folder with --out");
  for (const char* f : {"config.json", "model.safetensors"}) {
    CG_CHECK(!fs::exists(fs::path(out_dir) / f), "export: ", out_dir, " already holds ", f,
             "; give an empty or new folder with --out");
  }
  std::error_code error;
  fs::create_directories(out_dir, error);
  CG_CHECK(!error, "export: cannot make the folder ", out_dir, " (", error.message(),
           "); give a folder that can be written with --out");
  safetensors::save_file(tensors, (fs::path(out_dir) / "model.safetensors").string(),
                         {{"format", "pt"}});
  write_file_atomically((fs::path(out_dir) / "config.json").string(),
                        public_drafter_config(drafter.config(), info).dump(2) + "\n",
                        "the drafter's config.json");
}

namespace {

// Note [Export needs the run's target]: the public config.json takes the target's depth,
// vocabulary, RoPE and context length from the target's own config.json, found where the
// run named it (features.target; for offline features the folder their index.json names).
// Found nowhere, the drafter's shapes would come from the toy target's description -- a
// config.json that serving engines would load and compute wrongly with (rope_theta) --
// so export refuses, saying where it looked. A run on the toy target (a chunkgrad run
// directory as the target, or synthetic features) needs no file.
void check_run_target_found(const TrainConfig& config, const std::string& checkpoint) {
  std::string folder, named;
  if (config.features.source == "target") {
    folder = config.features.target;
    named = "features.target";
  } else if (config.features.source == "offline") {
    named = "the target that features.dir " + config.features.dir + " was written from";
    try {
      folder = read_feature_index(config.features.dir).target;
    } catch (const Error& e) {
      CG_FAIL("export: ", checkpoint, ": the run trained on offline features in ",
              config.features.dir, ", whose index.json cannot be read from here (", e.message(),
              "); the export takes the target's shapes from there: run export from the folder "
              "the run started in, or put the features back");
    }
  } else {
    return;
  }
  const fs::path file = fs::path(folder) / "config.json";
  std::error_code ec;
  CG_CHECK(fs::is_regular_file(file, ec), "export: ", checkpoint, ": ", named, " ", folder,
           " has no config.json at ", fs::absolute(file).lexically_normal().string(),
           "; the export takes the target's depth, vocabulary and RoPE from it: run export from "
           "the folder the run started in, or put the target back");
}

bool same_value(const json& a, const json& b) {
  if (a.is_number() && b.is_number()) {
    const double x = a.get<double>(), y = b.get<double>();
    return x == y || std::fabs(x - y) <= 1e-9 * std::max(std::fabs(x), std::fabs(y));
  }
  return a == b;
}

// A config.json value in an error: a short list of plain values in full ("[2, 4, 6]": the
// user must see what to set), anything else as describe_json says it.
std::string shown(const json& v) {
  constexpr size_t kMaxListed = 16;
  if (!v.is_array() || v.empty() || v.size() > kMaxListed) return describe_json(v);
  std::string out = "[";
  for (const json& e : v) {
    if (e.is_structured()) return describe_json(v);
    out += (out.size() > 1 ? ", " : "") + describe_json(e);
  }
  return out + "]";
}

}  // namespace

json run_target_record(const TrainConfig& config) {
  const nn::DFlashDrafterConfig dc = run_drafter_config(config);
  const PublicDrafterInfo info = public_drafter_info(config);
  return {{"architecture", run_target_architecture(config).str()},
          {"num_target_layers", info.num_target_layers},
          {"target_layer_ids", dc.target_layers},
          {"rope_theta", dc.layers.rope_theta},
          {"max_position_embeddings", info.max_position_embeddings}};
}

std::vector<std::string> target_record_changes(const json& then, const json& now) {
  if (!then.is_object()) return {"the checkpoint's record is " + describe_json(then)};
  // The fields export writes first; the architecture last.
  std::vector<std::string> fields{"num_target_layers", "target_layer_ids", "rope_theta",
                                  "max_position_embeddings"};
  for (const auto& [field, was] : then.items()) {
    if (std::find(fields.begin(), fields.end(), field) == fields.end()) fields.push_back(field);
  }
  // The architecture line in full (it is chunkgrad's own Qwen3Config::str()), when plain.
  const auto text = [](const json& v) {
    constexpr size_t kMaxChars = 1024;
    if (!v.is_string() || v.get_ref<const std::string&>().size() > kMaxChars) return shown(v);
    const std::string& s = v.get_ref<const std::string&>();
    const bool plain =
        std::all_of(s.begin(), s.end(), [](char c) { return c >= 0x20 && c < 0x7F; });
    return plain ? s : shown(v);
  };
  std::vector<std::string> out;
  for (const std::string& field : fields) {
    if (!then.contains(field)) continue;
    // The long architecture line only when no field export writes says the change.
    if (field == "architecture" && !out.empty()) continue;
    const json is = now.contains(field) ? now[field] : json(nullptr);
    if (!same_value(then[field], is))
      out.push_back(field + ": " + text(then[field]) + " when trained, " + text(is) + " now");
  }
  return out;
}

const json* draft_value(const json& c, const char* name) {
  if (c.contains("dflash_config") && c["dflash_config"].is_object() &&
      c["dflash_config"].contains(name))
    return &c["dflash_config"][name];
  return c.contains(name) ? &c[name] : nullptr;
}

PublicDrafterInfo public_drafter_info(const TrainConfig& config) {
  PublicDrafterInfo info;
  info.block_size = config.drafter.block_size;
  const std::string hf = run_target_hf_config(config);
  info.num_target_layers = config.features.source == "synthetic" ? config.drafter.num_target_layers
                           : !hf.empty() ? nn::Qwen3Config::from_hf_file(hf).num_layers
                                         : target_architecture(config.target).num_layers;
  if (!hf.empty()) {  // the target's own context length
    const json whole = parse_untrusted_json(read_text_file(hf, "the target's config.json"), hf);
    // A Qwen3.5 Qwen3_5ForConditionalGeneration keeps it in text_config (nn/config.cpp,
    // Note [Qwen3.5 config]).
    const json& t =
        whole.is_object() && whole.contains("text_config") && whole["text_config"].is_object()
            ? whole["text_config"]
            : whole;
    if (t.contains("max_position_embeddings") && !t["max_position_embeddings"].is_null()) {
      const json& v = t["max_position_embeddings"];
      CG_CHECK(v.is_number_integer() && v.get<int64_t>() > 0, hf,
               ": max_position_embeddings = ", describe_json(v),
               "; it must be a positive integer (the target's context length), so fix the file");
      info.max_position_embeddings = v.get<int64_t>();
    }
  }
  return info;
}

std::vector<std::string> public_config_mismatches(const json& c, const nn::DFlashDrafterConfig& dc,
                                                  const PublicDrafterInfo& info) {
  std::vector<std::string> out;
  if (!c.is_object()) return {"config.json is not a JSON object"};
  const nn::Qwen3Config& L = dc.layers;
  auto compare = [&](const std::string& field, const json* there, const json& here,
                     const char* which) {
    if (!there) {
      out.push_back(field + ": missing from config.json; " + here.dump() + " here (" + which + ")");
    } else if (!same_value(*there, here)) {
      out.push_back(field + ": " + shown(*there) + " in config.json, " + here.dump() + " here (" +
                    which + ")");
    }
  };
  auto top = [&](const char* f) { return c.contains(f) ? &c[f] : nullptr; };
  const json* arch = top("architectures");
  if (!arch || !arch->is_array() || arch->empty() || (*arch)[0] != "DFlashDraftModel")
    out.push_back("architectures: " + (arch ? describe_json(*arch) : std::string("missing")) +
                  "; a DFlash drafter says [\"DFlashDraftModel\"]");
  compare("hidden_size", top("hidden_size"), L.hidden_size, "the target's hidden size");
  compare("num_hidden_layers", top("num_hidden_layers"), L.num_layers, "drafter.num_layers");
  compare("num_attention_heads", top("num_attention_heads"), L.num_heads, "drafter.num_heads");
  compare("num_key_value_heads", top("num_key_value_heads"), L.num_kv_heads,
          "drafter.num_kv_heads");
  // Without head_dim, engines take hidden / heads.
  const json derived =
      (top("hidden_size") && top("num_attention_heads") &&
       c["num_attention_heads"].is_number_integer() &&
       c["num_attention_heads"].get<int64_t>() > 0 && c["hidden_size"].is_number_integer())
          ? json(c["hidden_size"].get<int64_t>() / c["num_attention_heads"].get<int64_t>())
          : json(nullptr);
  compare("head_dim", top("head_dim") ? top("head_dim") : &derived, L.head_dim, "drafter.head_dim");
  compare("intermediate_size", top("intermediate_size"), L.intermediate_size,
          "drafter.intermediate_size");
  compare("vocab_size", top("vocab_size"), L.vocab_size, "the target's vocabulary");
  compare("rms_norm_eps", top("rms_norm_eps"), L.rms_eps, "drafter.rms_eps");
  const json* theta = top("rope_theta");
  if (!theta && c.contains("rope_parameters") && c["rope_parameters"].is_object() &&
      c["rope_parameters"].contains("rope_theta"))
    theta = &c["rope_parameters"]["rope_theta"];  // transformers 5 writes it there
  compare("rope_theta", theta, L.rope_theta, "drafter.rope_theta, or the target's");
  compare("num_target_layers", top("num_target_layers"), info.num_target_layers,
          "the target's decoder layers");
  compare("block_size", draft_value(c, "block_size"), info.block_size, "drafter.block_size");
  compare("dflash_config.target_layer_ids", draft_value(c, "target_layer_ids"),
          json(dc.target_layers), "drafter.target_layers, or the public rule");
  const json* mask = draft_value(c, "mask_token_id");
  if (mask && !mask->is_null())  // a published config may leave it null (the tokenizer's)
    compare("dflash_config.mask_token_id", mask, dc.mask_token_id, "drafter.mask_token_id");
  json types = json::array();
  bool slides = false;
  for (int64_t i = 0; i < L.num_layers; ++i) {
    slides = slides || dc.layer_type(static_cast<size_t>(i)) == nn::DrafterAttention::sliding;
    types.push_back(nn::drafter_attention_name(dc.layer_type(static_cast<size_t>(i))));
  }
  const json all_full(std::vector<std::string>(types.size(), "full_attention"));
  if (!top("num_hidden_layers") || same_value(c["num_hidden_layers"], L.num_layers))
    compare("layer_types", top("layer_types") ? top("layer_types") : &all_full, types,
            "drafter.layer_types");
  if (slides) {
    compare("sliding_window", top("sliding_window"), dc.sliding_window, "drafter.sliding_window");
    if (!c.contains("use_sliding_window") || c["use_sliding_window"] != true)
      out.push_back(
          "use_sliding_window: not true in config.json, but layers slide (transformers "
          "then drops the window and runs them as full layers)");
  }
  const json* scaling = top("rope_scaling");
  if (scaling && !scaling->is_null())
    out.push_back("rope_scaling: " + describe_json(*scaling) +
                  " in config.json; a DFlash drafter runs plain RoPE (null)");
  const json* partial = top("partial_rotary_factor");
  if (partial && !same_value(*partial, 1.0))
    out.push_back("partial_rotary_factor: " + describe_json(*partial) +
                  " in config.json; the drafter rotates every head dim (1 or absent)");
  // transformers 5 writes the RoPE settings inside rope_parameters: the same rules there.
  // A Qwen3.5 target's partial rotary or M-RoPE sections leaking into a drafter config are
  // what collapses acceptance in serving (the engine rotates other dims than training did).
  if (c.contains("rope_parameters") && c["rope_parameters"].is_object()) {
    const json& rope = c["rope_parameters"];
    const auto in_rope = [&](const char* name) -> const json* {
      return rope.contains(name) && !rope[name].is_null() ? &rope[name] : nullptr;
    };
    const json* type = in_rope("rope_type");
    if (type && *type != "default")
      out.push_back("rope_parameters.rope_type: " + describe_json(*type) +
                    " in config.json; a DFlash drafter runs plain RoPE (\"default\")");
    const json* nested_partial = in_rope("partial_rotary_factor");
    if (nested_partial && !same_value(*nested_partial, 1.0))
      out.push_back("rope_parameters.partial_rotary_factor: " + describe_json(*nested_partial) +
                    " in config.json; the drafter rotates every head dim (1 or absent)");
    for (const char* mrope : {"mrope_section", "mrope_interleaved"}) {
      if (in_rope(mrope) && !(rope[mrope].is_boolean() && rope[mrope] == false))
        out.push_back(std::string("rope_parameters.") + mrope + ": " + describe_json(rope[mrope]) +
                      " in config.json; a DFlash drafter runs plain 1-D RoPE (remove it)");
    }
    const json* nested_theta = in_rope("rope_theta");
    if (nested_theta && top("rope_theta") && !same_value(*nested_theta, c["rope_theta"]))
      out.push_back("rope_theta: " + describe_json(c["rope_theta"]) +
                    " at the top of config.json but " + describe_json(*nested_theta) +
                    " in rope_parameters; give one base");
  }
  if (c.contains("attention_bias") && c["attention_bias"] == true)
    out.push_back("attention_bias: true in config.json; the drafter has no biases");
  if (c.contains("hidden_act") && c["hidden_act"] != "silu")
    out.push_back("hidden_act: " + describe_json(c["hidden_act"]) + "; the drafter's MLP is silu");
  return out;
}

void check_public_drafter_folder(const std::string& dir, const std::string& option) {
  const std::string where = option + " '" + dir + "'";
  CG_CHECK(fs::is_directory(dir), where,
           ": not a folder; give a folder holding config.json and "
           "model.safetensors (the public DFlash layout, docs/export.md)");
  CG_CHECK(fs::exists(fs::path(dir) / "config.json"), where,
           ": no config.json; a DFlash drafter folder holds "
           "config.json and model.safetensors (docs/export.md)");
  CG_CHECK(fs::exists(fs::path(dir) / "model.safetensors"), where,
           ": no model.safetensors beside config.json");
}

void load_public_drafter(nn::DFlashDrafter& drafter, const PublicDrafterInfo& info,
                         const std::string& dir, const std::string& option) {
  const std::string where = option + " '" + dir + "'";
  const fs::path config_path = fs::path(dir) / "config.json";
  const fs::path weights_path = fs::path(dir) / "model.safetensors";
  check_public_drafter_folder(dir, option);
  const json c = parse_untrusted_json(read_text_file(config_path.string(), where + " config.json"),
                                      where + " config.json");
  const bool from_train_config = option == "drafter.init_from";
  const std::vector<std::string> bad = public_config_mismatches(c, drafter.config(), info);
  if (!bad.empty()) {
    std::string fields;
    for (const std::string& b : bad) fields += (fields.empty() ? "" : "; ") + b;
    CG_FAIL(where, ": config.json does not match ",
            from_train_config ? "this run's drafter" : "what chunkgrad runs", " in ", bad.size(),
            " field(s) (",
            from_train_config ? "change the train config to match, or choose another folder"
                              : "fix config.json, or choose another folder",
            "): ", fields);
  }
  std::unique_ptr<safetensors::Reader> reader;
  try {
    reader = safetensors::open(weights_path.string());
  } catch (const Error& e) { CG_FAIL(where, ": model.safetensors is unreadable: ", e.message()); }
  const auto params = drafter.named_parameters();
  // eval's --drafter has no run: its drafter is the one config.json describes.
  const char* here = from_train_config ? "this run's drafter" : "the drafter config.json describes";
  const int64_t H = drafter.config().layers.hidden_size;
  const int64_t n = static_cast<int64_t>(drafter.config().target_layers.size());
  for (const auto& [name, p] : params) {
    CG_CHECK(reader->contains(name), where, ": model.safetensors has no tensor '", name,
             "' (the public names are listed in docs/export.md)");
    // fc reads the n target layers' features side by side: the likely cause is named.
    CG_CHECK(reader->info(name).shape == p.shape(), where, ": '", name, "' is ",
             shape_str(reader->info(name).shape), " in model.safetensors and ",
             shape_str(p.shape()), " in ", here,
             name == "fc.weight" ? " (n target_layer_ids need fc [H, n*H]; " + std::to_string(n) +
                                       " ids and H = " + std::to_string(H) + " give [" +
                                       std::to_string(H) + ", " + std::to_string(n * H) + "])"
                                 : std::string());
  }
  for (const std::string& name : reader->names()) {
    const bool known =
        std::any_of(params.begin(), params.end(), [&](const auto& np) { return np.first == name; });
    CG_CHECK(known, where, ": model.safetensors holds '", name,
             "', which a DFlash drafter does not have (no embedding, no lm_head: they are the "
             "target's)");
  }
  try {
    nn::load_checkpoint(drafter, *reader, {.strict = true, .convert_dtype = true});
  } catch (const Error& e) { CG_FAIL(where, ": model.safetensors: ", e.message()); }
}

ExportResult export_drafter_checkpoint(const std::string& run_dir, const std::string& checkpoint,
                                       const std::string& out_dir,
                                       int64_t max_position_embeddings) {
  ExportResult r;
  r.checkpoint = checkpoint.empty() ? latest_drafter_checkpoint(run_dir) : checkpoint;
  CG_CHECK(!r.checkpoint.empty(), "export: ", run_dir,
           " has no drafter checkpoint (drafter/step_<N>.safetensors); train first, or name a "
           "checkpoint with --checkpoint");
  std::unique_ptr<safetensors::Reader> reader;
  try {
    reader = safetensors::open(r.checkpoint);
  } catch (const Error& e) { CG_FAIL("export: ", r.checkpoint, " is unreadable: ", e.message()); }
  const auto& meta = reader->metadata();
  auto get = [&](const char* key) {
    auto it = meta.find(key);
    CG_CHECK(it != meta.end(), "export: ", r.checkpoint, " has no '", key,
             "' metadata: not a chunkgrad drafter checkpoint");
    return it->second;
  };
  CG_CHECK(get("format") == "chunkgrad-dflash-drafter-1", "export: ", r.checkpoint,
           " has format metadata '", get("format"),
           "': not a chunkgrad drafter checkpoint (step_<N>.safetensors in a run's drafter/ "
           "folder; a model's own weights are not one)");
  const std::string step = get("step");
  try {
    size_t used = 0;
    r.step = std::stoll(step, &used);
    CG_CHECK(used == step.size() && r.step >= 0, "");
  } catch (const std::exception&) {
    CG_FAIL("export: ", r.checkpoint, " has step metadata ", describe_json(json(step)),
            ", not a step number: the file is damaged; export another checkpoint");
  }
  json saved = TrainConfig().to_json();  // fields the checkpoint predates: their defaults
  TrainConfig config;
  try {
    saved.merge_patch(parse_untrusted_json(get("config"), "its saved train config"));
    config = TrainConfig::from_json(saved);
  } catch (const Error& e) { CG_FAIL("export: ", r.checkpoint, ": ", e.message()); }
  // A run on a Hugging Face target reads its config.json (the depth, the context length)
  // at the path the run was given, which may have been relative or moved since.
  check_run_target_found(config, r.checkpoint);
  nn::DFlashDrafterConfig dc;
  PublicDrafterInfo info;
  try {
    dc = run_drafter_config(config);
    info = public_drafter_info(config);
  } catch (const Error& e) {
    // Where the target's config.json is there, what fails is its content, and the hint is
    // about that (an outside tester's edited config.json was told to run export from the
    // folder the run started in).
    const std::string hf = run_target_hf_config(config);
    std::error_code ec;
    const bool there = !hf.empty() && std::filesystem::is_regular_file(hf, ec);
    CG_FAIL("export: ", r.checkpoint,
            ": the drafter cannot be rebuilt from the run's saved config (", e.message(), ")",
            there ? "; the target's config.json is read from " + hf +
                        " as the run read it: if it was edited since training, put the one the "
                        "run trained with back"
                  : "; a run on a Hugging Face target needs its config.json where the run "
                    "named it: run export from the folder the run started in, or put the "
                    "target back");
  }
  // Note [Export uses what training used].
  if (meta.count("target")) {
    std::vector<std::string> changes;
    try {
      changes = target_record_changes(parse_untrusted_json(meta.at("target"), "its target record"),
                                      run_target_record(config));
    } catch (const Error& e) { CG_FAIL("export: ", r.checkpoint, ": ", e.message()); }
    if (!changes.empty()) {
      std::string fields;
      for (const std::string& c : changes) fields += (fields.empty() ? "" : "; ") + c;
      const std::string hf = run_target_hf_config(config);
      CG_FAIL("export: ", r.checkpoint, ": the run's target changed since training (",
              hf.empty() ? std::string("the train config's target") : hf,
              " now describes another model): ", fields,
              "; the export would describe a target the drafter was not trained on: put back the "
              "config.json the run trained with, or train a drafter for this target");
    }
  }
  if (max_position_embeddings > 0) info.max_position_embeddings = max_position_embeddings;
  // The drafter is made for its shapes; its frozen tables are stride-0 views of one zero.
  const Tensor table = expand(zeros({1, 1}), {dc.layers.vocab_size, dc.layers.hidden_size});
  Generator gen(0);
  nn::DFlashDrafter drafter(dc, table, table, nn::InitOptions{.generator = &gen});
  try {
    nn::load_checkpoint(drafter, *reader,
                        {.strict = true, .convert_dtype = true, .prefix = "drafter."});
  } catch (const Error& e) {
    // The target's shapes come from the folder the run read its features from (its index
    // names the target); when that is gone, the toy target's description stands in. A
    // file that cannot be read, or whose bytes fail their checksum (the reader's
    // "safetensors:" errors), is the checkpoint's damage, not the shapes'.
    const std::string from = config.features.source == "offline"  ? config.features.dir
                             : config.features.source == "target" ? config.features.target
                                                                  : std::string();
    if (from.empty() || e.message().rfind("safetensors: ", 0) == 0)
      CG_FAIL("export: ", r.checkpoint, ": ", e.message());
    CG_FAIL("export: ", r.checkpoint, ": ", e.message(), "; the run took its target's shapes from ",
            from, " (features.", config.features.source == "offline" ? "dir" : "target",
            "), which must still be there, as the run named it, for the export");
  }
  write_public_drafter(drafter, info, out_dir);
  r.parameters = drafter.num_parameters();
  return r;
}

}  // namespace cg::train
