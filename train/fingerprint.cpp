// Why this file exists: content fingerprints of the corpus and checkpoints (fingerprint.h).
#include "train/fingerprint.h"

#include <filesystem>

#include "core/error.h"

namespace cg::train {

nlohmann::json data_fingerprint(const TrainConfig& config, std::string_view corpus_text) {
  nlohmann::json f = {{"corpus_xxh3", content_hash(corpus_text)}};
  if (!config.target.checkpoint.empty()) {
    // A missing file is left to the target stage, whose error names it with the rest of
    // the target's settings (target.hf_config first).
    f["target_checkpoint_xxh3"] =
        std::filesystem::exists(config.target.checkpoint)
            ? nlohmann::json(file_content_hash(config.target.checkpoint, "target.checkpoint"))
            : nlohmann::json();
  }
  return f;
}

}  // namespace cg::train
