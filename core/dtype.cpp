// Why this file exists: names of dtypes and the IEEE half-precision conversions
// (bf16's are one-liners in the header; f16 needs subnormal and overflow handling).
#include "core/dtype.h"

#include "core/error.h"

namespace cg {

size_t element_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::f16: return 2;
    case DType::bf16: return 2;
    case DType::i32: return 4;
    case DType::i64: return 8;
    case DType::boolean: return 1;
  }
  CG_FAIL("unknown dtype");
}

const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::f16: return "f16";
    case DType::bf16: return "bf16";
    case DType::i32: return "i32";
    case DType::i64: return "i64";
    case DType::boolean: return "bool";
  }
  return "?";
}

DType parse_dtype(const std::string& name) {
  for (DType t :
       {DType::f32, DType::f64, DType::f16, DType::bf16, DType::i32, DType::i64, DType::boolean}) {
    if (name == dtype_name(t)) return t;
  }
  CG_FAIL("unknown dtype '", name, "': expected one of f32, f64, f16, bf16, i32, i64, bool");
}

f16 float_to_f16(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t abs = u & 0x7FFFFFFFu;
  if (abs >= 0x7F800000u) {  // inf or NaN
    const bool nan = abs > 0x7F800000u;
    return f16{
        static_cast<uint16_t>(sign | 0x7C00u | (nan ? 0x0200u | ((abs >> 13) & 0x3FFu) : 0u))};
  }
  if (abs >= 0x477FF000u) return f16{static_cast<uint16_t>(sign | 0x7C00u)};  // >= 65520: inf
  if (abs < 0x38800000u) {  // below 2^-14: subnormal (or zero) in half
    // Value = abs_float; half subnormal unit = 2^-24. Round abs_float / 2^-24 to even.
    if (abs < 0x33000000u) return f16{sign};  // < 2^-25: rounds to zero (2^-25 ties to 0)
    const uint32_t exp = abs >> 23;           // biased fp32 exponent, 102..112
    const uint32_t mant = (abs & 0x7FFFFFu) | 0x800000u;  // 24-bit significand
    const uint32_t shift = 126 - exp;  // so that mant >> shift is in units of 2^-24
    uint32_t q = mant >> shift;
    const uint32_t rem = mant & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) q += 1;
    return f16{static_cast<uint16_t>(sign | q)};
  }
  // Normal: rebias exponent 127 -> 15, keep 10 mantissa bits, round to nearest even.
  uint32_t v = abs - 0x38000000u;  // exponent rebias (112 << 23)
  v += 0x0FFFu + ((v >> 13) & 1u);
  return f16{static_cast<uint16_t>(sign | (v >> 13))};
}

float f16_to_float(f16 h) {
  const uint32_t sign = static_cast<uint32_t>(h.bits & 0x8000u) << 16;
  const uint32_t exp = (h.bits >> 10) & 0x1Fu;
  const uint32_t mant = h.bits & 0x3FFu;
  if (exp == 0x1F) return bits_float(sign | 0x7F800000u | (mant << 13));
  if (exp == 0) {
    // subnormal or zero: mant * 2^-24
    const float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

}  // namespace cg
