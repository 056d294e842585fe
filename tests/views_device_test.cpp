// Why this file exists: copies that touch a GPU take their own path (Note [Device copy]
// in core/copy.cpp). These tests drive that path on cuda:0 when a GPU is there, and on
// any other machine with a fake device backend whose memory is mapped PROT_NONE except
// inside backend.copy(): host code that touches "device" memory directly crashes here,
// as it would on a GPU. (A build with a CUDA backend but no GPU skips them.)
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <cstdio>
#include <cstring>
#include <map>

#include "core/backend.h"
#include "core/caching_allocator.h"
#include "core/factories.h"
#include "core/views.h"
#include "ops/ops.h"
#include "tensor_test_helpers.h"

namespace cg {
namespace {

using V = std::vector<double>;

constexpr int kFakeIndex = 7;  // an index no other test uses for its allocator
const Device kFake = cuda_device(kFakeIndex);

// Every fake-device segment: start -> bytes.
std::map<char*, size_t>& device_segments() {
  static std::map<char*, size_t> segments;
  return segments;
}

// The segment that holds [p, p + n), or nullptr.
const std::pair<char* const, size_t>* segment_of(const void* p, size_t n) {
  auto& segments = device_segments();
  auto it = segments.upper_bound(static_cast<char*>(const_cast<void*>(p)));
  if (it == segments.begin()) return nullptr;
  --it;
  const char* c = static_cast<const char*>(p);
  return c + n <= it->first + it->second ? &*it : nullptr;
}

class NoAccessSegments final : public SegmentSource {
 public:
  Device device() const override { return kFake; }
  void* allocate_segment(size_t bytes) override {
    void* p = mmap(nullptr, bytes, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    device_segments()[static_cast<char*>(p)] = bytes;
    return p;
  }
  void free_segment(void* p, size_t bytes) override {
    device_segments().erase(static_cast<char*>(p));
    munmap(p, bytes);
  }
  std::string name() const override { return "fake-device"; }
};

class FakeDeviceBackend final : public DeviceBackend {
 public:
  DeviceType type() const override { return DeviceType::cuda; }
  int device_count() const override { return kFakeIndex + 1; }
  std::string unavailable_reason() const override { return ""; }
  std::unique_ptr<SegmentSource> make_segment_source(int index) override {
    CG_CHECK(index == kFakeIndex, "the fake backend only serves cuda:", kFakeIndex);
    return std::make_unique<NoAccessSegments>();
  }
  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            size_t nbytes) override {
    ++copies;
    std::vector<const std::pair<char* const, size_t>*> opened;
    for (auto [p, device] : {std::pair<const void*, Device>{dst, dst_device}, {src, src_device}}) {
      const auto* segment = segment_of(p, nbytes);
      if (device.is_cuda()) {
        CG_CHECK(device == kFake && segment != nullptr, "fake backend: ", nbytes,
                 " bytes at a pointer said to be on ", device.str(), " are not device memory");
        opened.push_back(segment);
      } else {
        CG_CHECK(segment == nullptr, "fake backend: a 'host' pointer is device memory");
      }
    }
    for (const auto* s : opened) mprotect(s->first, s->second, PROT_READ | PROT_WRITE);
    std::memmove(dst, src, nbytes);
    for (const auto* s : opened) mprotect(s->first, s->second, PROT_NONE);
  }
  void synchronize(int) override {}

  int copies = 0;
};

class ViewsOnDevice : public ::testing::Test {
 protected:
  static FakeDeviceBackend& fake() {
    static FakeDeviceBackend backend;
    return backend;
  }
  // Without a usable GPU (CPU-only builds, and CUDA builds on machines without one, as
  // in CI) the fake device stands in for cuda:0; the real backend, if any, comes back after.
  void SetUp() override {
    if (cuda_available()) {
      device_ = cuda_device(0);
      return;
    }
    real_ = find_backend(DeviceType::cuda);
    if (real_ != nullptr) unregister_backend(DeviceType::cuda);
    register_backend(&fake());
    using_fake_ = true;
    device_ = kFake;
  }
  void TearDown() override {
    if (!using_fake_) return;
    drop_device_allocator(kFake);
    unregister_backend(DeviceType::cuda);
    if (real_ != nullptr) register_backend(real_);
  }
  // Transfers so far through the fake backend (-1 on a real GPU: not counted there).
  int copies() const { return using_fake_ ? fake().copies : -1; }
  int expected_copies(int before, int more) const { return using_fake_ ? before + more : -1; }

  bool using_fake_ = false;
  DeviceBackend* real_ = nullptr;
  Device device_;
};

Tensor iota(const Shape& shape, DType dtype = DType::f32) {
  return raw::reshape(arange(0.0, static_cast<double>(shape_numel(shape)), 1.0, {.dtype = dtype}),
                      shape);
}

TEST_F(ViewsOnDevice, DeviceMemoryIsReallyOffLimitsToTheHost) {
  if (!using_fake_) GTEST_SKIP() << "checks the fake device only";
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

TEST_F(ViewsOnDevice, ConversionsStageThroughTheHost) {
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
  if (using_fake_) {
    TENSOR_EXPECT_ERROR(zeros({2}, {.device = cuda_device(9)}), "cuda:9 requested", "only 8");
  }
}

TEST_F(ViewsOnDevice, CrossDeviceOpsAreRefusedClearly) {
  const Tensor on_host = ones({2, 3});
  const Tensor on_device = to(ones({2, 3}), device_);
  for (auto op : {+[](const Tensor& a, const Tensor& b) { return add(a, b); },
                  +[](const Tensor& a, const Tensor& b) { return mul(a, b); },
                  +[](const Tensor& a, const Tensor& b) { return matmul(a, transpose(b, 0, 1)); }}) {
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

}  // namespace
}  // namespace cg
