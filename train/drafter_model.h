// Why this file exists: which drafter a run makes -- its architecture from the target's
// (or, with no target model, from the config's own target sizes) and the config's
// drafter fields, and the module itself over the target's frozen embedding and lm_head.
// Apart from the training loop (drafter_trainer.h), which only trains what it is given.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "nn/dflash_drafter.h"
#include "train/train_config.h"

namespace cg::train {

// The drafter's architecture for a target of architecture `target`: the target's width
// and vocabulary; the config's depth, MLP, heads, head_dim, RoPE theta and eps (each 0 =
// the target's), layer types and window, activation checkpointing; target layers by the public rule over the
// target's depth (or the explicit list); drafter.mask_token_id, or `mask_id` at -1.
// Throws when drafter.hidden_size / vocab_size / num_target_layers disagree with the target.
nn::DFlashDrafterConfig drafter_model_config(const nn::Qwen3Config& target,
                                             const DrafterConfig& config, int64_t mask_id);
// The drafter a run's config makes, from the config alone (no target loaded): the target's
// architecture (target_architecture, or synthetic_target_architecture for synthetic
// features) and the MASK id the run uses (the byte tokenizer's; synthetic: vocab_size - 1).
nn::DFlashDrafterConfig run_drafter_config(const TrainConfig& config);
// The target architecture run_drafter_config builds on, read now from where the run names
// it (run_target_hf_config, else the config's own target sizes).
nn::Qwen3Config run_target_architecture(const TrainConfig& config);
// The drafter a run will make on `target` (drafter_model_config with `mask_id`), checked
// from the config alone: its sizes against the target's, its attention sizes (a field at 0
// named with the target's value it took), its layout, and the head-loss chunk at its
// vocabulary in drafter.dtype on `device`. Each refusal is one line naming the drafter.*
// field and what to change. The pipelines call it before the run directory is written
// (docs/feature_files.md promises it): an outside tester's mismatched drafter.hidden_size
// failed after this run's config.json had replaced an earlier run's, and its summary.json
// was gone.
void check_run_drafter(const TrainConfig& config, const nn::Qwen3Config& target, int64_t mask_id,
                       Device device);
// The Hugging Face config.json of the run's target: features.target's (source target), the
// feature folder's target's when that is a Hugging Face folder (source offline), else
// target.hf_config ("" for the toy target).
std::string run_target_hf_config(const TrainConfig& config);
// The target's architecture as far as a drafter needs it, from drafter.hidden_size,
// vocab_size and num_target_layers, where there is no target model (synthetic features).
nn::Qwen3Config synthetic_target_architecture(const DrafterConfig& config);

// The drafter for a target (drafter_model_config); compute dtype f32 or bf16 (then the
// frozen embed/head are bf16 copies).
std::unique_ptr<nn::DFlashDrafter> make_drafter(const nn::Qwen3ForCausalLM& target,
                                                const DrafterConfig& config, int64_t mask_id,
                                                uint64_t seed);
// The same from the frozen tables alone ([V, H] each, already in the compute dtype and on
// the device), where there is no target model. init_on_device: the drafter's weights are
// drawn on the tables' device in the compute dtype (a 1.7B-parameter drafter is not made
// in f32 on the host first); false: made on the host in f32, then moved and cast, so that
// every device starts from the same values.
std::unique_ptr<nn::DFlashDrafter> make_drafter(const nn::Qwen3Config& target, Tensor embed,
                                                Tensor head, const DrafterConfig& config,
                                                int64_t mask_id, uint64_t seed,
                                                bool init_on_device = false);

// What the drafter learns from: the sequences and their features (train/feature_source.h;
// shared, so that the caller may keep using the source after the trainer is gone).

}  // namespace cg::train
