// Why this file exists: the fused row kernels (rms_norm, rotary) treat a tensor as
// [rows, D] and work on rows in parallel, yet their inputs may be transposed or sliced.
// Rather than copying such inputs to contiguous memory, a kernel asks here for the
// storage offset of every row and then walks each row with its own stride.
// Internal to ops/: not a public header.
#pragma once

#include <cstdint>
#include <vector>

#include "cpu/loops.h"

namespace cg::cpu {

// The element offset of every index of `shape` (row-major order) under `strides`.
inline std::vector<int64_t> index_offsets(const Shape& shape, const Shape& strides) {
  std::vector<int64_t> offsets;
  offsets.reserve(static_cast<size_t>(shape_numel(shape)));
  strided_loop<1>(shape, {strides},
                  [&](const std::array<int64_t, 1>& o) { offsets.push_back(o[0]); });
  return offsets;
}

// The offset of the first element of each row of t seen as [rows, t.size(-1)].
inline std::vector<int64_t> row_offsets(const Tensor& t) {
  const Shape lead(t.shape().begin(), t.shape().end() - 1);
  const Shape lead_strides(t.strides().begin(), t.strides().end() - 1);
  return index_offsets(lead, lead_strides);
}

}  // namespace cg::cpu
