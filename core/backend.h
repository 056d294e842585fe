// Why this file exists: core/ must not depend on cuda/, yet tensors must move to and
// from GPUs, be filled and copied where they live, and the allocator must get device
// segments. The CUDA backend registers itself here when the library is built with CUDA;
// without it, asking for a cuda device gives a clear error instead of a link failure.
// The host is a backend too (core/host_backend.cpp), so core calls one interface for
// every device.
//
// Note [Device capabilities]: what only some devices have is asked of the backend, so
// that device-neutral code (ops/, nn/, train/, examples/) branches on what a device can
// do, never on which device it is. A capability with a neutral form is a virtual whose
// host behaviour is that form: synchronize() waits for queued work (a no-op where there
// is none, as on the host); copy() may stage uploads through pinned host memory so that
// they return before the transfer ends (cuda/host_staging.h); the kernel table's
// check_labels and check_indices check on the device without a host wait where they can
// (Note [Host-known values], core/storage.h). What changes a caller's plan is a field of
// DeviceCapabilities, whose defaults are a plain device's answers (a new backend states
// only what it has). A communicator for several devices would join it the same way: a
// virtual returning none by default.
//
// Note [Device primitives]: the five data primitives below are what core/ needs to make
// and copy tensors without moving a GPU's data through host memory: factories (zeros,
// full, arange, rand, randn), copies (copy_, contiguous, clone, to_dtype, the device
// side of to_device) and gradient accumulation (raw::add_). They take raw pointers,
// dtypes and element sizes/strides (no Tensor), so cuda/ implements them with kernels
// and never includes the tensor header. Pointers point at the first element; sizes and
// strides have one entry per dim, strides in elements, never negative; a stride-0
// source broadcasts. All pointers are memory of `device`, which belongs to this
// backend. A device may run them asynchronously, in order on its one compute stream
// (cuda/compute_stream.h); copy() and synchronize() wait for them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/device.h"
#include "core/dtype.h"
#include "core/segment_source.h"

namespace cg {

// Note [Device capabilities].
struct DeviceCapabilities {
  // Memory of its own, apart from the host's (a GPU's): the host allocator's limit
  // (--memory-limit-mb) does not cap it, and reports give its peak beside the host's.
  bool own_memory = false;
  // Work is queued and runs after the call returns (a GPU's compute stream): a small step
  // costs launch-and-wait latency more than arithmetic, so batching rows pays, and timing
  // work needs synchronize() first.
  bool queued_work = false;
  // The fewest GEMM rows at which the device's matmuls run near their best, for code that
  // picks a chunk size (the memory lesson's chunked loss). 0: no such floor; size chunks
  // by memory budget (a GPU's GEMMs want as many rows as the budget allows).
  int64_t efficient_gemm_rows = 0;
};

class DeviceBackend {
 public:
  virtual ~DeviceBackend() = default;
  virtual DeviceType type() const = 0;
  // The device type's name ("cpu", "cuda"), from the table of core/device.h: what
  // messages call this backend's devices.
  const char* name() const { return device_type_name(type()); }
  virtual DeviceCapabilities capabilities() const { return {}; }
  // Number of usable devices; 0 when there is no driver or no device (never throws).
  virtual int device_count() const = 0;
  // Why device_count() is 0, in words (e.g. the CUDA error string); "" otherwise.
  virtual std::string unavailable_reason() const = 0;
  virtual std::unique_ptr<SegmentSource> make_segment_source(int index) = 0;
  // Copies nbytes between any two of: host memory, this backend's devices. Synchronous.
  virtual void copy(void* dst, Device dst_device, const void* src, Device src_device,
                    size_t nbytes) = 0;
  virtual void synchronize(int index) = 0;

