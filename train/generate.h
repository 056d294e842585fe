// Why this file exists: target-only decoding with a KV cache -- the baseline that
// speculative decoding must equal token for token and beat on wall-clock time, and the
// generator of the drafter's training data (the public DFlash recipes train on the
// target's own responses, with the target's hidden states of the layers the drafter reads).
//
//   cg::train::GenerateOptions opt{.max_new_tokens = 128, .eos_ids = {tok.eos_id()}};
//   cg::train::Generation g = cg::train::generate(lm, prompt_ids, opt);
//   g.tokens;             // prompt + new tokens (EOS included when it stopped there)
//   g.new_tokens();       // the generated part (its loss mask is 1)
//
// Note [Greedy decoding]: the prompt runs as one cached forward; each later step feeds the
// last chosen token and picks the next from the logits of the last position. Stops after
// the EOS token (which is kept) or after max_new_tokens new tokens, whichever comes first.
// Greedy picks the first maximum on ties (greedy_tokens), and speculative decoding picks
// with the same function, so the two can only differ through the logits themselves.
// Prompts of a batch run one after another (batch 1) on the CPU: the toy target is small
// enough that per-op overhead, not arithmetic, is what a step costs there. On a GPU every
// token step also waits for the device (its logits are read on the host), so generate_all
// runs prompts of one length together (Note [Batched generation on a GPU], generate.cpp).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <vector>

#include "core/factories.h"
#include "core/tensor.h"
#include "nn/qwen3.h"

namespace cg::train {

// Options for token ids on `lm`'s device: every host-built id tensor goes where the model is.
inline TensorOptions ids_on(const nn::Qwen3ForCausalLM& lm) {
  return {.dtype = DType::i64, .device = lm.lm_head->weight.device()};
}

struct SamplingOptions {
  double temperature = 0.0;        // 0: greedy (argmax); > 0: sample softmax(logits / T)
  int64_t top_k = 0;               // > 0: sample among the k largest logits only
  Generator* generator = nullptr;  // the draws' source; nullptr: cg::default_generator()
};

// Whether `token` is one of the stop tokens `eos_ids` (a model may name several: Qwen3's
// generation_config.json ends a turn at <|im_end|> or <|endoftext|>).
inline bool is_eos(const std::vector<int64_t>& eos_ids, int64_t token) {
  return std::find(eos_ids.begin(), eos_ids.end(), token) != eos_ids.end();
}

struct GenerateOptions {
  int64_t max_new_tokens = 64;     // >= 0
  std::vector<int64_t> eos_ids{};  // stop after any of these (kept); empty: never early
  SamplingOptions sampling{};
  // Target layers (0-based) whose outputs to return for every position of the result
  // (Generation::features); empty: none. The last token is fed once more to get its.
  std::vector<int64_t> capture_layers{};
};

struct Generation {
  std::vector<int64_t> tokens;  // prompt + new tokens
  int64_t prompt_length = 0;
  bool stopped_at_eos = false;
  int64_t target_forwards = 0;  // cached forwards run (prompt included)
  // [tokens.size(), capture_layers.size() * hidden]: the captured layers' outputs
  // concatenated on the last dim (BlockDrafter's feature layout); undefined without
  // capture_layers.
  Tensor features;

  std::vector<int64_t> new_tokens() const { return {tokens.begin() + prompt_length, tokens.end()}; }
};

// One prompt (non-empty ids). The cache may be passed to reuse its buffers across prompts
// (it is cleared first; it must hold prompt + max_new_tokens positions); nullptr makes one.
Generation generate(const nn::Qwen3ForCausalLM& lm, const std::vector<int64_t>& prompt,
                    const GenerateOptions& options, nn::KVCache* cache = nullptr);

// Told as prompts finish, for a progress bar (train/progress.h): `done` of `total`
// prompts, and the new tokens of those just finished.
using GenerateProgress = std::function<void(int64_t done, int64_t total, int64_t new_tokens)>;

// Several prompts: one after another sharing one cache on the CPU; on a GPU, greedy
// generation without captured layers runs prompts of equal length as one batch.
// on_progress (when set) is called after each prompt, or after each batch on a GPU.
std::vector<Generation> generate_all(const nn::Qwen3ForCausalLM& lm,
                                     const std::vector<std::vector<int64_t>>& prompts,
                                     const GenerateOptions& options,
                                     const GenerateProgress& on_progress = {});

// The index of the largest logit of each row of logits [..., vocab] (first on ties), read
// on the host: [1, n, vocab] gives n tokens.
std::vector<int64_t> greedy_tokens(const Tensor& logits);

// One token from a logits row [vocab] (any leading dims of size 1) under `sampling`.
int64_t pick_token(const Tensor& logits, const SamplingOptions& sampling);

// The captured layers' outputs for every position of `tokens` from one uncached forward
// (no graph): [tokens.size(), layers.size() * hidden]. What Generation::features holds,
// for sequences that were not generated here.
Tensor target_features(const nn::Qwen3ForCausalLM& lm, const std::vector<int64_t>& tokens,
                       const std::vector<int64_t>& layers);

// The rows of captured layer outputs ([1, n, hidden] each) joined on the last dim:
// [n, layers * hidden]. Shared by generation and speculative decoding.
Tensor concat_features(const std::vector<Tensor>& layer_hidden);

}  // namespace cg::train
