// Why this file exists: the CUDA rms_norm kernels, forward and backward (see
// norm_kernels.h; rotary is cuda/rotary_kernels.cu). They move little data per flop, so
// they are written to run at memory bandwidth: a row goes to a group of lanes -- a few
// lanes of a warp for short rows (qk-norm's 128), a block for long ones (the hidden
// 5120) -- which reads it once in 16-byte packs where the layout allows, keeps it in
// registers for the write, and walks the rows grid-stride (Note [Row groups],
// cuda/row_groups.cuh). Any stride still works, one element at a time.
//
// Numerics, as the CPU (cpu/norm.cpp): a row's sum of squares (and the backward's dot
// g.w.x) in double, y = x * rstd * w and dx = rstd (g w - x k) in the compute type (fp32;
// f64 for f64), one rounding on store. dweight is a column sum over rows in double, the
// same bits on every run (Note [Deterministic dweight]).
#include "cuda/norm_kernels.h"

#include <algorithm>
#include <type_traits>
#include <utility>

#include "cuda/cuda_check.h"
#include "cuda/device_math.cuh"
#include "cuda/row_groups.cuh"

namespace cg::cuda {

namespace {

// ---- kernels ------------------------------------------------------------------------------

// Pack p of the weight, or ones where there is none (rms_norm without a weight).
template <typename T, int P>
__device__ __forceinline__ void load_weight_pack(const T* w, int64_t p, compute_t<T> (&wv)[P]) {
  if (w) {
    load_pack<T, P>(w + p * P, wv);
  } else {
#pragma unroll
    for (int e = 0; e < P; ++e) wv[e] = compute_t<T>(1);
  }
}

// x rows from `rows` operand 0, element stride sx; out [rows, D] contiguous; rstd [rows].
// kLanes lanes per row (0: the block); kPacks 16-byte packs per lane held in registers
// (0: the general path, elements through the strides).
template <typename T, int kLanes, int kPacks>
__global__ void __launch_bounds__(512)
    rms_forward_kernel(const T* x, const T* w, T* out, compute_t<T>* rstd, Strided rows, int64_t D,
                       int64_t sx, int64_t sw, double eps) {
  using C = compute_t<T>;
  constexpr int P = kPack<T>;
  __shared__ double scratch[32];
  for_each_row<kLanes>(rows.numel, [&](int64_t r, bool live, int lane, int lanes) {
    int64_t o[1] = {0};
    if (live) offsets_of<1>(rows, r, o);
    const T* xr = x + o[0];
    T* yr = out + (live ? r : 0) * D;
    double s = 0.0;
    if constexpr (kPacks > 0) {
      const int64_t packs = D / P;
      uint4 v[kPacks];  // the row's packs of this lane, raw
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        const int64_t p = lane + static_cast<int64_t>(k) * lanes;
        v[k] = live && p < packs ? load_raw(xr + p * P) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
#pragma unroll
        for (int e = 0; e < P; ++e) {
          const double xe = static_cast<double>(raw_at<T>(v[k], e));
          s += xe * xe;
        }
      }
      s = group_sum<kLanes>(s, scratch);
      const C rs = static_cast<C>(1.0 / sqrt(s / static_cast<double>(D) + eps));
      if (live && lane == 0) rstd[r] = rs;
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        const int64_t p = lane + static_cast<int64_t>(k) * lanes;
        if (!live || p >= packs) continue;
        C wv[P], y[P];
        load_weight_pack<T, P>(w, p, wv);
#pragma unroll
        for (int e = 0; e < P; ++e) y[e] = raw_at<T>(v[k], e) * rs * wv[e];
        store_pack<T, P>(yr + p * P, y);
      }
    } else {
      if (live) {
        for (int64_t j = lane; j < D; j += lanes) {
          const double v = static_cast<double>(ld(xr + j * sx));
          s += v * v;
        }
      }
      s = group_sum<kLanes>(s, scratch);
      const C rs = static_cast<C>(1.0 / sqrt(s / static_cast<double>(D) + eps));
      if (!live) return;
      if (lane == 0) rstd[r] = rs;
      for (int64_t j = lane; j < D; j += lanes) {
        const C wj = w ? ld(w + j * sw) : C(1);
        st(yr + j, ld(xr + j * sx) * rs * wj);
      }
    }
  });
}

