// Why this file exists: the CPU table's reductions (CpuKernels, cpu/cpu_kernels.h): sum
// (and, with scale = 1/count, mean) over any set of dims and any strides, plus the per-row
// entries (max, argmax, logsumexp, max's backward). Every sum accumulates in double.
//
// sum has three walks: (1) everything -> one number: fixed blocks of
// kSumBlock elements summed in parallel, then the block sums added in order, so the
// result is the same for any thread count (Note [Deterministic threads] in
// cpu/parallel.h); (2) the last dim is kept (a bias gradient, [B*T, D] -> [D]): the
// input in memory order into a double buffer, split between threads by columns;
// (3) otherwise per output element over its inputs, output elements split between threads.
// sum_of_squares takes walk (1) over a^2.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/views.h"
#include "cpu/cpu_kernels.h"
#include "cpu/loops.h"
#include "cpu/parallel.h"
#include "ops/kernel_shapes.h"

namespace cg::cpu {

namespace {

constexpr int64_t kSumBlock = 32768;

}  // namespace

Tensor CpuKernels::sum(const Tensor& a, const std::vector<bool>& reduce, bool keepdim,
                       double scale) {
  const int64_t nd = a.dim();
  const ReductionSplit split = split_reduction(a, reduce, keepdim);
  const Shape& kept_shape = split.kept_shape;
  const Shape& reduced_shape = split.reduced_shape;
  Tensor out = raw::empty(split.out_shape, a.dtype(), a.device());
  const Shape& kept_strides = split.kept_strides;
  const Shape& reduced_strides = split.reduced_strides;
  const Shape& out_kept_strides = split.out_kept_strides;
  const int64_t numel = a.numel();
  dispatch_floating(a.dtype(), "sum", [&]<typename T>() {
    using C = compute_t<T>;
    const T* pa = static_cast<const T*>(a.data_ptr());
    T* po = static_cast<T*>(out.data_ptr());
    if (kept_shape.empty()) {
      // (1) Everything: block sums in parallel, added in block order.
      const bool flat = a.is_contiguous();
      auto block_sum = [&](int64_t b) {
        const int64_t begin = b * kSumBlock, end = std::min(numel, begin + kSumBlock);
        double acc = 0.0;
        if (flat) {
          for (int64_t i = begin; i < end; ++i) acc += static_cast<double>(load(pa + i));
        } else {
          strided_loop_range<1>(reduced_shape, {reduced_strides}, begin, end,
                                [&](const std::array<int64_t, 1>& o) {
                                  acc += static_cast<double>(load(pa + o[0]));
                                });
        }
        return acc;
      };
      const int64_t blocks = (numel + kSumBlock - 1) / kSumBlock;
      double total = 0.0;
      if (blocks == 1) {
        total = block_sum(0);
      } else if (blocks > 1) {
        Tensor partial = raw::empty({blocks}, DType::f64, a.device());
        double* pp = partial.data<double>();
        parallel_range(blocks, numel, [&](int64_t b0, int64_t b1) {
          for (int64_t b = b0; b < b1; ++b) pp[b] = block_sum(b);
        });
        for (int64_t b = 0; b < blocks; ++b) total += pp[b];
      }
      store(po, static_cast<C>(total * scale));
      return;
    }
    if (!reduced_shape.empty() && !reduce[nd - 1]) {
      // (2) The last dim is kept: walk the input in memory order and accumulate into a
      // double buffer of the output's size, instead of striding down columns once per
      // output element. Threads take disjoint column ranges of the last dim.
      Tensor acc = raw::empty(kept_shape, DType::f64, a.device());
      raw::fill_(acc, 0.0);
      double* pacc = acc.data<double>();
      Shape acc_strides(nd, 0);
      for (int64_t d = nd - 1, k = static_cast<int64_t>(kept_shape.size()) - 1; d >= 0; --d) {
        if (!reduce[d]) acc_strides[d] = out_kept_strides[k--];
      }
      const int64_t columns = a.shape()[nd - 1];
      parallel_range(columns, numel, [&](int64_t c0, int64_t c1) {
        Shape piece = a.shape();
        piece[nd - 1] = c1 - c0;
        const T* base = pa + c0 * a.strides()[nd - 1];
        double* acc_base = pacc + c0 * acc_strides[nd - 1];
        strided_loop<2>(piece, {a.strides(), acc_strides}, [&](const std::array<int64_t, 2>& o) {
          acc_base[o[1]] += static_cast<double>(load(base + o[0]));
        });
      });
      const int64_t n = acc.numel();
      for (int64_t i = 0; i < n; ++i) store(po + i, static_cast<C>(pacc[i] * scale));
      return;
    }
    // (3) Per output element, over its inputs.
    parallel_range(shape_numel(kept_shape), numel, [&](int64_t begin, int64_t end) {
      strided_loop_range<2>(kept_shape, {kept_strides, out_kept_strides}, begin, end,
                            [&](const std::array<int64_t, 2>& outer) {
                              double acc = 0.0;
                              const T* base = pa + outer[0];
                              strided_loop<1>(reduced_shape, {reduced_strides},
                                              [&](const std::array<int64_t, 1>& inner) {
                                                acc += static_cast<double>(load(base + inner[0]));
                                              });
                              store(po + outer[1], static_cast<C>(acc * scale));
                            });
    });
  });
  return out;
}

Tensor CpuKernels::sum_of_squares(const Tensor& a) {
  const int64_t numel = a.numel();
  Tensor out = raw::empty({}, compute_dtype_of(a.dtype()), a.device());
  dispatch_floating(a.dtype(), "sum_of_squares", [&]<typename T>() {
    using C = compute_t<T>;
    const T* pa = static_cast<const T*>(a.data_ptr());
    const int64_t blocks = (numel + kSumBlock - 1) / kSumBlock;
    std::vector<double> partial(static_cast<size_t>(blocks), 0.0);
    parallel_range(blocks, numel, [&](int64_t b0, int64_t b1) {
      for (int64_t b = b0; b < b1; ++b) {
        const int64_t begin = b * kSumBlock, end = std::min(numel, begin + kSumBlock);
        double acc = 0.0;
        for (int64_t i = begin; i < end; ++i) {
          const double x = static_cast<double>(load(pa + i));
          acc += x * x;
        }
        partial[static_cast<size_t>(b)] = acc;
      }
    });
    double total = 0.0;
    for (const double p : partial) total += p;
    store(static_cast<C*>(out.data_ptr()), static_cast<C>(total));
  });
  return out;
}

Tensor CpuKernels::max_along_dim(const Tensor& a, int64_t dim, Tensor* values) {
  Shape kept = a.shape();
  kept[dim] = 1;
  Tensor indices = raw::empty(kept, DType::i64, a.device());
  if (values) *values = raw::empty(kept, a.dtype(), a.device());
  const int64_t n = a.shape()[dim], stride = a.strides()[dim];
  dispatch_floating(a.dtype(), "max", [&]<typename T>() {
    using C = compute_t<T>;
    const T* pa = static_cast<const T*>(a.data_ptr());
    int64_t* pi = indices.data<int64_t>();
    T* pv = values ? static_cast<T*>(values->data_ptr()) : nullptr;
    // indices and values are contiguous with the same shape: one offset serves both.
    for_each_row<2>(a.shape(), dim, {a.strides(), indices.strides()},
                    [&](const std::array<int64_t, 2>& o) {
                      const T* row = pa + o[0];
                      C best = load(row);
                      int64_t arg = 0;
                      for (int64_t j = 1; j < n && !std::isnan(best); ++j) {
                        const C v = load(row + j * stride);
                        if (v > best || std::isnan(v)) {
                          best = v;
                          arg = j;
                        }
                      }
                      pi[o[1]] = arg;
                      if (pv) pv[o[1]] = row[arg * stride];
                    });
  });
  return indices;
}

Tensor CpuKernels::logsumexp_along_dim(const Tensor& a, int64_t dim) {
  Shape kept = a.shape();
  kept[dim] = 1;
  Tensor out = raw::empty(kept, a.dtype(), a.device());
  const int64_t n = a.shape()[dim], stride = a.strides()[dim];
  dispatch_floating(a.dtype(), "logsumexp", [&]<typename T>() {
    using C = compute_t<T>;
    const T* pa = static_cast<const T*>(a.data_ptr());
    T* po = static_cast<T*>(out.data_ptr());
    for_each_row<2>(a.shape(), dim, {a.strides(), out.strides()},
                    [&](const std::array<int64_t, 2>& o) {
                      const T* row = pa + o[0];
                      C m = -std::numeric_limits<C>::infinity();
                      for (int64_t j = 0; j < n; ++j) {
                        const C v = load(row + j * stride);
                        if (v > m) m = v;
                      }
                      // An infinite max (all -inf, or a +inf) is not subtracted: inf - inf
                      // would be NaN, and the sum below gives the right infinity anyway.
                      const C shift = std::isinf(m) ? C(0) : m;
                      double s = 0.0;
                      for (int64_t j = 0; j < n; ++j) {
                        s += static_cast<double>(std::exp(load(row + j * stride) - shift));
                      }
                      store(po + o[1], static_cast<C>(std::log(s) + static_cast<double>(shift)));
                    });
  });
  return out;
}

Tensor CpuKernels::scatter_along_dim(const Tensor& src, const Tensor& index, int64_t dim,
                                     const Shape& shape) {
  Tensor out = raw::empty(shape, src.dtype(), src.device());
  const int64_t n = shape[dim], stride = out.strides()[dim];
  dispatch_floating(src.dtype(), "scatter_along_dim", [&]<typename T>() {
    const T* ps = static_cast<const T*>(src.data_ptr());
    const int64_t* pi = index.data<int64_t>();
    T* po = static_cast<T*>(out.data_ptr());
    const T zero{};  // +0 in every floating type (bf16/f16: all bits clear)
    for_each_row<3>(shape, dim, {out.strides(), src.strides(), index.strides()},
                    [&](const std::array<int64_t, 3>& o) {
                      T* row = po + o[0];
                      for (int64_t j = 0; j < n; ++j) row[j * stride] = zero;
                      row[pi[o[2]] * stride] = ps[o[1]];
                    });
  });
  return out;
}

}  // namespace cg::cpu
