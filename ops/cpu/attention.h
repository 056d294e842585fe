// Why this file exists: the CPU kernels of scaled_dot_product_attention, kept out of the
// shared ops/cpu/kernels.h so the attention family stays in its own files. Plain
// functions on tensors: no autograd, inputs already checked by ops/attention.cpp.
// Internal to ops/: not a public header.
#pragma once

#include "core/tensor.h"
#include "ops/attention_mask.h"

namespace cg::cpu {

struct AttentionForward {
  Tensor out;  // [B, Hq, Sq, hd], q's dtype
  Tensor lse;  // [B, Hq, Sq], f32 (f64 for f64 inputs); -inf on a row that sees no key
};

// q [B, Hq, Sq, hd], k and v [B, Hkv, Sk, hd], any strides, one floating dtype.
AttentionForward attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const ResolvedAttentionMask& mask, double scale);

struct AttentionGrads {
  Tensor dq, dk, dv;  // contiguous, the inputs' shapes and dtype; undefined when not asked
};

// Recomputes the probabilities row by row from `lse` (no [Sq, Sk] buffer).
AttentionGrads attention_backward(const Tensor& grad_out, const Tensor& q, const Tensor& k,
                                  const Tensor& v, const Tensor& out, const Tensor& lse,
                                  const ResolvedAttentionMask& mask, double scale, bool need_dq,
                                  bool need_dk, bool need_dv);

}  // namespace cg::cpu
