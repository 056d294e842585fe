// Why this file exists: regenerating a data set's responses (`chunkgrad regenerate`,
// train/regenerate.h) decodes thousands of chat prompts of different lengths, and a GPU
// token step costs nearly the same for 1 row as for 64 (Note [Batched generation on a GPU],
// generate.cpp). generate_all batches only prompts of equal length and keeps finished rows
// in the batch; this decoder runs prompts of any lengths together, drops rows that finished
// and refills the batch from the prompts still waiting (Note [Ragged batch]).
//
//   std::vector<cg::train::DecodePrompt> prompts = ...;   // ids + the sample's seed
//   cg::train::decode_batched(lm, prompts, {.max_new_tokens = 512, .eos_ids = {151645},
//                                           .batch_size = 64},
//                             [&](cg::train::DecodedSample&& s) { ... });  // as each ends
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "nn/qwen3.h"
#include "train/generate.h"

namespace cg::train {

struct DecodePrompt {
  std::vector<int64_t> ids;  // non-empty
  uint64_t seed = 0;         // the sample's own draws (sampling only): Note [Sample seeds]
};

struct BatchedDecodeOptions {
  int64_t max_new_tokens = 64;   // >= 1
  std::vector<int64_t> eos_ids;  // stop after any of these (kept); empty: never early
  int64_t batch_size = 64;       // rows decoded together, >= 1
  SamplingOptions sampling{};    // its generator is ignored: each prompt has its own
  double top_p = 1.0;            // < 1 (with temperature > 0): pick_nucleus_token
};

struct DecodedSample {
  int64_t index = 0;                // into the prompts given
  std::vector<int64_t> new_tokens;  // the response (EOS included when it stopped there)
  bool stopped_at_eos = false;
};

struct DecodeStats {
  int64_t steps = 0;     // batched token steps
  int64_t prefills = 0;  // prompts run alone through the cache
  int64_t rebuilds = 0;  // times the batch was compacted / refilled
  int64_t new_tokens = 0;
  int64_t row_steps = 0;  // rows fed over all steps (finished rows still in the batch too)
};

// pick_token (generate.h) among the most likely tokens that hold top_p of the probability
// (after temperature and top_k; ties at the edge: the lower id first); top_p = 1 is
// pick_token itself. top_p in (0, 1].
int64_t pick_nucleus_token(const Tensor& logits, const SamplingOptions& sampling, double top_p);

// Decodes every prompt; on_done is called once per prompt as it finishes (in finishing
// order, not input order). Each prompt's tokens are those of decoding it alone with
// generate() (greedy) up to floating-point summation order (Note [Ragged batch]).
DecodeStats decode_batched(const nn::Qwen3ForCausalLM& lm, const std::vector<DecodePrompt>& prompts,
                           const BatchedDecodeOptions& options,
                           const std::function<void(DecodedSample&&)>& on_done);

}  // namespace cg::train
