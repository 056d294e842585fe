// Why this file exists: the CUDA reductions and row kernels (see reduce_kernels.h). Sums
// accumulate in double as the CPU's (cpu/reduce.cpp): short sums, and outputs adjacent
// in memory, take a thread per (output, piece); the rest a block per (output, piece); a
// second kernel adds the pieces in order, so the result does not depend on scheduling.
// Row kernels (max, logsumexp, softmax) take one block per row: a warp for short rows,
// 256 threads for long ones.
#include "cuda/reduce_kernels.h"

#include <algorithm>

#include "cuda/cuda_check.h"
#include "cuda/device_math.cuh"

namespace cg::cuda {

namespace {

// ---- sum ------------------------------------------------------------------------------

// Thread (output o, piece s), e = s * outputs + o (neighbouring threads take neighbouring
// outputs), sums piece s of o's reduced range; splits == 1 stores directly.
template <typename T>
__global__ void sum_thread_kernel(const T* a, T* out, Strided kept, Strided reduced, double scale,
                                  double* partial, int splits) {
  const int64_t work = kept.numel * splits;
  const int64_t per = (reduced.numel + splits - 1) / splits;
  for (int64_t e = first_index(); e < work; e += grid_stride()) {
    const int64_t s = e / kept.numel, o = e - s * kept.numel;
    int64_t ko[2];
    offsets_of<2>(kept, o, ko);
    const int64_t begin = s * per, end = min(reduced.numel, begin + per);
    double acc = 0.0;
    for (int64_t r = begin; r < end; ++r) {
      int64_t ro[1];
      offsets_of<1>(reduced, r, ro);
      acc += static_cast<double>(ld(a + ko[0] + ro[0]));
    }
    if (splits == 1)
      st(out + ko[1], static_cast<compute_t<T>>(acc * scale));
    else
      partial[o * splits + s] = acc;
  }
}

// Block (output o, piece s) sums piece s of o's reduced range; splits == 1 stores directly.
template <typename T>
__global__ void sum_block_kernel(const T* a, T* out, Strided kept, Strided reduced, double scale,
                                 double* partial, int splits) {
  __shared__ double scratch[32];
  const int64_t blocks = kept.numel * splits;
  const int64_t per = (reduced.numel + splits - 1) / splits;
  for (int64_t b = blockIdx.x; b < blocks; b += gridDim.x) {
    const int64_t o = b / splits, s = b % splits;
    int64_t ko[2];
    offsets_of<2>(kept, o, ko);
    const int64_t begin = s * per, end = min(reduced.numel, begin + per);
    double acc = 0.0;
    for (int64_t r = begin + threadIdx.x; r < end; r += blockDim.x) {
      int64_t ro[1];
      offsets_of<1>(reduced, r, ro);
      acc += static_cast<double>(ld(a + ko[0] + ro[0]));
    }
    acc = block_sum(acc, scratch);
    if (threadIdx.x == 0) {
      if (splits == 1)
        st(out + ko[1], static_cast<compute_t<T>>(acc * scale));
      else
        partial[o * splits + s] = acc;
    }
  }
}

// Block b sums a[i]^2 over its contiguous piece [b * per, (b + 1) * per) of a (n,).
template <typename T>
__global__ void squares_block_kernel(const T* a, int64_t n, double* partial) {
  __shared__ double scratch[32];
  const int64_t per = (n + gridDim.x - 1) / gridDim.x;
  const int64_t begin = static_cast<int64_t>(blockIdx.x) * per, end = min(n, begin + per);
  double acc = 0.0;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const double x = static_cast<double>(ld(a + i));
    acc += x * x;
  }
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}

// One block: out = the pieces' sums added in order (thread t takes pieces t, t + blockDim,
// ...; block_sum's tree is fixed), in the compute type.
template <typename T>
__global__ void squares_finish_kernel(const double* partial, compute_t<T>* out) {
  __shared__ double scratch[32];
  double acc = 0.0;
  for (int i = threadIdx.x; i < kSquaresBlocks; i += blockDim.x) acc += partial[i];
  acc = block_sum(acc, scratch);
  if (threadIdx.x == 0) *out = static_cast<compute_t<T>>(acc);
}

template <typename T>
__global__ void sum_finish_kernel(const double* partial, T* out, Strided kept, double scale,
                                  int splits) {
  for (int64_t o = first_index(); o < kept.numel; o += grid_stride()) {
    int64_t ko[2];
    offsets_of<2>(kept, o, ko);
    double acc = 0.0;
    for (int s = 0; s < splits; ++s) acc += partial[o * splits + s];
    st(out + ko[1], static_cast<compute_t<T>>(acc * scale));
  }
}

// ---- row kernels ------------------------------------------------------------------------

int row_threads(int64_t n) { return n >= 1024 ? 256 : 32; }
unsigned row_blocks(int64_t rows) {
  return static_cast<unsigned>(std::min<int64_t>(std::max<int64_t>(rows, 1), 1 << 20));
}

// (v, i) beats (bv, bi) as max's answer: a NaN beats numbers, the larger value wins, and
// ties (NaN with NaN included) go to the smaller index.
template <typename C>
__device__ __forceinline__ bool beats(C v, int64_t i, C bv, int64_t bi) {
  const bool nv = m_isnan(v), nb = m_isnan(bv);
  if (nv != nb) return nv;
  if (!nv && v != bv) return v > bv;
  return i < bi;
}

template <typename T>
__global__ void max_rows_kernel(const T* a, int64_t* indices, T* values, Strided rows, int64_t n,
                                int64_t stride) {
  using C = compute_t<T>;
  __shared__ C sv[32];
  __shared__ int64_t si[32];
  for (int64_t r = blockIdx.x; r < rows.numel; r += gridDim.x) {
    int64_t o[3];
    offsets_of<3>(rows, r, o);
    const T* row = a + o[0];
    C best = -m_inf<C>();
    int64_t arg = INT64_MAX;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const C v = ld(row + j * stride);
      if (beats(v, j, best, arg)) {
        best = v;
        arg = j;
      }
    }
    for (int off = 16; off > 0; off >>= 1) {
      const C v = __shfl_xor_sync(0xffffffffu, best, off);
      const int64_t i = __shfl_xor_sync(0xffffffffu, arg, off);
      if (beats(v, i, best, arg)) {
        best = v;
        arg = i;
      }
    }
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
    __syncthreads();
    if (lane == 0) {
      sv[warp] = best;
      si[warp] = arg;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int w = 1; w < warps; ++w) {
        if (beats(sv[w], si[w], best, arg)) {
          best = sv[w];
          arg = si[w];
        }
      }
      if (arg == INT64_MAX) arg = 0;
      indices[o[1]] = arg;
      if (values) values[o[2]] = row[arg * stride];
    }
  }
}

