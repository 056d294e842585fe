// Why this file exists: the KV-cache, generation and speculative-decoding tests share a
// tiny random-weight Qwen3 target (fast enough for ASan on two cores), random token ids,
// and the reference they all trust: greedy decoding with no cache at all, which reruns
// the whole prefix through the uncached forward for every new token.
#pragma once

#include <cstdint>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "nn/qwen3.h"
#include "ops/reduce.h"
#include "ops/shape_ops.h"

namespace cg::testing_decode {

// 3 layers, grouped-query heads, head_dim != hidden / heads (as Qwen3).
inline nn::Qwen3Config tiny_target_config(int64_t vocab = 40) {
  nn::Qwen3Config c;
  c.vocab_size = vocab;
  c.hidden_size = 16;
  c.num_layers = 3;
  c.num_heads = 4;
  c.num_kv_heads = 2;
  c.head_dim = 6;
  c.intermediate_size = 24;
  c.rope_theta = 1e4;
  return c;
}

inline std::vector<int64_t> random_ids(int64_t n, int64_t vocab, Generator& gen) {
  std::vector<int64_t> ids(static_cast<size_t>(n));
  for (auto& id : ids) id = static_cast<int64_t>(gen.next_u64() % static_cast<uint64_t>(vocab));
  return ids;
}

// Greedy decoding without a cache: prompt + up to max_new tokens, stopping after eos_id.
inline std::vector<int64_t> greedy_without_cache(const nn::Qwen3ForCausalLM& lm,
                                                 std::vector<int64_t> tokens, int64_t max_new,
                                                 int64_t eos_id = -1) {
  NoGradGuard no_grad;
  for (int64_t i = 0; i < max_new; ++i) {
    const int64_t S = static_cast<int64_t>(tokens.size());
    const auto out = lm.forward(from_ints(tokens, {1, S}));
    const int64_t next = static_cast<int64_t>(argmax(narrow(out.logits, 1, S - 1, 1)).item());
    tokens.push_back(next);
    if (next == eos_id) break;
  }
  return tokens;
}

}  // namespace cg::testing_decode
