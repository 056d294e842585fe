// Why this file exists: copies, conversions and factories on a GPU run on the device
// (Note [Device copy] in core/copy.cpp, Note [Device primitives] in core/backend.h).
// These tests drive those paths on cuda:0 when a GPU is there, and on any other machine
// on the fake device (tests/fake_device.h), whose memory the host cannot touch: host
// code that reads or writes "device" memory directly crashes here, as it would on a
// GPU, and the fake counts every byte transfer, so a hidden round trip through the host
// shows. (A build with a CUDA backend but no GPU uses the fake too.)
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>

#include "core/backend.h"
#include "core/caching_allocator.h"
#include "core/factories.h"
#include "core/views.h"
#include "fake_device.h"
#include "ops/ops.h"
#include "tensor_test_helpers.h"

namespace cg {
namespace {

using V = std::vector<double>;

const Device kFake = fake::fake_device();

class ViewsOnDevice : public ::testing::Test {
 protected:
  // Without a usable GPU (CPU-only builds, and CUDA builds on machines without one, as
  // in CI) the fake device (a type of its own, fake:0) stands in for cuda:0.
  void SetUp() override {
    if (cuda_available()) {
      device_ = cuda_device(0);
      return;
    }
    fake_ = &fake::install();
    device_ = kFake;
  }
  void TearDown() override {
    if (fake_ != nullptr) fake::uninstall();
  }
  // Byte transfers so far through the fake backend (-1 on a real GPU: not counted there).
  int copies() const { return fake_ != nullptr ? fake_->counts.transfers : -1; }
  int expected_copies(int before, int more) const { return fake_ != nullptr ? before + more : -1; }
  bool using_fake() const { return fake_ != nullptr; }

