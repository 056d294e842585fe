// Why this file exists: the CUDA rms_norm and rotary kernels (see norm_kernels.h). rms_norm
// takes one block per row (sums of squares in double, as the CPU); its dweight is a column
// sum over rows: each thread sums a column over one slice of the rows in fp32 (f64 for
// f64) into a [splits, D] double scratch, and a second kernel adds the slices in order in double, so the
// result is the same on every run. rotary takes a thread per (row, pair) and computes its
// angle in double, as the CPU's table does, then its sine and cosine in float from the
// angle reduced to [-pi, pi] (in double for f64 tensors).
#include "cuda/norm_kernels.h"

#include <algorithm>
#include <type_traits>

#include "cuda/cuda_check.h"
#include "cuda/device_math.cuh"

namespace cg::cuda {

namespace {

int norm_threads(int64_t D) { return D >= 1024 ? 256 : (D >= 256 ? 128 : 32); }
unsigned grid_rows(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(rows, 1), 1 << 20));
}

template <typename T>
__global__ void rms_forward_kernel(const T* x, const T* w, T* out, compute_t<T>* rstd, Strided rows,
                                   int64_t D, int64_t sx, int64_t sw, double eps) {
  using C = compute_t<T>;
  __shared__ double scratch[32];
  for (int64_t r = blockIdx.x; r < rows.numel; r += gridDim.x) {
    int64_t o[2];
    offsets_of<2>(rows, r, o);
    const T* xr = x + o[0];
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const double v = static_cast<double>(ld(xr + j * sx));
      s += v * v;
    }
    s = block_sum(s, scratch);
    const C rs = static_cast<C>(1.0 / sqrt(s / static_cast<double>(D) + eps));
    if (threadIdx.x == 0) rstd[r] = rs;
    T* yr = out + r * D;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const C wj = w ? ld(w + j * sw) : C(1);
      st(yr + j, ld(xr + j * sx) * rs * wj);
    }
  }
}

template <typename T>
__global__ void rms_dx_kernel(const T* grad, const T* x, const T* w, const compute_t<T>* rstd,
                              T* dx, Strided rows, int64_t D, int64_t sx, int64_t sg, int64_t sw) {
  using C = compute_t<T>;
  __shared__ double scratch[32];
  for (int64_t r = blockIdx.x; r < rows.numel; r += gridDim.x) {
    int64_t o[2];
    offsets_of<2>(rows, r, o);
    const T* xr = x + o[0];
    const T* gr = grad + o[1];
    double dot = 0.0;  // sum_j g_j w_j x_j
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const double wj = w ? static_cast<double>(ld(w + j * sw)) : 1.0;
      dot += static_cast<double>(ld(gr + j * sg)) * wj * static_cast<double>(ld(xr + j * sx));
    }
    dot = block_sum(dot, scratch);
    const double rs = static_cast<double>(rstd[r]);
    const C k = static_cast<C>(rs * rs * dot / static_cast<double>(D));
    const C rsc = static_cast<C>(rs);
    T* dxr = dx + r * D;
    for (int64_t j = threadIdx.x; j < D; j += blockDim.x) {
      const C wj = w ? ld(w + j * sw) : C(1);
      st(dxr + j, rsc * (ld(gr + j * sg) * wj - ld(xr + j * sx) * k));
    }
  }
}

// Grid (column blocks, splits): partial[s, j] = sum over rows of slice s of g x rstd, in the
// compute type (fp32; f64 for f64).
template <typename T>
__global__ void rms_dw_partial_kernel(const T* grad, const T* x, const compute_t<T>* rstd,
                                      double* partial, Strided rows, int64_t D, int64_t sx,
                                      int64_t sg, int splits) {
  using A = compute_t<T>;
  const int64_t j = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int s = blockIdx.y;
  if (j >= D) return;
  const int64_t per = (rows.numel + splits - 1) / splits;
  const int64_t begin = s * per, end = min(rows.numel, begin + per);
  A acc = 0;
  for (int64_t r = begin; r < end; ++r) {
    int64_t o[2];
    offsets_of<2>(rows, r, o);
    acc += ld(grad + o[1] + j * sg) * ld(x + o[0] + j * sx) * rstd[r];
  }
  partial[static_cast<int64_t>(s) * D + j] = static_cast<double>(acc);
}

template <typename T>
__global__ void rms_dw_finish_kernel(const double* partial, T* dweight, int64_t D, int splits) {
  for (int64_t j = first_index(); j < D; j += grid_stride()) {
    double acc = 0.0;
    for (int s = 0; s < splits; ++s) acc += partial[static_cast<int64_t>(s) * D + j];
    st(dweight + j, static_cast<compute_t<T>>(acc));
  }
}

// The angle pos * theta^(-2i/hd) is formed in double and reduced to [-pi, pi] there;
// sine and cosine of the reduced angle are then taken in float (about 1e-7 absolute:
// double sincos per element made this kernel compute-bound). The frequencies of the
// first kRotaryTable pairs are computed once per block.
constexpr int kRotaryTable = 256;

