// Why this file exists: the CPU's gemm entry (ops/kernels.h): out = alpha a b + beta out on
// 2-D operands of any floating dtypes, the building block of the fused head-loss loop.
// Internal to ops/: not a public header.
#pragma once

#include <cstddef>

#include "core/tensor.h"
#include "ops/kernels.h"

namespace cg::cpu {

// out [M, N] = alpha * a [M, K] @ b [K, N] + beta * out (see DeviceKernels::gemm).
void gemm(const Tensor& a, const Tensor& b, const Tensor& out, double alpha, double beta);
// Upper bound of the bytes gemm allocates (through the caching allocator) for such operands.
size_t gemm_scratch_bytes(const GemmDesc& desc);

}  // namespace cg::cpu
