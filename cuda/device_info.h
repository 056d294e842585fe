// Why this file exists: "is there a GPU, which one, how big" -- asked by the backend,
// the tests (to skip without a GPU) and the examples (to print what they run on).
// device_count() never throws: on a machine without a driver cudaGetDeviceCount
// returns an error, not zero, and every error here means "no GPU".
#pragma once

#include <cstddef>
#include <string>

namespace cg::cuda {

// Usable CUDA devices; 0 on any error (no driver, no device, driver too old).
int device_count();
// Why device_count() is 0, in words ("cudaErrorInsufficientDriver: ..."); "" when
// devices were found.
std::string unavailable_reason();

struct DeviceProperties {
  int index = 0;
  std::string name;
  int cc_major = 0;
  int cc_minor = 0;
  size_t total_memory = 0;  // bytes
  int multiprocessors = 0;
  size_t l2_cache_bytes = 0;

  // "cuda:0 NVIDIA H200, sm_90, 139.8 GiB, 132 SMs, L2 60.0 MiB"
  std::string summary() const;
};

// Properties of device `index`; throws cg::Error when it does not exist.
DeviceProperties device_properties(int index);

}  // namespace cg::cuda
