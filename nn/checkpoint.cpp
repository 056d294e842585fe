// Why this file exists: the glue between Module's checked state-dict load and the
// safetensors reader (checkpoint.h): a StateSource that reads a tensor's bytes only
// when load_state_dict copies it.
#include "nn/checkpoint.h"

#include "core/memory_trace.h"
#include "core/views.h"

namespace cg::nn {

namespace {

class CheckpointSource : public StateSource {
 public:
  CheckpointSource(const safetensors::Reader& reader, std::string prefix)
      : reader_(reader), prefix_(std::move(prefix)) {}

  std::vector<std::string> keys() const override {
    std::vector<std::string> out;
    for (const std::string& name : reader_.names()) {
      if (name.compare(0, prefix_.size(), prefix_) == 0) out.push_back(name.substr(prefix_.size()));
    }
    return out;
  }
  Shape shape(const std::string& key) const override { return reader_.info(prefix_ + key).shape; }
  DType dtype(const std::string& key) const override { return reader_.info(prefix_ + key).dtype; }
  void copy_into(const std::string& key, const Tensor& dst) const override {
    const std::string name = prefix_ + key;
    if (dst.device() == kCPU && dst.is_contiguous() && dst.dtype() == dtype(key)) {
      reader_.load_into(name, dst);  // straight into the parameter
      return;
    }
    CategoryGuard category(MemoryCategory::temporary);
    raw::copy_(dst, reader_.load(name, kCPU));  // converts dtype / moves to the device
  }
  std::string describe() const override { return "checkpoint '" + reader_.path() + "'"; }

 private:
  const safetensors::Reader& reader_;
  std::string prefix_;
};

safetensors::NamedTensors tensors_of(const Module& module) {
  safetensors::NamedTensors out;
  for (const auto& [name, p] : module.named_parameters()) out.emplace_back(name, p.detach());
  return out;
}

}  // namespace

void save_checkpoint(const Module& module, const std::string& path,
                     std::map<std::string, std::string> metadata) {
  metadata.emplace("format", "pt");
  safetensors::save_file(tensors_of(module), path, metadata);
}

void save_checkpoint_sharded(const Module& module, const std::string& folder,
                             uint64_t max_shard_bytes,
                             std::map<std::string, std::string> metadata) {
  metadata.emplace("format", "pt");
  safetensors::save_sharded(tensors_of(module), folder, max_shard_bytes, metadata);
}

LoadResult load_checkpoint(Module& module, const std::string& path,
                           const CheckpointLoadOptions& options) {
  const auto reader = safetensors::open(path);
  return load_checkpoint(module, *reader, options);
}

LoadResult load_checkpoint(Module& module, const safetensors::Reader& reader,
                           const CheckpointLoadOptions& options) {
  return module.load_state_dict(CheckpointSource(reader, options.prefix), options.strict,
                                options.convert_dtype);
}

StateDict read_state_dict(const std::string& path, Device device) {
  CategoryGuard category(MemoryCategory::parameter);
  const auto all = safetensors::open(path)->load_all(device);
  return StateDict(all.begin(), all.end());
}

}  // namespace cg::nn
