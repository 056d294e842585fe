// Why this file exists: a host-to-device copy from ordinary (pageable) host memory makes
// the host wait for the device -- the driver stages it, and the backend's copy() waited
// for the stream so that the caller may free its buffer. A training step uploads its
// labels, indices and positions every step, so that was a host synchronisation per
// upload. Copying the bytes into a pinned staging buffer first lets the transfer run in
// stream order while the host goes on (Note [Staged uploads]).
#pragma once

#include <cstddef>

#include <cuda_runtime_api.h>

namespace cg::cuda {

// Note [Staged uploads]: dst (device memory of `device`) receives src[0, nbytes) in
// `stream`'s order; src may be reused or freed as soon as this returns. The bytes go
// through a pinned buffer from a small pool; a buffer is reused once the event recorded
// after its transfer has completed (cudaEventQuery: never waits), and a new one is made
// (cudaHostAlloc, not device memory) only when every buffer of the size is still in
// flight, so a steady training loop stops making them after its first steps. Returns
// false (and copies nothing) for copies too large to stage (> kMaxStagedBytes): the
// caller then copies synchronously.
constexpr size_t kMaxStagedBytes = size_t{8} << 20;
bool stage_host_to_device(void* dst, const void* src, size_t nbytes, int device,
                          cudaStream_t stream);
// Pinned buffers made so far (for tests: stable after warm-up).
size_t staging_buffer_count();

}  // namespace cg::cuda
