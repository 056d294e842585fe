// Why this file exists: kernels are written once as templates over the element type;
// this turns a run-time DType into that type (visit_dtype) and holds the one set of
// element conversion rules (cast_element) that copies, printing and ops all share, so
// that a value converts the same way wherever it travels.
#pragma once

#include <cstdint>
#include <type_traits>

#include "core/dtype.h"
#include "core/error.h"

namespace cg {

// A value-less stand-in for a type, passed to visit_dtype's callback.
template <typename T>
struct TypeTag {
  using type = T;
};

// Calls f(TypeTag<T>{}) with T the C++ type stored for `dtype`:
//   visit_dtype(t.dtype(), [&](auto tag) { using T = typename decltype(tag)::type; ... });
template <typename F>
decltype(auto) visit_dtype(DType dtype, F&& f) {
  switch (dtype) {
    case DType::f32: return f(TypeTag<float>{});
    case DType::f64: return f(TypeTag<double>{});
    case DType::f16: return f(TypeTag<f16>{});
    case DType::bf16: return f(TypeTag<bf16>{});
    case DType::i32: return f(TypeTag<int32_t>{});
    case DType::i64: return f(TypeTag<int64_t>{});
    case DType::boolean: return f(TypeTag<bool>{});
  }
  CG_FAIL("unknown dtype code ", static_cast<int>(dtype));
}

template <typename T>
inline constexpr bool is_half_type_v = std::is_same_v<T, bf16> || std::is_same_v<T, f16>;

// x as a D. The rules: 16-bit floats are read and written through fp32 (round to
// nearest even); to bool is `x != 0` (NaN is true); float to int truncates toward zero
// (a C cast; out-of-range values are undefined, as in C); everything else is a C cast.
template <typename D, typename S>
inline D cast_element(S x) {
  if constexpr (std::is_same_v<D, S>) {
    return x;
  } else if constexpr (is_half_type_v<S>) {
    return cast_element<D>(to_float(x));
  } else if constexpr (std::is_same_v<D, bf16>) {
    return float_to_bf16(static_cast<float>(x));
  } else if constexpr (std::is_same_v<D, f16>) {
    return float_to_f16(static_cast<float>(x));
  } else if constexpr (std::is_same_v<D, bool>) {
    return x != static_cast<S>(0);
  } else {
    return static_cast<D>(x);
  }
}

}  // namespace cg
