// Why this file exists: the launchers of the CUDA elementwise kernels behind the kernel
// table's binary, unary, where, inplace, inplace_scalar, addcmul and swiglu entries
// (ops/kernels.h). Each takes raw device pointers, the storage dtype and a Strided
// geometry over the output's shape whose operand order the comment gives (broadcast
// operands carry stride 0), and launches on `stream` without waiting.
#pragma once

#include <cuda_runtime_api.h>

#include "core/dtype.h"
#include "cuda/kernel_args.h"
#include "ops/kernels.h"

namespace cg::cuda {

// g: {out, a, b}. out = op(a, b).
void launch_binary(BinaryOp op, DType dtype, void* out, const void* a, const void* b,
                   const Strided& g, cudaStream_t stream);
// g: {out, a}. out = op(a, s); out may be a (in place).
void launch_unary(UnaryOp op, DType dtype, void* out, const void* a, double s, const Strided& g,
                  cudaStream_t stream);
// g: {out, cond, a, b}. out = cond ? a : b, copied as stored; cond is bool.
void launch_where(DType dtype, void* out, const bool* cond, const void* a, const void* b,
                  const Strided& g, cudaStream_t stream);
// g: {dst, src}. dst += alpha src | dst *= src | dst = src.
void launch_inplace(InplaceOp op, DType dtype, void* dst, const void* src, double alpha,
                    const Strided& g, cudaStream_t stream);
// g: {dst, a, b}. dst += value * (divide ? a / b : a * b).
void launch_addcmul(DType dtype, void* dst, const void* a, const void* b, double value, bool divide,
                    const Strided& g, cudaStream_t stream);
// g: {out, gate, up}. out = gate * sigmoid(gate) * up.
void launch_swiglu_forward(DType dtype, void* out, const void* gate, const void* up,
                           const Strided& g, cudaStream_t stream);
// g: {grad, gate, up, dgate, dup}; dgate / dup may be null (not written).
void launch_swiglu_backward(DType dtype, const void* grad, const void* gate, const void* up,
                            void* dgate, void* dup, const Strided& g, cudaStream_t stream);

}  // namespace cg::cuda
