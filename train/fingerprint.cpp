// Why this file exists: content fingerprints of the corpus and checkpoints (fingerprint.h).
#include "train/fingerprint.h"

#include <algorithm>
#include <filesystem>
#include <vector>

#include "core/error.h"

namespace cg::train {

namespace fs = std::filesystem;

std::string checkpoint_content_hash(const std::string& path, const std::string& what) {
  std::error_code ec;
  const bool folder = fs::is_directory(path, ec);
  const bool index = !folder && path.ends_with(".index.json");
  if (!folder && !index) return file_content_hash(path, what);  // (one file: as always)
  // A folder, or a sharded checkpoint's index: every .safetensors file beside it, and the
  // index files, by name and bytes.
  const fs::path dir = folder ? fs::path(path) : fs::path(path).parent_path();
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(dir.empty() ? fs::path(".") : dir, ec)) {
    const std::string name = e.path().filename().string();
    if (e.is_regular_file() && (name.ends_with(".safetensors") || name.ends_with(".index.json")))
      files.push_back(e.path());
  }
  CG_CHECK(!ec, what, " '", path, "': cannot list ", dir.string(), ": ", ec.message());
  std::sort(files.begin(), files.end());
  CG_CHECK(!files.empty(), what, " '", path, "' holds no .safetensors file");
  std::string prints;
  for (const fs::path& f : files)
    prints += f.filename().string() + " " + file_content_hash(f.string(), what) + "\n";
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
