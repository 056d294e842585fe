// Why this file exists: the CPU elementwise, matmul and sum kernels, as plain functions on
// tensors (no autograd, no dispatch). cpu/cpu_kernels.cpp puts them into the CPU's
// kernel table (ops/kernels.h), whose contract they follow: inputs checked by the op,
// outputs contiguous and allocator-accounted.
// Internal to ops/: not a public header.
#pragma once

#include <vector>

#include "core/tensor.h"
#include "ops/kernels.h"

namespace cg {
namespace cpu {

Tensor binary(BinaryOp op, const Tensor& a, const Tensor& b);
Tensor unary(UnaryOp op, const Tensor& a, double s);
void inplace(InplaceOp op, const Tensor& dst, const Tensor& src, double alpha);
void inplace_scalar(UnaryOp op, const Tensor& dst, double s);  // dst = op(dst, s)
// dst += value * a * b (divide = false) or dst += value * a / b (divide = true).
void addcmul_(const Tensor& dst, const Tensor& a, const Tensor& b, double value, bool divide);
// out = cond ? a : b with numpy broadcasting of all three; cond is bool, a and b share a
// floating dtype (where, masked_fill and both their backwards).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// Batched matrix product: a [..., n, k] @ b [..., k, m] -> [batch..., n, m], batch dims
// broadcast. Both have dim >= 2.
Tensor matmul(const Tensor& a, const Tensor& b);

// scale * sum of a over the dims where reduce[d] is true; keepdim keeps them as 1.
Tensor sum(const Tensor& a, const std::vector<bool>& reduce, bool keepdim, double scale);

// ops/kernels.h's adamw_step (cpu/adamw.cpp).
void adamw_step(const std::vector<Tensor>& params, const std::vector<Tensor>& masters,
                const std::vector<Tensor>& grads, const std::vector<Tensor>& exp_avgs,
                const std::vector<Tensor>& exp_avg_sqs, const Tensor& grad_scale,
                const AdamWArgs& args);

}  // namespace cpu
}  // namespace cg
