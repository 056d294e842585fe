// Why this file exists: the glue that lets core/ use GPUs without depending on cuda/.
// A static object registers the CUDA DeviceBackend when libchunkgrad is loaded (the
// library is shared, so this file is always linked in); core then asks it for segment
// sources (one per device, for allocator_for) and for copies between host and devices.
#include <cstring>
#include <memory>
#include <string>

#include <cuda_runtime_api.h>

#include "core/backend.h"
#include "core/error.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_segment_source.h"
#include "cuda/device_info.h"

namespace cg::cuda {
namespace {

// Checks that `ptr` is memory of `device` as CUDA sees it. Host pointers may be
// pageable (unregistered) or pinned; device pointers must belong to that device.
void check_pointer(const void* ptr, Device device, const char* role, size_t nbytes) {
  CG_CHECK(ptr != nullptr, "copy of ", nbytes, " bytes: ", role, " pointer is null (",
           device.str(), ")");
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
             "copy: ", role, " pointer ", ptr, " is host memory but was given as ",
             device.str());
    CG_CHECK(attr.device == device.index, "copy: ", role, " pointer ", ptr,
             " belongs to cuda:", attr.device, " but was given as ", device.str());
  }
}

class CudaBackend final : public DeviceBackend {
 public:
  DeviceType type() const override { return DeviceType::cuda; }
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
      CG_CUDA_CHECK(cudaMemcpyPeer(dst, dst_device.index, src, src_device.index, nbytes));
      CG_CUDA_CHECK(cudaDeviceSynchronize());
      return;
    }
    const int index = dst_device.is_cuda() ? dst_device.index : src_device.index;
    CG_CUDA_CHECK(cudaSetDevice(index));
    cudaMemcpyKind kind = cudaMemcpyDeviceToDevice;
    if (src_device.is_cpu()) kind = cudaMemcpyHostToDevice;
    else if (dst_device.is_cpu()) kind = cudaMemcpyDeviceToHost;
    CG_CUDA_CHECK(cudaMemcpy(dst, src, nbytes, kind));
    // cudaMemcpy does not block the host for device-to-device copies (nor, for pageable
    // memory, always for host-to-device); this interface promises a finished copy.
    if (kind != cudaMemcpyDeviceToHost) CG_CUDA_CHECK(cudaDeviceSynchronize());
  }

  void synchronize(int index) override {
    check_device(Device{DeviceType::cuda, index}, "synchronize");
    CG_CUDA_CHECK(cudaSetDevice(index));
    CG_CUDA_CHECK(cudaDeviceSynchronize());
  }

 private:
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
