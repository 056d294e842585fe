// Why this file exists: the caching allocator's window onto one GPU. It hands out whole
// segments from cudaMalloc and takes them back with cudaFree; everything finer-grained
// (blocks, pools, stats, traces) is the allocator's, as on the host.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "core/segment_source.h"

namespace cg::cuda {

class CudaSegmentSource : public SegmentSource {
 public:
  // Throws cg::Error when cuda:`index` does not exist (no GPU, or index out of range).
  explicit CudaSegmentSource(int index);
  Device device() const override { return Device{DeviceType::cuda, index_}; }
  // cudaSetDevice + cudaMalloc. nullptr when the device is out of memory (the allocator
  // then frees its cache and retries); throws cg::Error on any other CUDA error.
  void* allocate_segment(size_t bytes) override;
  void free_segment(void* ptr, size_t bytes) override;
  // cudaMemGetInfo's free figure; -1 when the query fails.
  int64_t free_bytes() const override;
  std::string name() const override { return "cuda:" + std::to_string(index_); }
  // Note [Stream events] (core/segment_source.h): a CUDA event (timing off) recorded on
  // stream_for(index, stream), queried, waited on and destroyed.
  Event record_event(StreamId stream) override;
  bool event_done(Event event) override;
  void wait_event(Event event) override;
  void release_event(Event event) override;

 private:
  int index_;
};

}  // namespace cg::cuda
