// Why this file exists: softmax and log_softmax along one dim, the normalisations
// attention and every loss are built on. Both are numerically stable (shifted by the
// row max: logits of 1e4 do not overflow) and both save only their output, from which
// the backward is exact:
//   softmax:     dx = y * (g - sum(g * y))        (saves y = softmax(x))
//   log_softmax: dx = g - exp(y) * sum(g)         (saves y = log_softmax(x))
// `dim` may be negative (-1 = the last dim). A row of all -inf gives NaN, as in PyTorch;
// mask with a large negative number instead when a row can be fully masked.
// Definitions in ops/softmax.cpp, kernels in each device's table (ops/kernels.h).
#pragma once

#include "core/tensor.h"

namespace cg {

Tensor softmax(const Tensor& a, int64_t dim = -1);
Tensor log_softmax(const Tensor& a, int64_t dim = -1);

}  // namespace cg
