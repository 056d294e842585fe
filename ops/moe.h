// Why this file exists: the two ops of a mixture-of-experts layer (Qwen3.5-MoE's sparse
// block) that are not plain GEMMs: the router's softmax top-k and the routed experts'
// SwiGLU MLPs summed per token. Like ops/gated_delta.h they run frozen targets (prefill for
// features, cached decoding): they record no autograd graph and refuse inputs that need a
// gradient. The math and where 16-bit values round: Note [MoE rounding] (ops/kernels.h).
//
//   MoeRouting r = cg::moe_route(linear(x, router_weight), 8);  // r.weights, r.indices [N, 8]
//   Tensor y = cg::moe_experts(x, gate_up, down, r);            // [N, H], x's dtype
#pragma once

#include <cstdint>

#include "core/tensor.h"
#include "ops/kernels.h"

namespace cg {

// router_logits [N, E] (any floating dtype): per row the top_k experts of softmax(logits),
// descending (ties to the lower index), their probabilities renormalised to sum 1.
// weights [N, top_k] f32 (f64 for f64 logits), indices [N, top_k] i32. 1 <= top_k <= E.
MoeRouting moe_route(const Tensor& router_logits, int64_t top_k);

// x [N, H]; gate_up [E, 2I, H] (the gate's I rows, then the up's I rows); down [E, H, I];
// one floating dtype, one device. routing: weights [N, k] (f32 or f64) and indices [N, k]
// (i32 or i64, each in [0, E)), as moe_route returns. out [N, H] in x's dtype:
//   out[n] = sum_s w[n, s] * down[e] @ (silu(gate_up[e][:I] @ x[n]) * (gate_up[e][I:] @ x[n]))
Tensor moe_experts(const Tensor& x, const Tensor& gate_up, const Tensor& down,
                   const MoeRouting& routing);

}  // namespace cg
