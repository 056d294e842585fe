// Why this file exists: what the safetensors reader (safetensors.cpp) and writer
// (safetensors_write.cpp) must agree on beyond the public header: the reserved metadata
// keys, the Hugging Face file names, and how the metadata's checksum is taken (Note
// [Tensor checksums] in safetensors.h). Internal to nn/.
#pragma once

#include <cstddef>
#include <map>
#include <string>

namespace cg::safetensors {

constexpr const char* kMetadataKey = "__metadata__";
constexpr const char* kChecksumKey = "chunkgrad.xxh3";  // Note [Tensor checksums]
constexpr size_t kChecksumHexDigits = 32;
constexpr const char* kIndexName = "model.safetensors.index.json";
constexpr const char* kSingleName = "model.safetensors";

// The hash save_file records for the metadata (less the sums): its keys and values, sorted
// by key, as one JSON object.
std::string metadata_checksum(const std::map<std::string, std::string>& metadata);

}  // namespace cg::safetensors
