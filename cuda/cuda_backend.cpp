// Why this file exists: the glue that lets core/ use GPUs without depending on cuda/.
// A static object registers the CUDA DeviceBackend when libchunkgrad is loaded (the
// library is shared, so this file is always linked in); core then asks it for segment
// sources (one per device, for allocator_for), for copies between host and devices, and
// for the data primitives of Note [Device primitives] (core/backend.h), which run as
// kernels (cuda/copy_kernels.cu) on the device's one compute stream (Note [One compute
// stream], cuda/compute_stream.h).
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <cuda_runtime_api.h>

#include "core/backend.h"
#include "core/error.h"
#include "core/loop_nest.h"
#include "cuda/compute_stream.h"
#include "cuda/copy_kernels.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_segment_source.h"
#include "cuda/device_info.h"
#include "cuda/host_staging.h"

namespace cg::cuda {
namespace {

// Checks that `ptr` is memory of `device` as CUDA sees it. Host pointers may be
// pageable (unregistered) or pinned; device pointers must belong to that device.
void check_pointer(const void* ptr, Device device, const char* role, size_t nbytes) {
  CG_CHECK(ptr != nullptr, "copy of ", nbytes, " bytes: ", role, " pointer is null (", device.str(),
           ")");
  cudaPointerAttributes attr{};
  const cudaError_t err = cudaPointerGetAttributes(&attr, ptr);
  if (err != cudaSuccess) {
    cudaGetLastError();
    CG_CHECK(device.is_cpu(), "copy: ", role, " pointer ", ptr, " is not memory CUDA knows (",
             cudaGetErrorName(err), ") but was given as ", device.str());
    return;
  }
  if (device.is_cpu()) {
    CG_CHECK(attr.type != cudaMemoryTypeDevice, "copy: ", role, " pointer ", ptr,
             " is device memory of cuda:", attr.device, " but was given as host memory");
  } else {
    CG_CHECK(attr.type == cudaMemoryTypeDevice || attr.type == cudaMemoryTypeManaged,
             "copy: ", role, " pointer ", ptr, " is host memory but was given as ", device.str());
    CG_CHECK(attr.device == device.index, "copy: ", role, " pointer ", ptr,
             " belongs to cuda:", attr.device, " but was given as ", device.str());
  }
}

class CudaBackend final : public DeviceBackend {
 public:
  DeviceType type() const override { return DeviceType::cuda; }
  // Note [Device capabilities] (core/backend.h): a GPU has its own memory and a queue of
  // work; its GEMMs want as many rows as a chunk's budget allows, so no row floor.
  DeviceCapabilities capabilities() const override {
    return {.own_memory = true, .queued_work = true};
  }
  int device_count() const override { return cuda::device_count(); }
  std::string unavailable_reason() const override { return cuda::unavailable_reason(); }

