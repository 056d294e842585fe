// Why this file exists: the table of device types (Note [Device types], core/device.h) is
// what every program's --device, the train config and every message read. These tests
// pin its parsing and printing, resolve_device's errors (each says what to change), the
// registries' one slot per type, and that a device names itself and states its
// capabilities through its backend -- on the host and on the test fake, a device type of
// its own that registers like any other.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "core/backend.h"
#include "core/device.h"
#include "core/factories.h"
#include "fake_device.h"
#include "fake_kernels.h"
#include "ops/kernels.h"
#include "tensor_test_helpers.h"

namespace cg {
namespace {

TEST(DeviceTable, ParsesAndPrintsEveryType) {
  EXPECT_EQ(Device::parse("cpu"), kCPU);
  EXPECT_EQ(Device::parse("cuda"), cuda_device(0));
  EXPECT_EQ(Device::parse("cuda:3"), cuda_device(3));
  EXPECT_EQ(Device::parse("fake:0"), fake::fake_device());
  for (const char* text : {"cpu", "cuda:0", "cuda:12", "fake:0"}) {
    EXPECT_EQ(Device::parse(text).str(), text);
  }
  EXPECT_EQ(Device(DeviceType::cpu, 5), kCPU) << "the host has one device";
}

TEST(DeviceTable, BadStringsNameTheAcceptedSpellings) {
  for (const char* text :
       {"", "gpu", "CUDA", "cuda:", "cuda:x", "cuda:-1", "cuda:12345", "cpu:0", "cuda:0:1"}) {
    const std::string quoted = "bad device string '" + std::string(text) + "'";
    TENSOR_EXPECT_ERROR(Device::parse(text), quoted.c_str(), "give cpu, cuda or cuda:N");
  }
  // The fake is for tests: parsed, but not offered to users.
  EXPECT_EQ(device_names_help(), "cpu, cuda or cuda:N");
}

TEST(DeviceTable, OneSlotAndOneNamePerType) {
  std::set<size_t> slots;
  std::set<std::string> names;
  for (DeviceType t : {DeviceType::cpu, DeviceType::cuda, DeviceType::fake}) {
    EXPECT_LT(device_slot(t), kDeviceTypeCount);
    slots.insert(device_slot(t));
    names.insert(device_type_name(t));
    EXPECT_NE(std::string(device_type_build_hint(t)), "");
  }
  EXPECT_EQ(slots.size(), kDeviceTypeCount);
  EXPECT_EQ(names, (std::set<std::string>{"cpu", "cuda", "fake"}));
  TENSOR_EXPECT_ERROR(device_slot(static_cast<DeviceType>(kDeviceTypeCount)),
                      "unknown device type code");
  TENSOR_EXPECT_ERROR(find_backend(static_cast<DeviceType>(-1)), "unknown device type code");
}

TEST(ResolveDevice, NamesTheOptionAndWhatToChange) {
  EXPECT_EQ(resolve_device("cpu", "--device"), kCPU);
  TENSOR_EXPECT_ERROR(resolve_device("gpu", "--device"), "--device gpu: bad device string 'gpu'",
                      "give cpu, cuda or cuda:N");
  TENSOR_EXPECT_ERROR(resolve_device("", "--device"), "--device : bad device string ''");
  // (an outside tester's escape sequence reached the terminal through this message)
  TENSOR_EXPECT_ERROR(resolve_device("c\x1bpu\n", "--device"),
                      "--device c?pu?: bad device string 'c?pu?'");
  // Parsed but not built in: the table's hint says what to change.
  TENSOR_EXPECT_ERROR(resolve_device("fake", "train config: device"),
                      "train config: device fake is not available", "no fake backend",
                      "tests/fake_device.h");
  if (cuda_available()) {
    EXPECT_EQ(resolve_device("cuda", "--device"), cuda_device(0));
    const int n = device_count(DeviceType::cuda);
    TENSOR_EXPECT_ERROR(resolve_device("cuda:" + std::to_string(n), "--device"), "is not available",
                        "requested but only", "use cuda:0");
  } else {
    TENSOR_EXPECT_ERROR(resolve_device("cuda", "--device"), "--device cuda is not available");
  }
}

TEST(ResolveDevice, AFakeDeviceResolvesOnceRegistered) {
  fake::FakeDeviceScope scope;
  EXPECT_EQ(resolve_device("fake", "--device"), fake::fake_device());
  EXPECT_EQ(resolve_device("fake:0", "--device"), fake::fake_device());
  TENSOR_EXPECT_ERROR(resolve_device("fake:1", "--device"), "--device fake:1 is not available",
                      "fake:1 requested but only 1 fake device is visible", "use fake:0");
  EXPECT_EQ(device_count(DeviceType::fake), 1);
}

TEST(DeviceBackendInterface, NamesItselfAndStatesItsCapabilities) {
  const DeviceBackend& host = backend_for(kCPU);
  EXPECT_STREQ(host.name(), "cpu");
  const DeviceCapabilities h = host.capabilities();
  EXPECT_FALSE(h.own_memory);
  EXPECT_FALSE(h.queued_work);
  EXPECT_GT(h.efficient_gemm_rows, 0);

  fake::FakeDeviceScope scope;
  const DeviceBackend& fake = backend_for(fake::fake_device());
  EXPECT_STREQ(fake.name(), "fake");
  EXPECT_TRUE(fake.capabilities().own_memory);
  // A real GPU is never hidden by the fake: the types have their own slots.
  EXPECT_NE(&fake, find_backend(DeviceType::cuda));
}

TEST(DeviceBackendInterface, TheFakeRegistersAndLeavesLikeAnyDevice) {
  EXPECT_EQ(find_backend(DeviceType::fake), nullptr);
  EXPECT_EQ(find_kernels(DeviceType::fake), nullptr);
  TENSOR_EXPECT_ERROR(zeros({2}, {.device = fake::fake_device()}), "no fake backend");
  {
    FakeKernelDevice device;
    ASSERT_NE(find_kernels(DeviceType::fake), nullptr);
    EXPECT_EQ(find_kernels(DeviceType::fake)->type(), DeviceType::fake);
    const Tensor t = ones({3}, {.device = device.device()});
    EXPECT_EQ(t.device().str(), "fake:0");
  }
  EXPECT_EQ(find_backend(DeviceType::fake), nullptr);
  EXPECT_EQ(find_kernels(DeviceType::fake), nullptr);
  // A kernel table's messages use its device's name.
  TENSOR_EXPECT_ERROR(kernels_for(fake::fake_device(), "softmax"),
                      "softmax is not implemented on fake:0", "no fake kernels");
}

}  // namespace
}  // namespace cg
