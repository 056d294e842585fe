// Why this file exists: a module's parameters to and from safetensors checkpoints --
// chunkgrad's own and Hugging Face's. Loading reads each parameter's bytes straight
// into the parameter (no second copy of the model in memory), and only the tensors the
// module asks for, so a drafter can take embed_tokens and lm_head from a 16 GB target
// checkpoint without reading the rest.
//
//   cg::nn::save_checkpoint(lm, "/tmp/lm.safetensors");
//   cg::nn::load_checkpoint(lm, "/models/Qwen3-8B", {.strict = false, .convert_dtype = true});
#pragma once

#include <functional>
#include <map>
#include <string>

#include "nn/config.h"
#include "nn/module.h"
#include "nn/safetensors.h"

namespace cg::nn {

struct CheckpointLoadOptions {
  bool strict = true;          // missing/unexpected keys throw
  bool convert_dtype = false;  // a bf16 checkpoint may fill an f32 model
  // Prepended to every module parameter name when looking it up in the checkpoint
  // ("model." lets a Qwen3Model load from a Qwen3ForCausalLM checkpoint). With a prefix,
  // checkpoint keys outside it are not "unexpected".
  std::string prefix{};
  // When set: the module's name for each checkpoint tensor (after the prefix), or "" to skip
  // the tensor (never loaded, never "unexpected"). Two tensors mapping to one name are an
  // error. Errors name the tensor as the checkpoint does.
  std::function<std::string(const std::string&)> rename{};
  // Per-expert tensors (Note [Per-expert checkpoints]): the model's expert count, so that an
  // expert at or past it is named as extra, not as an incomplete one; 0: not known.
  int64_t num_experts = 0;
};

// Note [Hugging Face target names]: the module name of checkpoint tensor `name` for a target
// of config.family, or "" for a tensor the model does not use. Qwen3 ("qwen3"): the name
// itself. Qwen3.5 / Qwen3.6 ("qwen3_5"): Qwen3_5ForConditionalGeneration keeps the language
// model under model.language_model.* (-> model.*), lm_head.weight at the top, the vision
// tower under model.visual.* and, in released checkpoints, a multi-token-prediction head
// under mtp.* (both skipped: chunkgrad runs text only and does not use the MTP head);
// Qwen3_5ForCausalLM checkpoints, and chunkgrad's own saves, already use model.*.
std::string hf_target_name(const Qwen3Config& config, const std::string& name);
// The strict, dtype-converting load every Hugging Face target loader uses (rename set to
// hf_target_name for the config's family, num_experts to the config's).
CheckpointLoadOptions hf_target_load_options(const Qwen3Config& config);

// The module's state (shared parameters once, registration order) as one file, with
// metadata {"format": "pt"} added so transformers accepts it.
void save_checkpoint(const Module& module, const std::string& path,
                     std::map<std::string, std::string> metadata = {});
// As shards of at most max_shard_bytes in `folder` (see safetensors::save_sharded).
void save_checkpoint_sharded(const Module& module, const std::string& folder,
                             uint64_t max_shard_bytes,
                             std::map<std::string, std::string> metadata = {});

// From a file, an index or a folder (safetensors::open). Errors as load_state_dict's.
// Mixture-of-experts weights stored one tensor per expert (experts.{e}.{gate,up,down}_proj.
// weight) load into the packed experts.gate_up_proj / down_proj parameters (Note
// [Per-expert checkpoints], checkpoint.cpp).
LoadResult load_checkpoint(Module& module, const std::string& path,
                           const CheckpointLoadOptions& options = {});
LoadResult load_checkpoint(Module& module, const safetensors::Reader& reader,
                           const CheckpointLoadOptions& options = {});

// Note [Finite on load]: a parameter that is NaN or inf in a checkpoint (flipped bytes, or
// saved after a training diverged) loads silently and shows up only as a NaN loss steps
// later, whose message blames the learning rate. Every load here checks each floating
// tensor as it is read (one pass over bytes already in memory) and names the tensor, the
// file and what to do. Throws cg::Error when `cpu` (a CPU tensor) holds NaN or inf.
void check_finite(const Tensor& cpu, const std::string& tensor, const std::string& file);
// The flat index of the first NaN or inf of `cpu` (a CPU tensor; row-major order), or -1;
// `*value` (when given) is set to it. -1 for tensors that are not floating.
int64_t first_non_finite(const Tensor& cpu, double* value = nullptr);

// Every tensor of a checkpoint as a state dict, allocated as MemoryCategory::parameter.
StateDict read_state_dict(const std::string& path, Device device = {});

}  // namespace cg::nn
