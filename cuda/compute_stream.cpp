// Why this file exists: makes each device's compute stream once (Note [One compute
// stream], compute_stream.h).
#include "cuda/compute_stream.h"

#include <array>
#include <mutex>

#include "core/error.h"
#include "cuda/cuda_check.h"

namespace cg::cuda {

namespace {
constexpr int kMaxDevices = 64;
}  // namespace

cudaStream_t compute_stream(int index) {
  CG_CHECK(index >= 0 && index < kMaxDevices, "compute_stream: device index ", index,
           " is out of range [0, ", kMaxDevices, ")");
  static std::array<cudaStream_t, kMaxDevices> streams{};
  static std::array<std::once_flag, kMaxDevices> made;
  std::call_once(made[index], [index] {
    int current = 0;
    CG_CUDA_CHECK(cudaGetDevice(&current));
    CG_CUDA_CHECK(cudaSetDevice(index));
    CG_CUDA_CHECK(cudaStreamCreateWithFlags(&streams[index], cudaStreamNonBlocking));
    CG_CUDA_CHECK(cudaSetDevice(current));
  });
  return streams[index];
}

}  // namespace cg::cuda
