// Why this file exists: the model the drafter serves. `chunkgrad train` either loads a
// target from a safetensors checkpoint or trains a small Qwen3-style LM on the corpus,
// and caches it in the run directory (target/model.safetensors, its config and a
// fingerprint of what produced it in the metadata), so the next run with the same target
// settings and corpus starts from it instead of training again.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/qwen3.h"
#include "train/train_config.h"

namespace cg::train {

// The architecture the config asks for (vocabulary: the byte tokenizer's).
nn::Qwen3Config target_model_config(const TargetConfig& t, int64_t vocab_size);

// Called after each step: step (1-based), total, loss, tokens this step.
using StepCallback = std::function<void(int64_t step, int64_t total, double loss, int64_t tokens)>;

// Trains `lm` on random windows of seq_len + 1 tokens of `tokens` (next-token CE).
// Returns the last step's loss.
double train_target(nn::Qwen3ForCausalLM& lm, const std::vector<int64_t>& tokens,
                    const TargetConfig& config, uint64_t seed, const StepCallback& on_step);

struct TargetResult {
  std::unique_ptr<nn::Qwen3ForCausalLM> lm;
  std::string source;  // "trained", "cache", "checkpoint"
  double final_loss = 0;
  double seconds = 0;
};

// The target for this run: from config.target.checkpoint, else from the run directory's
// cache when its fingerprint matches, else trained (and cached).
TargetResult obtain_target(const TrainConfig& config, const std::vector<int64_t>& corpus_tokens,
                           const std::string& fingerprint, const StepCallback& on_step);

}  // namespace cg::train
