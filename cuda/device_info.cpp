// Why this file exists: device queries that never take the process down on a machine
// without a GPU. The first cudaGetDeviceCount result is cached: the answer cannot
// change within a process (CUDA itself caches it at initialisation).
#include "cuda/device_info.h"

#include <cstdio>
#include <mutex>

#include <cuda_runtime_api.h>

#include "core/error.h"
#include "cuda/cuda_check.h"

namespace cg::cuda {
namespace {

struct CountResult {
  int count = 0;
  std::string reason;
};

const CountResult& query_count() {
  static const CountResult result = [] {
    CountResult r;
    int n = 0;
    const cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      cudaGetLastError();  // clear it so later unrelated calls don't report it
      r.count = 0;
      r.reason = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
    } else if (n <= 0) {
      r.count = 0;
      r.reason = "no CUDA device found";
    } else {
      r.count = n;
    }
    return r;
  }();
  return result;
}

std::string gib(size_t bytes, double unit, const char* suffix) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f %s", static_cast<double>(bytes) / unit, suffix);
  return buf;
}

}  // namespace

int device_count() {
  try {
    return query_count().count;
  } catch (...) {
    return 0;  // std::string allocation failure: still "no GPU", never a throw
  }
}

std::string unavailable_reason() { return query_count().reason; }

DeviceProperties device_properties(int index) {
  const int n = device_count();
  CG_CHECK(index >= 0 && index < n, "cuda:", index, " does not exist: ", n,
           " CUDA device(s) available", n == 0 ? " (" + unavailable_reason() + ")" : "");
  cudaDeviceProp prop{};
  CG_CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  DeviceProperties p;
  p.index = index;
  p.name = prop.name;
  p.cc_major = prop.major;
  p.cc_minor = prop.minor;
  p.total_memory = prop.totalGlobalMem;
  p.multiprocessors = prop.multiProcessorCount;
  p.l2_cache_bytes = static_cast<size_t>(prop.l2CacheSize);
  return p;
}

std::string DeviceProperties::summary() const {
  return "cuda:" + std::to_string(index) + " " + name + ", sm_" + std::to_string(cc_major) +
         std::to_string(cc_minor) + ", " + gib(total_memory, 1024.0 * 1024 * 1024, "GiB") + ", " +
         std::to_string(multiprocessors) + " SMs, L2 " + gib(l2_cache_bytes, 1024.0 * 1024, "MiB");
}

}  // namespace cg::cuda
