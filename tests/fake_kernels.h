// Why this file exists: a stand-in device for machines without a GPU, so that device code
// paths -- the kernel-table dispatch, the device-neutral op files, device copies -- run in
// every CI build. It installs the fake device of fake_device.h (fake:0, memory the host
// may touch only inside a guard) and registers its kernel table, the CPU's
// (cpu/cpu_kernels.h) by derivation, that runs each CPU entry on that memory inside the
// guard and counts the calls per entry (the
// comparison harness, tests/backend_compare_test.cpp, checks each case reaches the entries
// it names). It has one side stream whose work runs as late as the waits allow (Note
// [Side streams], ops/kernels.h). Both are unregistered when it is destroyed.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "core/backend.h"
#include "ops/kernels.h"

namespace cg {

class FakeKernelDevice {
 public:
  FakeKernelDevice();
  ~FakeKernelDevice();
  FakeKernelDevice(const FakeKernelDevice&) = delete;
  FakeKernelDevice& operator=(const FakeKernelDevice&) = delete;

  Device device() const;
  int calls(const std::string& entry) const;
  void reset_calls();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace cg
