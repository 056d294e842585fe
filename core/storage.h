// Why this file exists: a Storage is one allocation from a device's caching allocator,
// shared by every tensor that views it. It goes back to the allocator (not the OS) when
// the last holder lets go, so the allocator's stats see every tensor's lifetime.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "core/device.h"

namespace cg {

class CachingAllocator;

class StorageImpl {
 public:
  // Allocates nbytes on `device` from allocator_for(device), under the calling thread's
  // memory category and scope.
  StorageImpl(size_t nbytes, Device device);
  ~StorageImpl();
  StorageImpl(const StorageImpl&) = delete;
  StorageImpl& operator=(const StorageImpl&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // Note [Version counter]: how many in-place writes went into these bytes through the
  // public API (ops/inplace.h, raw::copy_ / raw::fill_, loading a checkpoint into a
  // module). Autograd records it when it saves a tensor for backward and checks it when
  // backward uses the tensor, so a saved value changed in place -- through any view, even
  // under NoGradGuard -- is an error instead of a silently wrong gradient. One counter per
  // storage is PyTorch's per-"base" counter: every view of the bytes shares it. Writing
  // into a fresh output before anyone saved it bumps it harmlessly.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> version_{0};
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