template <typename T>
__global__ void rotary_kernel(const T* x, T* out, const int64_t* positions, Strided rows,
                              int64_t hd, int64_t sx, double theta, double sign) {
  using C = compute_t<T>;
  constexpr double kTwoPi = 6.283185307179586476925286766559;
  const int64_t half = hd / 2;
  __shared__ double inv_table[kRotaryTable];
  for (int64_t i = threadIdx.x; i < half && i < kRotaryTable; i += blockDim.x) {
    inv_table[i] = pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
  }
  __syncthreads();
  const int64_t n = rows.numel * half;
  for (int64_t e = first_index(); e < n; e += grid_stride()) {
    const int64_t r = e / half, i = e % half;
    int64_t o[3];
    offsets_of<3>(rows, r, o);
    const double inv_freq =
        i < kRotaryTable ? inv_table[i]
                         : pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
    const double angle = static_cast<double>(positions[o[2]]) * inv_freq;
    const float reduced = static_cast<float>(angle - kTwoPi * rint(angle / kTwoPi));
    float sf, cf;
    sincosf(reduced, &sf, &cf);
    C c, s;
    if constexpr (std::is_same_v<C, double>) {  // f64 tensors keep double throughout
      double sd, cd;
      sincos(angle, &sd, &cd);
      c = static_cast<C>(cd);
      s = static_cast<C>(sign * sd);
    } else {
      c = static_cast<C>(cf);
      s = static_cast<C>(sign * sf);
    }
    const T* xr = x + o[0];
    T* yr = out + r * hd;
    const C x1 = ld(xr + i * sx), x2 = ld(xr + (i + half) * sx);
    st(yr + i, x1 * c - x2 * s);
    st(yr + i + half, x2 * c + x1 * s);
  }
}

}  // namespace

int rms_norm_dweight_splits(int64_t rows, int64_t D) {
  // Enough pieces for about 4096 blocks (a narrow D -- qk-norm's head_dim 128 over
  // 786432 rows -- would otherwise leave each thread thousands of rows in a row), and at
  // least 64 rows a piece.
  const int64_t column_blocks = std::max<int64_t>(1, (D + kThreads - 1) / kThreads);
  const int64_t most = std::max<int64_t>(256, 4096 / column_blocks);
  return static_cast<int>(std::clamp<int64_t>(rows / 64, 1, most));
}

void launch_rms_norm_forward(DType dtype, const void* x, const void* weight, void* out, void* rstd,
                             const Strided& rows, int64_t D, int64_t sx, int64_t sw, double eps,
                             cudaStream_t stream) {
  if (rows.numel == 0) return;
  visit_floating(dtype, "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rms_forward_kernel<T><<<grid_rows(rows.numel), norm_threads(D), 0, stream>>>(
        static_cast<const T*>(x), static_cast<const T*>(weight), static_cast<T*>(out),
        static_cast<compute_t<T>*>(rstd), rows, D, sx, sw, eps);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_rms_norm_backward(DType dtype, const void* grad, const void* x, const void* weight,
                              const void* rstd, void* dx, void* dweight, double* dw_partial,
                              int splits, const Strided& rows, int64_t D, int64_t sx, int64_t sg,
                              int64_t sw, cudaStream_t stream) {
  visit_floating(dtype, "rms_norm backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const auto* pr = static_cast<const compute_t<T>*>(rstd);
    if (dx != nullptr && rows.numel > 0) {
      rms_dx_kernel<T><<<grid_rows(rows.numel), norm_threads(D), 0, stream>>>(
          static_cast<const T*>(grad), static_cast<const T*>(x), static_cast<const T*>(weight), pr,
          static_cast<T*>(dx), rows, D, sx, sg, sw);
      CG_CUDA_CHECK(cudaGetLastError());
    }
    if (dweight != nullptr && D > 0) {
      const dim3 grid(static_cast<unsigned>((D + kThreads - 1) / kThreads),
                      static_cast<unsigned>(splits));
      rms_dw_partial_kernel<T><<<grid, kThreads, 0, stream>>>(static_cast<const T*>(grad),
                                                              static_cast<const T*>(x), pr,
                                                              dw_partial, rows, D, sx, sg, splits);
      CG_CUDA_CHECK(cudaGetLastError());
      rms_dw_finish_kernel<T>
          <<<blocks_for(D), kThreads, 0, stream>>>(dw_partial, static_cast<T*>(dweight), D, splits);
      CG_CUDA_CHECK(cudaGetLastError());
    }
  });
}

void launch_rotary(DType dtype, const void* x, void* out, const int64_t* positions,
                   const Strided& rows, int64_t hd, int64_t sx, double theta, bool inverse,
                   cudaStream_t stream) {
  const int64_t n = rows.numel * (hd / 2);
  if (n == 0) return;
  visit_floating(dtype, "apply_rotary", [&](auto tag) {
    using T = typename decltype(tag)::type;
    rotary_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(x),
                                                             static_cast<T*>(out), positions, rows,
                                                             hd, sx, theta, inverse ? -1.0 : 1.0);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cg::cuda
