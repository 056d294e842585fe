// Why this file exists: content fingerprints of the corpus and checkpoints (fingerprint.h).
#include "train/fingerprint.h"

#include <filesystem>
#include <memory>

#include "core/error.h"
#include "nn/safetensors.h"

namespace cg::train {

namespace fs = std::filesystem;

std::string checkpoint_content_hash(const std::string& path, const std::string& what) {
  // What the load reads, found as safetensors::open finds it: one file (a folder's
  // model.safetensors, as transformers prefers), or an index and the shards it names. So a
  // file named directly or by its folder has one fingerprint, and files the load never
  // reads (another index, stray weights) take no part in it.
  std::unique_ptr<safetensors::Reader> reader;
  try {
    reader = safetensors::open(path);
  } catch (const Error& e) { CG_FAIL(what, " '", path, "': ", e.message()); }
  const auto* sharded = dynamic_cast<const safetensors::Sharded*>(reader.get());
  if (sharded == nullptr) return file_content_hash(reader->path(), what);
  const fs::path dir = fs::path(sharded->path()).parent_path();
  std::string prints = fs::path(sharded->path()).filename().string() + " " +
                       file_content_hash(sharded->path(), what) + "\n";
  for (const std::string& f : sharded->shard_files())
    prints += f + " " + file_content_hash((dir / f).string(), what) + "\n";
  return content_hash(prints);
}

nlohmann::json data_fingerprint(const TrainConfig& config, std::string_view corpus_text) {
  nlohmann::json f = {{"corpus_xxh3", content_hash(corpus_text)}};
  if (!config.target.checkpoint.empty()) {
    CG_CHECK(fs::exists(config.target.checkpoint), "target.checkpoint '", config.target.checkpoint,
             "' does not exist; give a .safetensors file, a sharded checkpoint's *.index.json, "
             "or a folder holding them");
    f["target_checkpoint_xxh3"] =
        checkpoint_content_hash(config.target.checkpoint, "target.checkpoint");
  }
  return f;
}

}  // namespace cg::train
