// Why this file exists: the safetensors writer -- save_file and save_sharded (format and
// Note [Tensor checksums] in safetensors.h; the reader is safetensors.cpp).
#include <cstdio>
#include <filesystem>
#include <set>

#include <nlohmann/json.hpp>

#include "core/atomic_file.h"
#include "core/content_hash.h"
#include "core/memory_trace.h"
#include "core/views.h"
#include "nn/safetensors.h"
#include "nn/safetensors_format.h"

namespace cg::safetensors {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

namespace {

std::string shard_name(size_t i, size_t count) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "model-%05zu-of-%05zu.safetensors", i + 1, count);
  return buf;
}

}  // namespace

// ---- writing ---------------------------------------------------------------------

std::string build_header(const std::vector<TensorInfo>& infos,
                         const std::map<std::string, std::string>& metadata) {
  ordered_json header = ordered_json::object();
  if (!metadata.empty()) header[kMetadataKey] = metadata;
  for (const TensorInfo& info : infos) {
    header[info.name] = {{"dtype", info.u8 ? "U8" : dtype_to_safetensors(info.dtype)},
                         {"shape", info.shape},
                         {"data_offsets", {info.begin, info.end}}};
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // data starts 8-byte aligned
  std::string out(8, '\0');
  uint64_t n = text.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + text;
}

void save_file(const NamedTensors& tensors, const std::string& path,
               const std::map<std::string, std::string>& metadata,
               const std::set<std::string>& u8_names) {
  CG_CHECK(metadata.count(kChecksumKey) == 0, "safetensors: metadata key '", kChecksumKey,
           "' is save_file's own (Note [Tensor checksums]); name the entry otherwise");
  std::set<std::string> seen;
  std::vector<TensorInfo> infos;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    CG_CHECK(name != kMetadataKey, "safetensors: a tensor cannot be named ", kMetadataKey);
    CG_CHECK(seen.insert(name).second, "safetensors: tensor name '", name,
             "' appears twice in what is being saved to '", path, "'");
    CG_CHECK(t.defined(), "safetensors: tensor '", name, "' saved to '", path, "' is undefined");
    TensorInfo info{name, t.dtype(), t.shape(), offset, offset + t.nbytes()};
    info.u8 = u8_names.count(name) > 0;
    CG_CHECK(!info.u8 || t.dtype() == DType::boolean, "safetensors: tensor '", name,
             "' is written as U8 but is ", dtype_name(t.dtype()), ", not bool");
    offset = info.end;
    infos.push_back(std::move(info));
  }
  // Written next to the target and renamed (core/atomic_file.h): a crash or a full disk
  // never leaves a half-written checkpoint under the real name, nor a temporary behind.
  AtomicFile out(path, "safetensors");
  // Note [Tensor checksums]: zeros first, the hashes over them once the data is written.
  const bool checksums = out.can_rewrite_start();
  std::map<std::string, std::string> meta = metadata;
  std::vector<std::string> sums(infos.size(), std::string(kChecksumHexDigits, '0'));
  auto with_sums = [&] {
    ordered_json j = ordered_json::object();
    j[kMetadataKey] = metadata_checksum(metadata);
    for (size_t i = 0; i < infos.size(); ++i) j[infos[i].name] = sums[i];
    meta[kChecksumKey] = j.dump();
    return build_header(infos, meta);
  };
  const std::string header = checksums ? with_sums() : build_header(infos, meta);
  out.write(header);
  CategoryGuard category(MemoryCategory::temporary);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor host = raw::contiguous(raw::to_device(tensors[i].second, kCPU));
    out.write(host.data_ptr(), host.nbytes());
    if (checksums) sums[i] = content_hash(host.data_ptr(), host.nbytes());
  }
  if (checksums) {
    const std::string final_header = with_sums();
    CG_CHECK(final_header.size() == header.size(), "safetensors: the header of '", path,
             "' changed length when its checksums were filled in (an internal error)");
    out.rewrite_start(final_header);
  }
  out.commit();
}

std::vector<std::string> save_sharded(const NamedTensors& tensors, const std::string& folder,
                                      uint64_t max_shard_bytes,
                                      const std::map<std::string, std::string>& metadata) {
  CG_CHECK(max_shard_bytes > 0, "safetensors: max_shard_bytes must be positive");
  CG_CHECK(fs::is_directory(folder), "safetensors: '", folder,
           "' is not a folder; create it before saving shards into it");
  // Greedy in the given order: a shard is closed when the next tensor would overflow it.
  std::vector<NamedTensors> shards(1);
  uint64_t in_shard = 0, total = 0;
  for (const auto& entry : tensors) {
    CG_CHECK(entry.second.defined(), "safetensors: tensor '", entry.first, "' is undefined");
    const uint64_t n = entry.second.nbytes();
    if (!shards.back().empty() && in_shard + n > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(entry);
    in_shard += n;
    total += n;
  }
  // One shard: a plain model.safetensors and no index, as Hugging Face writes it.
  if (shards.size() == 1) {
    save_file(shards[0], (fs::path(folder) / kSingleName).string(), metadata);
    return {kSingleName};
  }
  std::vector<std::string> files;
  ordered_json weight_map = ordered_json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    files.push_back(shard_name(i, shards.size()));
    save_file(shards[i], (fs::path(folder) / files.back()).string(), metadata);
    for (const auto& entry : shards[i]) weight_map[entry.first] = files.back();
  }
  ordered_json index_metadata = ordered_json::object();
  index_metadata["total_size"] = total;
  for (const auto& [k, v] : metadata) index_metadata[k] = v;
  ordered_json index = {{"metadata", index_metadata}, {"weight_map", weight_map}};
  const std::string index_path = (fs::path(folder) / kIndexName).string();
  write_file_atomically(index_path, index.dump(2) + "\n", "safetensors: the index");
  return files;
}

}  // namespace cg::safetensors
