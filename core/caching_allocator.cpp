// Why this file exists: the caching allocator's mechanics (see the Notes in the header):
// best-fit search, splitting, merging on free, segment release under pressure, stats
// and trace events. Public methods take the lock; private ones assume it is held.
#include "core/caching_allocator.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <string>

#include "core/allocator_holders.h"
#include "core/backend.h"
#include "core/error.h"

namespace cg {

struct CachingAllocator::Block {
  char* ptr = nullptr;
  size_t size = 0;
  size_t requested = 0;  // caller's size while allocated
  bool allocated = false;
  bool small = false;     // which pool the block's segment belongs to
  Block* prev = nullptr;  // neighbours inside the same segment
  Block* next = nullptr;
  MemoryCategory category = MemoryCategory::unknown;  // Note [Block owner]
  uint32_t scope_id = 0;
  StreamId stream = kDefaultStream;   // of the segment (Note [Streams])
  std::vector<StreamId> stream_uses;  // other streams that used it (record_stream)
  int pending_events = 0;             // freed, waiting for this many events
};

// Best fit in PyTorch's (stream, size, address) order: the blocks of one stream are one
// contiguous run of the pool, so a lookup never lands on another stream's block.
bool CachingAllocator::BlockLess::operator()(const Block* a, const Block* b) const {
  if (a->stream != b->stream) return a->stream < b->stream;
  if (a->size != b->size) return a->size < b->size;
  return std::less<char*>()(a->ptr, b->ptr);
}

CachingAllocator::CachingAllocator(std::unique_ptr<SegmentSource> source, AllocatorConfig config)
    : source_(std::move(source)), config_(config) {
  CG_CHECK(source_ != nullptr, "CachingAllocator needs a segment source");
}

CachingAllocator::~CachingAllocator() {
  for (const PendingFree& p : pending_) source_->release_event(p.event);
  // Tear down without stats or trace: give every segment back, live blocks included.
  for (Block* head : segments_) {
    size_t total = 0;
    for (Block* b = head; b != nullptr;) {
      Block* next = b->next;
      total += b->size;
      if (b != head) delete b;
      b = next;
    }
    source_->free_segment(head->ptr, total);
    delete head;
  }
}

size_t CachingAllocator::round_size(size_t nbytes) {
  CG_CHECK(nbytes <= kMaxAllocation, "CachingAllocator: ", nbytes,
           " bytes is above the largest allocation (", kMaxAllocation, " bytes)");
  if (nbytes < kMinBlockSize) return kMinBlockSize;
  return (nbytes + kMinBlockSize - 1) / kMinBlockSize * kMinBlockSize;
}

size_t CachingAllocator::segment_size_for(size_t rounded) {
  CG_CHECK(rounded <= kMaxAllocation, "CachingAllocator: ", rounded,
           " bytes is above the largest allocation (", kMaxAllocation, " bytes)");
  if (rounded <= kSmallSize) return kSmallBuffer;
  if (rounded < kMinLargeAlloc) return kLargeBuffer;
  return (rounded + kRoundLarge - 1) / kRoundLarge * kRoundLarge;
}

bool CachingAllocator::is_split(const Block* b) { return b->prev != nullptr || b->next != nullptr; }

CachingAllocator::Pool& CachingAllocator::pool_of(const Block* b) {
  return b->small ? small_pool_ : large_pool_;
}

// A free block is "inactive split" (it can become fragmentation) while it sits in a pool and
// shares its segment with other blocks. Whether a pooled block is split can only change while
// it is out of the pool, so counting at insert/erase keeps the stat exact.
void CachingAllocator::pool_insert(Pool& pool, Block* b) {
  pool.insert(b);
  if (is_split(b)) {
    stats_.inactive_split.add(1);
    stats_.inactive_split_bytes.add(static_cast<int64_t>(b->size));
  }
}

void CachingAllocator::pool_erase(Pool& pool, Block* b) {
  pool.erase(b);
  if (is_split(b)) {
    stats_.inactive_split.add(-1);
    stats_.inactive_split_bytes.add(-static_cast<int64_t>(b->size));
  }
}

CachingAllocator::Block* CachingAllocator::find_free_block(Pool& pool, size_t size,
                                                           StreamId stream) {
  Block key;
  key.size = size;
  key.stream = stream;
  auto it = pool.lower_bound(&key);
  if (it == pool.end() || (*it)->stream != stream) return nullptr;
  Block* b = *it;
  // Large blocks are kept for large requests (PyTorch's max_split_size rules).
  if (size < config_.max_split_size && b->size >= config_.max_split_size) return nullptr;
  if (size >= config_.max_split_size && b->size >= size + kLargeBuffer) return nullptr;
  pool_erase(pool, b);
  return b;
}

CachingAllocator::Block* CachingAllocator::alloc_segment(size_t segment_size, bool small,
                                                         StreamId stream) {
  if (config_.memory_limit != 0 &&
      static_cast<size_t>(stats_.reserved_bytes.current) + segment_size > config_.memory_limit) {
    return nullptr;
  }
  void* p = source_->allocate_segment(segment_size);
  if (p == nullptr) return nullptr;
  Block* b = new Block;
  b->ptr = static_cast<char*>(p);
  b->size = segment_size;
  b->small = small;
  b->stream = stream;
  segments_.push_back(b);
  stats_.segment.add(1);
  stats_.reserved_bytes.add(static_cast<int64_t>(segment_size));
  MemoryTrace::record(TraceAction::segment_alloc, source_->device(), reinterpret_cast<uint64_t>(p),
                      segment_size, segment_size, current_category(), current_scope_id(), stream);
  return b;
}

void CachingAllocator::release_segment(Block* head) {
  pool_erase(pool_of(head), head);
  source_->free_segment(head->ptr, head->size);
  stats_.segment.add(-1);
  stats_.reserved_bytes.add(-static_cast<int64_t>(head->size));
  MemoryTrace::record(TraceAction::segment_free, source_->device(),
                      reinterpret_cast<uint64_t>(head->ptr), head->size, head->size,
                      current_category(), current_scope_id(), head->stream);
  segments_.erase(std::find(segments_.begin(), segments_.end(), head));
  delete head;
}

bool CachingAllocator::release_cached(bool oversize_only) {
  std::vector<Block*> victims;
  for (Block* head : segments_) {
    const bool whole_and_free = !head->allocated && head->next == nullptr;
    if (whole_and_free && (!oversize_only || head->size >= config_.max_split_size)) {
      victims.push_back(head);
    }
  }
  for (Block* head : victims) release_segment(head);
  return !victims.empty();
}

void CachingAllocator::split(Block* b, size_t size, Pool& pool) {
  Block* rest = new Block;
  rest->ptr = b->ptr + size;
  rest->size = b->size - size;
  rest->small = b->small;
  rest->stream = b->stream;
  rest->prev = b;
  rest->next = b->next;
  if (b->next != nullptr) b->next->prev = rest;
  b->next = rest;
  b->size = size;
  pool_insert(pool, rest);
}

void* CachingAllocator::allocate(size_t nbytes, StreamId stream) {
  if (nbytes == 0) return nullptr;
  std::lock_guard<std::mutex> lock(mutex_);
  if (nbytes > kMaxAllocation) throw_too_large(nbytes);
  const size_t size = round_size(nbytes);
  const bool small = size <= kSmallSize;
  Pool& pool = small ? small_pool_ : large_pool_;
  if (!pending_.empty()) process_pending(false);

  Block* b = find_free_block(pool, size, stream);
  if (b == nullptr) {
    const size_t segment_size = segment_size_for(size);
    b = alloc_segment(segment_size, small, stream);
    if (b == nullptr && !pending_.empty()) {
      // Blocks still used by another stream: wait for that work, then look again.
      process_pending(true);
      b = find_free_block(pool, size, stream);
      if (b == nullptr) b = alloc_segment(segment_size, small, stream);
    }
    if (b == nullptr) {
      // Note [OOM]: give cached memory back and try again before failing.
      ++stats_.num_alloc_retries;
      if (config_.max_split_size != SIZE_MAX && release_cached(true)) {
        b = alloc_segment(segment_size, small, stream);
      }
      if (b == nullptr) {
        release_cached(false);
        b = alloc_segment(segment_size, small, stream);
      }
      if (b == nullptr) throw_oom(nbytes, size, segment_size, stream);
    }
  }

  const size_t remaining = b->size - size;
  const bool should_split = small ? remaining >= kMinBlockSize
                                  : (size < config_.max_split_size && remaining > kSmallSize);
  if (should_split) split(b, size, pool);

  b->allocated = true;
  b->requested = nbytes;
  b->category = current_category();
  b->scope_id = current_scope_id();
  live_.emplace(b->ptr, b);
  stats_.allocation.add(1);
  stats_.active.add(1);
  stats_.allocated_bytes.add(static_cast<int64_t>(b->size));
  stats_.active_bytes.add(static_cast<int64_t>(b->size));
  stats_.requested_bytes.add(static_cast<int64_t>(nbytes));
  MemoryTrace::record(TraceAction::alloc, source_->device(), reinterpret_cast<uint64_t>(b->ptr),
                      b->size, nbytes, b->category, b->scope_id, b->stream);
  return b->ptr;
}

CachingAllocator::Block* CachingAllocator::merge_with_free_neighbours(Block* b, Pool& pool) {
  if (b->prev != nullptr && !b->prev->allocated) {
    Block* prev = b->prev;
    pool_erase(pool, prev);
    prev->size += b->size;
    prev->next = b->next;
    if (b->next != nullptr) b->next->prev = prev;
    delete b;
    b = prev;
  }
  if (b->next != nullptr && !b->next->allocated) {
    Block* next = b->next;
    pool_erase(pool, next);
    b->size += next->size;
    b->next = next->next;
    if (next->next != nullptr) next->next->prev = b;
    delete next;
  }
  return b;
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  CG_CHECK(it != live_.end(), "CachingAllocator(", source_->name(), "): free of pointer ", ptr,
           " that this allocator did not hand out (or that was already freed)");
  Block* b = it->second;
  live_.erase(it);
  stats_.allocation.add(-1);
  stats_.allocated_bytes.add(-static_cast<int64_t>(b->size));
  stats_.requested_bytes.add(-static_cast<int64_t>(b->requested));
  // Note [Block owner]: the block's own category and scope, not the thread's.
  MemoryTrace::record(TraceAction::free, source_->device(), reinterpret_cast<uint64_t>(b->ptr),
                      b->size, b->requested, b->category, b->scope_id, b->stream);
  b->requested = 0;
  // Note [Streams]: a block another stream used waits for that stream's events; until
  // then it stays marked allocated, so that no neighbour merges with it.
  for (StreamId use : b->stream_uses) {
    const SegmentSource::Event event = source_->record_event(use);
    if (event == 0) continue;
    pending_.push_back({b, event});
    ++b->pending_events;
  }
  b->stream_uses.clear();
  if (b->pending_events == 0) return_to_pool(b);
}

void CachingAllocator::return_to_pool(Block* b) {
  stats_.active.add(-1);
  stats_.active_bytes.add(-static_cast<int64_t>(b->size));
  b->allocated = false;
  b->category = MemoryCategory::unknown;
  b->scope_id = 0;
  Pool& pool = pool_of(b);
  b = merge_with_free_neighbours(b, pool);
  pool_insert(pool, b);
}

void CachingAllocator::process_pending(bool wait) {
  std::vector<PendingFree> still;
  for (const PendingFree& p : pending_) {
    if (wait) source_->wait_event(p.event);
    if (!wait && !source_->event_done(p.event)) {
      still.push_back(p);
      continue;
    }
    source_->release_event(p.event);
    if (--p.block->pending_events == 0) return_to_pool(p.block);
  }
  pending_ = std::move(still);
}

void CachingAllocator::record_stream(void* ptr, StreamId stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = live_.find(ptr);
  CG_CHECK(it != live_.end(), "CachingAllocator(", source_->name(), "): record_stream of pointer ",
           ptr, " that is not a live block of this allocator");
  Block* b = it->second;
  if (stream == b->stream) return;
  if (std::find(b->stream_uses.begin(), b->stream_uses.end(), stream) == b->stream_uses.end()) {
    b->stream_uses.push_back(stream);
  }
}

int64_t CachingAllocator::pending_frees() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::set<const Block*> blocks;
  for (const PendingFree& p : pending_) blocks.insert(p.block);
  return static_cast<int64_t>(blocks.size());
}

