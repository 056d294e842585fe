// Why this file exists: checkpoints travel as safetensors, the format Hugging Face
// models ship in, so that a real Qwen3 checkpoint loads by name and what chunkgrad
// saves opens in PyTorch. Only the header is parsed up front; a tensor's bytes are read
// when that tensor is asked for, so a 60 GB checkpoint never has to be loaded whole.
//
// The format: 8 bytes little-endian header length N, then N bytes of JSON
//   {"name": {"dtype": "BF16", "shape": [2, 3], "data_offsets": [begin, end]}, ...,
//    "__metadata__": {"key": "value"}}   (optional, strings only)
// then the raw little-endian data; offsets count from the start of the data section.
// Sharded checkpoints add model.safetensors.index.json:
//   {"metadata": {"total_size": N}, "weight_map": {"name": "model-00001-of-00002.safetensors"}}
//
//   auto ckpt = cg::safetensors::open("/models/Qwen3-8B");   // file, index or folder
//   cg::Tensor w = ckpt->load("model.layers.0.self_attn.q_proj.weight");
//
// Tensors read here are allocated through the caching allocator under the calling
// thread's memory category (load_state_dict sets MemoryCategory::parameter).
//
// Note [Tensor checksums]: a bit that flips on disk in a checkpoint of finite values (an
// fc.weight element 0.036 -> 1e37, an outside tester's attack) used to resume without a
// word. Every file save_file writes (checkpoints, feature shards, exported drafters) records
// the XXH3-128 of each tensor's bytes in its metadata, under "chunkgrad.xxh3" (a JSON object
// of tensor name -> 32 hex digits, as one string: the format's metadata holds strings
// only, and other readers ignore keys they do not know), and under "__metadata__" there the
// hash of the other metadata (a checkpoint's step and config: a step "2" -> "3" is one bit);
// every read of a tensor whose file records one checks it, and opening the file checks the
// metadata's and that every tensor has one, so a damaged tensor is an error naming it and
// the file. Per-tensor sums do not catch a whole tensor swapped with its sum from another
// file by hand; that is not the damage they are for. The
// header comes before the data, so save_file writes it with zeros in place of the hashes
// and writes it again, at the same length, once the data is written. Files from before,
// or from other writers, have no hashes and are read as they were; so are files written
// straight into a pipe or a device, where the header cannot be written again. Hashing
// costs about one pass over memory at tens of GB/s, small next to the disk.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.h"

namespace cg::safetensors {

// "F32", "BF16", ... <-> DType. Names chunkgrad cannot hold (I8, F8_E4M3, ...) throw.
//
// Note [U8 as bytes]: chunkgrad has no uint8 dtype, but masks (the feature files' loss
// masks, docs/feature_files.md) are stored as U8 so that any reader takes them. A U8
// tensor is read into a DType::boolean tensor (one byte per element, the bytes as stored:
// the caller checks the values it allows), and TensorInfo::u8 says so; a boolean tensor
// is written as U8 when save_file is asked to (its u8_names).
const char* dtype_to_safetensors(DType dtype);
DType dtype_from_safetensors(const std::string& name, const std::string& tensor_name);

// One entry of a header. Offsets are relative to the data section.
struct TensorInfo {
  std::string name;
  DType dtype = DType::f32;
  Shape shape;
  uint64_t begin = 0;
  uint64_t end = 0;
  bool u8 = false;  // stored as U8, held as DType::boolean's bytes (Note [U8 as bytes])
  uint64_t nbytes() const { return end - begin; }
};

// A readable checkpoint: one file or a set of shards behind an index.
class Reader {
 public:
  virtual ~Reader() = default;
  // Every tensor name, in a stable order (data order within a file, files in index order).
  virtual const std::vector<std::string>& names() const = 0;
  virtual bool contains(const std::string& name) const = 0;
  // Header entry of `name`; throws naming the checkpoint when it has no such tensor.
  virtual const TensorInfo& info(const std::string& name) const = 0;
  // Reads one tensor's bytes into a fresh contiguous tensor on `device`.
  virtual Tensor load(const std::string& name, Device device = kCPU) const = 0;
  // Reads one tensor's bytes straight into `dst` (CPU, contiguous, same dtype and shape
  // as the file's; checked), without a temporary.
  virtual void load_into(const std::string& name, const Tensor& dst) const = 0;
  // String metadata ("__metadata__" of a file; the index's "metadata" as text), less the
  // tensor checksums (Note [Tensor checksums]).
  virtual const std::map<std::string, std::string>& metadata() const = 0;
  // The XXH3-128 hex its file records for `name`'s bytes, "" when it records none (Note
  // [Tensor checksums]); load and load_into check it themselves.
  virtual std::string checksum(const std::string& name) const = 0;
  virtual std::string path() const = 0;
  // The file holding `name`: path() for one file, its shard for a sharded checkpoint (what
  // an error about the tensor's bytes must name; the index holds none of them).
  virtual std::string path_of(const std::string& name) const = 0;

