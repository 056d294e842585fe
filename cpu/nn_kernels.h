// Why this file exists: the CPU kernels of the fused transformer ops -- rms_norm,
// rotary embedding, swiglu -- as plain functions on tensors (no autograd, no dispatch).
// They are the CPU table's entries of the same names (ops/kernels.h, result structs
// there). Inputs have been checked by the ops (ops/norm.cpp, rotary.cpp, swiglu.cpp). Inputs may have any strides; outputs are contiguous.
// f64 computes in double; f32, bf16 and f16 in float (Note [Compute types], loops.h).
// Internal to ops/: not a public header.
#pragma once

#include "core/tensor.h"
#include "ops/kernels.h"

namespace cg::cpu {

// ---- rms_norm: y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps) per row ----
// x [..., D]; weight [D] or undefined (no scale).
RmsNormForward rms_norm_forward(const Tensor& x, const Tensor& weight, double eps);

// With gw = grad * w, per row:  dx = rstd * (gw - x * rstd^2 * mean(gw * x)),
// dweight = sum over rows of grad * x * rstd (accumulated in double). weight may be
// undefined when only dweight is asked for (it is not read then).
RmsNormGrads rms_norm_backward(const Tensor& grad, const Tensor& x, const Tensor& weight,
                               const Tensor& rstd, bool need_dx, bool need_dweight);

// ---- rotary embedding (rotate_half convention: pairs (i, i + hd/2)) ----
// x [..., S, H, hd]; positions: contiguous i64 broadcastable to x.shape[:-2]. Rotates each
// pair by angle pos * theta^(-2i/hd) (by minus that angle when inverse: the backward).
Tensor rotary(const Tensor& x, const Tensor& positions, double theta, bool inverse);

// ---- swiglu: out = silu(gate) * up ----
Tensor swiglu_forward(const Tensor& gate, const Tensor& up);
SwigluGrads swiglu_backward(const Tensor& grad, const Tensor& gate, const Tensor& up,
                            bool need_dgate, bool need_dup);

}  // namespace cg::cpu
