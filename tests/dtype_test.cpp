// Why this file exists: the exact conversion rules of chunkgrad's element types. bf16 and
// f16 are checked bit pattern by bit pattern, and at the rounding edge cases (ties to
// even, overflow, subnormals) where hand-written conversions usually go wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "core/dtype.h"
#include "core/dtype_dispatch.h"
#include "tensor_test_helpers.h"

namespace cg {
namespace {

const DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16,    DType::bf16,
                            DType::i32, DType::i64, DType::boolean};

TEST(DType, NamesAndSizes) {
  EXPECT_STREQ(dtype_name(DType::f32), "f32");
  EXPECT_STREQ(dtype_name(DType::f64), "f64");
  EXPECT_STREQ(dtype_name(DType::f16), "f16");
  EXPECT_STREQ(dtype_name(DType::bf16), "bf16");
  EXPECT_STREQ(dtype_name(DType::i32), "i32");
  EXPECT_STREQ(dtype_name(DType::i64), "i64");
  EXPECT_STREQ(dtype_name(DType::boolean), "bool");
  EXPECT_EQ(element_size(DType::f32), 4u);
  EXPECT_EQ(element_size(DType::f64), 8u);
  EXPECT_EQ(element_size(DType::f16), 2u);
  EXPECT_EQ(element_size(DType::bf16), 2u);
  EXPECT_EQ(element_size(DType::i32), 4u);
  EXPECT_EQ(element_size(DType::i64), 8u);
  EXPECT_EQ(element_size(DType::boolean), 1u);
  EXPECT_TRUE(is_floating(DType::bf16));
  EXPECT_FALSE(is_floating(DType::i64));
  EXPECT_TRUE(is_half(DType::f16));
  EXPECT_FALSE(is_half(DType::f32));
}

TEST(DType, ParseIsTheInverseOfName) {
  for (DType t : kAllDTypes) EXPECT_EQ(parse_dtype(dtype_name(t)), t);
  TENSOR_EXPECT_ERROR(parse_dtype("float32"), "float32", "bf16");
}

TEST(DType, VisitGivesTheStoredType) {
  for (DType t : kAllDTypes) {
    const size_t size =
        visit_dtype(t, [](auto tag) { return sizeof(typename decltype(tag)::type); });
    EXPECT_EQ(size, element_size(t)) << dtype_name(t);
  }
}

TEST(DType, EveryBf16PatternRoundTrips) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const bf16 h{static_cast<uint16_t>(bits)};
    const float f = bf16_to_float(h);
    const bf16 back = float_to_bf16(f);
    if (std::isnan(f)) {
      EXPECT_TRUE(std::isnan(bf16_to_float(back))) << "bits " << bits;
    } else {
      ASSERT_EQ(back.bits, h.bits) << "bits " << bits << " value " << f;
    }
  }
}

TEST(DType, EveryF16PatternRoundTrips) {
  for (uint32_t bits = 0; bits < 65536; ++bits) {
    const f16 h{static_cast<uint16_t>(bits)};
    const float f = f16_to_float(h);
    const f16 back = float_to_f16(f);
    if (std::isnan(f)) {
      EXPECT_EQ(bits & 0x7C00u, 0x7C00u);
      EXPECT_TRUE(std::isnan(f16_to_float(back))) << "bits " << bits;
    } else {
      ASSERT_EQ(back.bits, h.bits) << "bits " << bits << " value " << f;
    }
  }
  // Spot values, so the round trip is not trivially right by being wrong both ways.
  EXPECT_EQ(f16_to_float(f16{0x3C00}), 1.0f);
  EXPECT_EQ(f16_to_float(f16{0xC000}), -2.0f);
  EXPECT_EQ(f16_to_float(f16{0x7BFF}), 65504.0f);
  EXPECT_EQ(f16_to_float(f16{0x0001}), std::ldexp(1.0f, -24));
  EXPECT_EQ(f16_to_float(f16{0x7C00}), std::numeric_limits<float>::infinity());
}

