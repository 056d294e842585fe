// Why this file exists: the matrix product, the op most of a model's FLOPs and most of
// its saved activations go through.
#pragma once

#include "core/tensor.h"

namespace cg {

// numpy/PyTorch matmul semantics:
//   [n, k] @ [k, m] -> [n, m]; [..., n, k] @ [..., k, m] -> [batch..., n, m] with the
//   batch dims broadcast; a 1-D left operand is a row [1, k] (the 1 is dropped from the
//   result), a 1-D right operand a column [k, 1] (likewise); 1-D @ 1-D is a dot product.
// Saves b when a needs a gradient and a when b does (only what backward needs).
Tensor matmul(const Tensor& a, const Tensor& b);

// PyTorch's F.linear: x [..., in] @ weight[out, in]^T (+ bias [out]) -> [..., out], as one
// 2-D GEMM over all leading dims (the transposed weight is read in place, not copied).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

}  // namespace cg
