// Why this file exists: the CPU kernels of scaled_dot_product_attention, kept out of the
// shared cpu/kernels.h so the attention family stays in its own files. Plain
// functions on tensors: no autograd, inputs already checked by ops/attention.cpp.
// Internal to ops/: not a public header.
#pragma once

#include "core/tensor.h"
#include "ops/attention_mask.h"
#include "ops/kernels.h"

namespace cg::cpu {


// q [B, Hq, Sq, hd], k and v [B, Hkv, Sk, hd], any strides, one floating dtype.
AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const ResolvedAttentionMask& mask, double scale);


// Recomputes the probabilities row by row from `lse` (no [Sq, Sk] buffer).
AttentionGrads attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse,
                                  const ResolvedAttentionMask& mask, double scale, bool need_dq,
                                  bool need_dk, bool need_dv);

}  // namespace cg::cpu