void CachingAllocator::empty_cache() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!pending_.empty()) process_pending(true);
  release_cached(false);
}

// Note [Large blocks kept whole]: a request can fail although the memory cached in
// partly used segments, given back, would make room for it: release_cached() can only
// return segments that are wholly free. The usual way there: a large segment freed by one
// step (a logits tensor's) is cut by the next step's smaller requests (best fit takes it
// when nothing smaller is free), and the large request then needs a new segment, which
// the card or the limit refuses. PyTorch's answer is its max_split_size_mb: blocks at
// least that large are never split and smaller requests never take them. Set here by
// set_max_split_size() or, for every allocator a program makes, CHUNKGRAD_MAX_SPLIT_MB
// (above 20 MiB: the 20 MiB segments of 1-10 MiB requests must stay splittable). The OOM
// message says when its error is this kind, counting the request's stream's free blocks
// against the room the limit and the source leave, and suggests a max split size only
// where a segment that could hold the request was cut (the full-scale step's naive head
// loss under the seed's 95e9 bytes: docs/full_scale_log.md).
std::string CachingAllocator::fragmentation_hint(size_t rounded, size_t segment_size,
                                                 StreamId stream) const {
  if (rounded <= kSmallSize) return "";  // (the small pool's 2 MiB segments)
  // The large pool's free blocks this request's stream may take, and the largest segment
  // such a block lies in (a segment is its chain of blocks).
  size_t largest = 0, cached = 0, largest_cut = 0;
  for (const Block* b : large_pool_) {
    if (b->stream != stream) continue;
    largest = std::max(largest, b->size);
    cached += b->size;
    const Block* head = b;
    while (head->prev != nullptr) head = head->prev;
    size_t segment = 0;
    for (const Block* x = head; x != nullptr; x = x->next) segment += x->size;
    largest_cut = std::max(largest_cut, segment);
  }
  if (largest >= rounded) {  // find_free_block refused it: the max split size's rules
    if (config_.max_split_size == SIZE_MAX) return "";
    return detail::concat("A cached block of ", format_bytes(uint64_t{largest}),
                          " could hold the request, but the max split size (",
                          format_bytes(uint64_t{config_.max_split_size}), ") keeps it ",
                          rounded < config_.max_split_size
                              ? "for requests at least that large. "
                              : "for requests within 20 MiB of its size. ");
  }
  // What a new segment could still take: the limit's room, and no more than the source
  // has free (a 95e9-byte limit on an 80 GB card is the card's shortage, not pieces).
  const auto reserved = static_cast<size_t>(stats_.reserved_bytes.current);
  size_t headroom = SIZE_MAX;
  if (config_.memory_limit != 0)
    headroom = config_.memory_limit > reserved ? config_.memory_limit - reserved : 0;
  if (const int64_t free = source_->free_bytes(); free >= 0)
    headroom = std::min(headroom, static_cast<size_t>(free));
  if (headroom == SIZE_MAX) headroom = 0;  // neither known: say nothing of pieces
  if (cached + headroom < segment_size) return "";
  std::string hint =
      detail::concat("The request would fit were the ", format_bytes(uint64_t{cached}),
                     " cached in partly used segments given back (the largest free piece is ",
                     format_bytes(uint64_t{largest}), ")");
  // A max split size helps only where a segment that could hold the request was cut.
  if (config_.max_split_size == SIZE_MAX && largest_cut >= rounded) {
    return hint +
           ": a segment large enough for it was cut by smaller requests; keep large blocks "
           "whole with a max split size (CHUNKGRAD_MAX_SPLIT_MB=N, N MiB above 20, or "
           "set_max_split_size; PyTorch's max_split_size_mb). ";
  }
  return hint + ". ";
}