// x, grad rows from `rows` operands 0, 1 (element strides sx, sg); dx [rows, D]
// contiguous. Lanes and packs as rms_forward_kernel; g and x stay in registers.
template <typename T, int kLanes, int kPacks>
__global__ void __launch_bounds__(512)
    rms_dx_kernel(const T* grad, const T* x, const T* w, const compute_t<T>* rstd, T* dx,
                  Strided rows, int64_t D, int64_t sx, int64_t sg, int64_t sw) {
  using C = compute_t<T>;
  constexpr int P = kPack<T>;
  __shared__ double scratch[32];
  for_each_row<kLanes>(rows.numel, [&](int64_t r, bool live, int lane, int lanes) {
    int64_t o[2] = {0, 0};
    if (live) offsets_of<2>(rows, r, o);
    const T* xr = x + o[0];
    const T* gr = grad + o[1];
    T* dxr = dx + (live ? r : 0) * D;
    double dot = 0.0;  // sum_j g_j w_j x_j
    if constexpr (kPacks > 0) {
      const int64_t packs = D / P;
      uint4 gv[kPacks], xv[kPacks];  // the row's packs of this lane, raw
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        const int64_t p = lane + static_cast<int64_t>(k) * lanes;
        const bool in = live && p < packs;
        gv[k] = in ? load_raw(gr + p * P) : make_uint4(0, 0, 0, 0);
        xv[k] = in ? load_raw(xr + p * P) : make_uint4(0, 0, 0, 0);
      }
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        const int64_t p = lane + static_cast<int64_t>(k) * lanes;
        C wv[P];
        if (w && live && p < packs) {
          load_pack<T, P>(w + p * P, wv);
        } else {
#pragma unroll
          for (int e = 0; e < P; ++e) wv[e] = C(1);
        }
#pragma unroll
        for (int e = 0; e < P; ++e) {
          dot += static_cast<double>(raw_at<T>(gv[k], e)) * static_cast<double>(wv[e]) *
                 static_cast<double>(raw_at<T>(xv[k], e));
        }
      }
      dot = group_sum<kLanes>(dot, scratch);
      if (!live) return;
      const double rs = static_cast<double>(rstd[r]);
      const C kk = static_cast<C>(rs * rs * dot / static_cast<double>(D));
      const C rsc = static_cast<C>(rs);
#pragma unroll
      for (int k = 0; k < kPacks; ++k) {
        const int64_t p = lane + static_cast<int64_t>(k) * lanes;
        if (p >= packs) continue;
        C wv[P], y[P];
        load_weight_pack<T, P>(w, p, wv);
#pragma unroll
        for (int e = 0; e < P; ++e) {
          y[e] = rsc * (raw_at<T>(gv[k], e) * wv[e] - raw_at<T>(xv[k], e) * kk);
        }
        store_pack<T, P>(dxr + p * P, y);
      }
    } else {
      if (live) {
        for (int64_t j = lane; j < D; j += lanes) {
          const double wj = w ? static_cast<double>(ld(w + j * sw)) : 1.0;
          dot += static_cast<double>(ld(gr + j * sg)) * wj * static_cast<double>(ld(xr + j * sx));
        }
      }
      dot = group_sum<kLanes>(dot, scratch);
      if (!live) return;
      const double rs = static_cast<double>(rstd[r]);
      const C kk = static_cast<C>(rs * rs * dot / static_cast<double>(D));
      const C rsc = static_cast<C>(rs);
      for (int64_t j = lane; j < D; j += lanes) {
        const C wj = w ? ld(w + j * sw) : C(1);
        st(dxr + j, rsc * (ld(gr + j * sg) * wj - ld(xr + j * sx) * kk));
      }
    }
  });
}

