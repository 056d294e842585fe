// Why this file exists: cudaMalloc/cudaFree behind the SegmentSource interface.
//
// Note [cudaMalloc OOM]: cudaMalloc reports out-of-memory as cudaErrorMemoryAllocation
// and also leaves it as the thread's "last error". It is not a sticky (context-killing)
// error, so we clear it with cudaGetLastError and return nullptr: the allocator then
// releases cached segments and retries, exactly as PyTorch does. Any other error is a
// real failure (bad device, driver gone) and throws.
#include "cuda/cuda_segment_source.h"

#include <cuda_runtime_api.h>

#include "core/error.h"
#include "cuda/compute_stream.h"
#include "cuda/cuda_check.h"
#include "cuda/device_info.h"

namespace cg::cuda {

CudaSegmentSource::CudaSegmentSource(int index) : index_(index) {
  const int n = device_count();
  CG_CHECK(index >= 0 && index < n, "cannot use cuda:", index, ": ", n, " CUDA device(s) available",
           n == 0 ? " (" + unavailable_reason() + ")" : std::string());
}

void* CudaSegmentSource::allocate_segment(size_t bytes) {
  CG_CHECK(bytes > 0, "CudaSegmentSource::allocate_segment: zero-byte segment requested");
  CG_CUDA_CHECK(cudaSetDevice(index_));
  void* ptr = nullptr;
  const cudaError_t err = cudaMalloc(&ptr, bytes);
  if (err == cudaErrorMemoryAllocation) {
    cudaGetLastError();  // see Note [cudaMalloc OOM]
    return nullptr;
  }
  CG_CUDA_CHECK(err);
  return ptr;
}

void CudaSegmentSource::free_segment(void* ptr, size_t bytes) {
  if (ptr == nullptr) return;
  // At process exit the runtime may already be unloading; the memory goes with it.
  auto shutting_down = [](cudaError_t e) {
    return e == cudaErrorCudartUnloading || e == cudaErrorContextIsDestroyed;
  };
  cudaError_t err = cudaSetDevice(index_);
  if (err == cudaSuccess) err = cudaFree(ptr);
  if (shutting_down(err)) {
    cudaGetLastError();
    return;
  }
  CG_CHECK(err == cudaSuccess, "cudaFree of a ", bytes, "-byte segment at ", ptr,
           " on cuda:", index_, " failed: ", cudaGetErrorName(err), " (", cudaGetErrorString(err),
           ")");
}

int64_t CudaSegmentSource::free_bytes() const {
  if (cudaSetDevice(index_) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return static_cast<int64_t>(free);
}

// Events travel through the allocator as integers: the cudaEvent_t pointer's bits.
SegmentSource::Event CudaSegmentSource::record_event(StreamId stream) {
  CG_CUDA_CHECK(cudaSetDevice(index_));
  cudaEvent_t event = nullptr;
  CG_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  CG_CUDA_CHECK(cudaEventRecord(event, stream_for(index_, stream)));
  return reinterpret_cast<Event>(event);
}

bool CudaSegmentSource::event_done(Event event) {
  const cudaError_t err = cudaEventQuery(reinterpret_cast<cudaEvent_t>(event));
  if (err == cudaErrorNotReady) {
    cudaGetLastError();  // not an error: the work is still running
    return false;
  }
  CG_CUDA_CHECK(err);
  return true;
}

void CudaSegmentSource::wait_event(Event event) {
  CG_CUDA_CHECK(cudaEventSynchronize(reinterpret_cast<cudaEvent_t>(event)));
}

void CudaSegmentSource::release_event(Event event) {
  cudaEventDestroy(reinterpret_cast<cudaEvent_t>(event));  // unchecked: runs in teardown too
}

}  // namespace cg::cuda
