// Why this file exists: the kernel table's matrix products on the GPU (gemm, matmul,
// gemm_scratch_bytes; ops/kernels.h) through cuBLASLt, with the CPU's contracts (cpu/
// gemm.h, cpu/matmul.cpp): transposed and strided operands read in place through the
// layouts' leading dimensions and transpose flags, bf16/f16 inputs with fp32 accumulation,
// f32 (TF32 only when CHUNKGRAD_TF32=1), f64 when all three are f64, batched matmul as one
// strided-batch call per run of evenly spaced batches, alpha/beta. Workspace comes from
// chunkgrad's caching allocator (a byte tensor per call); the cuBLASLt plan (descriptors
// and the heuristic's algorithm) is cached per shape/dtype/layout/alignment key.
#pragma once

#include <cstddef>

#include "core/tensor.h"
#include "ops/kernels.h"

namespace cg::cuda {

// out [M, N] = alpha a [M, K] @ b [K, N] + beta out (2-D, cuda tensors, any floating dtypes;
// an operand with no unit stride, or a dtype cuBLASLt cannot pair, goes through a
// converted copy). beta == 0: out is not read.
void lt_gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta);
// a [..., n, k] @ b [..., k, m], batch dims broadcast, one floating dtype.
Tensor lt_matmul(const Tensor& a, const Tensor& b);
// Upper bound of the allocator bytes lt_gemm takes for such operands.
size_t lt_gemm_scratch_bytes(const GemmDesc& desc);

// The most workspace cuBLASLt may use per call (bytes): 32 MiB, cuBLAS's advice for Hopper
// (smaller outputs get less: Note [Workspace size] in lt_gemm.cpp).
constexpr size_t kLtWorkspaceBytes = size_t{32} << 20;

}  // namespace cg::cuda
