// Why this file exists: the glue between Module's checked state-dict load and the
// safetensors reader (checkpoint.h): a StateSource that reads a tensor's bytes only
// when load_state_dict copies it.
#include "nn/checkpoint.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <type_traits>

#include "core/dtype_dispatch.h"
#include "core/error.h"
#include "core/memory_trace.h"
#include "core/views.h"

namespace cg::nn {

namespace {

// Note [Per-expert checkpoints]: transformers stores a Qwen3.5-MoE layer's routed experts
// packed, experts.gate_up_proj [E, 2I, H] (each expert's I gate rows, then its I up rows) and
// experts.down_proj [E, H, I]: what nn/moe.h's MoeExperts holds. Some third-party repacks
// store them one by one, experts.{e}.gate_proj.weight [I, H], .up_proj.weight [I, H] and
// .down_proj.weight [H, I]. The source below offers such a group to the model as the two
// packed tensors, stacked on copy (gate rows before up rows), so either layout loads into the
// same parameters. A group must hold all three projections of experts 0 .. E-1, each of one
// shape; a missing one is an error naming it. An expert at or past the model's num_experts
// (CheckpointLoadOptions::num_experts, which the Hugging Face loaders set) is an error naming
// it as extra; without the count, an extra expert makes E larger than the model's, and the
// shape check of load_state_dict names the stacked tensor.
struct ExpertName {
  std::string base;  // the module name up to and including "experts"
  int64_t expert = -1;
  std::string projection;  // "gate", "up" or "down"
};

// "<base>.experts.<e>.<gate|up|down>_proj.weight" -> its parts; nullopt for any other name.
std::optional<ExpertName> parse_expert_name(const std::string& key) {
  static const std::string marker = ".experts.", suffix = "_proj.weight";
  const size_t at = key.rfind(marker);
  if (at == std::string::npos || key.size() < suffix.size() ||
      key.compare(key.size() - suffix.size(), suffix.size(), suffix) != 0)
    return std::nullopt;
  size_t i = at + marker.size();
  const size_t digits = i;
  while (i < key.size() && std::isdigit(static_cast<unsigned char>(key[i]))) ++i;
  if (i == digits || i - digits > 9 || i >= key.size() || key[i] != '.') return std::nullopt;
  const std::string projection = key.substr(i + 1, key.size() - suffix.size() - i - 1);
  if (projection != "gate" && projection != "up" && projection != "down") return std::nullopt;
  return ExpertName{key.substr(0, at + marker.size() - 1),
                    std::stoll(key.substr(digits, i - digits)), projection};
}

class CheckpointSource : public StateSource {
 public:
  CheckpointSource(const safetensors::Reader& reader, const CheckpointLoadOptions& options)
      : reader_(reader), prefix_(options.prefix), num_experts_(options.num_experts) {
    const std::string& prefix = options.prefix;
    // base -> projection -> expert -> name in the file
    std::map<std::string, std::map<std::string, std::map<int64_t, std::string>>> experts;
    for (const std::string& name : reader_.names()) {
      if (name.compare(0, prefix.size(), prefix) != 0) continue;
      const std::string key =
          options.rename ? options.rename(name.substr(prefix.size())) : name.substr(prefix.size());
      if (key.empty()) continue;  // a tensor the model does not use
      learn_renamed_prefix(key, name);
      if (const auto e = parse_expert_name(key)) {
        experts[e->base][e->projection][e->expert] = name;
        continue;
      }
      add(key, name);
    }
    for (const auto& [base, projections] : experts) stack_experts(base, projections);
  }

  std::vector<std::string> keys() const override { return keys_; }
  Shape shape(const std::string& key) const override {
    const auto s = stacked_.find(key);
    return s != stacked_.end() ? s->second.shape : reader_.info(file(key)).shape;
  }
  DType dtype(const std::string& key) const override {
    const auto s = stacked_.find(key);
    return reader_.info(s != stacked_.end() ? s->second.parts.front() : file(key)).dtype;
  }
  std::string name_in_source(const std::string& key) const override {
    const auto it = file_name_.find(key);
    return it != file_name_.end() ? it->second : guessed_name(key);
  }
  void copy_into(const std::string& key, const Tensor& dst) const override {
    if (const auto s = stacked_.find(key); s != stacked_.end()) {
      copy_stacked(s->second, dst);
      return;
    }
    const std::string name = file(key);
    if (dst.device() == kCPU && dst.is_contiguous() && dst.dtype() == dtype(key)) {
      reader_.load_into(name, dst);                    // straight into the parameter
      check_finite(dst, name, reader_.path_of(name));  // Note [Finite on load]
      return;
    }
    CategoryGuard category(MemoryCategory::temporary);
    const Tensor read = reader_.load(name, kCPU);
    check_finite(read, name, reader_.path_of(name));
    raw::copy_(dst, read);  // converts dtype / moves to the device
  }
  std::string describe() const override { return "checkpoint '" + reader_.path() + "'"; }

