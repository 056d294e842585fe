// Why this file exists: what the CUDA table's matrix products (CudaKernels::gemm, matmul
// and gemm_scratch_bytes of cuda/cuda_kernels.h, defined in lt_gemm.cpp) do through
// cuBLASLt, with the CPU's contracts (cpu/gemm.h, cpu/matmul.cpp): transposed and strided
// operands read in place through the layouts' leading dimensions and transpose flags,
// bf16/f16 inputs with fp32 accumulation, f32 (TF32 only when CHUNKGRAD_TF32=1), f64 when
// all three are f64, batched matmul as one strided-batch call per run of evenly spaced
// batches, alpha/beta. Workspace comes from chunkgrad's caching allocator (a byte tensor per
// call); the cuBLASLt plan (descriptors and the heuristic's algorithm) is cached per
// shape/dtype/layout/alignment key.
//   gemm: out [M, N] = alpha a [M, K] @ b [K, N] + beta out (2-D, cuda tensors, any
//     floating dtypes; an operand with no unit stride, or a dtype cuBLASLt cannot pair, goes
//     through a converted copy). beta == 0: out is not read.
//   matmul: a [..., n, k] @ b [..., k, m], batch dims broadcast, one floating dtype.
//   gemm_scratch_bytes: an upper bound of the allocator bytes gemm takes for such operands.
#pragma once

#include <library_types.h>

#include <cstddef>

#include "core/dtype.h"

namespace cg::cuda {

// The cuBLAS / cuBLASLt data type of a floating dtype (throws for the others).
cudaDataType_t blas_data_type(DType dtype);

// The most workspace cuBLASLt may use per call (bytes): 32 MiB, cuBLAS's advice for Hopper
// (smaller outputs get less: Note [Workspace size] in lt_gemm.cpp).
constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

}  // namespace cg::cuda