  // Note [Pinned uploads]: page-locked host memory, which a device copies from on a copy
  // engine of its own while the host and the compute stream go on (the offline feature
  // reader's batches, train/offline_features.h). allocate_pinned_host returns nullptr where
  // the device has no such memory (the host, and the default): the caller then uses
  // ordinary memory and copy(). Tickets name points in a device's queues:
  //   record_compute(d)     the work queued on d's compute stream so far;
  //   upload_pinned(...)    queues dst (memory of dst_device) <- src (from
  //                         allocate_pinned_host) on d's upload stream, after ticket `after`
  //                         (0: none; consumed), and returns without waiting: src must stay
  //                         as it is until upload_done(ticket). Any thread may call it;
  //   wait_for(d, ticket)   work queued on d's compute stream from now on runs after the
  //                         ticket; the host does not wait;
  //   upload_done(ticket)   true once the ticket's work is done; never waits.
  // A destination the compute stream may still use (a block the caching allocator handed
  // back) is safe when `after` was recorded once it was allocated; the compute stream must
  // wait_for the upload before it reads or frees the destination. Default: no queues:
  // copy() at once, every ticket 0 and done.
  virtual void* allocate_pinned_host(size_t nbytes) {
    (void)nbytes;
    return nullptr;
  }
  virtual void free_pinned_host(void* ptr) { (void)ptr; }
  virtual uint64_t record_compute(Device device) {
    (void)device;
    return 0;
  }
  virtual uint64_t upload_pinned(void* dst, Device dst_device, const void* src, size_t nbytes,
                                 uint64_t after) {
    (void)after;
    copy(dst, dst_device, src, kCPU, nbytes);
    return 0;
  }
  virtual void wait_for(Device device, uint64_t ticket) {
    (void)device;
    (void)ticket;
  }
  virtual bool upload_done(uint64_t ticket) {
    (void)ticket;
    return true;
  }

  // ---- data primitives (Note [Device primitives]) ----
  using Dims = std::vector<int64_t>;
  // dst[i] = value + i * step for the elements in row-major order (step 0: a constant;
  // arange otherwise), computed in double and cast to `dtype` by cast_element's rules.
  virtual void fill(Device device, void* dst, DType dtype, const Dims& sizes, const Dims& strides,
                    double value, double step) = 0;
  // dst[i] = cast(src[i]) by cast_element's rules (core/dtype_dispatch.h); dst must not
  // overlap src, and no two dst elements may share an address.
  virtual void copy_strided(Device device, void* dst, DType dst_dtype, const Dims& sizes,
                            const Dims& dst_strides, const void* src, DType src_dtype,
                            const Dims& src_strides) = 0;
  // dst[i] += src[i]; both dtypes floating (possibly different, e.g. f32 += bf16), the
  // sum taken in f64 when either is f64, in f32 otherwise, then rounded to dst's dtype.
  virtual void accumulate(Device device, void* dst, DType dst_dtype, const Dims& sizes,
                          const Dims& dst_strides, const void* src, DType src_dtype,
                          const Dims& src_strides) = 0;
  // Element i (row-major) = philox::uniform_value / normal_value of counter offset + i
  // under `seed` (core/philox.h); `dtype` floating.
  virtual void random_uniform(Device device, void* dst, DType dtype, const Dims& sizes,
                              const Dims& strides, uint64_t seed, uint64_t offset, double low,
                              double high) = 0;
  virtual void random_normal(Device device, void* dst, DType dtype, const Dims& sizes,
                             const Dims& strides, uint64_t seed, uint64_t offset, double mean,
                             double std) = 0;
};

// The host backend (always registered), for backends and tests that run the host loops
// on memory they have made host-accessible (tests/fake_device.h).
DeviceBackend& host_backend();
// Mantissa bits (with the implicit one) that a uniform draw of `dtype` uses:
// 53 f64, 24 f32, 11 f16, 8 bf16 (see philox::uniform_value).
int uniform_bits(DType dtype);

void register_backend(DeviceBackend* backend);  // called once by the backend itself
// Tests only: forgets the backend of `type` (a fake device backend cleans up with this).
// Allocators already made for its devices stay; do not use them afterwards.
void unregister_backend(DeviceType type);
// The backend of `type`, or nullptr when this build has none.
DeviceBackend* find_backend(DeviceType type);
// The backend of `device`; throws a clear error when not built in or the device is absent.
DeviceBackend& backend_for(Device device);
// Devices of `type` present here; 0 when this build has no backend for it (never throws).
int device_count(DeviceType type);
// device_count(DeviceType::cuda) > 0: for cuda/'s tests and benches.
bool cuda_available();

// Note [Host sync count]: every call by which chunkgrad makes the host wait for a device
// (a stream or device synchronisation, a device-to-host copy, an event wait) adds one
// here, so that a test can show that a training step after warm-up never waits (the
// count stays put from step to step). Backends call note_host_sync(); the count is per
// process, over every device.
void note_host_sync();
uint64_t host_sync_count();
// Called by note_host_sync() when set (nullptr: none): a test that finds a wait where
// there should be none can print where it came from.
using HostSyncHook = void (*)();
void set_host_sync_hook(HostSyncHook hook);

}  // namespace cg
