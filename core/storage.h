// Why this file exists: a Storage is one allocation from a device's caching allocator,
// shared by every tensor that views it. It goes back to the allocator (not the OS) when
// the last holder lets go, so the allocator's stats see every tensor's lifetime.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>

#include "core/device.h"

namespace cg {

class CachingAllocator;

class StorageImpl {
 public:
  // Allocates nbytes on `device` from allocator_for(device), under the calling thread's
  // memory category and scope, from the pool of its current stream (core/stream_guard.h).
  StorageImpl(size_t nbytes, Device device);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  // Work queued on `stream` (not the one the bytes were allocated on) uses them: their
  // reuse after the last holder lets go waits for it (Note [Streams], caching_allocator.h).
  void record_stream(StreamId stream) const;

  // Note [Version counter]: how many in-place writes went into these bytes through the
  // public API (ops/inplace.h, raw::copy_ / raw::fill_, loading a checkpoint into a
  // module). Autograd records it when it saves a tensor for backward and checks it when
  // backward uses the tensor, so a saved value changed in place -- through any view, even
  // under NoGradGuard -- is an error instead of a silently wrong gradient. One counter per
  // storage is PyTorch's per-"base" counter: every view of the bytes shares it. Writing
  // into a fresh output before anyone saved it bumps it harmlessly.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

  // Note [Host-known values]: integer data built on the host and uploaded (from_ints:
  // labels, indices) has its values known there for free, so the uploader records their
  // bounds: the smallest value, the smallest value above it, and the largest. A device
  // check (check_labels, check_indices) that these bounds already prove passes without
  // reading the device -- the read is a host synchronisation per op otherwise (Note
  // [Checks sync], cuda/head_loss_and_index.cpp). The record holds only while the bytes are
  // unchanged: any in-place write bumps the version and the record is void. Views of the
  // storage see a subset of the values, so the bounds hold for them too.
  struct KnownValues {
    int64_t min = 0, next_min = 0, max = 0;  // next_min == min when only one value occurs
  };
  void set_known_values(const KnownValues& v) {
    known_ = v;
    known_version_ = version();
    has_known_ = true;
  }
  // True when the recorded values are all in [low, high) or equal to `also_allowed`.
  bool known_values_within(int64_t low, int64_t high,
                           std::optional<int64_t> also_allowed = std::nullopt) const {
    if (!has_known_ || known_version_ != version()) return false;
    const bool min_ok = (known_.min >= low && known_.min < high) || known_.min == also_allowed;
    if (!min_ok) return false;
    if (known_.next_min == known_.min) return true;      // one distinct value
    return known_.next_min >= low && known_.max < high;  // the others (conservative)
  }

 private:
  std::atomic<uint64_t> version_{0};
  KnownValues known_;
  uint64_t known_version_ = 0;
  bool has_known_ = false;
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  CachingAllocator* allocator_ = nullptr;
};

using Storage = std::shared_ptr<StorageImpl>;

inline Storage make_storage(size_t nbytes, Device device) {
  return std::make_shared<StorageImpl>(nbytes, device);
}

}  // namespace cg