  fake::FakeDeviceBackend* fake_ = nullptr;
  Device device_;
};

Tensor iota(const Shape& shape, DType dtype = DType::f32) {
  return raw::reshape(arange(0.0, static_cast<double>(shape_numel(shape)), 1.0, {.dtype = dtype}),
                      shape);
}

TEST_F(ViewsOnDevice, DeviceMemoryIsReallyOffLimitsToTheHost) {
  if (!using_fake()) GTEST_SKIP() << "checks the fake device only";
  const Tensor dev = zeros({4}, {.device = kFake});
  EXPECT_DEATH({ std::printf("%f", *static_cast<volatile float*>(dev.data_ptr())); }, "");
}

TEST_F(ViewsOnDevice, ContiguousRoundTripIsOneTransferEachWay) {
  const Tensor host = iota({2, 3});
  const int before = copies();
  const Tensor dev = raw::to_device(host, device_);
  EXPECT_EQ(copies(), expected_copies(before, 1));
  EXPECT_EQ(dev.device(), device_);
  EXPECT_EQ(dev.shape(), (Shape{2, 3}));
  const Tensor back = raw::to_device(dev, kCPU);
  EXPECT_EQ(copies(), expected_copies(before, 2));
  EXPECT_TRUE(back.device().is_cpu());
  EXPECT_EQ(back.to_vector(), host.to_vector());
}

TEST_F(ViewsOnDevice, StridedTensorsMoveBothWays) {
  const Tensor t = raw::transpose(iota({2, 3}), 0, 1);
  const Tensor dev = raw::to_device(t, device_);
  EXPECT_TRUE(dev.is_contiguous());
  EXPECT_EQ(dev.to_vector(), (V{0, 3, 1, 4, 2, 5}));
  const Tensor dev_t = raw::transpose(raw::to_device(iota({2, 3}), device_), 0, 1);
  EXPECT_EQ(dev_t.to_vector(), (V{0, 3, 1, 4, 2, 5}));
  EXPECT_EQ(raw::to_device(dev_t, kCPU).to_vector(), (V{0, 3, 1, 4, 2, 5}));
  const Tensor c = raw::contiguous(dev_t);
  EXPECT_EQ(c.device(), device_);
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_EQ(c.to_vector(), (V{0, 3, 1, 4, 2, 5}));
  const Tensor narrowed = raw::slice(raw::to_device(iota({10}), device_), 0, 1, 10, 3);
  EXPECT_EQ(narrowed.to_vector(), (V{1, 4, 7}));
}

TEST_F(ViewsOnDevice, ConversionsRunOnTheDevice) {
  const V values{0.1, -1.7, 2.9, 1.0 + 1.0 / 256};
  const Tensor dev = raw::to_device(from_vector(values, {4}), device_);
  const Tensor half = raw::to_dtype(dev, DType::bf16);
  EXPECT_EQ(half.device(), device_);
  EXPECT_EQ(half.dtype(), DType::bf16);
  const V got = raw::to_dtype(half, DType::f32).to_vector();
  for (size_t i = 0; i < values.size(); ++i) {
    EXPECT_EQ(got[i], bf16_to_float(float_to_bf16(static_cast<float>(values[i]))));
  }
  EXPECT_EQ(raw::to_dtype(dev, DType::i64).to_vector(), (V{0, -1, 2, 1}));
}

TEST_F(ViewsOnDevice, WritesIntoStridedDeviceViewsKeepTheGaps) {
  const Tensor dev = zeros({3, 4}, {.device = device_});
  raw::fill_(raw::narrow(dev, 1, 1, 2), 5);
  EXPECT_EQ(dev.to_vector(), (V{0, 5, 5, 0, 0, 5, 5, 0, 0, 5, 5, 0}));
  raw::copy_(raw::transpose(dev, 0, 1), iota({4, 3}, DType::i32));
  EXPECT_EQ(dev.to_vector(), (V{0, 3, 6, 9, 1, 4, 7, 10, 2, 5, 8, 11}));
  raw::copy_(raw::slice(dev, 0, 0, 3, 2), from_vector({1, 2, 3, 4}, {4}));  // broadcast rows
  EXPECT_EQ(dev.to_vector(), (V{1, 2, 3, 4, 1, 4, 7, 10, 1, 2, 3, 4}));
  raw::fill_(dev, -1);
  EXPECT_EQ(dev.to_vector(), V(12, -1));
}

TEST_F(ViewsOnDevice, OverlappingDeviceCopyReadsFirst) {
  const Tensor dev = raw::to_device(iota({3, 3}), device_);
  raw::copy_(dev, raw::transpose(dev, 0, 1));
  EXPECT_EQ(dev.to_vector(), (V{0, 3, 6, 1, 4, 7, 2, 5, 8}));
}

TEST_F(ViewsOnDevice, DeviceToDeviceIsADirectCopy) {
  const Tensor dev = raw::to_device(iota({4}), device_);
  const int before = copies();
  const Tensor copy = raw::clone(dev);
  EXPECT_EQ(copies(), expected_copies(before, 1));
  EXPECT_NE(copy.storage(), dev.storage());
  EXPECT_EQ(copy.to_vector(), (V{0, 1, 2, 3}));
}

TEST_F(ViewsOnDevice, ItemPrintingAndFactories) {
  EXPECT_EQ(scalar_tensor(2.5, {.device = device_}).item(), 2.5);
  EXPECT_EQ(from_vector({1, 2}, {2}, {.device = device_}).str(),
            "tensor([1.0000, 2.0000], device=" + device_.str() + ")");
  EXPECT_EQ(ones({2}, {.dtype = DType::bf16, .device = device_}).str(),
            "tensor([1.0000, 1.0000], device=" + device_.str() + ", dtype=bf16)");
  Generator a(3), b(3);
  EXPECT_EQ(randn({100}, {.device = device_}, &a).to_vector(), randn({100}, {}, &b).to_vector());
  EXPECT_EQ(arange(4, {.dtype = DType::i64, .device = device_}).to_vector(), (V{0, 1, 2, 3}));
  const Tensor g = zeros({2}, {.device = device_, .requires_grad = true});
  EXPECT_TRUE(g.impl()->requires_grad);
  EXPECT_EQ(g.device(), device_);
  EXPECT_EQ(zeros_like(g).device(), device_);
  if (using_fake()) {
    TENSOR_EXPECT_ERROR(zeros({2}, {.device = Device{DeviceType::fake, 9}}), "fake:9 requested",
                        "only 1 fake device is visible", "use fake:0");
  }
}

TEST_F(ViewsOnDevice, CrossDeviceOpsAreRefusedClearly) {
  const Tensor on_host = ones({2, 3});
  const Tensor on_device = to(ones({2, 3}), device_);
  for (auto op : {+[](const Tensor&a, const Tensor&b) { return add(a, b); },
                  +[](const Tensor&a, const Tensor&b) { return mul(a, b); },
                  +[](const Tensor&a, const Tensor&b) { return matmul(a, transpose(b, 0, 1)); }}) {
    try {
      op(on_host, on_device);
      FAIL() << "an op mixing cpu and " << device_.str() << " tensors did not throw";
    } catch (const Error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("different devices (cpu and " + device_.str() + ")"), std::string::npos)
          << msg;
      EXPECT_NE(msg.find("cg::to(t, device)"), std::string::npos) << msg;
    }
  }
}

// ---- the work stays on the device -------------------------------------------------

const DType kFloating[] = {DType::f32, DType::f64, DType::f16, DType::bf16};
const DType kAll[] = {DType::f32, DType::f64, DType::f16,    DType::bf16,
                      DType::i32, DType::i64, DType::boolean};

// Values every dtype holds exactly (0/1 for bool).
Tensor exact_host(const Shape& shape, DType dtype) {
  std::vector<double> v(static_cast<size_t>(shape_numel(shape)));
  for (size_t i = 0; i < v.size(); ++i) {
    v[i] = dtype == DType::boolean ? double(i % 3 == 0) : double(int64_t(i * 37 % 101) - 50);
  }
  return from_vector(v, shape, {.dtype = dtype});
}

TEST_F(ViewsOnDevice, DeviceMemoryIsReadableOnlyInsideTheGuard) {
  if (!using_fake()) GTEST_SKIP() << "checks the fake device only";
  const Tensor dev = full({4}, 2.5, {.device = kFake});
  {
    fake::DeviceMemoryAccessible open;
    fake::DeviceMemoryAccessible nested;
    EXPECT_EQ(*static_cast<const float*>(dev.data_ptr()), 2.5f);
  }
  EXPECT_DEATH({ std::printf("%f", *static_cast<volatile float*>(dev.data_ptr())); }, "");
  EXPECT_TRUE(fake::is_device_memory(dev.data_ptr(), dev.nbytes()));
  EXPECT_FALSE(fake::is_device_memory(ones({4}).data_ptr(), 16));
}

TEST_F(ViewsOnDevice, FactoriesFillOnTheDevice) {
  const int before = copies();
  std::vector<Tensor> made;
  for (DType dt : kAll) {
    made.push_back(zeros({3, 5}, {.dtype = dt, .device = device_}));
    made.push_back(full({3, 5}, 3.0, {.dtype = dt, .device = device_}));
    made.push_back(ones({7}, {.dtype = dt, .device = device_}));
    made.push_back(arange(0.0, 9.0, 2.0, {.dtype = dt, .device = device_}));
  }
  EXPECT_EQ(copies(), expected_copies(before, 0));  // no upload: filled where they live
  if (using_fake()) EXPECT_EQ(fake_->counts.fills, static_cast<int>(made.size()));
  size_t k = 0;
  for (DType dt : kAll) {
    SCOPED_TRACE(dtype_name(dt));
    EXPECT_EQ(made[k++].to_vector(), zeros({3, 5}, {.dtype = dt}).to_vector());
    EXPECT_EQ(made[k++].to_vector(), full({3, 5}, 3.0, {.dtype = dt}).to_vector());
    EXPECT_EQ(made[k++].to_vector(), ones({7}, {.dtype = dt}).to_vector());
    EXPECT_EQ(made[k++].to_vector(), arange(0.0, 9.0, 2.0, {.dtype = dt}).to_vector());
  }
}

TEST_F(ViewsOnDevice, RandomFillsOnTheDeviceMatchTheHost) {
  for (DType dt : kFloating) {
    SCOPED_TRACE(dtype_name(dt));
    Generator on_device(21), on_host(21);
    const int before = copies();
    const Tensor u = rand({5, 7}, {.dtype = dt, .device = device_}, &on_device, -2.0, 3.0);
    const Tensor n = randn({33}, {.dtype = dt, .device = device_}, &on_device, 1.0, 0.5);
    EXPECT_EQ(copies(), expected_copies(before, 0));
    EXPECT_EQ(on_device.offset(), 35u + 33u);
    EXPECT_EQ(u.to_vector(), rand({5, 7}, {.dtype = dt}, &on_host, -2.0, 3.0).to_vector());
    const V got = n.to_vector();
    const V want = randn({33}, {.dtype = dt}, &on_host, 1.0, 0.5).to_vector();
    if (dt == DType::f64 && !using_fake()) {  // CUDA's log/cos may differ in the last ulp
      for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-14) << i;
    } else {
      EXPECT_EQ(got, want);
    }
  }
}

