// Why this file exists: the CPU sum (and, with scale = 1/count, mean) over any set of
// dims, any strides; every output element accumulates its inputs in double. Two walks:
// per output element over its inputs when the last dim is reduced (rows are read
// contiguously), or the whole input in memory order into a double buffer otherwise.
#include "core/views.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/loops.h"

namespace cg::cpu {

Tensor sum(const Tensor& a, const std::vector<bool>& reduce, bool keepdim, double scale) {
  const int64_t nd = a.dim();
  Shape kept_shape, kept_strides, reduced_shape, reduced_strides, out_shape;
  for (int64_t d = 0; d < nd; ++d) {
    if (reduce[d]) {
      reduced_shape.push_back(a.shape()[d]);
      reduced_strides.push_back(a.strides()[d]);
      if (keepdim) out_shape.push_back(1);
    } else {
      kept_shape.push_back(a.shape()[d]);
      kept_strides.push_back(a.strides()[d]);
      out_shape.push_back(a.shape()[d]);
    }
  }
  Tensor out = raw::empty(out_shape, a.dtype(), a.device());
  // The output is contiguous and its kept dims are in the same order as the input's.
  const Shape out_kept_strides = contiguous_strides(kept_shape);
  dispatch_floating(a.dtype(), "sum", [&]<typename T>() {
    using C = compute_t<T>;
    const T* pa = static_cast<const T*>(a.data_ptr());
    T* po = static_cast<T*>(out.data_ptr());
    if (kept_shape.empty() && a.is_contiguous()) {
      double acc = 0.0;
      const int64_t n = a.numel();
      for (int64_t i = 0; i < n; ++i) acc += static_cast<double>(load(pa + i));
      store(po, static_cast<C>(acc * scale));
      return;
    }
    if (!reduced_shape.empty() && !reduce[nd - 1]) {
      // The last dim is kept (e.g. a bias gradient: [B*T, D] -> [D]): walk the input in
      // memory order and accumulate into a double buffer of the output's size, instead
      // of striding down columns once per output element.
      Tensor acc = raw::empty(kept_shape, DType::f64, a.device());
      raw::fill_(acc, 0.0);
      double* pacc = acc.data<double>();
      Shape acc_strides(nd, 0);
      for (int64_t d = nd - 1, k = static_cast<int64_t>(kept_shape.size()) - 1; d >= 0; --d) {
        if (!reduce[d]) acc_strides[d] = out_kept_strides[k--];
      }
      strided_loop<2>(a.shape(), {a.strides(), acc_strides},
                      [&](const std::array<int64_t, 2>& o) {
                        pacc[o[1]] += static_cast<double>(load(pa + o[0]));
                      });
      const int64_t n = acc.numel();
      for (int64_t i = 0; i < n; ++i) store(po + i, static_cast<C>(pacc[i] * scale));
      return;
    }
    strided_loop<2>(kept_shape, {kept_strides, out_kept_strides},
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
  return out;
}

}  // namespace cg::cpu
