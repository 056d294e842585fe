// Why this file exists: tensors on a GPU -- every dtype goes host -> device -> host
// unchanged (from contiguous and strided sources), cuda:0's caching allocator sees
// each device tensor's lifetime, and each data primitive of the CUDA backend (fill,
// strided copy with cast and broadcast, accumulate, random fills; Note [Device
// primitives] in core/backend.h) gives the host backend's values. Compiled only in CUDA
// builds; skipped without a GPU.
#if defined(CHUNKGRAD_WITH_CUDA)

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/backend.h"
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

const DType kAllDTypes[] = {DType::f32, DType::f64, DType::f16,    DType::bf16,
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
        raw::transpose(h, 0, 2),                             // (5, 4, 3)
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

// ---- data primitives against the host --------------------------------------------

const DType kFloatingDTypes[] = {DType::f32, DType::f64, DType::f16, DType::bf16};

// Values that exercise rounding in every conversion without leaving any dtype's defined
// range (no float -> int overflow, nothing beyond f16): fractions, ties, f16 subnormals.
std::vector<double> mixed_values(int64_t n) {
  const double pool[] = {1.0 / 3,  -2.7,    0.5, -0.5, 1.5,  2.5,  300.5, -60000.0,        6e-5,
                         -1e-8,    40000.5, 0.0, 1.0,  -1.0, 1e-3, 257.0, 1.0 + 1.0 / 256, 3.999,
                         -123.456, 7.0};
  std::vector<double> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[i] = pool[(i * 7) % 20];
  return v;
}

// Every element's bits on the host: equal tensors give equal vectors, NaN or not.
std::vector<uint64_t> bits_of(const Tensor& t) {
  const Tensor host = raw::contiguous(raw::to_device(t, kCPU));
  std::vector<uint64_t> out(static_cast<size_t>(host.numel()), 0);
  const size_t es = element_size(host.dtype());
  const auto* p = static_cast<const unsigned char*>(host.data_ptr());
  for (size_t i = 0; i < out.size(); ++i) std::memcpy(&out[i], p + i * es, es);
  return out;
}

TEST_F(CudaTensorTest, FillAndArangeMatchTheHostEveryDType) {
  for (DType dt : kAllDTypes) {
    SCOPED_TRACE(dtype_name(dt));
    for (double value : {0.0, -0.0, 1.0 / 3, -7.5, 1e6}) {
      const Tensor d = full({3, 5}, value, {.dtype = dt, .device = cuda_device(0)});
      EXPECT_EQ(bits_of(d), bits_of(full({3, 5}, value, {.dtype = dt}))) << value;
      // Into a strided view: the gaps keep their values.
      const Tensor dz = zeros({4, 6}, {.dtype = dt, .device = cuda_device(0)});
      const Tensor hz = zeros({4, 6}, {.dtype = dt});
      raw::fill_(raw::slice(raw::transpose(dz, 0, 1), 0, 1, 6, 2), value);
      raw::fill_(raw::slice(raw::transpose(hz, 0, 1), 0, 1, 6, 2), value);
      EXPECT_EQ(bits_of(dz), bits_of(hz)) << value;
    }
    EXPECT_EQ(bits_of(arange(-3.0, 40.0, 0.7, {.dtype = dt, .device = cuda_device(0)})),
              bits_of(arange(-3.0, 40.0, 0.7, {.dtype = dt})));
  }
}

TEST_F(CudaTensorTest, StridedCopyMatchesTheHostForEveryDTypePair) {
  for (DType from : kAllDTypes) {
    const Tensor h = from_vector(mixed_values(120), {4, 5, 6}, {.dtype = from});
    const Tensor d = raw::to_device(h, cuda_device(0));
    const Tensor hrow = from_vector(mixed_values(6), {1, 6}, {.dtype = from});
    const Tensor drow = raw::to_device(hrow, cuda_device(0));
    for (DType to : kAllDTypes) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
      // contiguous cast
      EXPECT_EQ(bits_of(raw::to_dtype(d, to)), bits_of(raw::to_dtype(h, to)));
      // transposed source (the host's tiled path) and a stepped permutation
      EXPECT_EQ(bits_of(raw::to_dtype(raw::transpose(d, 1, 2), to)),
                bits_of(raw::to_dtype(raw::transpose(h, 1, 2), to)));
      EXPECT_EQ(bits_of(raw::to_dtype(raw::slice(raw::permute(d, {2, 0, 1}), 2, 1, 5, 3), to)),
                bits_of(raw::to_dtype(raw::slice(raw::permute(h, {2, 0, 1}), 2, 1, 5, 3), to)));
      // broadcast source (stride 0) into a strided destination
      const Tensor dd = zeros({6, 7}, {.dtype = to, .device = cuda_device(0)});
      const Tensor hd = zeros({6, 7}, {.dtype = to});
      raw::copy_(raw::transpose(raw::narrow(dd, 1, 1, 5), 0, 1), drow);
      raw::copy_(raw::transpose(raw::narrow(hd, 1, 1, 5), 0, 1), hrow);
      EXPECT_EQ(bits_of(dd), bits_of(hd));
    }
  }
}

