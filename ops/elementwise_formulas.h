// Why this file exists: what happens to ONE element in each elementwise op, each
// activation's backward, the in-place updates and swiglu, written once for every device.
// The CPU loops (cpu/elementwise.cpp, cpu/swiglu.cpp) and the CUDA kernels (cuda/*.cu,
// through cuda/device_math.cuh) call these same functions, so a formula cannot drift
// between the tables. C is the compute type (float for f32/bf16/f16, double for f64; see
// Note [Compute types] in cpu/loops.h).
//
// Note [Formulas on the host and the device]: every function is CG_FORMULA, which is
// `__host__ __device__ __forceinline__` under nvcc and plain `inline` for the host
// compiler, so the CPU build needs no CUDA header. The few library calls (exp, log, ...)
// go through m_exp and friends: on the host they are the std:: overloads the CPU always
// called, on the device the CUDA math functions the kernels always called, so neither
// side's results changed when the two copies became this one (tools/formula_hash.sh
// checks the CPU bit for bit against an older tree).
// Internal to the device tables: not a public header.
#pragma once

#include <cmath>

#include "ops/kernels.h"

#if defined(__CUDACC__)
#define CG_HOST_DEVICE __host__ __device__
#define CG_FORMULA __host__ __device__ __forceinline__
#else
#define CG_HOST_DEVICE
#define CG_FORMULA inline
#endif

