// Why this file exists: the CPU rms_norm, forward and backward fused per row (CpuKernels,
// cpu/cpu_kernels.h, which gives the formulas). One pass computes sum(x^2) in double, a
// second writes y; the backward needs only x and the saved per-row rstd -- never the
// normalised output -- and builds dweight in double buffers, one per chunk of rows, added
// in a fixed order (the same bits on every run). Rows run in parallel; the sums over a contiguous
// f32/f64 row use row_math.h's vectorised block sums.
#include <algorithm>
#include <cmath>
#include <vector>

#include "core/views.h"
#include "cpu/cpu_kernels.h"
#include "cpu/loops.h"
#include "cpu/parallel.h"
#include "cpu/row_math.h"
#include "cpu/row_offsets.h"
#include "ops/compute_copy.h"

namespace cg::cpu {

RmsNormForward CpuKernels::rms_norm_forward(const Tensor& x, const Tensor& weight, double eps) {
  const int64_t D = x.shape().back();
  const std::vector<int64_t> rows = row_offsets(x);
  const int64_t R = static_cast<int64_t>(rows.size());
  RmsNormForward result{raw::empty(x.shape(), x.dtype(), x.device()),
                        raw::empty({R}, compute_dtype_of(x.dtype()), x.device())};
  const bool has_w = weight.defined();
  dispatch_floating(x.dtype(), "rms_norm", [&]<typename T>() {
    using C = compute_t<T>;
    const T* px = static_cast<const T*>(x.data_ptr());
    const T* pw = has_w ? static_cast<const T*>(weight.data_ptr()) : nullptr;
    const int64_t sx = x.strides().back(), sw = has_w ? weight.strides()[0] : 0;
    T* po = static_cast<T*>(result.out.data_ptr());
    C* pr = static_cast<C*>(result.rstd.data_ptr());
    parallel_range(R, R * D, [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) {
        const T* xr = px + rows[r];
        double sumsq = 0.0;
        bool summed = false;
        if constexpr (std::is_same_v<T, C>) {
          if (sx == 1) {
            // Squares in double, as the header promises: an f32 square overflows from
            // |x| > 1.8e19 and the row's rstd became 0 (issue 18 item 27).
            sumsq = block_sum<double>(D, [&](int64_t j) {
              const double v = xr[j];
              return v * v;
            });
            summed = true;
          }
        }
        if (!summed) {
          for (int64_t j = 0; j < D; ++j) {
            const double v = load(xr + j * sx);
            sumsq += v * v;
          }
        }
        const C rstd = static_cast<C>(1.0 / std::sqrt(sumsq / static_cast<double>(D) + eps));
        pr[r] = rstd;
        T* yr = po + r * D;
        for (int64_t j = 0; j < D; ++j) {
          const C w = has_w ? load(pw + j * sw) : C(1);
          store(yr + j, load(xr + j * sx) * rstd * w);
        }
      }
    });
  });
  return result;
}

RmsNormGrads CpuKernels::rms_norm_backward(const Tensor& grad, const Tensor& x,
                                           const Tensor& weight, const Tensor& rstd, bool need_dx,
                                           bool need_dweight) {
  const int64_t D = x.shape().back();
  const std::vector<int64_t> x_rows = row_offsets(x), g_rows = row_offsets(grad);
  const int64_t R = static_cast<int64_t>(x_rows.size());
  const bool has_w = weight.defined();
  RmsNormGrads grads;
  if (need_dx) grads.dx = raw::empty(x.shape(), x.dtype(), x.device());
  // Rows are cut into a fixed number of chunks (independent of the thread count), each
  // with its own [D] double buffer for dweight; the buffers are added in order, so the
  // result is the same on every run and machine.
  const int64_t chunks = R * D >= kParallelMinElements ? std::min<int64_t>(R, 32) : 1;
  std::vector<std::vector<double>> dw_parts(chunks);
  dispatch_floating(x.dtype(), "rms_norm backward", [&]<typename T>() {
    using C = compute_t<T>;
    const T* px = static_cast<const T*>(x.data_ptr());
    const T* pg = static_cast<const T*>(grad.data_ptr());
    const T* pw = has_w ? static_cast<const T*>(weight.data_ptr()) : nullptr;
    const C* pr = static_cast<const C*>(rstd.data_ptr());
    const int64_t sx = x.strides().back(), sg = grad.strides().back();
    const int64_t sw = has_w ? weight.strides()[0] : 0;
    T* pdx = need_dx ? static_cast<T*>(grads.dx.data_ptr()) : nullptr;
    parallel_for(chunks, [&](int64_t chunk_begin, int64_t chunk_end) {
      for (int64_t c = chunk_begin; c < chunk_end; ++c) {
        std::vector<double>& dw_local = dw_parts[c];
        dw_local.assign(need_dweight ? D : 0, 0.0);
        for (int64_t r = c * R / chunks; r < (c + 1) * R / chunks; ++r) {
          const T* xr = px + x_rows[r];
          const T* gr = pg + g_rows[r];
          const double rs = pr[r];
          if (need_dweight) {
            for (int64_t j = 0; j < D; ++j) {
              dw_local[j] += static_cast<double>(load(gr + j * sg)) * load(xr + j * sx) * rs;
            }
          }
          if (need_dx) {
            double dot = 0.0;  // sum_j g_j w_j x_j
            bool summed = false;
            if constexpr (std::is_same_v<T, C>) {
              if (sx == 1 && sg == 1 && (!has_w || sw == 1)) {
                dot = has_w ? block_sum<C>(D, [&](int64_t j) { return gr[j] * pw[j] * xr[j]; })
                            : block_sum<C>(D, [&](int64_t j) { return gr[j] * xr[j]; });
                summed = true;
              }
            }
            if (!summed) {
              for (int64_t j = 0; j < D; ++j) {
                const double w = has_w ? static_cast<double>(load(pw + j * sw)) : 1.0;
                dot += static_cast<double>(load(gr + j * sg)) * w * load(xr + j * sx);
              }
            }
            const C k = static_cast<C>(rs * rs * dot / static_cast<double>(D));
            const C rsc = static_cast<C>(rs);
            T* dxr = pdx + r * D;
            for (int64_t j = 0; j < D; ++j) {
              const C w = has_w ? load(pw + j * sw) : C(1);
              store(dxr + j, rsc * (load(gr + j * sg) * w - load(xr + j * sx) * k));
            }
          }
        }
      }
    });
  });
  if (need_dweight) {
    Tensor dw = raw::empty({D}, DType::f64, x.device());
    double* pdw = dw.data<double>();
    for (int64_t j = 0; j < D; ++j) pdw[j] = 0.0;
    for (const auto& part : dw_parts) {
      for (int64_t j = 0; j < D; ++j) pdw[j] += part[j];
    }
    grads.dweight = raw::to_dtype(dw, x.dtype());  // weight shares x's dtype
  }
  return grads;
}

}  // namespace cg::cpu
