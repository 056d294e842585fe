// Why this file exists: the one strided loop every CPU kernel is written with, and the
// dtype dispatch that turns a runtime DType into a C++ type. Kernels stay short: they
// say what happens to one element; this file walks shapes, strides and broadcasts.
//
// Note [Compute types]: f64 computes in double; f32, bf16 and f16 compute in float
// (16-bit values are loaded with to_float() and stored rounded to nearest even), as the
// CUDA kernels will. Reductions accumulate in double.
// Internal to ops/: not a public header.
#pragma once

#include <array>
#include <cstdint>
#include <type_traits>

#include "core/tensor.h"

namespace cg::cpu {

template <typename T>
using compute_t = std::conditional_t<std::is_same_v<T, double>, double, float>;

template <typename T>
inline compute_t<T> load(const T* p) {
  if constexpr (std::is_same_v<T, bf16> || std::is_same_v<T, f16>) {
    return to_float(*p);
  } else {
    return *p;
  }
}

template <typename T>
inline void store(T* p, compute_t<T> v) {
  if constexpr (std::is_same_v<T, bf16>) {
    *p = float_to_bf16(v);
  } else if constexpr (std::is_same_v<T, f16>) {
    *p = float_to_f16(v);
  } else {
    *p = v;
  }
}

// Calls body.template operator()<T>() with T the storage type of `dtype` (floating
// dtypes only); `op` names the caller in the error.
template <typename Body>
decltype(auto) dispatch_floating(DType dtype, const char* op, Body&& body) {
  switch (dtype) {
    case DType::f32: return body.template operator()<float>();
    case DType::f64: return body.template operator()<double>();
    case DType::bf16: return body.template operator()<bf16>();
    case DType::f16: return body.template operator()<f16>();
    default: break;
  }
  CG_FAIL(op, ": dtype ", dtype_name(dtype),
          " is not supported; it computes on f32, f64, bf16 "
          "and f16 tensors");
}

// Strides of t viewed at `shape` under numpy broadcasting: dims are aligned from the
// right; a dim t lacks, or has as 1 while shape has more, gets stride 0.
inline Shape broadcast_strides(const Tensor& t, const Shape& shape) {
  const size_t nd = shape.size(), td = t.shape().size();
  Shape strides(nd, 0);
  for (size_t i = 0; i < td; ++i) {
    const size_t o = nd - td + i;
    strides[o] = (t.shape()[i] == 1 && shape[o] != 1) ? 0 : t.strides()[i];
  }
  return strides;
}

// Calls f(offsets) for every index of `shape` in row-major order, where offsets[k] is
// sum(index * strides[k]) -- the element offset of operand k. The last dim is the
// inner loop.
template <size_t N, typename F>
void strided_loop(const Shape& shape, const std::array<Shape, N>& strides, F&& f) {
  const int64_t nd = static_cast<int64_t>(shape.size());
  for (int64_t s : shape) {
    if (s == 0) return;
  }
  std::array<int64_t, N> offsets{};
  if (nd == 0) {
    f(offsets);
    return;
  }
  const int64_t inner = shape[nd - 1];
  std::array<int64_t, N> inner_stride;
  for (size_t k = 0; k < N; ++k) inner_stride[k] = strides[k][nd - 1];
  Shape index(nd, 0);
  while (true) {
    std::array<int64_t, N> o = offsets;
    for (int64_t i = 0; i < inner; ++i) {
      f(o);
      for (size_t k = 0; k < N; ++k) o[k] += inner_stride[k];
    }
    // Odometer over the outer dims.
    int64_t d = nd - 2;
    for (; d >= 0; --d) {
      index[d] += 1;
      for (size_t k = 0; k < N; ++k) offsets[k] += strides[k][d];
      if (index[d] < shape[d]) break;
      for (size_t k = 0; k < N; ++k) offsets[k] -= strides[k][d] * shape[d];
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace cg::cpu
