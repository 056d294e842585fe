// Why this file exists: a device backend for machines without a GPU that still proves
// device code paths right. It is a device type of its own (DeviceType::fake, "fake:0"),
// registered like any other device, so it never hides a real GPU; its memory is mapped
// PROT_NONE except inside its own backend calls, so host code that touches "device"
// memory directly crashes, as it would on a GPU. Its data primitives (Note
// [Device primitives], core/backend.h) open the memory, run the host backend's loops
// and close it again, so results must equal the host's. Tests of copies and factories
// (views_device_test.cpp) and the backend-comparison harness use it.
//
//   FakeDeviceScope scope;                 // installs it; the real backend comes back after
//   Tensor t = zeros({4}, {.device = fake_device()});
//   { DeviceMemoryAccessible open; read t.data_ptr() directly; }
#pragma once

#include <cstddef>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "core/backend.h"

namespace cg::fake {

inline Device fake_device() { return Device{DeviceType::fake, 0}; }

// What went through the fake backend since it was installed.
struct Counts {
  int transfers = 0;  // copy(): byte copies, host <-> device and device <-> device
  int fills = 0;
  int strided_copies = 0;
  int accumulates = 0;
  int random_fills = 0;
  int pinned_buffers = 0;  // allocate_pinned_host() calls
  int pinned_uploads = 0;  // upload_pinned() calls
};

class FakeDeviceBackend final : public DeviceBackend {
 public:
  DeviceType type() const override { return DeviceType::fake; }
  // A GPU's stand-in: memory of its own; its work runs at once (nothing to wait for).
  DeviceCapabilities capabilities() const override { return {.own_memory = true}; }
  int device_count() const override { return 1; }
  std::string unavailable_reason() const override { return ""; }
  std::unique_ptr<SegmentSource> make_segment_source(int index) override;
  void copy(void* dst, Device dst_device, const void* src, Device src_device,
            size_t nbytes) override;
  void synchronize(int) override {}

  void fill(Device device, void* dst, DType dtype, const Dims& sizes, const Dims& strides,
            double value, double step) override;
  void copy_strided(Device device, void* dst, DType dst_dtype, const Dims& sizes,
                    const Dims& dst_strides, const void* src, DType src_dtype,
                    const Dims& src_strides) override;
  void accumulate(Device device, void* dst, DType dst_dtype, const Dims& sizes,
                  const Dims& dst_strides, const void* src, DType src_dtype,
                  const Dims& src_strides) override;
  void random_uniform(Device device, void* dst, DType dtype, const Dims& sizes, const Dims& strides,
                      uint64_t seed, uint64_t offset, double low, double high) override;
  void random_normal(Device device, void* dst, DType dtype, const Dims& sizes, const Dims& strides,
                     uint64_t seed, uint64_t offset, double mean, double std) override;

  // Note [Pinned uploads]: ordinary host memory stands for pinned memory. An upload is
  // only queued (any thread): its bytes are copied when the compute stream is made to
  // wait for it (wait_for) or when a test runs the queue (run_uploads), so that a reader
  // that rewrote a buffer before upload_done said so, or a step that read a destination
  // without wait_for, gets the wrong bytes, as on a GPU. The counts show the path taken.
  void* allocate_pinned_host(size_t nbytes) override;
  void free_pinned_host(void* ptr) override;
  uint64_t upload_pinned(void* dst, Device dst_device, const void* src, size_t nbytes,
                         uint64_t after) override;
  void wait_for(Device device, uint64_t ticket) override;
  bool upload_done(uint64_t ticket) override;
  void run_uploads();  // the upload stream catches up (main thread)
  int pending_uploads();

  Counts counts;

 private:
  struct Upload {
    void* dst;
    Device device;
    const void* src;
    size_t nbytes;
  };
  void run_uploads_through(uint64_t ticket);
  std::mutex uploads_mutex_;
  std::map<uint64_t, Upload> uploads_;  // queued, not yet copied, in ticket order
  uint64_t last_ticket_ = 0;
};

// Registers the fake device's backend and returns it, with its counts reset. uninstall()
// drops fake:0's allocator and unregisters the backend.
FakeDeviceBackend& install();
void uninstall();
bool installed();

// RAII form of install()/uninstall().
class FakeDeviceScope {
 public:
  FakeDeviceScope() : backend_(&install()) {}
  ~FakeDeviceScope() { uninstall(); }
  FakeDeviceScope(const FakeDeviceScope&) = delete;
  FakeDeviceScope& operator=(const FakeDeviceScope&) = delete;
  FakeDeviceBackend& backend() const { return *backend_; }

 private:
  FakeDeviceBackend* backend_;
};

// While one is alive, every fake-device segment is readable and writable (nests).
class DeviceMemoryAccessible {
 public:
  DeviceMemoryAccessible();
  ~DeviceMemoryAccessible();
  DeviceMemoryAccessible(const DeviceMemoryAccessible&) = delete;
  DeviceMemoryAccessible& operator=(const DeviceMemoryAccessible&) = delete;
};

// Every fake-device segment: start -> bytes.
const std::map<char*, size_t>& segments();
// Whether [p, p + nbytes) lies inside one fake-device segment.
bool is_device_memory(const void* p, size_t nbytes);

}  // namespace cg::fake
