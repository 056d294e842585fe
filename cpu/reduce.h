// Why this file exists: the CPU kernels of the reductions along one dim (max, argmax,
// logsumexp) and of max's backward, declared apart from cpu/kernels.h (where the
// older cpu::sum lives) so each op family owns its header. Same contract as kernels.h:
// plain functions on tensors, inputs checked by the entry point (ops/reduce.cpp), `dim`
// already in [0, ndim). Outputs keep the reduced dim as size 1 (callers squeeze it).
// Rows run in parallel when large (cpu/parallel.h); sums accumulate in double.
// Internal to ops/: not a public header.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace cg::cpu {

// Indices (i64) of the maximum of each row along `dim`: the first one on ties; a NaN
// counts as the maximum (the first NaN). When `values` is given it receives the maxima
// (a's dtype). a.shape()[dim] must be > 0.
Tensor max_along_dim(const Tensor& a, int64_t dim, Tensor* values);

// log(sum(exp(a))) along `dim`, shifted by the row max so 1e4 does not overflow; an
// all -inf (or empty) row gives -inf.
Tensor logsumexp_along_dim(const Tensor& a, int64_t dim);

// A tensor of `shape`: zeros, except src[r] at position index[r] along `dim` of each
// row r. src and index have `shape` with dim as 1 (max's backward).
Tensor scatter_along_dim(const Tensor& src, const Tensor& index, int64_t dim, const Shape& shape);

}  // namespace cg::cpu
