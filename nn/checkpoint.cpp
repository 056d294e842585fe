// Why this file exists: the glue between Module's checked state-dict load and the
// safetensors reader (checkpoint.h): a StateSource that reads a tensor's bytes only
// when load_state_dict copies it.
#include "nn/checkpoint.h"

#include <cmath>
#include <type_traits>

#include "core/dtype_dispatch.h"
#include "core/error.h"
#include "core/memory_trace.h"
#include "core/views.h"

namespace cg::nn {

namespace {

class CheckpointSource : public StateSource {
 public:
  CheckpointSource(const safetensors::Reader& reader, const CheckpointLoadOptions& options)
      : reader_(reader) {
    const std::string& prefix = options.prefix;
    for (const std::string& name : reader_.names()) {
      if (name.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string key =
          options.rename ? options.rename(name.substr(prefix.size())) : name.substr(prefix.size());
      if (key.empty()) continue;  // a tensor the model does not use
      const auto [it, fresh] = file_name_.emplace(key, name);
      CG_CHECK(fresh, "checkpoint '", reader_.path(), "': tensors '", it->second, "' and '", name,
               "' both hold the model's '", key,
               "'; the folder mixes two checkpoint layouts, keep one");
      keys_.push_back(key);
    }
  }

  std::vector<std::string> keys() const override { return keys_; }
  Shape shape(const std::string& key) const override { return reader_.info(file(key)).shape; }
  DType dtype(const std::string& key) const override { return reader_.info(file(key)).dtype; }
  std::string name_in_source(const std::string& key) const override { return file(key); }
  void copy_into(const std::string& key, const Tensor& dst) const override {
    const std::string name = file(key);
    if (dst.device() == kCPU && dst.is_contiguous() && dst.dtype() == dtype(key)) {
      reader_.load_into(name, dst);             // straight into the parameter
      check_finite(dst, name, reader_.path());  // Note [Finite on load]
      return;
    }
    CategoryGuard category(MemoryCategory::temporary);
    const Tensor read = reader_.load(name, kCPU);
    check_finite(read, name, reader_.path());
    raw::copy_(dst, read);  // converts dtype / moves to the device
  }
  std::string describe() const override { return "checkpoint '" + reader_.path() + "'"; }

 private:
  const std::string& file(const std::string& key) const { return file_name_.at(key); }

  const safetensors::Reader& reader_;
  std::vector<std::string> keys_;
  std::map<std::string, std::string> file_name_;  // module name -> name in the file
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
  return module.load_state_dict(CheckpointSource(reader, options), options.strict,
                                options.convert_dtype);
}

std::string hf_target_name(const Qwen3Config& config, const std::string& name) {
  if (config.family != "qwen3_5") return name;
  auto starts = [&](const char* p) { return name.rfind(p, 0) == 0; };
  if (starts("model.visual.") || starts("mtp.")) return "";
  static const std::string nested = "model.language_model.";
  if (starts(nested.c_str())) return "model." + name.substr(nested.size());
  return name;
}

CheckpointLoadOptions hf_target_load_options(const Qwen3Config& config) {
  return {.strict = true, .convert_dtype = true, .rename = [config](const std::string& name) {
            return hf_target_name(config, name);
          }};
}

void check_finite(const Tensor& cpu, const std::string& tensor, const std::string& file) {
  if (!is_floating(cpu.dtype()) || cpu.numel() == 0) return;
  CG_CHECK(cpu.device() == kCPU, "check_finite: '", tensor, "' must be on the host, got ",
           cpu.device().str());
  const Tensor t = raw::contiguous(cpu);
  int64_t bad = -1;
  double value = 0;
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T> || is_half_type_v<T>) {
      const T* p = static_cast<const T*>(t.data_ptr());
      for (int64_t i = 0, n = t.numel(); i < n; ++i) {
        const double v = cast_element<double>(p[i]);
        if (!std::isfinite(v)) {
          bad = i;
          value = v;
          break;
        }
      }
    }
  });
  CG_CHECK(
      bad < 0, "checkpoint '", file, "': tensor '", tensor, "' holds ",
      std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf"), " at element ", bad, " of ",
      t.numel(),
      ": the file is damaged, or was saved after its training diverged; use an intact checkpoint");
}

StateDict read_state_dict(const std::string& path, Device device) {
  CategoryGuard category(MemoryCategory::parameter);
  const auto all = safetensors::open(path)->load_all(device);
  return StateDict(all.begin(), all.end());
}

}  // namespace cg::nn
