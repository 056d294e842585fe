// Why this file exists: the model the drafter serves. `chunkgrad train` either loads a
// target from a safetensors checkpoint or trains a small Qwen3-style LM on the corpus,
// and caches it in the run directory (target/model.safetensors, its config and a
// fingerprint of what produced it in the metadata: the target settings and the corpus's
// content, train/fingerprint.h), so the next run with the same target settings and corpus
// bytes starts from it instead of training again. A target training stopped by a signal
// (train/stop_signal.h) leaves target/interrupted.safetensors (weights, optimiser state,
// step) and the next run with the same fingerprint goes on from that step.
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
// The target's architecture for this run: target.hf_config's when given (checked to read
// byte tokens), else target_model_config's. Reads only that file: callable before any stage.
nn::Qwen3Config target_architecture(const TargetConfig& t);

// Throws, saying what to change, when a corpus of `tokens` byte tokens cannot train a
// target on windows of seq_len + 1 (checked before the run directory is written too).
void check_corpus_trains_target(int64_t tokens, int64_t seq_len);

// Called after each step: step (1-based), total, loss, tokens this step.
using StepCallback = std::function<void(int64_t step, int64_t total, double loss, int64_t tokens)>;

// How a target training reports and where it keeps an interrupted state.
struct TargetTrainingHooks {
  StepCallback on_step;                   // after each step
  std::function<void(int64_t)> on_start;  // once, with the step it goes on after (0: the first)
  std::string resume_file;                // an interrupted training's state ("": not kept)
  std::string fingerprint;                // what resume_file must have been trained on
};

// Trains `lm` on random windows of seq_len + 1 tokens of `tokens` (next-token CE), going on
// from hooks.resume_file when it holds this fingerprint's state. Returns the last step's
// loss. On a stop signal: saves its state to hooks.resume_file and throws Interrupted.
double train_target(nn::Qwen3ForCausalLM& lm, const std::vector<int64_t>& tokens,
                    const TargetConfig& config, uint64_t seed, const TargetTrainingHooks& hooks);

struct TargetResult {
  std::unique_ptr<nn::Qwen3ForCausalLM> lm;
  std::string source;  // "trained", "cache", "checkpoint"
  double final_loss = 0;
  double seconds = 0;
};

// The target for this run: from config.target.checkpoint, else from the run directory's
// cache when its fingerprint matches, else trained (and cached).
TargetResult obtain_target(const TrainConfig& config, const std::vector<int64_t>& corpus_tokens,
                           const std::string& fingerprint, const StepCallback& on_step,
                           const std::function<void(int64_t)>& on_start = {});

}  // namespace cg::train
