// Why this file exists: the ops that read and write by integer index, with PyTorch's
// semantics -- index_select, gather, scatter_add. DFlash gathers per-block rows (anchor
// positions, labels of a + k) and scatters gradients back. Index tensors are i32 or i64,
// any strides; every index must lie in [0, size of the indexed dim) (no negative
// indices), checked with an error naming the bad value and where it is.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace cg {

// x with dim `dim` replaced by the entries idx (1-D, or 0-d for one entry) picks:
// out[.., j, ..] = x[.., idx[j], ..]. Any dtype. Saves idx; the gradient scatter-adds
// back into zeros of x's shape (repeated indices accumulate).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& idx);

// out[i][j][k] = x[i][idx[i][j][k]][k] (for dim = 1; likewise for any dim). idx has x's
// rank and idx.size(d) <= x.size(d) for d != dim; out has idx's shape. Any dtype.
// Saves idx; the gradient scatter-adds into zeros of x's shape.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& idx);

// Out of place: returns a copy of x with out[i][idx[i][j][k]][k] += src[i][j][k] (for
// dim = 1) for every index of idx. x, idx and src have one rank; idx.size(d) <=
// src.size(d) for all d and <= x.size(d) for d != dim; src has x's floating dtype.
// Repeated indices accumulate (in fp32 for bf16/f16). Saves idx, only when src needs a
// gradient: grad_x = grad, grad_src = gather(grad, dim, idx) (zeros where src is larger
// than idx).
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& idx, const Tensor& src);

}  // namespace cg
