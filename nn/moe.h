// Why this file exists: the mixture-of-experts MLP of a Qwen3.5-MoE target (model_type
// "qwen3_5_moe"; every decoder layer has one, nn/qwen3.h), built as transformers'
// Qwen3_5MoeSparseMoeBlock so that a checkpoint loads by name:
//   mlp.gate.weight                       [E, H]       the router (no bias)
//   mlp.experts.gate_up_proj              [E, 2I, H]   each expert's gate rows, then its up rows
//   mlp.experts.down_proj                 [E, H, I]
//   mlp.shared_expert.{gate,up,down}_proj.weight       a Qwen3MLP of inner size I_s
//   mlp.shared_expert_gate.weight         [1, H]
// out = experts(x) + sigmoid(shared_expert_gate(x)) * shared_expert(x), all in the model
// dtype; experts(x) is the router's top-k experts' SwiGLU MLPs weighted by the renormalised
// softmax (ops/moe.h; where 16-bit values round: Note [MoE rounding], ops/kernels.h).
// Checkpoints that store the experts one by one (experts.{e}.{gate,up,down}_proj.weight) are
// stacked into this layout on load (nn/checkpoint.cpp, Note [Per-expert checkpoints]).
//
// Like the Gated DeltaNet, the block runs frozen targets only: its routing and experts
// record no gradient (freeze() the model or run under cg::NoGradGuard).
#pragma once

#include <cstdint>

#include "nn/config.h"
#include "nn/linear.h"
#include "nn/module.h"
#include "ops/moe.h"

namespace cg::nn {

class Qwen3MLP;  // nn/qwen3.h

// The routed experts' weights as two stacked parameters (transformers' Qwen3_5MoeExperts).
class MoeExperts : public Module {
 public:
  // Init as transformers' _init_weights: both normal(0, 0.02).
  MoeExperts(int64_t num_experts, int64_t hidden_size, int64_t intermediate_size,
             InitOptions init = {});
  // x [N, H] -> [N, H]: sum over each token's routed experts (ops/moe.h moe_experts).
  Tensor forward(const Tensor& x, const MoeRouting& routing) const;
  int64_t num_experts() const { return gate_up_proj.size(0); }
  int64_t intermediate_size() const { return down_proj.size(2); }

  Tensor gate_up_proj;  // [E, 2I, H]
  Tensor down_proj;     // [E, H, I]
};

class SparseMoeBlock : public Module {
 public:
  // Sizes from config.num_experts, num_experts_per_tok, moe_intermediate_size,
  // shared_expert_intermediate_size and hidden_size. The router is normal(0, 0.02) as
  // transformers inits it; the shared expert and its gate are Linears.
  SparseMoeBlock(const Qwen3Config& config, InitOptions init = {});
  // x [..., H] -> [..., H]. Throws while grad mode is on and x or a parameter requires grad.
  Tensor forward(const Tensor& x) const;
  // The router's choice for x [N, H] (weights f32, indices i32, [N, top_k]).
  MoeRouting route(const Tensor& x) const;
  int64_t top_k() const { return top_k_; }

  Linear* gate;  // the router, [E, H]
  MoeExperts* experts;
  Qwen3MLP* shared_expert;
  Linear* shared_expert_gate;  // [1, H]

 private:
  int64_t top_k_ = 1;
  int64_t hidden_ = 0;
};

}  // namespace cg::nn
