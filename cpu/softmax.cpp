// Why this file exists: the CPU softmax / log_softmax and their backwards (CpuKernels,
// cpu/cpu_kernels.h, which gives the formulas). Stable: every exponent is x - max <= 0, so 1e4
// logits do not overflow. f32 and f64 rows write exp(x - max) and rescale in place;
// 16-bit rows recompute the exponential instead, so the output is rounded only once.
// f32/f64 rows take simple loops over the row that compile to vector code when the row is
// contiguous (cpu/row_math.h; a strided row runs the same arithmetic, so a transposed
// input gives the same bits); rows run in parallel.
#include "cpu/cpu_kernels.h"

#include <cmath>
#include <limits>
#include <type_traits>

#include "core/views.h"
#include "cpu/loops.h"
#include "cpu/parallel.h"
#include "cpu/row_math.h"

namespace cg::cpu {

Tensor CpuKernels::softmax(const Tensor& a, int64_t dim, bool log) {
  Tensor out = raw::empty(a.shape(), a.dtype(), a.device());
  const int64_t n = a.shape()[dim], sa = a.strides()[dim], so = out.strides()[dim];
  dispatch_floating(a.dtype(), log ? "log_softmax" : "softmax", [&]<typename T>() {
    using C = compute_t<T>;
    const T* pa = static_cast<const T*>(a.data_ptr());
    T* po = static_cast<T*>(out.data_ptr());
    for_each_row<2>(
        a.shape(), dim, {a.strides(), out.strides()}, [&](const std::array<int64_t, 2>& o) {
          const T* x = pa + o[0];
          T* y = po + o[1];
          if constexpr (std::is_same_v<T, C>) {
            const C m = sa == 1 ? row_max(x, n) : row_max_strided(x, n, sa);
            if (log) {
              const double s = block_sum<C>(n, [&](int64_t j) { return exp_fast(x[j * sa] - m); });
              const C log_s = static_cast<C>(std::log(s));
              for (int64_t j = 0; j < n; ++j) y[j * so] = (x[j * sa] - m) - log_s;
            } else {
              for (int64_t j = 0; j < n; ++j) y[j * so] = exp_fast(x[j * sa] - m);
              const C inv =
                  static_cast<C>(1.0 / block_sum<C>(n, [&](int64_t j) { return y[j * so]; }));
              for (int64_t j = 0; j < n; ++j) y[j * so] *= inv;
            }
            return;
          }
          C m = -std::numeric_limits<C>::infinity();
          for (int64_t j = 0; j < n; ++j) {
            const C v = load(x + j * sa);
            if (v > m) m = v;
          }
          double s = 0.0;
          if (log) {
            for (int64_t j = 0; j < n; ++j) {
              s += static_cast<double>(std::exp(load(x + j * sa) - m));
            }
            const C log_s = static_cast<C>(std::log(s));
            for (int64_t j = 0; j < n; ++j) store(y + j * so, (load(x + j * sa) - m) - log_s);
          } else if constexpr (std::is_same_v<T, C>) {
            for (int64_t j = 0; j < n; ++j) {
              const C e = std::exp(load(x + j * sa) - m);
              y[j * so] = e;
              s += static_cast<double>(e);
            }
            const C inv = static_cast<C>(1.0 / s);
            for (int64_t j = 0; j < n; ++j) y[j * so] *= inv;
          } else {
            for (int64_t j = 0; j < n; ++j) {
              s += static_cast<double>(std::exp(load(x + j * sa) - m));
            }
            const C inv = static_cast<C>(1.0 / s);
            for (int64_t j = 0; j < n; ++j) {
              store(y + j * so, std::exp(load(x + j * sa) - m) * inv);
            }
          }
        });
  });
  return out;
}

Tensor CpuKernels::softmax_backward(const Tensor& grad, const Tensor& y, int64_t dim, bool log) {
  Tensor out = raw::empty(y.shape(), y.dtype(), y.device());
  const int64_t n = y.shape()[dim], sg = grad.strides()[dim], sy = y.strides()[dim],
                so = out.strides()[dim];
  dispatch_floating(
      y.dtype(), log ? "log_softmax_backward" : "softmax_backward", [&]<typename T>() {
        using C = compute_t<T>;
        const T* pg = static_cast<const T*>(grad.data_ptr());
        const T* py = static_cast<const T*>(y.data_ptr());
        T* po = static_cast<T*>(out.data_ptr());
        for_each_row<3>(
            y.shape(), dim, {grad.strides(), y.strides(), out.strides()},
            [&](const std::array<int64_t, 3>& o) {
              const T* g = pg + o[0];
              const T* yr = py + o[1];
              T* gx = po + o[2];
              if constexpr (std::is_same_v<T, C>) {
                if (log) {
                  const C total =
                      static_cast<C>(block_sum<C>(n, [&](int64_t j) { return g[j * sg]; }));
                  for (int64_t j = 0; j < n; ++j)
                    gx[j * so] = g[j * sg] - exp_fast(yr[j * sy]) * total;
                } else {
                  const C dot = static_cast<C>(
                      block_sum<C>(n, [&](int64_t j) { return g[j * sg] * yr[j * sy]; }));
                  for (int64_t j = 0; j < n; ++j) gx[j * so] = yr[j * sy] * (g[j * sg] - dot);
                }
                return;
              }
              double s = 0.0;
              if (log) {
                for (int64_t j = 0; j < n; ++j) s += static_cast<double>(load(g + j * sg));
                const C total = static_cast<C>(s);
                for (int64_t j = 0; j < n; ++j) {
                  store(gx + j * so, load(g + j * sg) - std::exp(load(yr + j * sy)) * total);
                }
              } else {
                for (int64_t j = 0; j < n; ++j) {
                  s += static_cast<double>(load(g + j * sg)) *
                       static_cast<double>(load(yr + j * sy));
                }
                const C dot = static_cast<C>(s);
                for (int64_t j = 0; j < n; ++j) {
                  store(gx + j * so, load(yr + j * sy) * (load(g + j * sg) - dot));
                }
              }
            });
      });
  return out;
}

}  // namespace cg::cpu