// What the live blocks are, by category and scope, for the out-of-memory message.
std::string CachingAllocator::held_blocks_sentence() const {
  std::vector<HeldBlock> held;
  for (const Block* head : segments_) {
    for (const Block* b = head; b != nullptr; b = b->next) {
      if (b->allocated) held.push_back(HeldBlock{b->size, b->category, b->scope_id});
    }
  }
  return describe_holders(held);
}

void CachingAllocator::throw_oom(size_t nbytes, size_t rounded, size_t segment_size,
                                 StreamId stream) {
  ++stats_.num_ooms;
  MemoryTrace::record(TraceAction::oom, source_->device(), 0, rounded, nbytes);
  const int64_t allocated = stats_.allocated_bytes.current;
  const int64_t reserved = stats_.reserved_bytes.current;
  const int64_t source_free = source_->free_bytes();
  std::string limit = config_.memory_limit == 0
                          ? std::string("none")
                          : format_bytes(uint64_t{config_.memory_limit}) + " (" +
                                std::to_string(config_.memory_limit) + " bytes)";
  throw OutOfMemoryError(
      detail::concat(
          "out of memory on ", source_->device().str(), " (", source_->name(),
          "): tried to allocate ", format_bytes(uint64_t{nbytes}), " (", nbytes,
          " bytes requested, a new segment of ", segment_size, " bytes needed); allocated ",
          format_bytes(allocated), " (", allocated, " bytes), reserved ", format_bytes(reserved),
          " (", reserved, " bytes, of which ", format_bytes(reserved - allocated),
          " cached but unallocated), memory limit ", limit, ", source free ",
          source_free < 0 ? std::string("unknown") : format_bytes(source_free), ". ",
          config_.memory_limit != 0 && segment_size > config_.memory_limit
              ? "The segment this request needs (" + format_bytes(uint64_t{segment_size}) +
                    ") is alone larger than the memory limit. "
              : std::string(),
          fragmentation_hint(rounded, segment_size, stream), held_blocks_sentence(),
          "Lower the batch, sequence or chunk size, or raise the limit."),
      __FILE__, __LINE__);
}

