// Why this file exists: the CPU kernels of softmax and log_softmax along one dim and of
// their backwards (ops/softmax.cpp is the entry point). Same contract as
// cpu/kernels.h: inputs checked, `dim` already in [0, ndim), outputs contiguous.
// Each row is one pass for its max, one for its sum of exponentials (in double), one to
// write; rows run in parallel when large (cpu/parallel.h).
// Internal to ops/: not a public header.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace cg::cpu {

// softmax: exp(a - max) / sum(exp(a - max)); log_softmax (log = true):
// (a - max) - log(sum(exp(a - max))). Rows along `dim`.
Tensor softmax(const Tensor& a, int64_t dim, bool log);

// The gradient wrt the input from the gradient wrt the output and the output y:
//   softmax:     y * (g - sum(g * y))
//   log_softmax: g - exp(y) * sum(g)
// sums along `dim`, per row.
Tensor softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log);

}  // namespace cg::cpu
