// Why this file exists: the differentiable elementwise ops, the activations, where /
// masked_fill, and the Tensor operators. Binary ops broadcast like numpy; their
// backward sums each gradient back to its input's shape. Inputs must share a device and
// a floating dtype (no silent promotion); bf16/f16 are stored 16-bit and computed in fp32.
//
// What each op saves for backward is written next to it: only what the gradient formula
// needs, so graph_retained_bytes (autograd/graph_bytes.h) is the true cost of the graph.
// "Saves its output" ops (exp, sqrt, tanh, sigmoid, relu) let the input be freed.
//
// Definitions: ops/elementwise.cpp (arithmetic and math), ops/activation.cpp (relu,
// tanh, sigmoid, silu, gelu), ops/where.cpp (where, masked_fill); kernels in each
// device's table (ops/kernels.h; the CPU's loops in cpu/elementwise.cpp).
#pragma once

#include "core/tensor.h"

namespace cg {

// ---- arithmetic ----
Tensor add(const Tensor& a, const Tensor& b);  // saves nothing
Tensor sub(const Tensor& a, const Tensor& b);  // saves nothing
Tensor mul(const Tensor& a, const Tensor& b);  // saves b for a's grad, a for b's grad
Tensor div(const Tensor& a, const Tensor& b);  // saves b; and a too when b needs a grad
Tensor neg(const Tensor& a);                   // saves nothing
Tensor scale(const Tensor& a, double s);       // a * s; saves nothing
Tensor add_scalar(const Tensor& a, double s);  // a + s; saves nothing

// ---- math ----
Tensor exp(const Tensor& a);    // saves its output (d/da = out)
Tensor log(const Tensor& a);    // saves its input (d/da = 1 / a)
Tensor sqrt(const Tensor& a);   // saves its output (d/da = 0.5 / out)
Tensor rsqrt(const Tensor& a);  // 1 / sqrt(a); saves its output (d/da = -0.5 out^3)
// a ^ exponent; saves its input (d/da = exponent * a^(exponent - 1)); nothing when the
// exponent is 0 or 1.
Tensor pow(const Tensor& a, double exponent);
// a ^ b, broadcasting. Saves a and b when a needs a grad (b a^(b-1)); a and the output
// when b needs one (out * log a, taken as 0 where out is 0, so a = 0 gives no NaN).
Tensor pow(const Tensor& a, const Tensor& b);

// ---- activations ----
Tensor relu(const Tensor& a);     // saves its output (the mask's source)
Tensor tanh(const Tensor& a);     // saves its output (d/da = 1 - out^2)
Tensor sigmoid(const Tensor& a);  // saves its output (d/da = out (1 - out))
Tensor silu(const Tensor& a);     // a * sigmoid(a); saves its input (sigmoid recomputed)
enum class GeluApproximation {
  none,  // exact: 0.5 a (1 + erf(a / sqrt 2))
  tanh,  // 0.5 a (1 + tanh(sqrt(2/pi) (a + 0.044715 a^3))), as GPT-2 used
};
// Saves its input (the derivative is recomputed from it).
Tensor gelu(const Tensor& a, GeluApproximation approximate = GeluApproximation::none);

// ---- selection ----
// cond ? a : b elementwise; cond is a bool tensor; all three broadcast together. Saves
// cond only: a's gradient is g where cond, b's where not (each summed to its shape).
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
// x with `value` where mask is true; mask is bool and broadcasts to x's shape (the
// output has x's shape). Saves mask only; x's gradient is g with zeros where mask.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// ---- operators ----
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
Tensor operator+(const Tensor& a, double s);
Tensor operator+(double s, const Tensor& a);
Tensor operator-(const Tensor& a, double s);
Tensor operator-(double s, const Tensor& a);
Tensor operator*(const Tensor& a, double s);
Tensor operator*(double s, const Tensor& a);
Tensor operator/(const Tensor& a, double s);
Tensor operator/(double s, const Tensor& a);  // s * a^-1

}  // namespace cg
