// Why this file exists: the KV-cache, generation and speculative-decoding tests share a
// tiny random-weight Qwen3 target (fast enough for ASan on two cores) and its Qwen3.5-style
// hybrid twin (Gated DeltaNet and gated attention layers), random token ids,
// and the reference they all trust: greedy decoding with no cache at all, which reruns
// the whole prefix through the uncached forward for every new token.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "autograd/grad_mode.h"
#include "core/factories.h"
#include "core/views.h"
#include "nn/qwen3.h"
#include "ops/elementwise.h"
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

// A Qwen3.5-style hybrid target of the same size (L F L F): DeltaNet layers with 4 value
// heads over 2 key heads, dk != dv, conv kernel 4; gated full attention with head_dim 8,
// half of it rotating; zero-centred norms.
inline nn::Qwen3Config tiny_hybrid_target_config(int64_t vocab = 40) {
  nn::Qwen3Config c = tiny_target_config(vocab);
  c.family = "qwen3_5";
  c.num_layers = 4;
  c.head_dim = 8;
  c.layer_types = {"linear_attention", "full_attention", "linear_attention", "full_attention"};
  c.attn_output_gate = true;
  c.zero_centred_norm = true;
  c.partial_rotary_factor = 0.5;
  c.linear_num_key_heads = 2;
  c.linear_num_value_heads = 4;
  c.linear_key_head_dim = 4;
  c.linear_value_head_dim = 6;
  c.linear_conv_kernel_dim = 4;
  return c;
}

// Random norm weights (zero-centred ones start at 0; the DeltaNet's gated norm, plain w,
// about 1, and its out_proj scaled up: tokens must depend on the DeltaNet states) and
// dt_bias, and a slow DeltaNet decay
// (A = exp(A_log) in [0.02, 0.2) instead of the init's [0.01, 16): a state that forgets
// within a token or two would let a test miss a wrong state), drawn from `seed` on the CPU
// (the same values whatever device the model is on), then frozen (a DeltaNet target
// records no graph).
inline void perturb_and_freeze(nn::Qwen3ForCausalLM& lm, uint64_t seed) {
  NoGradGuard no_grad;
  Generator gen(seed);
  for (const auto& [name, p] : lm.named_parameters()) {
    Tensor r;
    if (name.find("A_log") != std::string::npos) {
      r = log(rand(p.shape(), {.dtype = p.dtype()}, &gen, 0.02, 0.2));
    } else if (name.find("linear_attn.norm") != std::string::npos) {  // plain w, not 1 + w
      r = randn(p.shape(), {.dtype = p.dtype()}, &gen) * 0.3 + 1.0;
    } else if (name.find("linear_attn.out_proj") != std::string::npos) {
      r = to_device(p, kCPU) * 4.0;  // the DeltaNet layers' say in the residual stream
    } else if (name.find("norm") != std::string::npos ||
               name.find("dt_bias") != std::string::npos) {
      r = randn(p.shape(), {.dtype = p.dtype()}, &gen) * 0.3;
    } else {
      continue;
    }
    raw::copy_(p, to_device(r, p.device()));
  }
  lm.freeze();
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
