// Why this file exists: the CPU kernels that move data by integer indices -- the
// forward and backward of index_select, gather, scatter_add and embedding. Gathers are
// pure data movement (any dtype, copied as raw bits); scatter-adds accumulate in the
// compute type, and into an fp32 buffer for bf16/f16 so repeated indices round once.
// Index tensors are i32 or i64 with any strides. Entry points check shapes; the index
// values are checked here, on the host, by check_indices (a CUDA path would check on
// the device).
// Internal to ops/: not a public header.
#pragma once

#include <string>

#include "core/tensor.h"

namespace cg::cpu {

// Throws unless every value of idx is in [0, bound). The message names the op, the bad
// value, its position in idx and `what` the bound is ("the weight's 10 rows").
// `noun` names an index in the message ("id", "index").
void check_indices(const char* op, const char* noun, const Tensor& idx, int64_t bound,
                   const std::string& what);

// out = x with dim `dim` replaced by idx (1-D or 0-d): out[.., j, ..] = x[.., idx[j], ..].
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& idx);
// dst[.., idx[j], ..] += src[.., j, ..], skipping j where idx[j] == skip (-1: none).
// dst floating (it is updated in place), src of dst's dtype.
void index_add_(const Tensor& dst, int64_t dim, const Tensor& idx, const Tensor& src,
                int64_t skip = -1);

// out[i][j][k] = x[i][idx[i][j][k]][k] for dim = 1 (PyTorch gather); out has idx's shape.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& idx);
// dst[i][idx[i][j][k]][k] += src[i][j][k] for every index of idx (PyTorch scatter_add_).
void scatter_add_(const Tensor& dst, int64_t dim, const Tensor& idx, const Tensor& src);

}  // namespace cg::cpu