 private:
  // A packed tensor made of per-expert ones: parts in order, each [rows, cols], stacked as
  // [E, parts_per_expert * rows, cols] (Note [Per-expert checkpoints]).
  struct Stacked {
    std::vector<std::string> parts;
    int64_t parts_per_expert = 1;
    Shape shape;
  };

  void add(const std::string& key, const std::string& name) {
    const auto [it, fresh] = file_name_.emplace(key, name);
    CG_CHECK(fresh, "checkpoint '", reader_.path(), "': tensors '", it->second, "' and '", name,
             "' both hold the model's '", key,
             "'; the folder mixes two checkpoint layouts, keep one");
    keys_.push_back(key);
  }

  void stack_experts(const std::string& base,
                     const std::map<std::string, std::map<int64_t, std::string>>& projections) {
    int64_t count = 0;
    for (const auto& [projection, by_expert] : projections)
      count = std::max(count, by_expert.rbegin()->first + 1);
    // An expert past the model's count is extra, whatever else it lacks (an outside tester's
    // experts.8.* beside 8 experts was called "incomplete").
    if (num_experts_ > 0 && count > num_experts_) {
      for (const auto& [projection, by_expert] : projections) {
        const auto extra = by_expert.lower_bound(num_experts_);
        if (extra == by_expert.end()) continue;
        CG_FAIL("checkpoint '", reader_.path(), "': '", extra->second, "' is expert ", extra->first,
                ", beyond num_experts (", num_experts_, ": experts 0 .. ", num_experts_ - 1,
                "); the checkpoint is for another config, or config.json's num_experts is wrong");
      }
    }
    auto part = [&](const char* projection, int64_t e) -> const std::string& {
      const auto p = projections.find(projection);
      const bool found = p != projections.end() && p->second.count(e) > 0;
      CG_CHECK(found, "checkpoint '", reader_.path(), "': the per-expert tensors under '", base,
               ".' stop short: expert ", e, " has no ", projection,
               "_proj.weight, but experts up to ", count - 1,
               " appear (Note [Per-expert checkpoints]: every expert 0 .. E-1 needs gate_proj, "
               "up_proj and down_proj); the checkpoint is incomplete");
      return p->second.at(e);
    };
    Stacked gate_up, down;
    gate_up.parts_per_expert = 2;
    for (int64_t e = 0; e < count; ++e) {
      gate_up.parts.push_back(part("gate", e));
      gate_up.parts.push_back(part("up", e));
      down.parts.push_back(part("down", e));
    }
    gate_up.shape = stacked_shape(gate_up, base);
    down.shape = stacked_shape(down, base);
    const std::string described = base + ".{0.." + std::to_string(count - 1) + "}.";
    add(base + ".gate_up_proj", described + "{gate,up}_proj.weight (stacked)");
    add(base + ".down_proj", described + "down_proj.weight (stacked)");
    stacked_.emplace(base + ".gate_up_proj", std::move(gate_up));
    stacked_.emplace(base + ".down_proj", std::move(down));
  }

  // [E, parts_per_expert * rows, cols] after checking every part is one 2-D shape and dtype.
  Shape stacked_shape(const Stacked& s, const std::string& base) const {
    const auto& first = reader_.info(s.parts.front());
    for (const std::string& name : s.parts) {
      const auto& info = reader_.info(name);
      CG_CHECK(info.shape.size() == 2 && info.shape == first.shape && info.dtype == first.dtype,
               "checkpoint '", reader_.path(), "': the per-expert tensors under '", base,
               ".' differ: '", name, "' is ", dtype_name(info.dtype), " ", shape_str(info.shape),
               " but '", s.parts.front(), "' is ", dtype_name(first.dtype), " ",
               shape_str(first.shape), "; each projection needs one 2-D shape for every expert");
    }
    const int64_t experts = static_cast<int64_t>(s.parts.size()) / s.parts_per_expert;
    return {experts, s.parts_per_expert * first.shape[0], first.shape[1]};
  }

  void copy_stacked(const Stacked& s, const Tensor& dst) const {
    CategoryGuard category(MemoryCategory::temporary);
    const int64_t rows = s.shape[1] / s.parts_per_expert;
    for (size_t i = 0; i < s.parts.size(); ++i) {
      const int64_t e = static_cast<int64_t>(i) / s.parts_per_expert;
      const int64_t row0 = (static_cast<int64_t>(i) % s.parts_per_expert) * rows;
      const Tensor read = reader_.load(s.parts[i], kCPU);
      check_finite(read, s.parts[i], reader_.path_of(s.parts[i]));
      raw::copy_(raw::narrow(raw::squeeze(raw::narrow(dst, 0, e, 1), 0), 0, row0, rows), read);
    }
  }