// A request no rounding can hold is an out-of-memory error like any other (callers that
// catch OutOfMemoryError to try a smaller size see it), but it never reaches the source.
void CachingAllocator::throw_too_large(size_t nbytes) {
  ++stats_.num_ooms;
  MemoryTrace::record(TraceAction::oom, source_->device(), 0, nbytes, nbytes);
  throw OutOfMemoryError(
      detail::concat("out of memory on ", source_->device().str(), " (", source_->name(),
                     "): tried to allocate ", format_bytes(uint64_t{nbytes}), " (", nbytes,
                     " bytes), above the largest allocation chunkgrad can make (",
                     format_bytes(uint64_t{kMaxAllocation}), ", ", kMaxAllocation,
                     " bytes); the size was probably computed from a wrong shape"),
      __FILE__, __LINE__);
}

AllocatorStats CachingAllocator::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  stats_.reset_peak();
}

void CachingAllocator::set_memory_limit(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  config_.memory_limit = bytes;
}

size_t CachingAllocator::memory_limit() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return config_.memory_limit;
}

void CachingAllocator::set_max_split_size(size_t bytes) {
  // PyTorch refuses max_split_size_mb <= 20 too: the 20 MiB segments of 1-10 MiB requests
  // would be kept whole and never used again, one more each step.
  CG_CHECK(bytes > kLargeBuffer, "CachingAllocator(", source_->name(), "): max_split_size ", bytes,
           " bytes is not above the 20 MiB segments of 1-10 MiB requests (", kLargeBuffer,
           " bytes), which it would keep whole and never reuse; give more (SIZE_MAX: split "
           "every block)");
  std::lock_guard<std::mutex> lock(mutex_);
  config_.max_split_size = bytes;
}

