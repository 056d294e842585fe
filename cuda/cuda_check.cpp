// Why this file exists: cuBLAS status codes in words, for CG_CUBLAS_CHECK messages.
// Our own table rather than cublasGetStatusString so that messages read the same on
// every cuBLAS version we build against.
#include "cuda/cuda_check.h"

namespace cg::cuda {

const char* cublas_status_name(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_ARCH_MISMATCH: return "CUBLAS_STATUS_ARCH_MISMATCH";
    case CUBLAS_STATUS_MAPPING_ERROR: return "CUBLAS_STATUS_MAPPING_ERROR";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "CUBLAS_STATUS_EXECUTION_FAILED";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "CUBLAS_STATUS_INTERNAL_ERROR";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    case CUBLAS_STATUS_LICENSE_ERROR: return "CUBLAS_STATUS_LICENSE_ERROR";
  }
  return "CUBLAS_STATUS_<unknown>";
}

const char* cublas_status_string(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "success";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "cuBLAS was not initialized (no handle, or no usable GPU/driver)";
    case CUBLAS_STATUS_ALLOC_FAILED: return "cuBLAS could not allocate resources";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "an unsupported value or parameter was passed (check shapes, leading dims)";
    case CUBLAS_STATUS_ARCH_MISMATCH:
      return "the GPU lacks a feature this call needs (compute capability too low)";
    case CUBLAS_STATUS_MAPPING_ERROR: return "access to GPU memory space failed";
    case CUBLAS_STATUS_EXECUTION_FAILED: return "the GPU program failed to execute";
    case CUBLAS_STATUS_INTERNAL_ERROR: return "an internal cuBLAS operation failed";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "the requested functionality is not supported";
    case CUBLAS_STATUS_LICENSE_ERROR: return "cuBLAS licensing error";
  }
  return "unknown cuBLAS status";
}

}  // namespace cg::cuda
