// Why this file exists: the element types chunkgrad stores, and the exact rules for
// the two 16-bit float formats. bf16 and f16 are stored as 16-bit words and computed
// in fp32: every kernel loads them through to_float() and stores through from_float(),
// which rounds to nearest, ties to even, as CUDA's __float2bfloat16_rn/__float2half_rn do.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

namespace cg {

enum class DType : int8_t { f32, f64, f16, bf16, i32, i64, boolean };

size_t element_size(DType t);
const char* dtype_name(DType t);             // "f32", "bf16", ...
DType parse_dtype(const std::string& name);  // inverse of dtype_name; throws on unknown
inline bool is_floating(DType t) {
  return t == DType::f32 || t == DType::f64 || t == DType::f16 || t == DType::bf16;
}
inline bool is_half(DType t) { return t == DType::f16 || t == DType::bf16; }

// ---- 16-bit float formats --------------------------------------------------------

struct bf16 {
  uint16_t bits = 0;
};
struct f16 {
  uint16_t bits = 0;
};

inline uint32_t float_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline float bits_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// bf16 is the top half of an fp32; rounding adds 0x7FFF plus the lowest kept bit
// (ties to even). NaN stays NaN (quiet bit forced so a payload in the low half
// cannot round to infinity).
inline bf16 float_to_bf16(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7F800000u) == 0x7F800000u && (u & 0x007FFFFFu) != 0) {
    return bf16{static_cast<uint16_t>((u >> 16) | 0x0040u)};
  }
  u += 0x7FFFu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}
inline float bf16_to_float(bf16 h) { return bits_float(static_cast<uint32_t>(h.bits) << 16); }

// IEEE binary16: 1 sign, 5 exponent (bias 15), 10 mantissa bits; subnormals below
// 2^-14; values >= 65520 round to infinity.
f16 float_to_f16(float f);
float f16_to_float(f16 h);

inline float to_float(bf16 h) { return bf16_to_float(h); }
inline float to_float(f16 h) { return f16_to_float(h); }

}  // namespace cg
