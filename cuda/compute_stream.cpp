// Why this file exists: makes each device's compute stream, and its side streams, once
// (Note [One compute stream], compute_stream.h), and orders them with events.
#include "cuda/compute_stream.h"

#include <array>
#include <mutex>

#include "core/error.h"
#include "core/stream_guard.h"
#include "cuda/cuda_check.h"

namespace cg::cuda {

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

cudaStream_t stream_for(int index, StreamId id) {
  if (id == kDefaultStream) return compute_stream(index);
  CG_CHECK(index >= 0 && index < kMaxDevices, "stream_for: device index ", index,
           " is out of range [0, ", kMaxDevices, ")");
  CG_CHECK(id <= kMaxSideStreams, "stream_for: stream id ", id, " is out of range [0, ",
           kMaxSideStreams, "]");
  static std::array<std::array<cudaStream_t, kMaxSideStreams>, kMaxDevices> streams{};
  static std::array<std::array<std::once_flag, kMaxSideStreams>, kMaxDevices> made;
  cudaStream_t& stream = streams[index][id - 1];
  std::call_once(made[index][id - 1], [index, &stream] {
    int current = 0;
    CG_CUDA_CHECK(cudaGetDevice(&current));
    CG_CUDA_CHECK(cudaSetDevice(index));
    CG_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    CG_CUDA_CHECK(cudaSetDevice(current));
  });
  return stream;
}

cudaStream_t current_stream(int index) {
  return stream_for(index, cg::current_stream(cuda_device(index)));
}

void stream_wait(int index, StreamId waiter, StreamId producer) {
  if (waiter == producer) return;
  CG_CUDA_CHECK(cudaSetDevice(index));
  // The wait takes the event's state now, so the event may be destroyed at once (CUDA
  // releases it when it completes): a few microseconds per call, no pool to manage.
  cudaEvent_t done{};
  CG_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
  CG_CUDA_CHECK(cudaEventRecord(done, stream_for(index, producer)));
  CG_CUDA_CHECK(cudaStreamWaitEvent(stream_for(index, waiter), done, 0));
  CG_CUDA_CHECK(cudaEventDestroy(done));
}

}  // namespace cg::cuda
