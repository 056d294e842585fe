// Why this file exists: what happens to ONE element in each elementwise op and each
// activation's backward, kept apart from the loops that walk tensors (cpu/
// elementwise.cpp) so the formulas can be read, and later ported to CUDA, in one place.
// C is the compute type (float for f32/bf16/f16, double for f64; see Note [Compute
// types] in cpu/loops.h).
// Internal to ops/: not a public header.
#pragma once

#include <cmath>

#include "ops/kernels.h"

namespace cg::cpu {

template <typename C>
inline constexpr C kSqrtHalf = C(0.70710678118654752440);  // 1 / sqrt(2)
template <typename C>
inline constexpr C kInvSqrt2Pi = C(0.39894228040143267794);  // 1 / sqrt(2 pi)
template <typename C>
inline constexpr C kSqrt2OverPi = C(0.79788456080286535588);  // sqrt(2 / pi)
template <typename C>
inline constexpr C kGeluCubic = C(0.044715);

// 1 / (1 + e^-x) without overflow: e^-x is only formed for x >= 0.
template <typename C>
inline C sigmoid_of(C x) {
  if (x >= C(0)) return C(1) / (C(1) + std::exp(-x));
  const C e = std::exp(x);
  return e / (C(1) + e);
}

// a^s with the common exponents exact and cheap.
template <typename C>
inline C pow_of(C a, C s) {
  if (s == C(2)) return a * a;
  if (s == C(1)) return a;
  if (s == C(0.5)) return std::sqrt(a);
  if (s == C(-1)) return C(1) / a;
  if (s == C(3)) return a * a * a;
  return std::pow(a, s);
}

template <typename C>
inline C gelu_of(C x) {
  return C(0.5) * x * (C(1) + std::erf(x * kSqrtHalf<C>));
}

template <typename C>
inline C gelu_tanh_of(C x) {
  const C u = kSqrt2OverPi<C> * (x + kGeluCubic<C> * x * x * x);
  return C(0.5) * x * (C(1) + std::tanh(u));
}

// d gelu / dx = Phi(x) + x phi(x).
template <typename C>
inline C gelu_grad_of(C x) {
  const C cdf = C(0.5) * (C(1) + std::erf(x * kSqrtHalf<C>));
  const C pdf = kInvSqrt2Pi<C> * std::exp(C(-0.5) * x * x);
  return cdf + x * pdf;
}

// d/dx of 0.5 x (1 + tanh u), u = k (x + c x^3):  0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2).
template <typename C>
inline C gelu_tanh_grad_of(C x) {
  const C u = kSqrt2OverPi<C> * (x + kGeluCubic<C> * x * x * x);
  const C t = std::tanh(u);
  const C du = kSqrt2OverPi<C> * (C(1) + C(3) * kGeluCubic<C> * x * x);
  return C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * du;
}

template <typename C>
inline C apply_unary(UnaryOp op, C a, C s) {
  switch (op) {
    case UnaryOp::neg: return -a;
    case UnaryOp::scale: return a * s;
    case UnaryOp::add_scalar: return a + s;
    case UnaryOp::relu: return a > C(0) ? a : C(0);
    case UnaryOp::exp: return std::exp(a);
    case UnaryOp::log: return std::log(a);
    case UnaryOp::sqrt: return std::sqrt(a);
    case UnaryOp::rsqrt: return C(1) / std::sqrt(a);
    case UnaryOp::pow: return pow_of(a, s);
    case UnaryOp::tanh: return std::tanh(a);
    case UnaryOp::sigmoid: return sigmoid_of(a);
    case UnaryOp::silu: return a * sigmoid_of(a);
    case UnaryOp::gelu: return gelu_of(a);
    case UnaryOp::gelu_tanh: return gelu_tanh_of(a);
  }
  return C(0);
}

template <typename C>
inline C apply_binary(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::relu_backward: return b > C(0) ? a : C(0);
    case BinaryOp::div: return a / b;
    case BinaryOp::pow: return std::pow(a, b);
    case BinaryOp::xlogy: return a == C(0) ? C(0) : a * std::log(b);
    case BinaryOp::sqrt_backward: return a * C(0.5) / b;
    case BinaryOp::rsqrt_backward: return a * C(-0.5) * b * b * b;
    case BinaryOp::tanh_backward: return a * (C(1) - b * b);
    case BinaryOp::sigmoid_backward: return a * b * (C(1) - b);
    case BinaryOp::silu_backward: {
      const C s = sigmoid_of(b);
      return a * s * (C(1) + b * (C(1) - s));
    }
    case BinaryOp::gelu_backward: return a * gelu_grad_of(b);
    case BinaryOp::gelu_tanh_backward: return a * gelu_tanh_grad_of(b);
  }
  return C(0);
}

}  // namespace cg::cpu
