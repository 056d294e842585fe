// Why this file exists: see allocator_test_util.h.
#include "tests/allocator_test_util.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#if defined(CHUNKGRAD_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "cuda/cuda_segment_source.h"
#include "cuda/device_info.h"
#endif

namespace cg::testing {

const char* source_kind_name(SourceKind kind) {
  switch (kind) {
    case SourceKind::fake: return "Fake";
    case SourceKind::host: return "Host";
    case SourceKind::cuda: return "Cuda";
  }
  return "?";
}

void* CountingSource::allocate_segment(size_t bytes) {
  if (c_->fail_next > 0) {
    --c_->fail_next;
    return nullptr;
  }
  void* p = inner_->allocate_segment(bytes);
  if (p == nullptr) return nullptr;
  c_->in_use += bytes;
  ++c_->allocs;
  c_->live[reinterpret_cast<uintptr_t>(p)] = bytes;
  return p;
}

void CountingSource::free_segment(void* ptr, size_t bytes) {
  auto it = c_->live.find(reinterpret_cast<uintptr_t>(ptr));
  if (it == c_->live.end()) {
    ADD_FAILURE() << "allocator returned segment " << ptr << " that the source never gave";
  } else {
    EXPECT_EQ(it->second, bytes) << "segment " << ptr << " returned with a different size";
    c_->live.erase(it);
  }
  c_->in_use -= bytes;
  ++c_->frees;
  inner_->free_segment(ptr, bytes);
}

bool source_available(SourceKind kind, std::string* why) {
  if (kind != SourceKind::cuda) return true;
#if defined(CHUNKGRAD_WITH_CUDA)
  if (cg::cuda::device_count() > 0) return true;
  if (why) *why = "no CUDA device: " + cg::cuda::unavailable_reason();
#else
  if (why) *why = "built without CUDA";
#endif
  return false;
}

std::unique_ptr<SegmentSource> make_source(SourceKind kind, size_t fake_capacity) {
  switch (kind) {
    case SourceKind::fake: return std::make_unique<FakeSegmentSource>(fake_capacity);
    case SourceKind::host: return make_host_segment_source();
    case SourceKind::cuda:
#if defined(CHUNKGRAD_WITH_CUDA)
      if (cg::cuda::device_count() > 0) return std::make_unique<cg::cuda::CudaSegmentSource>(0);
#endif
      return nullptr;
  }
  return nullptr;
}

// ---- MemoryAccess --------------------------------------------------------------

void MemoryAccess::make_pattern(size_t n, uint64_t tag) {
  pattern_.resize(n);
  const uint8_t fill = static_cast<uint8_t>((tag * 0x9E3779B97F4A7C15ull) >> 56) | 1;
  std::memset(pattern_.data(), fill, n);
  // The tag itself at both ends catches two blocks that happen to share a fill byte.
  std::memcpy(pattern_.data(), &tag, std::min(n, sizeof tag));
  if (n >= 2 * sizeof tag) std::memcpy(pattern_.data() + n - sizeof tag, &tag, sizeof tag);
}

void MemoryAccess::fill(void* p, size_t n, uint64_t tag) {
  make_pattern(n, tag);
  if (kind_ == SourceKind::cuda) {
#if defined(CHUNKGRAD_WITH_CUDA)
    ASSERT_EQ(cudaMemcpy(p, pattern_.data(), n, cudaMemcpyHostToDevice), cudaSuccess);
#endif
    return;
  }
  std::memcpy(p, pattern_.data(), n);
}

std::string MemoryAccess::check(const void* p, size_t n, uint64_t tag) {
  make_pattern(n, tag);
  const uint8_t* got = static_cast<const uint8_t*>(p);
  if (kind_ == SourceKind::cuda) {
#if defined(CHUNKGRAD_WITH_CUDA)
    readback_.resize(n);
    const cudaError_t err = cudaMemcpy(readback_.data(), p, n, cudaMemcpyDeviceToHost);
    if (err != cudaSuccess) return std::string("cudaMemcpy D2H failed: ") + cudaGetErrorName(err);
    got = readback_.data();
#endif
  }
  if (std::memcmp(got, pattern_.data(), n) == 0) return "";
  size_t i = 0;
  while (i < n && got[i] == pattern_[i]) ++i;
  std::ostringstream out;
  out << "block " << p << " (" << n << " B, tag " << tag << ") corrupted at byte " << i
      << ": expected " << int(pattern_[i]) << ", found " << int(got[i]);
  return out.str();
}

// ---- snapshot and stats checks -------------------------------------------------

void check_stat_consistency(const AllocatorStats& s) {
  const std::pair<const char*, const Stat*> all[] = {
      {"allocation", &s.allocation},
      {"segment", &s.segment},
      {"active", &s.active},
      {"inactive_split", &s.inactive_split},
      {"allocated_bytes", &s.allocated_bytes},
      {"reserved_bytes", &s.reserved_bytes},
      {"active_bytes", &s.active_bytes},
      {"inactive_split_bytes", &s.inactive_split_bytes},
      {"requested_bytes", &s.requested_bytes}};
  for (const auto& [name, st] : all) {
    EXPECT_EQ(st->current, st->allocated - st->freed) << name;
    EXPECT_GE(st->current, 0) << name;
    EXPECT_GE(st->peak, st->current) << name;
  }
  EXPECT_EQ(s.active.current, s.allocation.current);
  EXPECT_EQ(s.active_bytes.current, s.allocated_bytes.current);
  EXPECT_GE(s.reserved_bytes.current, s.allocated_bytes.current);
  EXPECT_GE(s.allocated_bytes.current, s.requested_bytes.current);
  EXPECT_GE(s.reserved_bytes.current, s.allocated_bytes.current + s.inactive_split_bytes.current);
}

void check_snapshot(const CachingAllocator& a, const std::map<uintptr_t, size_t>& live) {
  const std::vector<SegmentInfo> segs = a.snapshot();
  const AllocatorStats s = a.stats();
  int64_t reserved = 0, allocated = 0, requested = 0, n_alloc = 0;
  int64_t inactive_split = 0, inactive_split_bytes = 0;
  size_t live_seen = 0;
  uint64_t prev_end = 0;
  for (const SegmentInfo& seg : segs) {
    ASSERT_GE(seg.addr, prev_end) << "segments overlap or are not in address order";
    prev_end = seg.addr + seg.size;
    reserved += static_cast<int64_t>(seg.size);
    EXPECT_EQ(seg.small_pool, seg.size == kSmallBuffer) << "segment at " << seg.addr;
    ASSERT_FALSE(seg.blocks.empty()) << "segment without blocks at " << seg.addr;
    uint64_t at = seg.addr;
    bool prev_free = false;
    for (const BlockInfo& b : seg.blocks) {
      EXPECT_EQ(b.addr, at) << "blocks do not tile segment " << seg.addr;
      EXPECT_GT(b.size, 0u);
      EXPECT_EQ(b.size % kMinBlockSize, 0u) << "block size " << b.size;
      at = b.addr + b.size;
      if (b.allocated) {
        ++n_alloc;
        allocated += static_cast<int64_t>(b.size);
        requested += static_cast<int64_t>(b.requested);
        auto it = live.find(b.addr);
        if (it == live.end()) {
          ADD_FAILURE() << "snapshot shows allocated block " << b.addr << " nobody holds";
        } else {
          ++live_seen;
          EXPECT_EQ(b.requested, it->second) << "block " << b.addr;
          const size_t rounded = CachingAllocator::round_size(it->second);
          if (seg.small_pool) {
            // the small pool always splits (the rest is a multiple of 512 B)
            EXPECT_EQ(b.size, rounded) << "small block " << b.addr;
            EXPECT_LE(it->second, kSmallSize);
          } else {
            // unsplit large blocks keep at most 1 MiB beyond the rounded request
            EXPECT_GE(b.size, rounded) << "large block " << b.addr;
            EXPECT_LE(b.size, rounded + kSmallSize) << "large block " << b.addr;
            EXPECT_GT(it->second, kSmallSize);
          }
        }
        prev_free = false;
      } else {
        EXPECT_EQ(b.requested, 0u) << "free block " << b.addr;
        EXPECT_FALSE(prev_free) << "two adjacent free blocks were not merged at " << b.addr;
        prev_free = true;
        if (seg.blocks.size() > 1) {
          ++inactive_split;
          inactive_split_bytes += static_cast<int64_t>(b.size);
        }
      }
    }
    EXPECT_EQ(at, seg.addr + seg.size) << "blocks do not cover segment " << seg.addr;
  }
  EXPECT_EQ(live_seen, live.size()) << "some live pointers are missing from the snapshot";
  EXPECT_EQ(s.segment.current, static_cast<int64_t>(segs.size()));
  EXPECT_EQ(s.reserved_bytes.current, reserved);
  EXPECT_EQ(s.allocated_bytes.current, allocated);
  EXPECT_EQ(s.requested_bytes.current, requested);
  EXPECT_EQ(s.allocation.current, n_alloc);
  EXPECT_EQ(s.inactive_split.current, inactive_split);
  EXPECT_EQ(s.inactive_split_bytes.current, inactive_split_bytes);
}

}  // namespace cg::testing