TEST_F(CudaTensorTest, CrossDeviceCopiesConvertOnTheDevice) {
  const Tensor h = from_vector(mixed_values(24), {4, 6});
  const Tensor d = raw::to_device(h, cuda_device(0));
  for (DType to : kAllDTypes) {
    SCOPED_TRACE(dtype_name(to));
    const Tensor down = empty({6, 4}, {.dtype = to});
    raw::copy_(down, raw::transpose(d, 0, 1));  // device -> host with a cast
    EXPECT_EQ(bits_of(down), bits_of(raw::to_dtype(raw::transpose(h, 0, 1), to)));
    const Tensor up = zeros({6, 4}, {.dtype = to, .device = cuda_device(0)});
    raw::copy_(up, raw::transpose(h, 0, 1));  // host -> device with a cast
    EXPECT_EQ(bits_of(up), bits_of(down));
  }
}

TEST_F(CudaTensorTest, AccumulateMatchesTheHostForEveryFloatingPair) {
  for (DType to : kFloatingDTypes) {
    for (DType from : kFloatingDTypes) {
      SCOPED_TRACE(std::string(dtype_name(to)) + " += " + dtype_name(from));
      const Tensor hd = from_vector(mixed_values(30), {5, 6}, {.dtype = to});
      const Tensor hs = from_vector(mixed_values(5), {5, 1}, {.dtype = from});
      const Tensor dd = raw::to_device(hd, cuda_device(0));
      const Tensor ds = raw::to_device(hs, cuda_device(0));
      raw::add_(raw::transpose(dd, 0, 1), raw::transpose(ds, 0, 1));  // strided, broadcast
      raw::add_(raw::transpose(hd, 0, 1), raw::transpose(hs, 0, 1));
      EXPECT_EQ(bits_of(dd), bits_of(hd));
      raw::add_(dd, dd);  // x += x
      raw::add_(hd, hd);
      EXPECT_EQ(bits_of(dd), bits_of(hd));
    }
  }
}

TEST_F(CudaTensorTest, RandomNumbersAreTheHostsForTheSameSeed) {
  for (DType dt : kFloatingDTypes) {
    SCOPED_TRACE(dtype_name(dt));
    Generator gd(77), gh(77);
    EXPECT_EQ(bits_of(rand({1000, 3}, {.dtype = dt, .device = cuda_device(0)}, &gd, -1.5, 2.0)),
              bits_of(rand({1000, 3}, {.dtype = dt}, &gh, -1.5, 2.0)));
    const std::vector<double> nd =
        randn({4099}, {.dtype = dt, .device = cuda_device(0)}, &gd, 0.25, 3.0).to_vector();
    const std::vector<double> nh = randn({4099}, {.dtype = dt}, &gh, 0.25, 3.0).to_vector();
    ASSERT_EQ(nd.size(), nh.size());
    for (size_t i = 0; i < nd.size(); ++i) {
      // f64: CUDA's log/cos may differ from libm's in the last ulp (core/philox.h).
      if (dt == DType::f64) {
        EXPECT_NEAR(nd[i], nh[i], 1e-13) << i;
      } else {
        EXPECT_EQ(nd[i], nh[i]) << i;
      }
    }
    EXPECT_EQ(gd.offset(), gh.offset());
  }
  // One draw of n on the device == two draws on the host (values depend on the counter).
  Generator one(5), two(5);
  const Tensor whole = rand({300}, {.device = cuda_device(0)}, &one);
  const std::vector<double> a = rand({120}, {}, &two).to_vector();
  const std::vector<double> b = rand({180}, {}, &two).to_vector();
  std::vector<double> joined = a;
  joined.insert(joined.end(), b.begin(), b.end());
  EXPECT_EQ(whole.to_vector(), joined);
  // Into a strided view: element numbers follow the view's row-major order.
  Generator s1(9), s2(9);
  const Tensor dv = zeros({8, 5}, {.device = cuda_device(0)});
  const Tensor hv = zeros({8, 5});
  raw::copy_(raw::transpose(dv, 0, 1), rand({5, 8}, {.device = cuda_device(0)}, &s1));
  raw::copy_(raw::transpose(hv, 0, 1), rand({5, 8}, {}, &s2));
  EXPECT_EQ(bits_of(dv), bits_of(hv));
}

TEST_F(CudaTensorTest, MoreThanEightUnmergeableDimsAreAClearError) {
  const Shape nine(9, 2);
  const Tensor d = raw::to_device(arange(0.0, 512.0, 1.0), cuda_device(0));
  // Nine contiguous dims merge into one: fine.
  EXPECT_EQ(raw::clone(raw::view(d, nine)).to_vector(), d.to_vector());
  // Reversed, no two dims merge.
  const Tensor reversed = raw::permute(raw::view(d, nine), {8, 7, 6, 5, 4, 3, 2, 1, 0});
  try {
    raw::contiguous(reversed);
    FAIL() << "a 9-d unmergeable copy did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("at most 8"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace cg

#endif  // CHUNKGRAD_WITH_CUDA