template <typename T>
__global__ void logsumexp_rows_kernel(const T* a, T* out, Strided rows, int64_t n, int64_t stride) {
  using C = compute_t<T>;
  __shared__ C smax[32];
  __shared__ double ssum[32];
  for (int64_t r = blockIdx.x; r < rows.numel; r += gridDim.x) {
    int64_t o[2];
    offsets_of<2>(rows, r, o);
    const T* row = a + o[0];
    C m = -m_inf<C>();
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const C v = ld(row + j * stride);
      if (v > m) m = v;
    }
    m = block_max(m, smax);
    // An infinite max is not subtracted (inf - inf = NaN); the sum gives the infinity.
    const C shift = m_isinf(m) ? C(0) : m;
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      s += static_cast<double>(m_exp(ld(row + j * stride) - shift));
    }
    s = block_sum(s, ssum);
    if (threadIdx.x == 0) st(out + o[1], static_cast<C>(log(s) + static_cast<double>(shift)));
  }
}

template <typename T>
__global__ void scatter_rows_kernel(T* out, const T* src, const int64_t* index, Strided rows,
                                    int64_t out_stride) {
  for (int64_t r = first_index(); r < rows.numel; r += grid_stride()) {
    int64_t o[3];
    offsets_of<3>(rows, r, o);
    out[o[0] + index[o[2]] * out_stride] = src[o[1]];
  }
}