TEST_F(ViewsOnDevice, StridedBroadcastAndConvertingCopiesStayOnTheDevice) {
  for (DType to : kAll) {
    for (DType from : kAll) {
      SCOPED_TRACE(std::string(dtype_name(from)) + " -> " + dtype_name(to));
      const Tensor host_src = exact_host({3, 4, 5}, from);
      const Tensor dev_src = raw::to_device(host_src, device_);
      const Tensor host_row = exact_host({1, 5}, from);
      const Tensor dev_row = raw::to_device(host_row, device_);
      const int before = copies();
      // Strided source (a permutation with a step), strided destination, broadcast row.
      const Tensor dev_perm =
          raw::to_dtype(raw::slice(raw::permute(dev_src, {2, 0, 1}), 2, 1, 4, 2), to);
      const Tensor dev_dst = zeros({4, 5}, {.dtype = to, .device = device_});
      raw::copy_(raw::transpose(dev_dst, 0, 1),
                 raw::squeeze(raw::transpose(raw::narrow(dev_src, 0, 1, 1), 1, 2), 0));
      const Tensor dev_bcast = zeros({6, 5}, {.dtype = to, .device = device_});
      raw::copy_(dev_bcast, dev_row);
      EXPECT_EQ(copies(), expected_copies(before, 0));

      const Tensor host_perm =
          raw::to_dtype(raw::slice(raw::permute(host_src, {2, 0, 1}), 2, 1, 4, 2), to);
      const Tensor host_dst = zeros({4, 5}, {.dtype = to});
      raw::copy_(raw::transpose(host_dst, 0, 1),
                 raw::squeeze(raw::transpose(raw::narrow(host_src, 0, 1, 1), 1, 2), 0));
      const Tensor host_bcast = zeros({6, 5}, {.dtype = to});
      raw::copy_(host_bcast, host_row);
      EXPECT_EQ(dev_perm.to_vector(), host_perm.to_vector());
      EXPECT_EQ(dev_dst.to_vector(), host_dst.to_vector());
      EXPECT_EQ(dev_bcast.to_vector(), host_bcast.to_vector());
    }
  }
}

