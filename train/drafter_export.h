// Why this file exists: a trained drafter is only useful where it is served, and vLLM,
// SGLang, llama.cpp's converter and mistral.rs load DFlash drafters in one public layout
// (docs/export.md): a folder with config.json and one bf16 model.safetensors. This file
// writes that layout from a drafter (`chunkgrad export`), and reads it back into a drafter
// (`drafter.init_from`: fine-tune a published drafter), checking config.json against the
// drafter this run makes, field by field.
//
// Note [Public drafter names]: chunkgrad's drafter module tree is the public one (read in
// z-lab/dflash `dflash/model.py`, DFlashDraftModel @1012959): fc (Linear K*H -> H, no
// bias) over the K target features concatenated in target_layer_ids order, hidden_norm
// (RMSNorm), layers.{i} = Qwen3 decoder layers whose self_attn k_proj / v_proj and k_norm
// are applied to the fused context and to the block alike, final norm. Linear weights are
// [out, in] as torch's; the norms scale by w (not 1 + w). So the public names are the
// module's own parameter names, and export only casts to bf16: public_drafter_names()
// lists them and export refuses a module with any other parameter.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "nn/dflash_drafter.h"
#include "train/train_config.h"

namespace cg::train {

// What config.json carries beyond the drafter's architecture.
struct PublicDrafterInfo {
  int64_t block_size = 16;         // the block the drafter was trained with
  int64_t num_target_layers = 36;  // the target's depth (decoder layers)
  // The target's context length (Qwen3: 40960); engines size RoPE tables with it.
  int64_t max_position_embeddings = 40960;
};

// block_size and num_target_layers of a run's config; max_position_embeddings from
// target.hf_config when there is one (else Qwen3's 40960).
PublicDrafterInfo public_drafter_info(const TrainConfig& config);

// The published names, in file order: fc.weight, hidden_norm.weight, layers.{i}.*,
// norm.weight (Note [Public drafter names]).
std::vector<std::string> public_drafter_names(int64_t num_layers);

// config.json of a drafter (docs/export.md lists each field and its source). rope_theta is
// the drafter's own (dc.layers.rope_theta); no rope scaling, M-RoPE or partial-rotary field
// is ever written; sliding_window is a number only when a layer slides (null otherwise).
nlohmann::json public_drafter_config(const nn::DFlashDrafterConfig& dc,
                                     const PublicDrafterInfo& info);

// Writes out_dir/config.json and out_dir/model.safetensors (bf16, public names; no
// embedding, no lm_head). out_dir is made if missing; it must not already hold either file.
void write_public_drafter(const nn::DFlashDrafter& drafter, const PublicDrafterInfo& info,
                          const std::string& out_dir);

// The field `name` of a drafter's config.json as z-lab's _draft_value finds it:
// dflash_config first, then the top level; nullptr when in neither.
const nlohmann::json* draft_value(const nlohmann::json& config, const char* name);

// One line per field of config.json (parsed) that disagrees with the drafter `dc` and
// `info` ("hidden_size: 4096 in config.json, 64 here (...)"); empty when it fits.
std::vector<std::string> public_config_mismatches(const nlohmann::json& config,
                                                  const nn::DFlashDrafterConfig& dc,
                                                  const PublicDrafterInfo& info);

// The file checks of load_public_drafter (a folder with config.json and model.safetensors),
// made when a run starts, before the target stage can take minutes.
void check_public_drafter_folder(const std::string& dir,
                                 const std::string& option = "drafter.init_from");

// Loads a public-layout folder into `drafter` (any dtype; bf16 values converted): checks
// config.json (public_config_mismatches), then every tensor's name and shape, then reads
// them. Each failure is one error naming the folder and what to change.
void load_public_drafter(nn::DFlashDrafter& drafter, const PublicDrafterInfo& info,
                         const std::string& dir, const std::string& option = "drafter.init_from");

// Note [Export uses what training used]: export rebuilds the drafter's config.json from
// the run's saved train config and the target's config.json, read where the run named it
// (Note [Export needs the run's target]). That file may have changed since training (an
// outside tester edited num_hidden_layers, layer_types and rope_theta: export wrote the new
// depth, other target_layer_ids and the new theta, exit 0, for a drafter trained on the old
// target). So each checkpoint records, as metadata "target", what the export takes from the
// target as the run saw it: the target's architecture (Qwen3Config::str()),
// num_target_layers, target_layer_ids, rope_theta and max_position_embeddings. Export
// computes the same record now and refuses any difference, naming each field with both
// values. Checkpoints from before the record are exported as before, unchecked.
nlohmann::json run_target_record(const TrainConfig& config);
// One line per field of `then` (a checkpoint's record) that `now` gives otherwise
// ("rope_theta: 10000.0 when trained, 1000000.0 now"); the architecture line only when no
// other field differs. Empty when they agree.
std::vector<std::string> target_record_changes(const nlohmann::json& then,
                                               const nlohmann::json& now);

// `chunkgrad export`: the drafter of a chunkgrad checkpoint (`checkpoint`, or the newest
// of run_dir/drafter/ when checkpoint is ""), rebuilt from the config saved in it, written
// to out_dir. max_position_embeddings 0 = the target's config.json value, else 40960.
struct ExportResult {
  std::string checkpoint;  // the file exported
  int64_t step = 0;        // its training step
  int64_t parameters = 0;
};
ExportResult export_drafter_checkpoint(const std::string& run_dir, const std::string& checkpoint,
                                       const std::string& out_dir,
                                       int64_t max_position_embeddings = 0);

}  // namespace cg::train