template <typename T>
__global__ void softmax_rows_kernel(bool log_out, const T* a, T* out, Strided rows, int64_t n,
                                    int64_t sa, int64_t so) {
  using C = compute_t<T>;
  __shared__ C smax[32];
  __shared__ double ssum[32];
  for (int64_t r = blockIdx.x; r < rows.numel; r += gridDim.x) {
    int64_t o[2];
    offsets_of<2>(rows, r, o);
    const T* x = a + o[0];
    T* y = out + o[1];
    C m = -m_inf<C>();
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const C v = ld(x + j * sa);
      if (v > m) m = v;
    }
    m = block_max(m, smax);
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      s += static_cast<double>(m_exp(ld(x + j * sa) - m));
    }
    s = block_sum(s, ssum);
    if (log_out) {
      const C log_s = static_cast<C>(log(s));
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        st(y + j * so, (ld(x + j * sa) - m) - log_s);
    } else {
      const C inv = static_cast<C>(1.0 / s);
      for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
        st(y + j * so, m_exp(ld(x + j * sa) - m) * inv);
    }
  }
}

template <typename T>
__global__ void softmax_backward_rows_kernel(bool log_out, const T* grad, const T* yv, T* out,
                                             Strided rows, int64_t n, int64_t sg, int64_t sy,
                                             int64_t so) {
  using C = compute_t<T>;
  __shared__ double ssum[32];
  for (int64_t r = blockIdx.x; r < rows.numel; r += gridDim.x) {
    int64_t o[3];
    offsets_of<3>(rows, r, o);
    const T* g = grad + o[0];
    const T* y = yv + o[1];
    T* gx = out + o[2];
    double s = 0.0;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const double gj = static_cast<double>(ld(g + j * sg));
      s += log_out ? gj : gj * static_cast<double>(ld(y + j * sy));
    }
    const C total = static_cast<C>(block_sum(s, ssum));
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
      const C gj = ld(g + j * sg), yj = ld(y + j * sy);
      st(gx + j * so, log_out ? gj - m_exp(yj) * total : yj * (gj - total));
    }
  }
}

}  // namespace

SumPlan sum_plan(int64_t outputs, int64_t reduced, bool coalesced) {
  SumPlan plan;
  // A thread per output (and piece): short sums, or outputs whose neighbours are neighbours
  // in memory (a bias gradient [rows, D] -> [D]: each step of a warp reads one row). Long
  // sums are cut into pieces until about 2^18 threads run.
  if (reduced <= 64 || (outputs >= 1024 && coalesced)) {
    plan.per_thread = true;
    const int64_t want = std::max<int64_t>(1, (int64_t{1} << 18) / std::max<int64_t>(outputs, 1));
    const int64_t cap = std::max<int64_t>(1, reduced / 64);
    plan.splits = static_cast<int>(std::min<int64_t>({want, cap, 4096}));
    return plan;
  }
  // Otherwise a block per output (and piece), the pieces filling about 1024 blocks.
  const int64_t want = std::max<int64_t>(1, 1024 / std::max<int64_t>(outputs, 1));
  const int64_t cap = std::max<int64_t>(1, reduced / 4096);
  plan.splits = static_cast<int>(std::min<int64_t>({want, cap, 1024}));
  return plan;
}

