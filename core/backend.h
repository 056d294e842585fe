// Why this file exists: core/ must not depend on cuda/, yet tensors must move to and
// from GPUs and the allocator must get device segments. The CUDA backend registers
// itself here when the library is built with CUDA; without it, asking for a cuda
// device gives a clear error instead of a link failure.
#pragma once

#include <cstddef>
#include <memory>
#include <string>

#include "core/device.h"
#include "core/segment_source.h"

namespace cg {

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual DeviceType type() const = 0;
  // Number of usable devices; 0 when there is no driver or no device (never throws).
  virtual int device_count() const = 0;
  // Why device_count() is 0, in words (e.g. the CUDA error string); "" otherwise.
  virtual std::string unavailable_reason() const = 0;
  virtual std::unique_ptr<SegmentSource> make_segment_source(int index) = 0;
  // Copies nbytes between any two of: host memory, this backend's devices. Synchronous.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    size_t nbytes) = 0;
  virtual void synchronize(int index) = 0;
};

void register_backend(DeviceBackend* backend);  // called once by the backend itself
// Tests only: forgets the backend of `type` (a fake device backend cleans up with this).
// Allocators already made for its devices stay; do not use them afterwards.
void unregister_backend(DeviceType type);
// The backend of `type`, or nullptr when this build has none.
DeviceBackend* find_backend(DeviceType type);
// The backend of `device`; throws a clear error when not built in or the device is absent.
DeviceBackend& backend_for(Device device);
bool cuda_available();

}  // namespace cg
