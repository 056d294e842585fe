// Why this file exists: `chunkgrad train` with `features.source` "synthetic" -- the
// full-scale drafter trained (and benchmarked) where there is no target model: no corpus,
// no target training, no drafter data generation. The drafter is built from the config's
// own sizes (drafter.hidden_size, vocab_size, num_target_layers, heads, layer types, ...)
// over the seeded frozen tables of train/synthetic_features.h, trained by the same
// DrafterTrainer (checkpoints, resume, the per-step log with ms, rates, MFU and peak), and
// evaluated by its held-out slot accuracy. Speculative decoding is skipped: it needs a
// target to verify the drafts, and the summary says so.
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

#include "core/device.h"
#include "train/pipeline.h"
#include "train/train_config.h"

namespace cg::train {

// The run of a synthetic config (config.features.source == "synthetic"); returns the
// summary, also written to <run_dir>/summary.json. run_pipeline calls it.
nlohmann::json run_synthetic_pipeline(const TrainConfig& config,
                                      const PipelineOptions& options = {});

// Bytes the run holds before its first activation: the frozen embedding and lm_head, the
// drafter's weights, their gradients, AdamW's fp32 masters (bf16 compute) and moments.
int64_t synthetic_static_bytes(const TrainConfig& config);
// Those bytes plus the head loss's temporaries for one micro-batch on `device` (a chunk's
// logits: at a large vocabulary they outgrow the weights; drafter_head_loss_bytes).
int64_t synthetic_memory_need(const TrainConfig& config, Device device);

// Throws, before anything is allocated or written, when `device` is the host and
// synthetic_memory_need exceeds the memory the host has available (`available` bytes; -1 =
// read it: MemAvailable) or the CPU allocator's limit (--memory-limit-mb) when that is
// lower; the refusal names which, in bytes, and what to change. The seed's run (a
// 1.73B-parameter drafter in bf16 over a 248320 x 5120 vocabulary) needs about 31 GiB
// before activations. A GPU's memory is left to its allocator, whose out-of-memory message
// names what held it.
void check_synthetic_memory(const TrainConfig& config, Device device, int64_t available = -1);

// The same for a run that trains its toy target first (features.source online): the target's
// fp32 weights, gradients and AdamW moments (16 bytes a parameter) must fit what the host
// has (`available`; -1: MemAvailable), or the CPU allocator's --memory-limit-mb when lower.
// A 64-layer target of hidden 8192 filled the host until the kernel would kill it.
void check_online_target_memory(const TrainConfig& config, Device device, int64_t available = -1);

}  // namespace cg::train
