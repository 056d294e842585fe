// Why this file exists: an in-place op whose source shares memory with its destination
// used to give silently wrong values (add_(x, transpose(x, 0, 1)) read elements it had
// already overwritten; copy_(z[1:], z[:4]) on 1..5 gave 1 1 1 1 1). These tests pin down
// core/overlap.h (Note [Memory overlap]) and that every in-place entry point asks it:
// partial overlap and writes into self-overlapping tensors are refused with an error that
// says to clone(), exact aliasing computes the right thing, and raw::copy_ keeps its
// memmove semantics.
#include <gtest/gtest.h>

#include "core/factories.h"
#include "core/overlap.h"
#include "core/views.h"
#include "error_helpers.h"
#include "ops/ops.h"

namespace cg {
namespace {

using V = std::vector<double>;

Tensor one_to(int64_t n, const Shape& shape) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[static_cast<size_t>(i)] = static_cast<double>(i + 1);
  return from_vector(v, shape);
}

// ---- core/overlap.h ------------------------------------------------------------------

TEST(MemoryOverlap, ClassifiesViewsOfOneStorage) {
  const Tensor x = one_to(9, {3, 3});
  EXPECT_EQ(memory_overlap(x, one_to(9, {3, 3})), MemOverlap::none);  // another storage
  EXPECT_EQ(memory_overlap(x, x), MemOverlap::full);
  EXPECT_EQ(memory_overlap(x, raw::view(x, {3, 3})), MemOverlap::full);  // another impl
  EXPECT_EQ(memory_overlap(raw::transpose(x, 0, 1), raw::transpose(x, 0, 1)), MemOverlap::full);
  EXPECT_EQ(memory_overlap(x, raw::transpose(x, 0, 1)), MemOverlap::partial);
  // A row broadcast over the tensor it belongs to: row 0 is read after it is written.
  EXPECT_EQ(memory_overlap(x, raw::narrow(x, 0, 0, 1)), MemOverlap::partial);
  // Disjoint ranges; and interleaved columns whose ranges meet but share no element.
  EXPECT_EQ(memory_overlap(raw::narrow(x, 0, 0, 1), raw::narrow(x, 0, 2, 1)), MemOverlap::none);
  EXPECT_EQ(memory_overlap(raw::narrow(x, 1, 0, 1), raw::narrow(x, 1, 1, 1)), MemOverlap::none);
  EXPECT_EQ(memory_overlap(raw::narrow(x, 1, 0, 2), raw::narrow(x, 1, 1, 2)), MemOverlap::partial);
  // Size-1 dims are never stepped over: their strides do not matter.
  EXPECT_EQ(
      memory_overlap(raw::as_strided(x, {1, 3}, {3, 1}, 3), raw::as_strided(x, {1, 3}, {7, 1}, 3)),
      MemOverlap::full);
  // Empty tensors touch no memory.
  EXPECT_EQ(memory_overlap(raw::narrow(x, 0, 0, 0), x), MemOverlap::none);
}

TEST(MemoryOverlap, ComparesBytesAcrossDtypes) {
  // The same 8 bytes seen as one f64 and as two f32: never "full" (other values).
  const Tensor d = zeros({2}, {.dtype = DType::f64});
  const Tensor f = raw::make_tensor(d.storage(), {4}, {1}, 0, DType::f32);
  EXPECT_EQ(memory_overlap(raw::narrow(d, 0, 0, 1), raw::narrow(f, 0, 0, 2)), MemOverlap::partial);
  EXPECT_EQ(memory_overlap(raw::narrow(d, 0, 0, 1), raw::narrow(f, 0, 1, 1)), MemOverlap::partial);
  EXPECT_EQ(memory_overlap(raw::narrow(d, 0, 1, 1), raw::narrow(f, 0, 0, 2)), MemOverlap::none);
}

TEST(MemoryOverlap, InternalOverlap) {
  const Tensor x = one_to(12, {12});
  EXPECT_FALSE(has_internal_overlap(x));
  EXPECT_FALSE(has_internal_overlap(raw::transpose(raw::view(x, {3, 4}), 0, 1)));
  EXPECT_FALSE(has_internal_overlap(raw::slice(x, 0, 0, 12, 3)));
  EXPECT_TRUE(has_internal_overlap(raw::expand(raw::narrow(x, 0, 0, 1), {4})));
  // Folded strides: offsets 0 1 2 / 2 3 4 share offset 2.
  EXPECT_TRUE(has_internal_overlap(raw::as_strided(x, {2, 3}, {2, 1}, 0)));
  // Strides that interleave without sharing: offsets 0 2 4 / 3 5 7.
  EXPECT_FALSE(has_internal_overlap(raw::as_strided(x, {2, 3}, {3, 2}, 0)));
}

// ---- the in-place ops: the three cases ---------------------------------------

TEST(InplaceOverlap, AddOfOwnTransposeIsRefused) {
  const Tensor x = one_to(9, {3, 3});
  EXPECT_ERROR_HAS(add_(x, transpose(x, 0, 1)), "add_", "src", "shares memory", "clone");
  EXPECT_EQ(x.to_vector(), (V{1, 2, 3, 4, 5, 6, 7, 8, 9}));  // untouched
  add_(x, raw::clone(transpose(x, 0, 1)));                   // what the error says to do
  EXPECT_EQ(x.to_vector(), (V{2, 6, 10, 6, 10, 14, 10, 14, 18}));
}

TEST(InplaceOverlap, ShiftedCopyIsRefusedButRawCopyReadsFirst) {
  const Tensor z = one_to(5, {5});
  EXPECT_ERROR_HAS(copy_(slice(z, 0, 1, 5), slice(z, 0, 0, 4)), "copy_", "shares memory", "clone");
  EXPECT_EQ(z.to_vector(), (V{1, 2, 3, 4, 5}));
  EXPECT_ERROR_HAS(add_(slice(z, 0, 1, 5), slice(z, 0, 0, 4)), "add_", "shares memory");
  EXPECT_ERROR_HAS(mul_(slice(z, 0, 0, 4), slice(z, 0, 1, 5)), "mul_", "shares memory");
  EXPECT_EQ(z.to_vector(), (V{1, 2, 3, 4, 5}));
  // raw::copy_ has memmove semantics (Note [raw::copy_ and overlap]).
  raw::copy_(slice(z, 0, 1, 5), slice(z, 0, 0, 4));
  EXPECT_EQ(z.to_vector(), (V{1, 1, 2, 3, 4}));
  raw::copy_(slice(z, 0, 0, 4), slice(z, 0, 1, 5));
  EXPECT_EQ(z.to_vector(), (V{1, 2, 3, 4, 4}));
}

TEST(InplaceOverlap, EveryEntryPointWithASourceChecks) {
  const Tensor x = one_to(9, {3, 3});
  const Tensor t = transpose(x, 0, 1);
  const Tensor row0 = narrow(x, 0, 0, 1);  // broadcast over x: read after written
  EXPECT_ERROR_HAS(add_(x, row0), "add_", "shares memory");
  EXPECT_ERROR_HAS(mul_(x, t), "mul_", "shares memory");
  EXPECT_ERROR_HAS(copy_(x, t), "copy_", "shares memory");
  EXPECT_ERROR_HAS(addcmul_(x, t, ones({3, 3})), "addcmul_", "the first operand", "shares memory");
  EXPECT_ERROR_HAS(addcdiv_(x, ones({3, 3}), row0), "addcdiv_", "the second operand",
                   "shares memory");
  EXPECT_EQ(x.to_vector(), (V{1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(InplaceOverlap, ExactAliasingIsCorrect) {
  const Tensor x = one_to(4, {2, 2});
  add_(x, x);
  EXPECT_EQ(x.to_vector(), (V{2, 4, 6, 8}));
  mul_(x, view(x, {2, 2}));  // another handle on the same elements
  EXPECT_EQ(x.to_vector(), (V{4, 16, 36, 64}));
  copy_(transpose(x, 0, 1), transpose(x, 0, 1));
  EXPECT_EQ(x.to_vector(), (V{4, 16, 36, 64}));
  const Tensor y = one_to(3, {3});
  addcmul_(y, y, y, 1.0);  // y + y * y
  EXPECT_EQ(y.to_vector(), (V{2, 6, 12}));
  addcdiv_(y, y, y, -1.0);  // y - y / y
  EXPECT_EQ(y.to_vector(), (V{1, 5, 11}));
}

TEST(InplaceOverlap, ViewsThatShareNoElementAreFine) {
  const Tensor x = one_to(9, {3, 3});
  add_(narrow(x, 1, 0, 1), narrow(x, 1, 2, 1));  // columns: ranges meet, elements do not
  EXPECT_EQ(x.to_vector(), (V{4, 2, 3, 10, 5, 6, 16, 8, 9}));
  copy_(narrow(x, 0, 0, 1), narrow(x, 0, 2, 1));  // rows: disjoint ranges
  EXPECT_EQ(x.to_vector(), (V{16, 8, 9, 10, 5, 6, 16, 8, 9}));
}

TEST(InplaceOverlap, BeyondTheExactLimitTheCheckIsConservative) {
  // Two interleaved columns share no element, but above kOverlapExactLimit elements they
  // are not listed one by one: the in-place op refuses and says why; raw::copy_ copies.
  const int64_t rows = kOverlapExactLimit + 1;
  const Tensor x = zeros({rows, 2});
  raw::fill_(narrow(x, 1, 1, 1), 1.0);
  EXPECT_ERROR_HAS(add_(narrow(x, 1, 0, 1), narrow(x, 1, 1, 1)), "may share memory",
                   "too large to check");
  raw::copy_(narrow(x, 1, 0, 1), narrow(x, 1, 1, 1));
  EXPECT_EQ(sum(x).item(), static_cast<double>(2 * rows));
}

TEST(InplaceOverlap, WritesIntoSelfOverlappingTensorsAreRefused) {
  const Tensor base = one_to(6, {6});
  const Tensor expanded = expand(narrow(base, 0, 0, 3), {2, 3});
  EXPECT_ERROR_HAS(add_(expanded, ones({2, 3})), "add_", "one memory location", "clone");
  EXPECT_ERROR_HAS(fill_(expanded, 1.0), "fill_", "one memory location");
  EXPECT_ERROR_HAS(zero_(expanded), "zero_", "one memory location");
  EXPECT_ERROR_HAS(mul_(expanded, 2.0), "mul_", "one memory location");
  EXPECT_ERROR_HAS(add_scalar_(expanded, 2.0), "add_scalar_", "one memory location");
  // Folded strides without a zero: offsets 0 1 2 / 2 3 4.
  const Tensor folded = raw::as_strided(base, {2, 3}, {2, 1}, 0);
  EXPECT_ERROR_HAS(copy_(folded, ones({2, 3})), "copy_", "one memory location");
  EXPECT_ERROR_HAS(raw::copy_(folded, ones({2, 3})), "copy_", "one memory location");
  EXPECT_ERROR_HAS(raw::fill_(folded, 0.0), "fill_", "one memory location");
  EXPECT_EQ(base.to_vector(), (V{1, 2, 3, 4, 5, 6}));
  // Interleaved strides that never meet are written normally.
  add_(raw::as_strided(base, {2, 2}, {3, 2}, 0), ones({2, 2}));  // offsets 0 2 3 5
  EXPECT_EQ(base.to_vector(), (V{2, 2, 4, 5, 5, 7}));
}

}  // namespace
}  // namespace cg
