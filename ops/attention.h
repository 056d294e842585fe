// Why this file exists: attention is the one op whose naive form (scores, mask, softmax,
// matmul as separate ops) saves a [B, H, Sq, Sk] probability matrix for backward -- the
// memory DFlash training cannot afford when Sk is thousands of context keys. Here it is
// one fused op with its own node, saving O(B * H * S * hd) bytes.
//
// Layout (heads before sequence, as in PyTorch's scaled_dot_product_attention):
//   q    [B, Hq,  Sq, hd]
//   k, v [B, Hkv, Sk, hd]      Hq % Hkv == 0 (grouped-query attention): query head h
//                              reads kv head h / (Hq / Hkv); k and v are never repeated.
//   out  [B, Hq,  Sq, hd]      out = softmax(scale * q k^T + mask) v, row by row.
// Any strides (cg::transpose(x, 1, 2) of a [B, S, H, hd] tensor is fine). One floating dtype for
// all three: f32 and f64 compute in their own precision; bf16 and f16 are stored 16-bit
// and computed in fp32, the output rounded once (cpu/attention.cpp).
//
//   cg::Tensor out = cg::scaled_dot_product_attention(q, k, v, cg::AttentionMask::causal());
//   cg::Tensor out2 = cg::scaled_dot_product_attention(q, k, v, allowed /* bool */);
//
// A query row that may see no key at all (a padded DFlash block, an all-false mask row)
// outputs 0 and passes no gradient; it never produces NaN.
//
// Saved for backward (node "ScaledDotProductAttentionBackward"): q, k, v, the output and
// the per-row logsumexp [B, Hq, Sq] (f32; f64 for f64 inputs) -- not the probabilities,
// which backward recomputes row by row -- plus a dense mask tensor when one was given
// (DFlash anchors are kept as N host integers). Costs: cpu/attention.cpp, Note [CPU
// attention costs].
#pragma once

#include <optional>

#include "core/tensor.h"
#include "ops/attention_mask.h"

namespace cg {

// scale defaults to 1 / sqrt(hd).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const AttentionMask& mask = AttentionMask::none(),
                                    std::optional<double> scale = std::nullopt);

// `allowed`: bool, broadcastable to [B, Hq, Sq, Sk], true = may attend
// (the same as passing AttentionMask::dense(allowed)).
Tensor scaled_dot_product_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                    const Tensor& allowed,
                                    std::optional<double> scale = std::nullopt);

}  // namespace cg
