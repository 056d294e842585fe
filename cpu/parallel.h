// Why this file exists: the one place CPU kernels decide whether to use threads. A
// parallel region costs microseconds to start (more when other processes hold the cores),
// which a small add never earns back: below kParallelMinElements of work everything runs
// on the calling thread, above it the range is cut into one contiguous piece per thread.
// Also the strided walk over a sub-range of a shape, so a non-contiguous (transposed,
// sliced, broadcast) operand can be split between threads like a contiguous one.
//
// Note [Deterministic threads]: every split here is of independent outputs; nothing is
// accumulated across pieces, so a result does not depend on the number of threads.
// Kernels that reduce across a split (CpuKernels::sum over everything) use fixed-size blocks
// summed in order instead (see cpu/reduce.cpp).
//
// Note [Threads under load]: the threshold keeps small ops off threads, but above it a
// parallel region still waits for every piece. The threads are the library's own
// (cpu/thread_pool.h), not OpenMP's: libgomp's workers spin between regions, and on
// a machine whose cores are busy with other processes that spinning takes the time slices
// the serial parts need. Measured on a 2-core machine already running other builds
// (load average 8-11), 300 steps of examples/mlp_demo, wall time:
//                                   as is     + two `yes >/dev/null` busy loops
//     OpenMP (before)               5.3 s     56-69 s
//     OpenMP, OMP_NUM_THREADS=1     1.0 s     3.6 s
//     OpenMP, OMP_WAIT_POLICY=passive         6.3 s
//     this pool                     1.2 s     2.2-3.1 s
//     this pool, 1 thread           1.1 s     3.2 s
// A later run (load average 6, row kernels vectorised): OpenMP 24.9 s against the pool's
// 0.44-0.60 s with the two busy loops (1 thread: 1.36 s).
// The pool's workers spin for at most 50 us, then sleep on a condition variable, and the
// calling thread takes the pieces no worker has started yet, so a worker the scheduler
// has not run holds nothing up. CHUNKGRAD_NUM_THREADS (or OMP_NUM_THREADS) sets the
// count; cg::set_num_threads changes it at run time.
// Internal to ops/: not a public header.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "core/tensor.h"
#include "cpu/thread_pool.h"

namespace cg::cpu {

// Work (elements touched) below which a kernel stays on one thread.
inline constexpr int64_t kParallelMinElements = 32768;

// Calls body(begin, end) on disjoint pieces covering [0, n): once on this thread when
// `work` < kParallelMinElements (or there is one thread, or we are already inside a
// parallel region), else one contiguous piece per thread (parallel_for). `work` is the
// cost estimate in elements (n itself for elementwise loops; all elements of the rows for
// row loops).
template <typename F>
void parallel_range(int64_t n, int64_t work, F&& body) {
  if (n <= 0) return;
  if (work >= kParallelMinElements && n > 1) {
    parallel_for(n, [&](int64_t begin, int64_t end) { body(begin, end); });
    return;
  }
  body(int64_t{0}, n);
}

// Calls f(offsets) for the elements [begin, end) of `shape` in row-major order, where
// offsets[k] is the element offset of operand k (sum of index * strides[k]). The same
// walk as strided_loop (cpu/loops.h), started part-way through.
template <size_t N, typename F>
void strided_loop_range(const Shape& shape, const std::array<Shape, N>& strides, int64_t begin,
                        int64_t end, F&& f) {
  if (begin >= end) return;
  const int64_t nd = static_cast<int64_t>(shape.size());
  std::array<int64_t, N> offsets{};
  if (nd == 0) {
    f(offsets);
    return;
  }
  // Unravel `begin` into an index and the operands' offsets.
  Shape index(nd, 0);
  int64_t rest = begin;
  for (int64_t d = nd - 1; d >= 0; --d) {
    index[d] = rest % shape[d];
    rest /= shape[d];
    for (size_t k = 0; k < N; ++k) offsets[k] += index[d] * strides[k][d];
  }
  const int64_t inner = shape[nd - 1];
  std::array<int64_t, N> inner_stride;
  for (size_t k = 0; k < N; ++k) inner_stride[k] = strides[k][nd - 1];
  int64_t remaining = end - begin;
  while (true) {
    const int64_t count = std::min(inner - index[nd - 1], remaining);
    std::array<int64_t, N> o = offsets;
    for (int64_t i = 0; i < count; ++i) {
      f(o);
      for (size_t k = 0; k < N; ++k) o[k] += inner_stride[k];
    }
    remaining -= count;
    if (remaining == 0) return;
    // Back to the start of the row, then the odometer over the outer dims.
    for (size_t k = 0; k < N; ++k) offsets[k] -= index[nd - 1] * inner_stride[k];
    index[nd - 1] = 0;
    for (int64_t d = nd - 2; d >= 0; --d) {
      index[d] += 1;
      for (size_t k = 0; k < N; ++k) offsets[k] += strides[k][d];
      if (index[d] < shape[d]) break;
      for (size_t k = 0; k < N; ++k) offsets[k] -= strides[k][d] * shape[d];
      index[d] = 0;
    }
  }
}

// strided_loop over all of `shape`, split between threads when it is large.
template <size_t N, typename F>
void parallel_strided_loop(const Shape& shape, const std::array<Shape, N>& strides, F&& f) {
  const int64_t n = shape_numel(shape);
  parallel_range(n, n, [&](int64_t begin, int64_t end) {
    strided_loop_range<N>(shape, strides, begin, end, f);
  });
}

// The rows of `shape` along `dim`: calls row(offsets) once per index of the other dims,
// with offsets[k] the element offset of operand k at position 0 of the row (the row's
// elements are then strides[k][dim] apart). Rows run in parallel when the whole shape
// is large; each row runs on one thread.
template <size_t N, typename F>
void for_each_row(const Shape& shape, int64_t dim, const std::array<Shape, N>& strides, F&& row) {
  Shape rows_shape = shape;
  rows_shape[dim] = 1;
  const int64_t rows = shape_numel(rows_shape);
  if (rows == 0) return;
  parallel_range(rows, shape_numel(shape), [&](int64_t begin, int64_t end) {
    strided_loop_range<N>(rows_shape, strides, begin, end, row);
  });
}

}  // namespace cg::cpu
