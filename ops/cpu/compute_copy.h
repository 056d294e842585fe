// Why this file exists: every CPU kernel that works on whole buffers (the loss rows, the
// fused head loop, attention, norms) needs the same two things: the dtype it computes in
// (Note [Compute types] in loops.h: f64 stays f64, the rest computes in f32) and a
// contiguous tensor of that dtype. One definition, so the rule cannot drift.
// Internal to ops/: not a public header.
#pragma once

#include "core/tensor.h"

namespace cg::cpu {

inline DType compute_dtype_of(DType storage) {
  return storage == DType::f64 ? DType::f64 : DType::f32;
}

// A contiguous tensor of `compute` holding t's values: t itself when it already is one
// and `fresh` is false (the caller only reads it); else a new allocator-accounted copy
// (the caller may write into it).
Tensor compute_copy(const Tensor& t, DType compute, bool fresh = false);

}  // namespace cg::cpu
