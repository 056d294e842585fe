// Why this file exists: the pieces every allocator test needs whatever the segment
// source: a source wrapper that counts what the allocator takes and gives back, a way
// to write and read bytes that works on host and device memory, and a checker that a
// snapshot tiles its segments and agrees with the stats. Test-only code.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/caching_allocator.h"
#include "core/segment_source.h"

namespace cg::testing {

constexpr size_t KiB = size_t{1} << 10;
constexpr size_t MiB = size_t{1} << 20;

enum class SourceKind { fake, host, cuda };
const char* source_kind_name(SourceKind kind);
inline void PrintTo(SourceKind kind, std::ostream* os) { *os << source_kind_name(kind); }

// What a CountingSource saw; shared so it outlives the allocator that owns the source.
struct SourceCounters {
  size_t in_use = 0;
  int64_t allocs = 0;
  int64_t frees = 0;
  int fail_next = 0;                 // make the next N requests fail (return nullptr)
  std::map<uintptr_t, size_t> live;  // segment address -> bytes
};

// Wraps any source; fails the test when a segment comes back with a different size or
// twice, and can make requests fail like FakeSegmentSource::fail_next on every source.
class CountingSource : public SegmentSource {
 public:
  CountingSource(std::unique_ptr<SegmentSource> inner, std::shared_ptr<SourceCounters> c)
      : inner_(std::move(inner)), c_(std::move(c)) {}
  Device device() const override { return inner_->device(); }
  void* allocate_segment(size_t bytes) override;
  void free_segment(void* ptr, size_t bytes) override;
  int64_t free_bytes() const override { return inner_->free_bytes(); }
  std::string name() const override { return "counting(" + inner_->name() + ")"; }

 private:
  std::unique_ptr<SegmentSource> inner_;
  std::shared_ptr<SourceCounters> c_;
};

// nullptr for SourceKind::cuda when no GPU (callers skip); capacity applies to fake only.
std::unique_ptr<SegmentSource> make_source(SourceKind kind, size_t fake_capacity);
bool source_available(SourceKind kind, std::string* why);

// Byte access that works on host and device memory (device via cudaMemcpy).
class MemoryAccess {
 public:
  explicit MemoryAccess(SourceKind kind) : kind_(kind) {}
  // Fills [p, p+n) with a pattern derived from `tag` (tag also at both ends).
  void fill(void* p, size_t n, uint64_t tag);
  // Empty when intact, else a description of the first bad byte.
  std::string check(const void* p, size_t n, uint64_t tag);

 private:
  void make_pattern(size_t n, uint64_t tag);
  SourceKind kind_;
  std::vector<uint8_t> pattern_, readback_;
};

// Checks every structural rule of a snapshot and its agreement with stats(), given the
// live pointers with their requested sizes. Uses gtest assertions.
void check_snapshot(const CachingAllocator& a, const std::map<uintptr_t, size_t>& live);
// current == allocated - freed, peak >= current, active == allocation, ...
void check_stat_consistency(const AllocatorStats& s);

}  // namespace cg::testing
