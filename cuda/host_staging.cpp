// Why this file exists: the pinned buffer pool of staged uploads (host_staging.h).
#include "cuda/host_staging.h"

#include <cstring>
#include <mutex>
#include <vector>

#include "cuda/cuda_check.h"

namespace cg::cuda {

namespace {

struct StagingBuffer {
  void* host = nullptr;  // pinned
  size_t size = 0;       // a power of two >= 4 KiB
  cudaEvent_t done{};    // recorded after the buffer's last transfer
  bool in_flight = false;
};

struct Pool {
  std::mutex mutex;
  std::vector<StagingBuffer> buffers;  // never freed (uploads may still use them at exit)
};

Pool& pool() {
  static Pool* p = new Pool();  // leaked on purpose: outlives static destructors
  return *p;
}

size_t size_class(size_t nbytes) {
  size_t s = 4096;
  while (s < nbytes) s <<= 1;
  return s;
}

// A buffer of exactly `size` whose last transfer has finished; nullptr if none.
StagingBuffer* free_buffer(Pool& p, size_t size) {
  for (StagingBuffer& b : p.buffers) {
    if (b.size != size) continue;
    if (!b.in_flight) return &b;
    const cudaError_t e = cudaEventQuery(b.done);
    if (e == cudaSuccess) {
      b.in_flight = false;
      return &b;
    }
    if (e != cudaErrorNotReady) CG_CUDA_CHECK(e);
  }
  return nullptr;
}

}  // namespace

bool stage_host_to_device(void* dst, const void* src, size_t nbytes, int device,
                          cudaStream_t stream) {
  if (nbytes > kMaxStagedBytes) return false;
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  const size_t size = size_class(nbytes);
  StagingBuffer* b = free_buffer(p, size);
  if (b == nullptr) {
    StagingBuffer fresh;
    fresh.size = size;
    CG_CUDA_CHECK(cudaHostAlloc(&fresh.host, size, cudaHostAllocPortable));
    CG_CUDA_CHECK(cudaEventCreateWithFlags(&fresh.done, cudaEventDisableTiming));
    p.buffers.push_back(fresh);
    b = &p.buffers.back();
  }
  std::memcpy(b->host, src, nbytes);
  CG_CUDA_CHECK(cudaSetDevice(device));
  CG_CUDA_CHECK(cudaMemcpyAsync(dst, b->host, nbytes, cudaMemcpyHostToDevice, stream));
  CG_CUDA_CHECK(cudaEventRecord(b->done, stream));
  b->in_flight = true;
  return true;
}

size_t staging_buffer_count() {
  Pool& p = pool();
  std::lock_guard<std::mutex> lock(p.mutex);
  return p.buffers.size();
}

}  // namespace cg::cuda
