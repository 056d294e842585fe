// Why this file exists: the two segment sources that need no GPU -- real host memory
// for the CPU device, and a bounded fake that tests use to provoke out-of-memory.
#include "core/segment_source.h"

#include <cstdlib>

#include "core/error.h"

namespace cg {

namespace {

constexpr size_t kHostAlignment = 4096;

class HostSegmentSource : public SegmentSource {
 public:
  Device device() const override { return Device{}; }
  void* allocate_segment(size_t bytes) override {
    const size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
    return std::aligned_alloc(kHostAlignment, rounded);
  }
  void free_segment(void* ptr, size_t) override { std::free(ptr); }
  std::string name() const override { return "host"; }
};

}  // namespace

std::unique_ptr<SegmentSource> make_host_segment_source() {
  return std::make_unique<HostSegmentSource>();
}

FakeSegmentSource::FakeSegmentSource(size_t capacity_bytes, Device device)
    : capacity_(capacity_bytes), device_(device) {}

FakeSegmentSource::~FakeSegmentSource() = default;

void* FakeSegmentSource::allocate_segment(size_t bytes) {
  if (fail_next_ > 0) {
    --fail_next_;
    return nullptr;
  }
  if (bytes > capacity_ - in_use_) return nullptr;
  void* p = std::aligned_alloc(kHostAlignment,
                               (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment);
  if (p == nullptr) return nullptr;
  in_use_ += bytes;
  ++segment_allocs_;
  return p;
}

void FakeSegmentSource::free_segment(void* ptr, size_t bytes) {
  CG_CHECK(bytes <= in_use_, "FakeSegmentSource: freeing ", bytes, " bytes but only ", in_use_,
           " are in use");
  std::free(ptr);
  in_use_ -= bytes;
  ++segment_frees_;
}

SegmentSource::Event FakeSegmentSource::record_event(StreamId stream) {
  (void)stream;
  pending_.insert(next_event_);
  return next_event_++;
}

void FakeSegmentSource::wait_event(Event event) {
  ++host_waits_;
  pending_.erase(event);
}

}  // namespace cg
