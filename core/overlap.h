// Why this file exists: an in-place write whose source shares memory with its
// destination gives silently wrong values (add_(x, x.transpose(0, 1)) reads elements it
// has already overwritten, in whatever order the parallel loop runs), and a write into a
// tensor whose elements share memory (an expanded view) writes one location many times.
// This is the one place that decides, from storage and geometry alone, how two tensors'
// memory relates, so that every in-place entry point asks the same question the same way.
//
// Note [Memory overlap]: after PyTorch's MemOverlap (ATen/MemoryOverlap.h), with a
// precise answer where PyTorch says "too hard":
//   - different storages, or byte ranges that do not intersect: none;
//   - every element of dst sits exactly where the same-index element of src (broadcast to
//     dst's shape) sits, with the same dtype: full. An elementwise op reads src[i] and
//     writes dst[i] in one step, so exact aliasing (add_(x, x)) is correct;
//   - otherwise, when any byte is shared: partial. Whether it is shared is decided
//     precisely (by listing every element's bytes) up to kOverlapExactLimit elements and
//     conservatively (partial) above, where that list would cost more than the op.
#pragma once

#include <cstdint>

#include "core/tensor.h"

namespace cg {

enum class MemOverlap { none, full, partial };

// Above this many elements (either tensor) intersecting ranges are not inspected element
// by element and count as overlapping (Note [Memory overlap]).
inline constexpr int64_t kOverlapExactLimit = int64_t{1} << 20;

// How the memory dst writes relates to the memory src reads; src is taken as broadcast to
// dst's shape when the shapes differ (the caller checked that it broadcasts).
MemOverlap memory_overlap(const Tensor& dst, const Tensor& src);

// True when two or more of t's elements share memory (an expanded view, or an
// as_strided view whose strides fold onto themselves).
bool has_internal_overlap(const Tensor& t);

// The checks every in-place entry point runs, throwing errors that say what to change.
// `op` names the operation, `arg` the source argument ("src", "the first operand").
void check_no_internal_overlap(const char* op, const Tensor& dst);
void check_no_partial_overlap(const char* op, const Tensor& dst, const Tensor& src,
                              const char* arg);

}  // namespace cg
