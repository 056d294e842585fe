// Why this file exists: the small kernels the head loss runs around its row kernel
// (head_loss_kernels.cu) -- finding the first label outside [0, V) so the host can name it,
// and the per-row loss weights (ignore_index, optional weights, normalized to sum 1 when
// asked) -- in a file of their own, so that the row kernel's file is about the rows.
#include "cuda/head_loss_kernels.h"

#include <cstdint>

#include "cuda/cuda_check.h"
#include "cuda/device_math.cuh"

namespace cg::cuda {

namespace {

// first_bad[0]: the index of the first bad label (INT64_MAX: none), [1]: its value.
__global__ void init_bad_kernel(int64_t* first_bad) {
  first_bad[0] = INT64_MAX;
  first_bad[1] = 0;
}

__global__ void find_bad_label_kernel(const int64_t* labels, int64_t n, int64_t stride, int64_t V,
                                      int64_t ignore_index, int64_t* first_bad) {
  for (int64_t i = first_index(); i < n; i += grid_stride()) {
    const int64_t y = labels[i * stride];
    if (!(y == ignore_index || (y >= 0 && y < V))) {
      atomicMin(reinterpret_cast<unsigned long long*>(first_bad),
                static_cast<unsigned long long>(i));
    }
  }
}

__global__ void bad_label_value_kernel(const int64_t* labels, int64_t stride, int64_t* first_bad) {
  if (first_bad[0] != INT64_MAX) first_bad[1] = labels[first_bad[0] * stride];
}

__global__ void row_weights_kernel(const int64_t* labels, int64_t label_stride, const void* weights,
                                   DType weights_dtype, int64_t weight_stride, int64_t ignore_index,
                                   bool normalize, void* out, DType out_dtype, int64_t out_stride,
                                   int64_t n) {
  __shared__ double sd[32];
  auto weight = [&](int64_t i) {
    double w = weights ? load_any(weights, weights_dtype, i * weight_stride) : 1.0;
    if (labels && labels[i * label_stride] == ignore_index) w = 0.0;
    return w;
  };
  double total = 1.0;
  if (normalize) {
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) s += weight(i);
    total = block_sum(s, sd);
  }
  for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
    const double w = weight(i);
    const double v = !normalize ? w : (total == 0.0 ? 0.0 : w / total);
    store_any(out, out_dtype, i * out_stride, v);
  }
}

}  // namespace

void launch_find_bad_label(const int64_t* labels, int64_t n, int64_t stride, int64_t V,
                           int64_t ignore_index, int64_t* first_bad, cudaStream_t stream) {
  init_bad_kernel<<<1, 1, 0, stream>>>(first_bad);
  CG_CUDA_CHECK(cudaGetLastError());
  if (n == 0) return;
  find_bad_label_kernel<<<blocks_for(n), kThreads, 0, stream>>>(labels, n, stride, V, ignore_index,
                                                                first_bad);
  CG_CUDA_CHECK(cudaGetLastError());
  bad_label_value_kernel<<<1, 1, 0, stream>>>(labels, stride, first_bad);
  CG_CUDA_CHECK(cudaGetLastError());
}

void launch_row_weights(const int64_t* labels, int64_t label_stride, const void* weights,
                        DType weights_dtype, int64_t weight_stride, int64_t ignore_index,
                        bool normalize, void* out, DType out_dtype, int64_t out_stride, int64_t n,
                        cudaStream_t stream) {
  if (n == 0) return;
  row_weights_kernel<<<1, 1024, 0, stream>>>(labels, label_stride, weights, weights_dtype,
                                             weight_stride, ignore_index, normalize, out, out_dtype,
                                             out_stride, n);
  CG_CUDA_CHECK(cudaGetLastError());
}

}  // namespace cg::cuda
