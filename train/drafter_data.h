// Why this file exists: what the drafter learns from. The public recipes regenerate the
// responses with the target itself, so the drafter learns to predict what the target
// will actually say: each prompt is continued by the target (greedy), and the loss mask
// covers the generated tokens only. The target's features for those sequences (its
// layer outputs, and its final hidden states for distillation) are computed once here,
// with no graph, so a drafter step costs only the drafter.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "nn/qwen3.h"
#include "train/dflash_batch.h"
#include "train/generate.h"

namespace cg::train {

// [BOS] + prompt + the target's greedy continuation (train/generate.h, with the KV cache);
// loss mask 1 on the continuation.
// on_progress: generate_all's, as the prompts are continued.
std::vector<DrafterSequence> make_drafter_sequences(const nn::Qwen3ForCausalLM& lm,
                                                    const std::vector<std::string>& prompts,
                                                    int64_t max_new_tokens,
                                                    const GenerateProgress& on_progress = {});

// The target's view of the sequences, padded to the longest (pad id, loss mask 0).
struct TargetFeatures {
  Tensor features;      // [N, S, n*H]: outputs of `layers`, concatenated
  Tensor final_hidden;  // [N, S, H]: after the final norm (teacher for KL); undefined unless asked
  int64_t seq_len = 0;
};
TargetFeatures compute_target_features(const nn::Qwen3ForCausalLM& lm,
                                       const std::vector<DrafterSequence>& sequences,
                                       const std::vector<int64_t>& layers, bool final_hidden,
                                       int64_t pad_id);

}  // namespace cg::train