namespace cg::formulas {

// ---- library math in the compute type (Note [Formulas on the host and the device]) ----

// One float and one double overload each, the same in nvcc's host and device passes;
// only the body differs between them.
#if defined(__CUDA_ARCH__)
#define CG_MATH_ON_SIDE(device_call, host_call) return device_call
#else
#define CG_MATH_ON_SIDE(device_call, host_call) return host_call
#endif
CG_FORMULA float m_exp(float x) { CG_MATH_ON_SIDE(::expf(x), std::exp(x)); }
CG_FORMULA double m_exp(double x) { CG_MATH_ON_SIDE(::exp(x), std::exp(x)); }
CG_FORMULA float m_log(float x) { CG_MATH_ON_SIDE(::logf(x), std::log(x)); }
CG_FORMULA double m_log(double x) { CG_MATH_ON_SIDE(::log(x), std::log(x)); }
CG_FORMULA float m_sqrt(float x) { CG_MATH_ON_SIDE(::sqrtf(x), std::sqrt(x)); }
CG_FORMULA double m_sqrt(double x) { CG_MATH_ON_SIDE(::sqrt(x), std::sqrt(x)); }
CG_FORMULA float m_tanh(float x) { CG_MATH_ON_SIDE(::tanhf(x), std::tanh(x)); }
CG_FORMULA double m_tanh(double x) { CG_MATH_ON_SIDE(::tanh(x), std::tanh(x)); }
CG_FORMULA float m_erf(float x) { CG_MATH_ON_SIDE(::erff(x), std::erf(x)); }
CG_FORMULA double m_erf(double x) { CG_MATH_ON_SIDE(::erf(x), std::erf(x)); }
CG_FORMULA float m_pow(float a, float b) { CG_MATH_ON_SIDE(::powf(a, b), std::pow(a, b)); }
CG_FORMULA double m_pow(double a, double b) { CG_MATH_ON_SIDE(::pow(a, b), std::pow(a, b)); }
#undef CG_MATH_ON_SIDE

template <typename C>
inline constexpr C kSqrtHalf = C(0.70710678118654752440);  // 1 / sqrt(2)
template <typename C>
inline constexpr C kInvSqrt2Pi = C(0.39894228040143267794);  // 1 / sqrt(2 pi)
template <typename C>
inline constexpr C kSqrt2OverPi = C(0.79788456080286535588);  // sqrt(2 / pi)
template <typename C>
inline constexpr C kGeluCubic = C(0.044715);

// ---- activations and their derivatives --------------------------------------------------

// 1 / (1 + e^-x) without overflow: e^-x is only formed for x >= 0.
template <typename C>
CG_FORMULA C sigmoid_of(C x) {
  if (x >= C(0)) return C(1) / (C(1) + m_exp(-x));
  const C e = m_exp(x);
  return e / (C(1) + e);
}

// 1 / (1 + e^-x) as written, swiglu's sigmoid (e^-x may overflow to inf: the result is
// then 0, which is the limit).
template <typename C>
CG_FORMULA C plain_sigmoid_of(C x) {
  return C(1) / (C(1) + m_exp(-x));
}

// a^s with the common exponents exact and cheap.
template <typename C>
CG_FORMULA C pow_of(C a, C s) {
  if (s == C(2)) return a * a;
  if (s == C(1)) return a;
  if (s == C(0.5)) return m_sqrt(a);
  if (s == C(-1)) return C(1) / a;
  if (s == C(3)) return a * a * a;
  return m_pow(a, s);
}

template <typename C>
CG_FORMULA C gelu_of(C x) {
  return C(0.5) * x * (C(1) + m_erf(x * kSqrtHalf<C>));
}

template <typename C>
CG_FORMULA C gelu_tanh_of(C x) {
  const C u = kSqrt2OverPi<C> * (x + kGeluCubic<C> * x * x * x);
  return C(0.5) * x * (C(1) + m_tanh(u));
}

// d gelu / dx = Phi(x) + x phi(x).
template <typename C>
CG_FORMULA C gelu_grad_of(C x) {
  const C cdf = C(0.5) * (C(1) + m_erf(x * kSqrtHalf<C>));
  const C pdf = kInvSqrt2Pi<C> * m_exp(C(-0.5) * x * x);
  return cdf + x * pdf;
}

// d/dx of 0.5 x (1 + tanh u), u = k (x + c x^3):  0.5 (1 + t) + 0.5 x (1 - t^2) k (1 + 3 c x^2).
template <typename C>
CG_FORMULA C gelu_tanh_grad_of(C x) {
  const C u = kSqrt2OverPi<C> * (x + kGeluCubic<C> * x * x * x);
  const C t = m_tanh(u);
  const C du = kSqrt2OverPi<C> * (C(1) + C(3) * kGeluCubic<C> * x * x);
  return C(0.5) * (C(1) + t) + C(0.5) * x * (C(1) - t * t) * du;
}

// ---- the table entries' per-element rules ------------------------------------------------

template <typename C>
CG_FORMULA C apply_unary(UnaryOp op, C a, C s) {
  switch (op) {
    case UnaryOp::neg: return -a;
    case UnaryOp::scale: return a * s;
    case UnaryOp::add_scalar: return a + s;
    case UnaryOp::relu: return a > C(0) ? a : C(0);
    case UnaryOp::exp: return m_exp(a);
    case UnaryOp::log: return m_log(a);
    case UnaryOp::sqrt: return m_sqrt(a);
    case UnaryOp::rsqrt: return C(1) / m_sqrt(a);
    case UnaryOp::pow: return pow_of(a, s);
    case UnaryOp::tanh: return m_tanh(a);
    case UnaryOp::sigmoid: return sigmoid_of(a);
    case UnaryOp::silu: return a * sigmoid_of(a);
    case UnaryOp::gelu: return gelu_of(a);
    case UnaryOp::gelu_tanh: return gelu_tanh_of(a);
  }
  return C(0);
}

template <typename C>
CG_FORMULA C apply_binary(BinaryOp op, C a, C b) {
  switch (op) {
    case BinaryOp::add: return a + b;
    case BinaryOp::sub: return a - b;
    case BinaryOp::mul: return a * b;
    case BinaryOp::relu_backward: return b > C(0) ? a : C(0);
    case BinaryOp::div: return a / b;
    case BinaryOp::pow: return m_pow(a, b);
    case BinaryOp::xlogy: return a == C(0) ? C(0) : a * m_log(b);
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

// The new value of dst for an in-place update with src (already broadcast) and alpha.
template <typename C>
CG_FORMULA C apply_inplace(InplaceOp op, C dst, C src, C alpha) {
  switch (op) {
    case InplaceOp::add: return dst + alpha * src;
    case InplaceOp::mul: return dst * src;
    case InplaceOp::copy: return src;
  }
  return dst;
}

// addcmul's new dst: dst + value * (a * b), or dst + value * (a / b) when divide.
template <typename C>
CG_FORMULA C addcmul_of(C dst, C a, C b, C value, bool divide) {
  return dst + value * (divide ? a / b : a * b);
}

// swiglu: out = gate * sig(gate) * up; its gradients for the incoming gradient g.
template <typename C>
CG_FORMULA C swiglu_of(C gate, C up) {
  return gate * plain_sigmoid_of(gate) * up;
}
// Both gradients at once (one sigmoid): d out / d gate and d out / d up, times g.
template <typename C>
CG_FORMULA void swiglu_grads_of(C g, C gate, C up, C& dgate, C& dup) {
  const C s = plain_sigmoid_of(gate);
  dgate = g * up * s * (C(1) + gate * (C(1) - s));
  dup = g * gate * s;
}

}  // namespace cg::formulas
