// Why this file exists: every device primitive (fill, strided copy, accumulate, random
// fill; core/backend.h) walks one to two strided operands of one shape. Before any
// device runs such a loop, the loop is made as short as it can be (Note [Loop nest]);
// the host loops (core/host_backend.cpp) and the CUDA kernels (cuda/copy_kernels.cu)
// share this one simplification, so that they visit the same elements in the same
// logical order (the random fills number elements by that order).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"

namespace cg {

// Note [Loop nest]: size-1 dims are dropped and neighbouring dims that are contiguous
// with each other in EVERY operand are merged, so a contiguous tensor (or a copy of a
// broadcast row) becomes one flat loop. Dims are kept outermost first; merging two
// dims that are adjacent in row-major order keeps the row-major numbering of the
// elements, which is what the random fills count with. The result is never empty (a
// 0-d tensor is one loop of one element); strides are in elements.
template <size_t N>
struct LoopNest {
  std::vector<int64_t> sizes;
  std::array<std::vector<int64_t>, N> strides;  // one per operand, each sizes.size() long

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t s : sizes) n *= s;
    return n;
  }
  size_t dims() const { return sizes.size(); }
};

template <size_t N>
LoopNest<N> simplify_loops(const std::vector<int64_t>& sizes,
                           const std::array<const std::vector<int64_t>*, N>& strides) {
  for (size_t k = 0; k < N; ++k) {
    CG_CHECK(strides[k]->size() == sizes.size(), "simplify_loops: operand ", k, " has ",
             strides[k]->size(), " strides for ", sizes.size(), " sizes");
  }
  LoopNest<N> nest;
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] == 1) continue;
    // Stepping the outer dim once == stepping this dim sizes[i] times, in every operand.
    bool mergeable = !nest.sizes.empty();
    for (size_t k = 0; k < N && mergeable; ++k) {
      mergeable = nest.strides[k].back() == sizes[i] * (*strides[k])[i];
    }
    if (mergeable) {
      nest.sizes.back() *= sizes[i];
      for (size_t k = 0; k < N; ++k) nest.strides[k].back() = (*strides[k])[i];
      continue;
    }
    nest.sizes.push_back(sizes[i]);
    for (size_t k = 0; k < N; ++k) nest.strides[k].push_back((*strides[k])[i]);
  }
  if (nest.sizes.empty()) {
    nest.sizes = {1};
    for (size_t k = 0; k < N; ++k) nest.strides[k] = {1};
  }
  return nest;
}

}  // namespace cg
