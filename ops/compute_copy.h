// Why this file exists: kernels and ops that work on whole buffers (the loss rows, the
// fused head loop, attention, norms) need the same two things: the dtype they compute in
// (compute_dtype_of, ops/kernels.h: f64 stays f64, the rest computes in f32) and a
// contiguous tensor of that dtype, on the tensor's own device. One definition, so the
// rule cannot drift.
// Internal to ops/ and its device folders: not a public header.
#pragma once

#include "core/tensor.h"
#include "ops/kernels.h"  // compute_dtype_of

namespace cg {

// A contiguous tensor of `compute` holding t's values: t itself when it already is one
// and `fresh` is false (the caller only reads it); else a new allocator-accounted copy
// (the caller may write into it).
Tensor compute_copy(const Tensor& t, DType compute, bool fresh = false);

}  // namespace cg