TEST(DType, Bf16RoundsToNearestEven) {
  const float ulp = std::ldexp(1.0f, -7);  // bf16 spacing in [1, 2)
  auto round = [](float f) { return bf16_to_float(float_to_bf16(f)); };
  EXPECT_EQ(float_to_bf16(1.0f).bits, 0x3F80);
  EXPECT_EQ(bf16_to_float(bf16{0x3F80}), 1.0f);
  EXPECT_EQ(round(1.0f + ulp / 2), 1.0f);                                // tie, 1.0 is even
  EXPECT_EQ(round(1.0f + 3 * ulp / 2), 1.0f + 2 * ulp);                  // tie, 1 + 2^-6 is even
  EXPECT_EQ(round(1.0f + ulp / 2 + std::ldexp(1.0f, -20)), 1.0f + ulp);  // above the tie
  EXPECT_EQ(round(1.0f + ulp / 2 - std::ldexp(1.0f, -20)), 1.0f);        // below it
  EXPECT_EQ(round(-1.0f - 3 * ulp / 2), -1.0f - 2 * ulp);                // symmetric for negatives
  EXPECT_EQ(round(0.1f), 0.10009765625f);
  // The largest floats round up to infinity; NaN stays NaN; -0 keeps its sign.
  EXPECT_TRUE(std::isinf(round(std::numeric_limits<float>::max())));
  EXPECT_TRUE(std::isnan(round(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(float_to_bf16(-0.0f).bits, 0x8000);
  EXPECT_TRUE(std::signbit(round(-0.0f)));
  // A NaN whose payload sits only in the low half must not become infinity.
  EXPECT_TRUE(std::isnan(round(bits_float(0x7F800001u))));
}

TEST(DType, F16RoundsToNearestEven) {
  const float ulp = std::ldexp(1.0f, -10);  // f16 spacing in [1, 2)
  auto round = [](float f) { return f16_to_float(float_to_f16(f)); };
  EXPECT_EQ(float_to_f16(1.0f).bits, 0x3C00);
  EXPECT_EQ(round(1.0f + ulp / 2), 1.0f);
  EXPECT_EQ(round(1.0f + 3 * ulp / 2), 1.0f + 2 * ulp);
  EXPECT_EQ(round(1.0f + ulp / 2 + std::ldexp(1.0f, -20)), 1.0f + ulp);
}

TEST(DType, F16OverflowsAtItsRoundingBoundary) {
  auto round = [](float f) { return f16_to_float(float_to_f16(f)); };
  EXPECT_EQ(round(65504.0f), 65504.0f);
  EXPECT_EQ(round(65519.0f), 65504.0f);
  EXPECT_EQ(round(65519.996f), 65504.0f);
  EXPECT_EQ(float_to_f16(65520.0f).bits, 0x7C00);
  EXPECT_EQ(float_to_f16(-65520.0f).bits, 0xFC00);
  EXPECT_EQ(float_to_f16(1e10f).bits, 0x7C00);
  EXPECT_EQ(float_to_f16(std::numeric_limits<float>::infinity()).bits, 0x7C00);
  EXPECT_TRUE(std::isnan(round(std::numeric_limits<float>::quiet_NaN())));
}

TEST(DType, F16Subnormals) {
  auto round = [](float f) { return f16_to_float(float_to_f16(f)); };
  const float unit = std::ldexp(1.0f, -24);  // smallest f16 subnormal
  EXPECT_EQ(float_to_f16(unit).bits, 0x0001);
  EXPECT_EQ(round(unit), unit);
  EXPECT_EQ(float_to_f16(unit / 2).bits, 0x0000);            // tie to even: zero
  EXPECT_EQ(float_to_f16(unit / 2 * 1.0001f).bits, 0x0001);  // above the tie
  EXPECT_EQ(float_to_f16(unit / 4).bits, 0x0000);
  EXPECT_EQ(round(1.5f * unit), 2 * unit);  // tie to even: 2
  EXPECT_EQ(round(2.5f * unit), 2 * unit);  // tie to even: 2
  EXPECT_EQ(round(3.0f * unit), 3 * unit);
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -14)).bits, 0x0400);  // smallest normal
  // Largest subnormal + half a unit ties up into the smallest normal (0x0400 is even).
  EXPECT_EQ(float_to_f16(std::ldexp(1.0f, -14) - unit / 2).bits, 0x0400);
  EXPECT_EQ(float_to_f16(-unit).bits, 0x8001);
  EXPECT_EQ(float_to_f16(-unit / 4).bits, 0x8000);  // rounds to -0
  EXPECT_EQ(float_to_f16(-0.0f).bits, 0x8000);
  EXPECT_TRUE(std::signbit(round(-0.0f)));
}

TEST(DType, CastElementRules) {
  EXPECT_EQ(cast_element<int32_t>(-1.7), -1);  // toward zero, like a C cast
  EXPECT_EQ(cast_element<int32_t>(2.9f), 2);
  EXPECT_EQ(cast_element<int64_t>(bf16{0x4040}), 3);  // bf16 3.0
  EXPECT_TRUE(cast_element<bool>(0.5));
  EXPECT_FALSE(cast_element<bool>(0.0));
  EXPECT_FALSE(cast_element<bool>(-0.0f));
  EXPECT_TRUE(cast_element<bool>(bf16{0x3F80}));
  EXPECT_EQ(cast_element<double>(true), 1.0);
  EXPECT_EQ(cast_element<bf16>(1.0 + 1.0 / 256).bits, 0x3F80);  // through float, ties even
  EXPECT_EQ(cast_element<f16>(bf16{0x3F80}).bits, 0x3C00);
  EXPECT_EQ(cast_element<float>(int64_t{16777217}), 16777216.0f);
}

}  // namespace
}  // namespace cg