size_t CachingAllocator::max_split_size() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return config_.max_split_size;
}

Device CachingAllocator::device() const { return source_->device(); }

std::vector<SegmentInfo> CachingAllocator::snapshot() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<SegmentInfo> out;
  for (const Block* head : segments_) {
    SegmentInfo seg{reinterpret_cast<uint64_t>(head->ptr), 0, head->small, {}};
    for (const Block* b = head; b != nullptr; b = b->next) {
      seg.blocks.push_back(BlockInfo{reinterpret_cast<uint64_t>(b->ptr), b->size, b->requested,
                                     b->allocated, b->category, b->scope_id, b->stream});
      seg.size += b->size;
    }
    out.push_back(std::move(seg));
  }
  std::sort(out.begin(), out.end(),
            [](const SegmentInfo& a, const SegmentInfo& b) { return a.addr < b.addr; });
  return out;
}

namespace {

struct AllocatorRegistry {
  std::mutex mutex;
  std::map<std::pair<int, int>, CachingAllocator*> allocators;
};

// Leaked on purpose: tensors may be freed during static destruction.
AllocatorRegistry& registry() {
  static auto* r = new AllocatorRegistry();
  return *r;
}

std::pair<int, int> registry_key(Device d) { return {static_cast<int>(d.type), d.index}; }

}  // namespace

