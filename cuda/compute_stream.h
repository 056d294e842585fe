// Why this file exists: the one place that says on which CUDA stream chunkgrad's work for
// a device runs, so that kernels, copies and cuBLAS calls agree on it.
//
// Note [One compute stream]: each device has one compute stream, created by the
// backend on first use (non-blocking with respect to the legacy default stream) and
// never destroyed (tensors freed during static destruction may still need it). Every
// kernel and every cudaMemcpyAsync for that device is issued on it, so work on one
// device runs in issue order and the caching allocator may hand a freed block to the
// next request at once: the next user of the block is ordered after the last one on
// the same stream. Kernels return before they finish; the host waits only where it
// must read or hand over memory: DeviceBackend::copy() (a device-to-host copy must have
// its bytes; a host-to-device copy must be done with the host buffer) and synchronize().
// Not cudaStreamPerThread: its stream depends on the calling host thread, and two
// threads would then race on one device's blocks.
// A StreamGuard (core/stream_guard.h) sends the calling thread's work on a device to a
// side stream instead: kernels, cuBLASLt calls and the backend's data primitives launch
// on current_stream(index). (The attention entries still launch on the compute stream:
// no caller guards them.)
#pragma once

#include <cuda_runtime_api.h>

#include "core/device.h"

namespace cg::cuda {

// Device indices the CUDA backend addresses: [0, kMaxDevices) (per-device tables are this
// long).
constexpr int kMaxDevices = 64;

// The compute stream of CUDA device `index` (Note [One compute stream]).
cudaStream_t compute_stream(int index);

// Side streams: work that should overlap the compute stream (a copy, a second GEMM). Id
// kDefaultStream is the compute stream; ids 1 .. kMaxSideStreams are made on first use,
// non-blocking, and kept. Memory a side stream touches must be recorded with
// StorageImpl::record_stream (Note [Streams], core/caching_allocator.h).
constexpr StreamId kMaxSideStreams = 4;
cudaStream_t stream_for(int index, StreamId id);
// The side stream of the offline features' pinned uploads (Note [Pinned uploads],
// core/backend.h): host-to-device copies only, so that a copy engine runs them beside the
// compute stream. (The gradient reducer takes the one before it: Note [Reduce on a side
// stream], train/grad_reducer.h; the fused head loss's pipelined loop takes stream 1.)
constexpr StreamId kUploadStream = kMaxSideStreams;

// The stream the calling thread's work on device `index` goes to: stream_for(index,
// cg::current_stream(cuda_device(index))).
cudaStream_t current_stream(int index);

// Work queued on `waiter` from now on starts after everything queued on `producer` so far
// (an event recorded on one, waited for by the other); the host does not wait.
void stream_wait(int index, StreamId waiter, StreamId producer);

}  // namespace cg::cuda