// Note [Deterministic dweight]
// ~~~~~~~~~~~~~~~~~~~~~~~~~~~~
// dweight[j] = sum over rows of g x rstd. Grid (column blocks, splits), kThreads threads:
// the rows are cut into `splits` slices, one per blockIdx.y; a block covers unit_lanes
// units of columns (a 16-byte pack each, or one column on the general path) with
// kThreads / unit_lanes row lanes, lane q summing g x rstd over rows q, q + row lanes, ...
// of the slice in double, as the CPU does (fp32 sums over hundreds of rows would be off
// by about an f32 test's whole tolerance in a column whose sum is near zero). The block
// then adds its row lanes' sums in lane order into partial[s, j]; rms_dw_finish_kernel adds the slices of a
// column with a fixed split of them over its threads and a fixed tree. Every order is a
// function of (rows, D, dtype, layout) alone, so dweight has the same bits on every run.
// g x in double, as the CPU's double(g) * x: one fp32 product for 16-bit types, exact (8
// or 11 significant bits a factor) and one conversion instead of two.
template <typename T>
__device__ __forceinline__ double product_of(compute_t<T> g, compute_t<T> x) {
  if constexpr (sizeof(T) == 2) {
    return static_cast<double>(g * x);
  } else {
    return static_cast<double>(g) * static_cast<double>(x);
  }
}

template <typename T, int kUnit>
__global__ void __launch_bounds__(kThreads)
    rms_dw_partial_kernel(const T* grad, const T* x, const compute_t<T>* rstd, double* partial,
                          Strided rows, int64_t D, int64_t sx, int64_t sg, int splits,
                          int unit_lanes) {
  using A = compute_t<T>;
  __shared__ double sums[kThreads * kUnit];  // [row lanes, columns of the block]
  const int u = static_cast<int>(threadIdx.x) % unit_lanes;
  const int q = static_cast<int>(threadIdx.x) / unit_lanes;
  const int row_lanes = kThreads / unit_lanes;
  const int cols = unit_lanes * kUnit;
  const int64_t j0 = (static_cast<int64_t>(blockIdx.x) * unit_lanes + u) * kUnit;
  const int s = blockIdx.y;
  const int64_t per = (rows.numel + splits - 1) / splits;
  const int64_t begin = s * per, end = min(rows.numel, begin + per);
  double acc[kUnit];
#pragma unroll
  for (int e = 0; e < kUnit; ++e) acc[e] = 0.0;
  if (j0 < D) {
#pragma unroll 4
    for (int64_t r = begin + q; r < end; r += row_lanes) {
      int64_t o[2];
      offsets_of<2>(rows, r, o);
      A g[kUnit], xv[kUnit];
      if constexpr (kUnit > 1) {  // packs: unit strides, D a multiple of the pack
        load_pack<T, kUnit>(grad + o[1] + j0, g);
        load_pack<T, kUnit>(x + o[0] + j0, xv);
      } else {
        g[0] = ld(grad + o[1] + j0 * sg);
        xv[0] = ld(x + o[0] + j0 * sx);
      }
      const double rs = static_cast<double>(rstd[r]);
#pragma unroll
      for (int e = 0; e < kUnit; ++e) acc[e] += product_of<T>(g[e], xv[e]) * rs;
    }
  }
#pragma unroll
  for (int e = 0; e < kUnit; ++e) sums[q * cols + u * kUnit + e] = acc[e];
  __syncthreads();
  for (int t = threadIdx.x; t < cols; t += blockDim.x) {
    const int64_t j = static_cast<int64_t>(blockIdx.x) * cols + t;
    if (j >= D) continue;
    double total = 0.0;
    for (int k = 0; k < row_lanes; ++k) total += sums[k * cols + t];
    partial[static_cast<int64_t>(s) * D + j] = total;
  }
}

constexpr int kFinishThreads = 128;