void launch_sum(DType dtype, const void* a, void* out, const Strided& kept, const Strided& reduced,
                double scale, double* partial, const SumPlan& plan, cudaStream_t stream) {
  if (kept.numel == 0) return;
  const int splits = plan.splits;
  visit_floating(dtype, "sum", [&](auto tag) {
    using T = typename decltype(tag)::type;
    const T* pa = static_cast<const T*>(a);
    T* po = static_cast<T*>(out);
    if (plan.per_thread) {
      sum_thread_kernel<T><<<blocks_for(kept.numel * splits), kThreads, 0, stream>>>(
          pa, po, kept, reduced, scale, partial, splits);
    } else {
      const int64_t blocks = std::min<int64_t>(kept.numel * splits, 1 << 20);
      sum_block_kernel<T><<<static_cast<unsigned>(blocks), kThreads, 0, stream>>>(
          pa, po, kept, reduced, scale, partial, splits);
    }
    if (splits > 1) {
      CG_CUDA_CHECK(cudaGetLastError());
      sum_finish_kernel<T>
          <<<blocks_for(kept.numel), kThreads, 0, stream>>>(partial, po, kept, scale, splits);
    }
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_sum_of_squares(DType dtype, const void* a, int64_t n, void* out, double* partial,
                           cudaStream_t stream) {
  visit_floating(dtype, "sum_of_squares", [&](auto tag) {
    using T = typename decltype(tag)::type;
    squares_block_kernel<T>
        <<<kSquaresBlocks, kThreads, 0, stream>>>(static_cast<const T*>(a), n, partial);
    CG_CUDA_CHECK(cudaGetLastError());
    squares_finish_kernel<T><<<1, kThreads, 0, stream>>>(partial, static_cast<compute_t<T>*>(out));
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_max_rows(DType dtype, const void* a, int64_t* indices, void* values,
                     const Strided& rows, int64_t n, int64_t stride, cudaStream_t stream) {
  if (rows.numel == 0) return;
  visit_floating(dtype, "max", [&](auto tag) {
    using T = typename decltype(tag)::type;
    max_rows_kernel<T><<<row_blocks(rows.numel), row_threads(n), 0, stream>>>(
        static_cast<const T*>(a), indices, static_cast<T*>(values), rows, n, stride);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_logsumexp_rows(DType dtype, const void* a, void* out, const Strided& rows, int64_t n,
                           int64_t stride, cudaStream_t stream) {
  if (rows.numel == 0) return;
  visit_floating(dtype, "logsumexp", [&](auto tag) {
    using T = typename decltype(tag)::type;
    logsumexp_rows_kernel<T><<<row_blocks(rows.numel), row_threads(n), 0, stream>>>(
        static_cast<const T*>(a), static_cast<T*>(out), rows, n, stride);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_scatter_rows(DType dtype, void* out, const void* src, const int64_t* index,
                         const Strided& rows, int64_t out_stride, cudaStream_t stream) {
  if (rows.numel == 0) return;
  visit_floating(dtype, "scatter_along_dim", [&](auto tag) {
    using T = typename decltype(tag)::type;
    scatter_rows_kernel<T><<<blocks_for(rows.numel), kThreads, 0, stream>>>(
        static_cast<T*>(out), static_cast<const T*>(src), index, rows, out_stride);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_softmax_rows(DType dtype, bool log, const void* a, void* out, const Strided& rows,
                         int64_t n, int64_t sa, int64_t so, cudaStream_t stream) {
  if (rows.numel == 0 || n == 0) return;
  visit_floating(dtype, log ? "log_softmax" : "softmax", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_rows_kernel<T><<<row_blocks(rows.numel), row_threads(n), 0, stream>>>(
        log, static_cast<const T*>(a), static_cast<T*>(out), rows, n, sa, so);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_softmax_backward_rows(DType dtype, bool log, const void* grad, const void* y, void* out,
                                  const Strided& rows, int64_t n, int64_t sg, int64_t sy,
                                  int64_t so, cudaStream_t stream) {
  if (rows.numel == 0 || n == 0) return;
  visit_floating(dtype, log ? "log_softmax_backward" : "softmax_backward", [&](auto tag) {
    using T = typename decltype(tag)::type;
    softmax_backward_rows_kernel<T><<<row_blocks(rows.numel), row_threads(n), 0, stream>>>(
        log, static_cast<const T*>(grad), static_cast<const T*>(y), static_cast<T*>(out), rows, n,
        sg, sy, so);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cg::cuda
