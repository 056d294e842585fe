// Why this file exists: content fingerprints of the corpus and checkpoints (fingerprint.h).
#include "train/fingerprint.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <vector>

#include <xxhash.h>

#include "core/error.h"

namespace cg::train {

namespace {
std::string hex(const XXH128_hash_t& h) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return buf;
}
}  // namespace

std::string content_hash(std::string_view bytes) {
  return hex(XXH3_128bits(bytes.data(), bytes.size()));
}

std::string file_content_hash(const std::string& path, const std::string& what) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  const int err = errno;
  CG_CHECK(in.is_open(), what, ": cannot read ", path,
           err ? std::string(": ") + std::strerror(err) : std::string());
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                 &XXH3_freeState);
  CG_CHECK(state != nullptr && XXH3_128bits_reset(state.get()) == XXH_OK,
           "cannot start a content hash");
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    XXH3_128bits_update(state.get(), buf.data(), static_cast<size_t>(in.gcount()));
  }
  CG_CHECK(in.eof(), what, ": reading ", path, " failed");
  return hex(XXH3_128bits_digest(state.get()));
}

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