TEST_F(ViewsOnDevice, CrossDeviceCopiesMoveOneContiguousBuffer) {
  const Tensor host = iota({4, 6});
  const Tensor dev = raw::to_device(host, device_);
  int before = copies();
  // Download of a strided, converted view: packed and converted on the device, one transfer.
  const Tensor down = raw::to_device(raw::to_dtype(raw::transpose(dev, 0, 1), DType::bf16), kCPU);
  const Tensor down_direct = empty({6, 4}, {.dtype = DType::bf16});
  raw::copy_(down_direct, raw::transpose(dev, 0, 1));
  EXPECT_EQ(copies(), expected_copies(before, 2));
  const V want = raw::to_dtype(raw::transpose(host, 0, 1), DType::bf16).to_vector();
  EXPECT_EQ(down.to_vector(), want);
  EXPECT_EQ(down_direct.to_vector(), want);
  // Upload into a strided device view with a cast and a broadcast: one transfer of the
  // small source, the rest on the device.
  const Tensor target = zeros({6, 4}, {.dtype = DType::f64, .device = device_});
  before = copies();
  raw::copy_(raw::transpose(target, 0, 1), from_vector({1, 2, 3, 4, 5, 6}, {1, 6}));
  EXPECT_EQ(copies(), expected_copies(before, 1));
  EXPECT_EQ(raw::transpose(target, 0, 1).to_vector(),
            raw::expand(from_vector({1, 2, 3, 4, 5, 6}, {1, 6}), {4, 6}).to_vector());
}

TEST_F(ViewsOnDevice, AccumulateRunsOnTheDevice) {
  const Tensor host_dst = raw::to_dtype(iota({3, 4}), DType::f32);
  const Tensor host_src = raw::to_dtype(from_vector({0.5, -1.25, 3.0, 8.0}, {4}), DType::bf16);
  const Tensor dev_dst = raw::to_device(host_dst, device_);
  const Tensor dev_src = raw::to_device(host_src, device_);
  const int before = copies();
  raw::add_(raw::transpose(dev_dst, 0, 1), raw::unsqueeze(dev_src, 1));  // f32 += bf16, broadcast
  raw::add_(raw::transpose(host_dst, 0, 1), raw::unsqueeze(host_src, 1));
  EXPECT_EQ(copies(), expected_copies(before, 0));
  if (using_fake()) EXPECT_EQ(fake_->counts.accumulates, 1);
  EXPECT_EQ(dev_dst.to_vector(), host_dst.to_vector());
  EXPECT_EQ(host_dst.to_vector(), (V{0.5, -0.25, 5, 11, 4.5, 3.75, 9, 15, 8.5, 7.75, 13, 19}));
}

TEST_F(ViewsOnDevice, GradientsAccumulateOnTheDevice) {
  // The second backward adds into the .grad the first one made (raw::add_ on the device).
  const Tensor leaf = ones({2, 3}, {.device = device_, .requires_grad = true});
  const Tensor g = full({2, 3}, 0.25, {.device = device_});
  leaf.backward(g);
  leaf.backward(g);
  EXPECT_EQ(leaf.grad().device(), device_);
  EXPECT_EQ(leaf.grad().to_vector(), V(6, 0.5));
}

}  // namespace
}  // namespace cg
