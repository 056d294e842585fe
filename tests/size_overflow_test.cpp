// Why this file exists: sizes that overflow 64 bits must become a clear cg::Error, never
// a small block or a wrapped count (issue 8, item 4). Each case here was a silent wrong
// answer or a crash before: allocate(SIZE_MAX) returned a 0-byte block, empty({2^62-1})
// succeeded and the first write segfaulted, zeros({2^61+1, 8}) had 8 elements, and an
// OOM for 2^63 bytes printed "-8388608.00 TiB". Build with -fsanitize=undefined to see
// that none of them overflows a signed integer on the way to its error.
#include <cstdint>
#include <limits>
#include <memory>
#include <string>

#include <gtest/gtest.h>

#include "core/allocator_stats.h"
#include "core/caching_allocator.h"
#include "core/factories.h"
#include "core/segment_source.h"
#include "core/views.h"
#include "ops/join_ops.h"
#include "tests/error_helpers.h"

namespace cg {
namespace {

constexpr int64_t kInt64Max = std::numeric_limits<int64_t>::max();
constexpr size_t MiB = size_t{1} << 20;

TEST(SizeOverflow, AllocatorRefusesRequestsItCannotRound) {
  CachingAllocator a(std::make_unique<FakeSegmentSource>(64 * MiB, kCPU));
  for (size_t n : {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - kMinBlockSize + 2, size_t{1} << 63,
                   kMaxAllocation + 1}) {
    EXPECT_THROW(a.allocate(n), OutOfMemoryError) << n;
    const std::string msg = testing::error_of([&] { a.allocate(n); });
    EXPECT_NE(msg.find(std::to_string(n)), std::string::npos) << msg;
    EXPECT_NE(msg.find("largest allocation"), std::string::npos) << msg;
  }
  EXPECT_EQ(a.stats().allocation.current, 0);
  EXPECT_EQ(a.stats().reserved_bytes.current, 0) << "nothing may reach the source";
  EXPECT_ERROR_HAS(CachingAllocator::round_size(SIZE_MAX), "largest allocation");
  EXPECT_ERROR_HAS(CachingAllocator::segment_size_for(SIZE_MAX - 1), "largest allocation");
  // The largest allowed request rounds without wrapping (and then finds no memory).
  EXPECT_EQ(CachingAllocator::round_size(kMaxAllocation), kMaxAllocation);
  EXPECT_EQ(CachingAllocator::segment_size_for(kMaxAllocation), kMaxAllocation);
  EXPECT_THROW(a.allocate(kMaxAllocation), OutOfMemoryError);
}

TEST(SizeOverflow, OomMessageFormatsHugeSizesUnsigned) {
  CachingAllocator a(std::make_unique<FakeSegmentSource>(64 * MiB, kCPU));
  const std::string msg = testing::error_of([&] { a.allocate(size_t{1} << 63); });
  EXPECT_NE(msg.find("8.00 EiB"), std::string::npos) << msg;
  EXPECT_EQ(msg.find('-'), std::string::npos) << "a negative size in: " << msg;
  // A request the limit refuses, above 2^63 in no way but large: sizes stay unsigned.
  a.set_memory_limit(kMaxAllocation);
  const std::string limit_msg = testing::error_of([&] { a.allocate(kMaxAllocation); });
  EXPECT_NE(limit_msg.find("8.00 EiB"), std::string::npos) << limit_msg;
  EXPECT_EQ(limit_msg.find("-"), std::string::npos) << limit_msg;
}

TEST(SizeOverflow, FormatBytesCoversAll64Bits) {
  EXPECT_EQ(format_bytes(uint64_t{1} << 63), "8.00 EiB");
  EXPECT_EQ(format_bytes(UINT64_MAX), "16.00 EiB");
  EXPECT_EQ(format_bytes(std::numeric_limits<int64_t>::min()), "-8.00 EiB");
  EXPECT_EQ(format_bytes(kInt64Max), "8.00 EiB");
  EXPECT_EQ(format_bytes(int64_t{1} << 50), "1.00 PiB");
  EXPECT_EQ(format_bytes(int64_t{-1536}), "-1.50 KiB");
  EXPECT_EQ(format_bytes(512), "512 B");  // int: no ambiguous overload
  EXPECT_EQ(format_bytes(size_t{3} * MiB), "3.00 MiB");
  EXPECT_EQ(format_bytes(0LL), "0 B");
}

TEST(SizeOverflow, NumelThatOverflowsIsAnError) {
  const int64_t big = (int64_t{1} << 61) + 1;
  EXPECT_ERROR_HAS(shape_numel({big, 8}), "more elements than a 64-bit count");
  EXPECT_ERROR_HAS(zeros({big, 8}), "more elements");
  EXPECT_ERROR_HAS(empty({kInt64Max, 2}), "more elements");
  EXPECT_ERROR_HAS(ones({int64_t{1} << 32, int64_t{1} << 32}), "more elements");
  EXPECT_EQ(shape_numel({int64_t{1} << 31, int64_t{1} << 31}), int64_t{1} << 62);
  EXPECT_EQ(shape_numel({big, 0}), 0);
  EXPECT_ERROR_HAS(raw::view(zeros({2, 3}), {big, 8}), "more elements");
}

TEST(SizeOverflow, BytesThatOverflowAreAnError) {
  // 2^62 - 1 floats fit numel but need 2^64 - 4 bytes: the allocator refuses them
  // (before the fix they came back as a 0-byte block and the first write segfaulted).
  EXPECT_THROW(raw::empty({(int64_t{1} << 62) - 1}, DType::f32, kCPU), OutOfMemoryError);
  EXPECT_THROW(empty({(int64_t{1} << 62) - 1}), OutOfMemoryError);
  // 2^62 doubles need 2^65 bytes: no 64-bit count holds that.
  EXPECT_ERROR_HAS(raw::empty({int64_t{1} << 62}, DType::f64, kCPU), "more bytes than 64 bits");
  // A view may count more elements than its storage holds bytes (an expanded scalar).
  const Tensor huge = raw::expand(scalar_tensor(1.0, {.dtype = DType::f64}), {int64_t{1} << 62});
  EXPECT_EQ(huge.numel(), int64_t{1} << 62);
  EXPECT_ERROR_HAS(huge.nbytes(), "more bytes than 64 bits");
}

TEST(SizeOverflow, StridesThatOverflowAreAnError) {
  // An empty shape has no elements, but its strides must still fit.
  EXPECT_ERROR_HAS(contiguous_strides({0, int64_t{1} << 62, 4}), "strides overflow");
  EXPECT_ERROR_HAS(raw::empty({0, int64_t{1} << 62, 4}, DType::f32, kCPU), "strides overflow");
  EXPECT_EQ(contiguous_strides({0, 3, 4}), (Shape{12, 4, 1}));
  EXPECT_EQ(contiguous_strides({kInt64Max}), (Shape{1}));  // the outer size steps nothing
}

TEST(SizeOverflow, ViewBoundsThatOverflowAreAnError) {
  const Tensor t = zeros({4});
  // (size - 1) * stride and offset + that wrap past int64: out of bounds, not a wrap.
  EXPECT_ERROR_HAS(raw::as_strided(t, {3}, {kInt64Max / 2 + 1}, 0), "beyond 2^63",
                   "storage holds only 4");
  EXPECT_ERROR_HAS(raw::as_strided(t, {2, 2}, {kInt64Max, kInt64Max}, 1), "storage holds only");
  EXPECT_ERROR_HAS(raw::as_strided(t, {2}, {kInt64Max}, kInt64Max), "storage holds only");
  // narrow: start + length would overflow.
  EXPECT_ERROR_HAS(raw::narrow(t, 0, 2, kInt64Max), "exceeds dim 0 of size 4");
  // slice: a huge step gives one element (PyTorch's answer), without overflow.
  const Tensor one = raw::slice(t, 0, 1, 4, kInt64Max);
  EXPECT_EQ(one.shape(), (Shape{1}));
  EXPECT_EQ(one.offset(), 1);
  EXPECT_EQ(raw::slice(t, 0, 0, kInt64Max, kInt64Max).shape(), (Shape{1}));
  EXPECT_EQ(raw::slice(t, 0, 0, 4, 3).shape(), (Shape{2}));
  // An empty tensor may carry any strides; views of it must not overflow either.
  const Tensor e = raw::as_strided(t, {0, 5}, {kInt64Max, kInt64Max}, 0);
  EXPECT_EQ(raw::unsqueeze(e, 1).shape(), (Shape{0, 1, 5}));
  EXPECT_ERROR_HAS(raw::narrow(e, 1, 3, 2), "overflows 64 bits");
  EXPECT_ERROR_HAS(raw::slice(e, 1, 2, 5, 2), "overflows 64 bits");
}

TEST(SizeOverflow, ArangeCountThatOverflowsIsAnError) {
  EXPECT_ERROR_HAS(arange(0.0, 1e300, 1.0), "more than a 64-bit count");
  EXPECT_ERROR_HAS(arange(0.0, 1e19, 1.0), "more than a 64-bit count");
}

TEST(SizeOverflow, CatSizesThatOverflowAreAnError) {
  // Four views of 2^62 elements and a fifth of 5 used to wrap to a 5-element output.
  const Tensor big = raw::expand(zeros({1}), {int64_t{1} << 62});
  EXPECT_ERROR_HAS(cat({big, big, big, big, ones({5})}, 0), "cat", "64 bits");
}

}  // namespace
}  // namespace cg
