// Why this file exists: a Storage's lifetime is an allocator block's lifetime. Taking the
// bytes from allocator_for(device) (never malloc) is what lets the allocator's stats and
// trace account for every tensor chunkgrad ever makes.
#include "core/storage.h"

#include "core/backend.h"
#include "core/caching_allocator.h"
#include "core/stream_guard.h"

namespace cg {

StorageImpl::StorageImpl(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  // An empty tensor on a device that does not exist should still fail loudly.
  if (!device.is_cpu()) backend_for(device);
  if (nbytes == 0) return;
  allocator_ = &allocator_for(device);
  data_ = allocator_->allocate(nbytes, current_stream(device));  // core/stream_guard.h
}

StorageImpl::~StorageImpl() {
  if (allocator_ != nullptr && data_ != nullptr) allocator_->free(data_);
}

void StorageImpl::record_stream(StreamId stream) const {
  if (allocator_ != nullptr && data_ != nullptr) allocator_->record_stream(data_, stream);
}

}  // namespace cg