// One block per column (grid-stride): thread t adds slices t, t + kFinishThreads, ... in
// order, then block_sum's fixed tree (Note [Deterministic dweight]).
template <typename T>
__global__ void __launch_bounds__(kFinishThreads)
    rms_dw_finish_kernel(const double* partial, T* dweight, int64_t D, int splits) {
  __shared__ double scratch[32];
  for (int64_t j = blockIdx.x; j < D; j += gridDim.x) {
    double acc = 0.0;
    for (int s = threadIdx.x; s < splits; s += kFinishThreads) {
      acc += partial[static_cast<int64_t>(s) * D + j];
    }
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) st(dweight + j, static_cast<compute_t<T>>(acc));
  }
}

// ---- launchers ----------------------------------------------------------------------------

// How rows of D go to lanes (Note [Row groups]): lanes 0 is a block per row; packs 0 is the
// general path.
struct RowShape {
  int lanes = 32;
  int packs = 0;
  int threads = kThreads;
};

RowShape row_shape(int64_t D, int pack, bool packed) {
  const int64_t units = packed ? D / pack : D;
  if (packed && units <= 128) {  // a few lanes of a warp, up to 4 packs each
    RowShape s;
    s.lanes = static_cast<int>(std::clamp<int64_t>(pow2_at_least(units), 4, 32));
    s.packs = static_cast<int>(pow2_at_least(std::max<int64_t>(1, (units + 31) / 32)));
    return s;
  }
  if (packed) {  // a block per row: the fewest packs per thread at most 512 threads allow
    for (int k : {1, 2, 4}) {
      const int64_t threads = (units + k - 1) / k;
      if (threads <= 512) return {0, k, static_cast<int>((threads + 31) / 32 * 32)};
    }
  }
  return D <= 1024 ? RowShape{32, 0, kThreads} : RowShape{0, 0, kThreads};
}

// Calls f(lanes, packs) as integral constants for a shape row_shape can return.
template <typename F>
void with_row_shape(const RowShape& s, F&& f) {
  using std::integral_constant;
  if (s.packs == 0) {
    if (s.lanes == 32) return f(integral_constant<int, 32>{}, integral_constant<int, 0>{});
    return f(integral_constant<int, 0>{}, integral_constant<int, 0>{});
  }
  if (s.lanes == 0) {
    if (s.packs == 1) return f(integral_constant<int, 0>{}, integral_constant<int, 1>{});
    if (s.packs == 2) return f(integral_constant<int, 0>{}, integral_constant<int, 2>{});
    return f(integral_constant<int, 0>{}, integral_constant<int, 4>{});
  }
  switch (s.lanes) {
    case 4: return f(integral_constant<int, 4>{}, integral_constant<int, 1>{});
    case 8: return f(integral_constant<int, 8>{}, integral_constant<int, 1>{});
    case 16: return f(integral_constant<int, 16>{}, integral_constant<int, 1>{});
    default: break;
  }
  if (s.packs == 1) return f(integral_constant<int, 32>{}, integral_constant<int, 1>{});
  if (s.packs == 2) return f(integral_constant<int, 32>{}, integral_constant<int, 2>{});
  return f(integral_constant<int, 32>{}, integral_constant<int, 4>{});
}

int64_t rows_per_block(const RowShape& s) { return s.lanes ? s.threads / s.lanes : 1; }

}  // namespace

int rms_norm_dweight_splits(int64_t rows, int64_t D) {
  // About 2048 blocks of partial sums (a block covers up to 256 columns: a narrow D --
  // qk-norm's head_dim 128 over 786432 rows -- is cut into 2048 slices of 384 rows), and
  // at least 32 rows a slice.
  const int64_t column_blocks = std::max<int64_t>(1, (D + kThreads - 1) / kThreads);
  const int64_t most = std::max<int64_t>(1, 2048 / column_blocks);
  return static_cast<int>(std::clamp<int64_t>(rows / 32, 1, most));
}

