// Why this file exists: the caching allocator does not know where memory comes from.
// A SegmentSource hands it whole segments (host pages, cudaMalloc'd device memory, or a
// bounded fake for tests) and takes them back; everything else -- rounding, pools,
// splitting, caching, stats, trace -- is the allocator's, identical on every device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <set>
#include <string>

#include "core/device.h"

namespace cg {

class SegmentSource {
 public:
  virtual ~SegmentSource() = default;
  virtual Device device() const = 0;
  // Returns nullptr when the memory cannot be had; throws only on programming errors.
  virtual void* allocate_segment(size_t bytes) = 0;
  virtual void free_segment(void* ptr, size_t bytes) = 0;
  // Bytes the source could still hand out, for OOM messages; -1 when unknown.
  virtual int64_t free_bytes() const { return -1; }
  virtual std::string name() const = 0;

  // Note [Stream events]: the allocator's view of a device's queues. A block that another
  // stream used (CachingAllocator::record_stream) may be handed out again only when that
  // stream's work on it is done: at free the allocator records an event on each such
  // stream and keeps the block out of its pools until every event has completed. A source
  // without streams (the host) records nothing: event 0 means "nothing to wait for".
  using Event = uint64_t;
  virtual Event record_event(StreamId stream) {
    (void)stream;
    return 0;
  }
  virtual bool event_done(Event event) {  // without waiting
    (void)event;
    return true;
  }
  virtual void wait_event(Event event) { (void)event; }  // the host waits for it
  virtual void release_event(Event event) { (void)event; }
};

// Host memory, 4096-byte aligned (aligned_alloc). Never fails short of the OS refusing.
std::unique_ptr<SegmentSource> make_host_segment_source();

// Test source: real host memory (so contents can be checked) but with a hard capacity,
// counters of calls, and a switch that makes the next N segment requests fail.
class FakeSegmentSource : public SegmentSource {
 public:
  explicit FakeSegmentSource(size_t capacity_bytes, Device device = Device{});
  ~FakeSegmentSource() override;
  Device device() const override { return device_; }
  void* allocate_segment(size_t bytes) override;
  void free_segment(void* ptr, size_t bytes) override;
  int64_t free_bytes() const override { return static_cast<int64_t>(capacity_ - in_use_); }
  std::string name() const override { return "fake"; }
  // Fake streams: events stay pending until complete_events() or wait_event().
  Event record_event(StreamId stream) override;
  bool event_done(Event event) override { return !pending_.contains(event); }
  void wait_event(Event event) override;
  void complete_events() { pending_.clear(); }
  int64_t events_recorded() const { return next_event_ - 1; }
  int64_t host_waits() const { return host_waits_; }

  size_t in_use() const { return in_use_; }
  int64_t segment_allocs() const { return segment_allocs_; }
  int64_t segment_frees() const { return segment_frees_; }
  void fail_next(int count) { fail_next_ = count; }

 private:
  size_t capacity_;
  Device device_;
  size_t in_use_ = 0;
  int64_t segment_allocs_ = 0;
  int64_t segment_frees_ = 0;
  int fail_next_ = 0;
  std::set<Event> pending_;
  Event next_event_ = 1;
  int64_t host_waits_ = 0;
};

}  // namespace cg
