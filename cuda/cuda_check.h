// Why this file exists: every CUDA runtime and cuBLAS call in chunkgrad is wrapped so
// that a failure becomes a cg::Error naming the file, line, the call that failed and
// what CUDA said about it -- never a silent error code, never an abort.
//
//   CG_CUDA_CHECK(cudaMemcpy(dst, src, n, cudaMemcpyHostToDevice));
//   CG_CUBLAS_CHECK(cublasSgemm(handle, ...));
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "core/error.h"

namespace cg::cuda {

// "CUBLAS_STATUS_NOT_INITIALIZED: the cuBLAS library was not initialized", etc.
const char* cublas_status_name(cublasStatus_t status);
const char* cublas_status_string(cublasStatus_t status);

}  // namespace cg::cuda

#define CG_CUDA_CHECK(expr)                                                                        \
  do {                                                                                             \
    const cudaError_t cg_cuda_err_ = (expr);                                                       \
    if (cg_cuda_err_ != cudaSuccess) {                                                             \
      throw ::cg::Error(                                                                           \
          ::cg::detail::concat("CUDA call `", #expr, "` failed: ", cudaGetErrorName(cg_cuda_err_), \
                               " (", cudaGetErrorString(cg_cuda_err_), ")"),                       \
          __FILE__, __LINE__);                                                                     \
    }                                                                                              \
  } while (0)

#define CG_CUBLAS_CHECK(expr)                                                                     \
  do {                                                                                            \
    const cublasStatus_t cg_cublas_st_ = (expr);                                                  \
    if (cg_cublas_st_ != CUBLAS_STATUS_SUCCESS) {                                                 \
      throw ::cg::Error(                                                                          \
          ::cg::detail::concat("cuBLAS call `", #expr,                                            \
                               "` failed: ", ::cg::cuda::cublas_status_name(cg_cublas_st_), " (", \
                               ::cg::cuda::cublas_status_string(cg_cublas_st_), ")"),             \
          __FILE__, __LINE__);                                                                    \
    }                                                                                             \
  } while (0)
