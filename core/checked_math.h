// Why this file exists: shapes, strides, offsets and byte counts come from users and from
// files, and their products overflow 64 bits long before any machine runs out of memory
// ({2^61 + 1, 8} has 2^64 + 8 elements, which wraps to 8). Every place in core/ that
// multiplies or adds sizes does it through these, so an impossible size becomes a clear
// cg::Error instead of a small allocation and a segfault (or signed-overflow UB).
#pragma once

#include <optional>

namespace cg {

// a * b, or nullopt when the exact result does not fit T (signed or unsigned).
template <typename T>
std::optional<T> checked_mul(T a, T b) {
  T out;
  if (__builtin_mul_overflow(a, b, &out)) return std::nullopt;
  return out;
}

// a + b, or nullopt when the exact result does not fit T.
template <typename T>
std::optional<T> checked_add(T a, T b) {
  T out;
  if (__builtin_add_overflow(a, b, &out)) return std::nullopt;
  return out;
}

}  // namespace cg
