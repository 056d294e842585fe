// Why this file exists: the speculative-decoding measurement the summary reports -- tau,
// wall-clock speedup over target-only greedy decoding of the same prompts (both with a KV
// cache) and the token-for-token check -- on top of the decode branch's
// train/speculative_decoding.h.
#pragma once

#include <string>
#include <vector>

#include "nn/qwen3.h"
#include "train/block_drafter.h"

namespace cg::train {

struct SpecEvalResult {
  double tau = 0, speedup = 0;
  double target_tokens_per_s = 0, speculative_tokens_per_s = 0;
  bool lossless = false;
  int64_t prompts = 0, tokens = 0;
};

SpecEvalResult evaluate_speculative(const nn::Qwen3ForCausalLM& target, BlockDrafter& drafter,
                                    const std::vector<std::string>& prompts, int64_t max_new_tokens,
                                    int64_t block_size);

}  // namespace cg::train
