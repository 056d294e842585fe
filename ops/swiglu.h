// Why this file exists: the gated MLP activation of Qwen3-style blocks,
// down_proj(silu(gate_proj(x)) * up_proj(x)). Fused so the graph keeps gate and up
// only -- not silu(gate), not sigmoid(gate) -- and runs one pass each way.
#pragma once

#include "core/tensor.h"

namespace cg {

// silu(gate) * up = gate * sigmoid(gate) * up, elementwise.
//   gate, up  the same shape, dtype and device (no broadcasting); any strides
// Computes in fp32 for f32/bf16/f16 (one rounding), double for f64.
// Saves gate and up (each only when a gradient needs it: dup reads gate; dgate reads
// gate and up). Gradients to both; first order only.
Tensor swiglu(const Tensor& gate, const Tensor& up);

}  // namespace cg