void launch_rms_norm_forward(DType dtype, const void* x, const void* weight, void* out, void* rstd,
                             const Strided& rows, int64_t D, int64_t sx, int64_t sw, double eps,
                             cudaStream_t stream) {
  if (rows.numel == 0) return;
  visit_floating(dtype, "rms_norm", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int P = kPack<T>;
    const bool packed = sx == 1 && D % P == 0 && packs_fit(x, rows, 0, P) && aligned16(out) &&
                        (weight == nullptr || (sw == 1 && aligned16(weight)));
    const RowShape shape = row_shape(D, P, packed);
    with_row_shape(shape, [&](auto lanes, auto packs) {
      const auto kernel = rms_forward_kernel<T, decltype(lanes)::value, decltype(packs)::value>;
      kernel<<<row_grid(kernel, shape.threads, rows.numel, rows_per_block(shape)), shape.threads, 0,
               stream>>>(static_cast<const T*>(x), static_cast<const T*>(weight),
                         static_cast<T*>(out), static_cast<compute_t<T>*>(rstd), rows, D, sx, sw,
                         eps);
    });
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_rms_norm_backward(DType dtype, const void* grad, const void* x, const void* weight,
                              const void* rstd, void* dx, void* dweight, double* dw_partial,
                              int splits, const Strided& rows, int64_t D, int64_t sx, int64_t sg,
                              int64_t sw, cudaStream_t stream) {
  visit_floating(dtype, "rms_norm backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    constexpr int P = kPack<T>;
    const auto* pg = static_cast<const T*>(grad);
    const auto* px = static_cast<const T*>(x);
    const auto* pr = static_cast<const compute_t<T>*>(rstd);
    // Packs of g and x: unit strides, D a multiple of the pack, aligned row starts.
    const bool packed_in =
        sx == 1 && sg == 1 && D % P == 0 && packs_fit(x, rows, 0, P) && packs_fit(grad, rows, 1, P);
    if (dx != nullptr && rows.numel > 0) {
      const bool packed =
          packed_in && aligned16(dx) && (weight == nullptr || (sw == 1 && aligned16(weight)));
      const RowShape shape = row_shape(D, P, packed);
      with_row_shape(shape, [&](auto lanes, auto packs) {
        const auto kernel = rms_dx_kernel<T, decltype(lanes)::value, decltype(packs)::value>;
        kernel<<<row_grid(kernel, shape.threads, rows.numel, rows_per_block(shape)), shape.threads,
                 0, stream>>>(pg, px, static_cast<const T*>(weight), pr, static_cast<T*>(dx), rows,
                              D, sx, sg, sw);
      });
      CG_CUDA_CHECK(cudaGetLastError());
    }
    if (dweight != nullptr && D > 0) {
      // unit_lanes: columns units side by side in a block, up to 32 packs (a warp reads
      // 512 contiguous bytes of a row) or 64 single columns; the rest of the block's
      // threads are row lanes.
      const int64_t units = packed_in ? D / P : D;
      const int unit_lanes =
          static_cast<int>(std::min<int64_t>(packed_in ? 32 : 64, pow2_at_least(units)));
      const dim3 grid(static_cast<unsigned>((units + unit_lanes - 1) / unit_lanes),
                      static_cast<unsigned>(splits));
      if (packed_in) {
        rms_dw_partial_kernel<T, P><<<grid, kThreads, 0, stream>>>(pg, px, pr, dw_partial, rows, D,
                                                                   sx, sg, splits, unit_lanes);
      } else {
        rms_dw_partial_kernel<T, 1><<<grid, kThreads, 0, stream>>>(pg, px, pr, dw_partial, rows, D,
                                                                   sx, sg, splits, unit_lanes);
      }
      CG_CUDA_CHECK(cudaGetLastError());
      const auto blocks = static_cast<unsigned>(std::min<int64_t>(D, 65535));
      rms_dw_finish_kernel<T>
          <<<blocks, kFinishThreads, 0, stream>>>(dw_partial, static_cast<T*>(dweight), D, splits);
      CG_CUDA_CHECK(cudaGetLastError());
    }
  });
}

}  // namespace cg::cuda
