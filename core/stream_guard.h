// Why this file exists: the calling thread's current stream, so that a device-neutral loop
// can send some of its kernel-table calls to a side stream of the device without any entry
// taking a stream argument (PyTorch's CUDAStreamGuard). Every entry of a device with
// streams launches on the current stream, and every tensor made under the guard comes from
// that stream's pool of the caching allocator (Note [Streams], core/caching_allocator.h),
// so a temporary an entry makes and frees on the side stream is reused only by later work
// of that stream.
//
//   {
//     StreamGuard side(dev, 1);   // kernel-table calls on dev below go to side stream 1
//     k.head_loss_rows(rows);
//   }                             // back on dev's compute stream
//
// Ordering between streams is the caller's: DeviceKernels::stream_wait (ops/kernels.h).
// A device without side streams (the host) never sees a guard: callers ask
// DeviceKernels::side_streams() first.
#pragma once

#include "core/device.h"

namespace cg {

// The stream the calling thread's work on `device` goes to: the innermost live
// StreamGuard's for that device, else kDefaultStream (the compute stream).
StreamId current_stream(Device device);

class StreamGuard {
 public:
  StreamGuard(Device device, StreamId stream);
  ~StreamGuard();
  StreamGuard(const StreamGuard&) = delete;
  StreamGuard& operator=(const StreamGuard&) = delete;

 private:
  Device previous_device_;
  StreamId previous_stream_;
};

}  // namespace cg
