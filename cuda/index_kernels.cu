// Why this file exists: the CUDA index kernels (see index_kernels.h). Gathers copy raw bits
// (one instantiation per element size, as the CPU's); scatter-adds use atomicAdd into f32
// or f64 (the table gives bf16/f16 destinations an f32 buffer, one rounding at the end, as
// the CPU does). Note [Atomic order]: with repeated indices the order of the atomic adds
// varies between runs, so such sums may differ in the last bits from run to run (and from
// the CPU's serial order); distinct indices are exact.
#include "cuda/index_kernels.h"

#include "cuda/cuda_check.h"
#include "cuda/device_math.cuh"

namespace cg::cuda {

namespace {

template <typename U, typename I>
__global__ void gather_kernel(U* out, const U* x, const I* idx, int64_t step, Strided g) {
  for (int64_t i = first_index(); i < g.numel; i += grid_stride()) {
    int64_t o[3];
    offsets_of<3>(g, i, o);
    out[o[0]] = x[o[1] + static_cast<int64_t>(idx[o[2]]) * step];
  }
}

template <typename A, typename S, typename I>
__global__ void scatter_add_kernel(A* acc, const S* src, const I* idx, int64_t step, int64_t skip,
                                   Strided g) {
  for (int64_t i = first_index(); i < g.numel; i += grid_stride()) {
    int64_t o[3];
    offsets_of<3>(g, i, o);
    const int64_t k = static_cast<int64_t>(idx[o[2]]);
    if (k == skip) continue;
    atomicAdd(acc + o[0] + k * step, static_cast<A>(ld(src + o[1])));
  }
}

__global__ void init_bad_kernel(int64_t* first_bad) {
  first_bad[0] = INT64_MAX;
  first_bad[1] = 0;
}

template <typename I>
__global__ void find_bad_index_kernel(const I* idx, int64_t bound, Strided g, int64_t* first_bad) {
  for (int64_t i = first_index(); i < g.numel; i += grid_stride()) {
    int64_t o[1];
    offsets_of<1>(g, i, o);
    const int64_t v = static_cast<int64_t>(idx[o[0]]);
    if (v < 0 || v >= bound) {
      atomicMin(reinterpret_cast<unsigned long long*>(first_bad),
                static_cast<unsigned long long>(i));
    }
  }
}

template <typename I>
__global__ void bad_index_value_kernel(const I* idx, Strided g, int64_t* first_bad) {
  if (first_bad[0] == INT64_MAX) return;
  int64_t o[1];
  offsets_of<1>(g, first_bad[0], o);
  first_bad[1] = static_cast<int64_t>(idx[o[0]]);
}

template <typename F>
void visit_size(size_t elem_size, F&& f) {
  switch (elem_size) {
    case 1: return f(Tag<uint8_t>{});
    case 2: return f(Tag<uint16_t>{});
    case 4: return f(Tag<uint32_t>{});
    case 8: return f(Tag<uint64_t>{});
    default: break;
  }
  CG_FAIL("index op: element size ", elem_size, " is not supported");
}

}  // namespace

void launch_gather_elements(size_t elem_size, void* out, const void* x, const void* idx,
                            DType idx_dtype, int64_t step, const Strided& g, cudaStream_t stream) {
  if (g.numel == 0) return;
  visit_size(elem_size, [&](auto utag) {
    using U = typename decltype(utag)::type;
    visit_index(idx_dtype, [&](auto itag) {
      using I = typename decltype(itag)::type;
      gather_kernel<U, I><<<blocks_for(g.numel), kThreads, 0, stream>>>(
          static_cast<U*>(out), static_cast<const U*>(x), static_cast<const I*>(idx), step, g);
    });
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_scatter_add_elements(DType acc_dtype, void* acc, DType src_dtype, const void* src,
                                 const void* idx, DType idx_dtype, int64_t step, int64_t skip,
                                 const Strided& g, cudaStream_t stream) {
  if (g.numel == 0) return;
  CG_CHECK(acc_dtype == DType::f32 || acc_dtype == DType::f64,
           "scatter-add: the accumulator must be f32 or f64 (internal)");
  visit_floating(src_dtype, "scatter-add", [&](auto stag) {
    using S = typename decltype(stag)::type;
    visit_index(idx_dtype, [&](auto itag) {
      using I = typename decltype(itag)::type;
      if (acc_dtype == DType::f64) {
        scatter_add_kernel<double, S, I><<<blocks_for(g.numel), kThreads, 0, stream>>>(
            static_cast<double*>(acc), static_cast<const S*>(src), static_cast<const I*>(idx), step,
            skip, g);
      } else {
        scatter_add_kernel<float, S, I><<<blocks_for(g.numel), kThreads, 0, stream>>>(
            static_cast<float*>(acc), static_cast<const S*>(src), static_cast<const I*>(idx), step,
            skip, g);
      }
    });
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_find_bad_index(const void* idx, DType idx_dtype, int64_t bound, const Strided& g,
                           int64_t* first_bad, cudaStream_t stream) {
  init_bad_kernel<<<1, 1, 0, stream>>>(first_bad);
  CG_CUDA_CHECK(cudaGetLastError());
  if (g.numel == 0) return;
  visit_index(idx_dtype, [&](auto itag) {
    using I = typename decltype(itag)::type;
    find_bad_index_kernel<I><<<blocks_for(g.numel), kThreads, 0, stream>>>(
        static_cast<const I*>(idx), bound, g, first_bad);
    CG_CUDA_CHECK(cudaGetLastError());
    bad_index_value_kernel<I><<<1, 1, 0, stream>>>(static_cast<const I*>(idx), g, first_bad);
  });
  CG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cg::cuda
