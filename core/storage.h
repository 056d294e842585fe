// Why this file exists: a Storage is one allocation from a device's caching allocator,
// shared by every tensor that views it. It goes back to the allocator (not the OS) when
// the last holder lets go, so the allocator's stats see every tensor's lifetime.
#pragma once

#include <cstddef>
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

 private:
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
