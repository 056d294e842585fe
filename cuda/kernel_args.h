// Why this file exists: the by-value geometry every strided CUDA kernel of the kernel table
// takes (up to kMaxOperands operands of one shape, at most kMaxDims dims after Note [Loop
// nest] merging), and the host helper that builds it, shared by the launchers (cuda/*.cu)
// and the table entries (cuda/elementwise.cpp, reduce.cpp, ...) so both agree on one layout.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "core/error.h"
#include "core/loop_nest.h"
#include "cuda/copy_kernels.h"  // kMaxDims

namespace cg::cuda {

constexpr int kMaxOperands = 5;

// sizes (ndim,) outermost first; strides (operand, ndim) in elements; numel = prod(sizes).
struct Strided {
  int ndim = 1;
  int64_t numel = 1;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxOperands][kMaxDims] = {};
};

// The merged loop over `sizes` for N operands with the given strides (each sizes.size()
// long). Throws when more than kMaxDims dims remain.
template <size_t N>
Strided strided_of(const std::vector<int64_t>& sizes,
                   const std::array<const std::vector<int64_t>*, N>& strides, const char* what) {
  static_assert(N <= static_cast<size_t>(kMaxOperands));
  const LoopNest<N> loop = simplify_loops<N>(sizes, strides);
  CG_CHECK(loop.dims() <= static_cast<size_t>(kMaxDims), what, ": ", loop.dims(),
           " dims remain after merging contiguous ones, but CUDA kernels take at most ", kMaxDims,
           "; make the tensor contiguous or reshape it to fewer dims first");
  Strided g;
  g.ndim = static_cast<int>(loop.dims());
  g.numel = 1;
  for (size_t d = 0; d < loop.dims(); ++d) {
    g.sizes[d] = loop.sizes[d];
    g.numel *= loop.sizes[d];
    for (size_t k = 0; k < N; ++k) g.strides[k][d] = loop.strides[k][d];
  }
  for (int64_t s : sizes) {
    if (s == 0) g.numel = 0;
  }
  return g;
}

}  // namespace cg::cuda