CachingAllocator& allocator_for(Device device) {
  AllocatorRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.allocators.find(registry_key(device));
  if (it != r.allocators.end()) return *it->second;
  const size_t split = max_split_size_from_env();  // (throws before anything is made)
  std::unique_ptr<SegmentSource> source =
      device.is_cpu() ? make_host_segment_source()
                      : backend_for(device).make_segment_source(device.index);
  auto* allocator = new CachingAllocator(std::move(source));
  if (split != SIZE_MAX) allocator->set_max_split_size(split);
  r.allocators.emplace(registry_key(device), allocator);
  return *allocator;
}

size_t max_split_size_from_env() {
  const char* e = std::getenv("CHUNKGRAD_MAX_SPLIT_MB");
  if (e == nullptr) return SIZE_MAX;
  const std::string text = e;
  // A whole number of MiB, as PyTorch's max_split_size_mb takes it: digits only.
  const bool digits = !text.empty() && text.size() <= 7 &&
                      text.find_first_not_of("0123456789") == std::string::npos;
  const int64_t mb = digits ? std::stoll(text) : 0;
  CG_CHECK(mb > 20, "CHUNKGRAD_MAX_SPLIT_MB is \"", text,
           "\": give a whole number of MiB from 21 to 9999999 (cached blocks that large stay "
           "whole; 20 or less would keep the 20 MiB segments of small requests whole and "
           "unused), or unset it");
  return static_cast<size_t>(mb) << 20;
}

void drop_device_allocator(Device device) {
  CG_CHECK(!device.is_cpu(), "drop_device_allocator: the CPU allocator is never dropped");
  AllocatorRegistry& r = registry();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto it = r.allocators.find(registry_key(device));
  if (it == r.allocators.end()) return;
  CG_CHECK(it->second->stats().allocation.current == 0, "drop_device_allocator: ", device.str(),
           " still has live blocks; free every tensor on it first");
  delete it->second;
  r.allocators.erase(it);
}

}  // namespace cg
