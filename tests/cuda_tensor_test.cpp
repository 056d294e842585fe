// Why this file exists: tensors on a GPU -- every dtype goes host -> device -> host
// unchanged (from contiguous and strided sources), and cuda:0's caching allocator sees
// each device tensor's lifetime. Compiled only in CUDA builds; skipped without a GPU.
#if defined(CHUNKGRAD_WITH_CUDA)

#include <cstdint>
#include <vector>

#include <gtest/gtest.h>

#include "core/caching_allocator.h"
#include "core/factories.h"
#include "core/tensor.h"
#include "core/views.h"
#include "cuda/device_info.h"

namespace cg {
namespace {

class CudaTensorTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda::device_count() == 0) {
      GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
    }
  }
};

const DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16,
                            DType::i32, DType::i64, DType::boolean};

// Values every dtype holds exactly (small integers; 0/1 for bool).
std::vector<double> exact_values(DType dt, int64_t n) {
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    v[i] = dt == DType::boolean ? double((i * 7 + 3) % 3 == 0) : double((i * 37) % 101 - 50);
  }
  return v;
}

TEST_F(CudaTensorTest, RoundTripEveryDTypeContiguous) {
  for (DType dt : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor h = from_vector(exact_values(dt, 24), {2, 3, 4}, {.dtype = dt});
    const Tensor d = raw::to_device(h, cuda_device(0));
    EXPECT_EQ(d.device(), cuda_device(0));
    EXPECT_EQ(d.dtype(), dt);
    EXPECT_EQ(d.shape(), h.shape());
    EXPECT_NE(d.data_ptr(), h.data_ptr());
    const Tensor back = raw::to_device(d, kCPU);
    EXPECT_TRUE(back.device().is_cpu());
    EXPECT_EQ(back.to_vector(), h.to_vector());
    EXPECT_EQ(d.to_vector(), h.to_vector());  // to_vector copies to host itself
  }
}

TEST_F(CudaTensorTest, RoundTripEveryDTypeFromStridedSource) {
  for (DType dt : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dt));
    const Tensor h = from_vector(exact_values(dt, 60), {3, 4, 5}, {.dtype = dt});
    const Tensor views[] = {
        raw::transpose(h, 0, 2),                       // (5, 4, 3)
        raw::slice(raw::permute(h, {1, 0, 2}), 2, 1, 5, 2),  // strided, offset
        raw::expand(raw::narrow(h, 1, 2, 1), {3, 4, 5}),     // stride 0
    };
    for (const Tensor& v : views) {
      ASSERT_FALSE(v.is_contiguous());
      const Tensor d = raw::to_device(v, cuda_device(0));
      EXPECT_EQ(d.shape(), v.shape());
      const Tensor back = raw::to_device(d, kCPU);
      EXPECT_EQ(back.shape(), v.shape());
      EXPECT_EQ(back.to_vector(), v.to_vector());
    }
  }
}

TEST_F(CudaTensorTest, Int64AndHalfBitsSurviveExactly) {
  const std::vector<int64_t> big = {INT64_MAX, INT64_MIN, (int64_t{1} << 53) + 1, -3};
  const Tensor h = from_ints(big, {4});
  const Tensor back = raw::to_device(raw::to_device(h, cuda_device(0)), kCPU);
  const int64_t* p = back.data<int64_t>();
  for (size_t i = 0; i < big.size(); ++i) EXPECT_EQ(p[i], big[i]);

  const Tensor hb = from_vector({1.0 / 3, -1e-3, 65504.0, 1e30}, {4}, {.dtype = DType::bf16});
  const Tensor bb = raw::to_device(raw::to_device(hb, cuda_device(0)), kCPU);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(bb.data<bf16>()[i].bits, hb.data<bf16>()[i].bits);
}

TEST_F(CudaTensorTest, FromVectorOnDevice) {
  const std::vector<double> v = {1, 2, 3, 4, 5, 6};
  const Tensor d = from_vector(v, {2, 3}, {.device = cuda_device(0)});
  EXPECT_EQ(d.device(), cuda_device(0));
  EXPECT_EQ(d.to_vector(), v);
}

TEST_F(CudaTensorTest, AllocatorStatsFollowTensorLifetimes) {
  CachingAllocator& a = allocator_for(cuda_device(0));
  CachingAllocator& host = allocator_for(kCPU);
  const AllocatorStats before = a.stats();
  const int64_t host_before = host.stats().allocation.current;
  {
    const Tensor d = raw::empty({1024, 1024}, DType::f32, cuda_device(0));  // 4 MiB
    AllocatorStats s = a.stats();
    EXPECT_EQ(s.allocation.current, before.allocation.current + 1);
    EXPECT_EQ(s.requested_bytes.current, before.requested_bytes.current + (int64_t{4} << 20));
    EXPECT_GE(s.allocated_bytes.current, before.allocated_bytes.current + (int64_t{4} << 20));
    EXPECT_GE(s.reserved_bytes.current, s.allocated_bytes.current);
    EXPECT_EQ(host.stats().allocation.current, host_before) << "a device tensor took host memory";

    // the tensor's pointer is a live block in the snapshot
    bool found = false;
    for (const SegmentInfo& seg : a.snapshot()) {
      for (const BlockInfo& b : seg.blocks) {
        if (b.allocated && b.addr == reinterpret_cast<uint64_t>(d.data_ptr())) {
          found = true;
          EXPECT_EQ(b.requested, size_t{4} << 20);
        }
      }
    }
    EXPECT_TRUE(found) << "device tensor's data_ptr is not a live block of cuda:0";

    {
      const Tensor v = raw::transpose(d, 0, 1);  // a view: no new memory
      const Tensor n = raw::narrow(v, 0, 0, 10);
      EXPECT_EQ(a.stats().allocation.current, before.allocation.current + 1);
    }
    const Tensor e = raw::empty({10}, DType::f16, cuda_device(0));
    s = a.stats();
    EXPECT_EQ(s.allocation.current, before.allocation.current + 2);
    EXPECT_EQ(s.requested_bytes.current, before.requested_bytes.current + (int64_t{4} << 20) + 20);
  }
  const AllocatorStats after = a.stats();
  EXPECT_EQ(after.allocation.current, before.allocation.current);
  EXPECT_EQ(after.allocated_bytes.current, before.allocated_bytes.current);
  EXPECT_EQ(after.requested_bytes.current, before.requested_bytes.current);
  EXPECT_GE(after.allocation.allocated, before.allocation.allocated + 2);
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.current == 0, a.stats().allocation.current == 0);
}

}  // namespace
}  // namespace cg

#endif  // CHUNKGRAD_WITH_CUDA
