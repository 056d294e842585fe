// Why this file exists: opening a run from offline features (offline_run.h).
#include "train/offline_run.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "nn/dflash_drafter.h"
#include "train/fingerprint.h"
#include "train/target_lm.h"
#include "train/tokenizer.h"

namespace cg::train {

namespace fs = std::filesystem;

OfflineRun open_offline_run(const TrainConfig& config, Device device) {
  const std::string& dir = config.features.dir;
  const FeatureFileIndex index = read_feature_index(dir);
  // The target the index names; a folder that moved since is looked for in the run
  // directory (a run's cached target).
  std::string target_dir = index.target;
  if (!fs::is_directory(target_dir)) {
    CG_CHECK(fs::exists(fs::path(config.run_dir) / "target" / "model.safetensors"),
             "feature files: ", dir, "/index.json: field 'target' names ", index.target,
             ", which is not a folder, and the run directory ", config.run_dir,
             " has no cached target; put the target back or write the features again");
    target_dir = config.run_dir;
  }
  OfflineRun r;
  // In the drafter's dtype: only its embedding and lm_head are used, in that dtype.
  r.target = load_feature_target(target_dir, device,
                                 config.drafter.dtype == "bf16" ? DType::bf16 : DType::f32);
  const nn::Qwen3Config& arch = r.target.lm->config();
  // A chunkgrad run's toy target is described by the config's target section, which
  // export and init_from rebuild the drafter from: one that disagrees with the target the
  // features came from trained fine and then exported the wrong target_layer_ids.
  if (r.target.kind == "chunkgrad run") {
    const nn::Qwen3Config said = target_architecture(config.target);
    std::string differ;
    std::string sets;  // what makes the config agree
    auto compare = [&](const char* field, int64_t here, int64_t there) {
      if (here != there) {
        differ += std::string(differ.empty() ? "" : ", ") + "target." + field + " " +
                  std::to_string(here) + " (the features' target: " + std::to_string(there) + ")";
        sets += " --set target." + std::string(field) + "=" + std::to_string(there);
      }
    };
    compare("num_layers", said.num_layers, arch.num_layers);
    compare("hidden_size", said.hidden_size, arch.hidden_size);
    compare("vocab_size", said.vocab_size, arch.vocab_size);
    compare("num_heads", said.num_heads, arch.num_heads);
    compare("num_kv_heads", said.num_kv_heads, arch.num_kv_heads);
    compare("head_dim", said.head_dim, arch.head_dim);
    compare("intermediate_size", said.intermediate_size, arch.intermediate_size);
    CG_CHECK(differ.empty(), "train config: ", differ, ": with --features the target is the one ",
             dir, " was written from (", target_dir, "), and the config must describe it:", sets,
             " (or write features from a target of the config's sizes)");
  }
  // The byte tokenizer's MASK id (the default) is an ordinary token of a real vocabulary.
  CG_CHECK(
      r.target.kind != "hugging face" ||
          (config.drafter.mask_token_id >= 0 && config.drafter.mask_token_id < arch.vocab_size),
      "train config: drafter.mask_token_id is ", config.drafter.mask_token_id,
      "; features of a Hugging Face target need the MASK id set, an id of its vocabulary (0 .. ",
      arch.vocab_size - 1,
      ") that the tokenizer never produces (Qwen3: 151669, the published drafters' id)");
  FeatureExpectations expect;
  expect.layer_ids =
      config.drafter.target_layers.empty()
          ? nn::dflash_target_layers(arch.num_layers, config.drafter.num_target_features)
          : config.drafter.target_layers;
  expect.hidden_size = arch.hidden_size;
  expect.vocab_size = arch.vocab_size;
  expect.mask_token_id =
      config.drafter.mask_token_id >= 0 ? config.drafter.mask_token_id : ByteTokenizer::kMask;
  expect.target_fingerprint = r.target.fingerprint;
  expect.tokenizer_hash = r.target.tokenizer_hash;
  const int64_t n = index.num_samples;
  const int64_t held = std::min<int64_t>(config.eval.accuracy_sequences, n / 4);
  r.train = std::make_shared<OfflineFeatureSource>(dir, expect, 0, n - held);
  if (held > 0) r.held = std::make_shared<OfflineFeatureSource>(dir, expect, n - held, held);
  std::ifstream in(fs::path(dir) / "index.json", std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  r.data_fingerprint = nlohmann::json{{"features_index_xxh3", content_hash(text.str())},
                                      {"target", r.target.fingerprint}}
                           .dump();
  return r;
}

}  // namespace cg::train
