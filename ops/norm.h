// Why this file exists: RMSNorm, the only normalisation a Qwen3-style drafter uses
// (pre-attention, post-attention, final, per-head q/k norm, and after the feature fusion).
// It is one fused op rather than pow/mean/rsqrt/mul so that the graph keeps x and one
// float per row, not four full-size intermediates.
#pragma once

#include "core/tensor.h"

namespace cg {

// y = x / sqrt(mean(x^2 over the last dim) + eps) * weight.
//   x       [..., D], any floating dtype, any strides
//   weight  [D] of x's dtype and device, or an undefined Tensor() for no scale
// Computes in fp32 for f32/bf16/f16 (one rounding of y; HF's Qwen3RMSNorm rounds the
// normalised x to bf16 before the weight multiply, a difference of at most 1 bf16 ulp)
// and in double for f64; sum(x^2) accumulates in double.
// Saves x and rstd = 1/sqrt(mean(x^2)+eps) per row ([rows], f32; f64 for f64 x), plus
// weight when x needs a gradient (a parameter: no new bytes). Never the normalised output.
// Gradients to x and weight; first order only (the backward records no graph).
Tensor rms_norm(const Tensor& x, const Tensor& weight, double eps = 1e-6);

}  // namespace cg