  std::unique_ptr<SegmentSource> make_segment_source(int index) override {
    return std::make_unique<CudaSegmentSource>(index);
  }

  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            size_t nbytes) override {
    if (nbytes == 0) return;
    check_device(dst_device, "destination");
    check_device(src_device, "source");
    // Checked on every path: a device pointer passed as host memory would crash memmove.
    check_pointer(dst, dst_device, "destination", nbytes);
    check_pointer(src, src_device, "source", nbytes);
    if (dst_device.is_cpu() && src_device.is_cpu()) {
      std::memmove(dst, src, nbytes);
      return;
    }

    if (dst_device.is_cuda() && src_device.is_cuda() && dst_device.index != src_device.index) {
      // The source's pending work first, then the transfer in the destination's order.
      note_host_sync();  // Note [Host sync count] in core/backend.h (twice: two waits)
      note_host_sync();
      CG_CUDA_CHECK(cudaStreamSynchronize(compute_stream(src_device.index)));
      CG_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, nbytes,
                                        compute_stream(dst_device.index)));
      CG_CUDA_CHECK(cudaStreamSynchronize(compute_stream(dst_device.index)));
      return;
    }
    const int index = dst_device.is_cuda() ? dst_device.index : src_device.index;
    CG_CUDA_CHECK(cudaSetDevice(index));
    cudaMemcpyKind kind = cudaMemcpyDeviceToDevice;
    if (src_device.is_cpu())
      kind = cudaMemcpyHostToDevice;
    else if (dst_device.is_cpu())
      kind = cudaMemcpyDeviceToHost;
    // In order after the kernels that wrote the source; this interface promises a
    // finished copy (the host may read or free its buffer right after). An upload keeps
    // that promise without waiting when it can be staged (Note [Staged uploads]); a copy
    // within one device involves no host memory, and everything that touches either
    // buffer afterwards (kernels, copies, the allocator's reuse of a freed block) is
    // ordered after it on the same stream, so it does not wait either (a contiguous
    // clone in a training step would otherwise be a host synchronisation).
    const cudaStream_t stream = current_stream(index);
    if (kind == cudaMemcpyHostToDevice && stage_host_to_device(dst, src, nbytes, index, stream))
      return;
    CG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, kind, stream));
    if (kind == cudaMemcpyDeviceToDevice) return;
    note_host_sync();
    CG_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  void synchronize(int index) override {
    check_device(Device{DeviceType::cuda, index}, "synchronize");
    CG_CUDA_CHECK(cudaSetDevice(index));
    note_host_sync();
    CG_CUDA_CHECK(cudaStreamSynchronize(compute_stream(index)));
    CG_CUDA_CHECK(cudaDeviceSynchronize());
  }

  // ---- data primitives: kernels on the compute stream, not waited for ----

  void fill(Device device, void* dst, DType dtype, const Dims& sizes, const Dims& strides,
            double value, double step) override {
    const cudaStream_t stream = enter(device, "fill");
    launch_fill(dst, dtype, simplify_loops<1>(sizes, {&strides}), value, step, stream);
  }

  void copy_strided(Device device, void* dst, DType dst_dtype, const Dims& sizes,
                    const Dims& dst_strides, const void* src, DType src_dtype,
                    const Dims& src_strides) override {
    const cudaStream_t stream = enter(device, "copy_strided");
    launch_copy(dst, dst_dtype, src, src_dtype,
                simplify_loops<2>(sizes, {&dst_strides, &src_strides}), stream);
  }

  void accumulate(Device device, void* dst, DType dst_dtype, const Dims& sizes,
                  const Dims& dst_strides, const void* src, DType src_dtype,
                  const Dims& src_strides) override {
    const cudaStream_t stream = enter(device, "accumulate");
    launch_accumulate(dst, dst_dtype, src, src_dtype,
                      simplify_loops<2>(sizes, {&dst_strides, &src_strides}), stream);
  }

  void random_uniform(Device device, void* dst, DType dtype, const Dims& sizes, const Dims& strides,
                      uint64_t seed, uint64_t offset, double low, double high) override {
    const cudaStream_t stream = enter(device, "random_uniform");
    launch_random_uniform(dst, dtype, simplify_loops<1>(sizes, {&strides}), seed, offset,
                          uniform_bits(dtype), low, high, stream);
  }

  void random_normal(Device device, void* dst, DType dtype, const Dims& sizes, const Dims& strides,
                     uint64_t seed, uint64_t offset, double mean, double std) override {
    const cudaStream_t stream = enter(device, "random_normal");
    launch_random_normal(dst, dtype, simplify_loops<1>(sizes, {&strides}), seed, offset, mean, std,
                         stream);
  }

  // ---- Note [Pinned uploads] (core/backend.h) ----

  void* allocate_pinned_host(size_t nbytes) override {
    void* ptr = nullptr;
    CG_CUDA_CHECK(cudaHostAlloc(&ptr, nbytes, cudaHostAllocPortable));
    return ptr;
  }
  void free_pinned_host(void* ptr) override {
    if (ptr != nullptr) CG_CUDA_CHECK(cudaFreeHost(ptr));
  }
  // The compute stream's work so far: an event on it.
  uint64_t record_compute(Device device) override {
    enter(device, "record_compute");
    return record(compute_stream(device.index));  // whatever the thread's current stream
  }
  // On the upload stream (a copy engine beside the compute stream), after `after`; then an
  // event whose completion frees the source.
  uint64_t upload_pinned(void* dst, Device dst_device, const void* src, size_t nbytes,
                         uint64_t after) override {
    enter(dst_device, "upload_pinned");  // checks the device and makes it current
    const cudaStream_t stream = cuda::stream_for(dst_device.index, cuda::kUploadStream);
    {
      std::lock_guard<std::mutex> lock(uploads_mutex_);
      auto it = uploads_.find(after);
      if (it != uploads_.end()) {  // else 0, or seen done already
        CG_CUDA_CHECK(cudaStreamWaitEvent(stream, it->second, 0));
        CG_CUDA_CHECK(cudaEventDestroy(it->second));  // released once it completes
        uploads_.erase(it);
      }
    }
    CG_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyHostToDevice, stream));
    return record(stream);
  }
  void wait_for(Device device, uint64_t ticket) override {
    enter(device, "wait_for");
    const cudaStream_t stream = compute_stream(device.index);
    std::lock_guard<std::mutex> lock(uploads_mutex_);  // upload_done may destroy the event
    auto it = uploads_.find(ticket);
    if (it != uploads_.end()) CG_CUDA_CHECK(cudaStreamWaitEvent(stream, it->second, 0));
  }
  bool upload_done(uint64_t ticket) override {
    std::lock_guard<std::mutex> lock(uploads_mutex_);
    auto it = uploads_.find(ticket);
    if (it == uploads_.end()) return true;                 // seen done before (or 0: no upload)
    const cudaError_t state = cudaEventQuery(it->second);  // never waits
    if (state == cudaErrorNotReady) {
      cudaGetLastError();
      return false;
    }
    CG_CUDA_CHECK(state);
    CG_CUDA_CHECK(cudaEventDestroy(it->second));
    uploads_.erase(it);
    return true;
  }

 private:
  std::mutex uploads_mutex_;                 // guards uploads_ and last_ticket_
  std::map<uint64_t, cudaEvent_t> uploads_;  // tickets not yet seen done
  uint64_t last_ticket_ = 0;

  // A ticket for the work queued on `stream` so far.
  uint64_t record(cudaStream_t stream) {
    cudaEvent_t done{};
    CG_CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming));
    CG_CUDA_CHECK(cudaEventRecord(done, stream));
    std::lock_guard<std::mutex> lock(uploads_mutex_);
    uploads_.emplace(++last_ticket_, done);
    return last_ticket_;
  }

  // Makes `device` current and returns the calling thread's stream on it (the compute
  // stream unless a StreamGuard says otherwise: compute_stream.h).
  cudaStream_t enter(Device device, const char* what) {
    CG_CHECK(device.is_cuda(), "the CUDA backend's ", what, " was asked to run on ", device.str(),
             " (a dispatch bug: use that device's backend)");
    check_device(device, what);
    CG_CUDA_CHECK(cudaSetDevice(device.index));
    return current_stream(device.index);
  }

  void check_device(Device d, const char* role) const {
    if (d.is_cpu()) return;
    const int n = cuda::device_count();
    CG_CHECK(d.index >= 0 && d.index < n, role, " device ", d.str(), " does not exist: ", n,
             " CUDA device(s) available",
             n == 0 ? " (" + cuda::unavailable_reason() + ")" : std::string());
  }
};

// Registered at load time; never destroyed (tensors freed during static destruction may
// still need it).
struct Registrar {
  Registrar() { register_backend(new CudaBackend()); }
};
const Registrar registrar;

}  // namespace
}  // namespace cg::cuda
