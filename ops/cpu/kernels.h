// Why this file exists: the CPU kernels behind every op, as plain functions on tensors
// (no autograd, no dispatch). Each op's entry point (ops/*.cpp) switches on the device
// and calls cpu::X here; a CUDA kernel with the same signature plugs into the other
// case of that switch without touching any caller. Inputs have been checked by then
// (same device, same floating dtype, compatible shapes).
// Internal to ops/: not a public header.
#pragma once

#include <vector>

#include "core/tensor.h"

namespace cg {

// Elementwise binary ops; out = op(a, b) with numpy broadcasting.
enum class BinaryOp {
  add,            // a + b
  sub,            // a - b
  mul,            // a * b
  relu_backward,  // b > 0 ? a : 0  (a = gradient, b = relu's output)
  div,            // a / b
  pow,            // a ^ b
  xlogy,          // a == 0 ? 0 : a * log(b)  (pow's exponent gradient: out * log(base))
  // Backward of a unary op: a = the gradient, b = what the op saved (y = its output,
  // x = its input). Formulas in ops/cpu/elementwise_math.h.
  sqrt_backward,       // a * 0.5 / y
  rsqrt_backward,      // a * -0.5 * y^3
  tanh_backward,       // a * (1 - y^2)
  sigmoid_backward,    // a * y * (1 - y)
  silu_backward,       // a * s * (1 + x (1 - s)),  s = sigmoid(x)
  gelu_backward,       // a * (Phi(x) + x phi(x))
  gelu_tanh_backward,  // a * d/dx of gelu's tanh approximation
};
// Elementwise unary ops with one scalar parameter s.
enum class UnaryOp {
  neg,         // -a
  scale,       // a * s
  add_scalar,  // a + s
  relu,        // max(a, 0)
  exp,         // e^a
  log,         // ln a
  sqrt,        // a^(1/2)
  rsqrt,       // a^(-1/2)
  pow,         // a^s
  tanh,        // tanh a
  sigmoid,     // 1 / (1 + e^-a)
  silu,        // a * sigmoid(a)
  gelu,        // 0.5 a (1 + erf(a / sqrt 2))
  gelu_tanh,   // 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3)))
};
// In-place updates of dst (src broadcast to dst's shape).
enum class InplaceOp {
  add,      // dst += alpha * src
  mul,      // dst *= src
  copy,     // dst = src
};

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

}  // namespace cpu
}  // namespace cg