  const std::string& file(const std::string& key) const { return file_name_.at(key); }

  // Note [Missing names]: a tensor the model needs and the checkpoint lacks has no name in
  // the file to show. The error must still name it as the user's files would (a nested
  // Qwen3.5 folder's model.language_model.layers.3.mlp.up_proj.weight, not the module's
  // model.layers.3...), so the source learns how the names it saw were renamed: the module
  // name and the file name end in the same dotted parts, and the parts before differ
  // ("model." -> "model.language_model."). A missing key under a learnt module prefix takes
  // that prefix's file prefix (the longest match); any other is the prefix plus the key.
  void learn_renamed_prefix(const std::string& key, const std::string& name) {
    if (key == name) return;
    size_t k = key.size(), n = name.size();
    while (k > 0 && n > 0 && key[k - 1] == name[n - 1]) --k, --n;
    // On to a part boundary: the common tail starts after a '.' (or at the start) in both.
    // ("model.layers.0.x" and "model.language_model.layers.0.x" share "model.layers.0.x"
    // from "l", which is no boundary in the second.)
    while (k < key.size() && ((k > 0 && key[k - 1] != '.') || (n > 0 && name[n - 1] != '.')))
      ++k, ++n;
    if (k >= key.size()) return;  // no whole common part: nothing to learn
    file_prefix_of_.emplace(key.substr(0, k), name.substr(0, n));
  }
  std::string guessed_name(const std::string& key) const {
    const std::string* best = nullptr;
    size_t best_size = 0;
    for (const auto& [module_prefix, file_prefix] : file_prefix_of_) {
      if (key.starts_with(module_prefix) && (!best || module_prefix.size() > best_size)) {
        best = &file_prefix;
        best_size = module_prefix.size();
      }
    }
    return best ? *best + key.substr(best_size) : prefix_ + key;
  }

  const safetensors::Reader& reader_;
  std::vector<std::string> keys_;
  std::map<std::string, std::string> file_name_;       // module name -> name in the file
  std::map<std::string, Stacked> stacked_;             // module name -> its per-expert parts
  std::string prefix_;                                 // CheckpointLoadOptions::prefix
  int64_t num_experts_ = 0;                            // CheckpointLoadOptions::num_experts
  std::map<std::string, std::string> file_prefix_of_;  // Note [Missing names]
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
  return {.strict = true,
          .convert_dtype = true,
          .rename = [config](const std::string& name) { return hf_target_name(config, name); },
          .num_experts = config.num_experts};
}

int64_t first_non_finite(const Tensor& cpu, double* value) {
  if (!is_floating(cpu.dtype()) || cpu.numel() == 0) return -1;
  CG_CHECK(cpu.device() == kCPU, "first_non_finite: the tensor must be on the host, got ",
           cpu.device().str());
  const Tensor t = raw::contiguous(cpu);
  int64_t bad = -1;
  visit_dtype(t.dtype(), [&](auto tag) {
    using T = typename decltype(tag)::type;
    if constexpr (std::is_floating_point_v<T> || is_half_type_v<T>) {
      const T* p = static_cast<const T*>(t.data_ptr());
      for (int64_t i = 0, n = t.numel(); i < n; ++i) {
        const double v = cast_element<double>(p[i]);
        if (!std::isfinite(v)) {
          bad = i;
          if (value) *value = v;
          break;
        }
      }
    }
  });
  return bad;
}

void check_finite(const Tensor& cpu, const std::string& tensor, const std::string& file) {
  if (!is_floating(cpu.dtype()) || cpu.numel() == 0) return;
  CG_CHECK(cpu.device() == kCPU, "check_finite: '", tensor, "' must be on the host, got ",
           cpu.device().str());
  double value = 0;
  const int64_t bad = first_non_finite(cpu, &value);
  CG_CHECK(
      bad < 0, "checkpoint '", file, "': tensor '", tensor, "' holds ",
      std::isnan(value) ? "nan" : (value > 0 ? "inf" : "-inf"), " at element ", bad, " of ",
      cpu.numel(),
      ": the file is damaged, or was saved after its training diverged; use an intact checkpoint");
}

StateDict read_state_dict(const std::string& path, Device device) {
  CategoryGuard category(MemoryCategory::parameter);
  const auto all = safetensors::open(path)->load_all(device);
  return StateDict(all.begin(), all.end());
}

}  // namespace cg::nn