  // Every tensor (or the named ones) read in one go.
  std::map<std::string, Tensor> load_all(Device device = kCPU) const;
  std::map<std::string, Tensor> load_some(const std::vector<std::string>& names,
                                          Device device = kCPU) const;
};

// One .safetensors file. The constructor reads and checks the header only:
// length within the file, JSON object, known dtypes, shapes >= 0, offsets inside the
// data section, sizes == numel * element size, coverage contiguous without overlap.
class File : public Reader {
 public:
  explicit File(std::string path);
  const std::vector<std::string>& names() const override { return names_; }
  bool contains(const std::string& name) const override;
  const TensorInfo& info(const std::string& name) const override;
  Tensor load(const std::string& name, Device device = kCPU) const override;
  void load_into(const std::string& name, const Tensor& dst) const override;
  const std::map<std::string, std::string>& metadata() const override { return metadata_; }
  std::string checksum(const std::string& name) const override;
  std::string path() const override { return path_; }
  std::string path_of(const std::string&) const override { return path_; }
  uint64_t data_start() const { return data_start_; }  // 8 + N

 private:
  std::string path_;
  uint64_t data_start_ = 0;
  std::vector<std::string> names_;
  std::map<std::string, TensorInfo> infos_;
  std::map<std::string, std::string> metadata_;
  std::map<std::string, std::string> checksums_;  // tensor -> XXH3-128 hex
  void read_checksums(const std::string& text);
};

// A checkpoint split over shards, read through its index. A shard's header is parsed
// the first time one of its tensors is asked for; then its weight_map entries are
// checked against it.
class Sharded : public Reader {
 public:
  explicit Sharded(std::string index_path);
  ~Sharded() override;
  const std::vector<std::string>& names() const override { return names_; }
  bool contains(const std::string& name) const override;
  const TensorInfo& info(const std::string& name) const override;
  Tensor load(const std::string& name, Device device = kCPU) const override;
  void load_into(const std::string& name, const Tensor& dst) const override;
  const std::map<std::string, std::string>& metadata() const override { return metadata_; }
  std::string checksum(const std::string& name) const override;
  std::string path() const override { return index_path_; }
  std::string path_of(const std::string& name) const override;
  // Shard file names in the order they first appear in the weight map.
  const std::vector<std::string>& shard_files() const { return shard_files_; }

 private:
  const File& shard_of(const std::string& name) const;

  std::string index_path_;
  std::string folder_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> file_of_;  // tensor -> shard file
  std::vector<std::string> shard_files_;
  mutable std::mutex mutex_;                                     // guards opened_
  mutable std::map<std::string, std::unique_ptr<File>> opened_;  // shard file -> header
  std::map<std::string, std::string> metadata_;
};

// Opens a .safetensors file, a *.index.json, or a folder holding model.safetensors or
// model.safetensors.index.json (the Hugging Face layout; with both, model.safetensors, as
// transformers loads it).
std::unique_ptr<Reader> open(const std::string& path);

// Tensors to write, in the order they go into the file.
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;

// Writes one file. Tensors may be on any device, any strides (copied to host,
// contiguous); names must be unique and not "__metadata__". The boolean tensors named in
// u8_names are written as U8 (Note [U8 as bytes]).
void save_file(const NamedTensors& tensors, const std::string& path,
               const std::map<std::string, std::string>& metadata = {},
               const std::set<std::string>& u8_names = {});

// Writes `tensors` into `folder` as shards of at most max_shard_bytes of tensor data
// each (a tensor larger than that gets a shard of its own), named
// model-00001-of-0000K.safetensors, plus model.safetensors.index.json. Returns the
// shard file names. The folder must exist.
std::vector<std::string> save_sharded(const NamedTensors& tensors, const std::string& folder,
                                      uint64_t max_shard_bytes,
                                      const std::map<std::string, std::string>& metadata = {});

// The 8-byte length + padded JSON header save_file writes before the data (exposed for
// tests that build files by hand and for tools).
std::string build_header(const std::vector<TensorInfo>& infos,
                         const std::map<std::string, std::string>& metadata);

}  // namespace cg::safetensors
