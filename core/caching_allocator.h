// Why this file exists: chunkgrad's caching allocator, one design for host and device
// memory, after PyTorch's CUDACachingAllocator (docs/allocator_notes.md). Memory is taken
// from a SegmentSource in whole segments, carved into blocks, and cached on free, so
// that every byte the framework holds is counted in one place.
//
// Note [Sizes]: requests round up to 512 B. Requests <= 1 MiB come from the small pool,
// whose segments are 2 MiB; larger ones from the large pool, whose segments are 20 MiB
// for requests below 10 MiB and the request rounded up to 2 MiB otherwise.
// Note [Split]: a found block is split when the rest is worth keeping: >= 512 B in the
// small pool; > 1 MiB in the large pool (and only for requests < max_split_size).
// Note [OOM]: when the source refuses (or the configured limit would be passed), the
// allocator frees cached oversize blocks, then every fully free segment, and retries;
// then it throws OutOfMemoryError stating requested, allocated, reserved and the limit,
// and, where the large pool's free blocks (in partly used segments) would make room for
// the request if given back, that they are in pieces (Note [Large blocks kept whole], the
// .cpp).
// A request above kMaxAllocation (which no rounding or int64 stat could hold) is refused
// with OutOfMemoryError before any arithmetic, so a size that wrapped around 64 bits
// upstream can never come back as a small block.
//
// Note [Streams]: each device has one compute stream (cuda/compute_stream.h) and may have
// side streams (a copy stream, a second compute stream). The stream is a property of
// every block and segment, as in PyTorch: the best-fit order is (stream, size, address),
// a request is served only from blocks of its own stream, split remainders keep their
// segment's stream, and trace events carry it. Work on one stream runs in issue order, so
// a block freed on the host goes back to its stream's pool at once: its next user on that
// stream is ordered after its last. A block that another stream also used is different:
// record_stream(ptr, other) says so, and free() then records an event on each such stream
// (Note [Stream events], core/segment_source.h) and keeps the block out of the pools --
// still "active", no longer "allocated" -- until every event has completed. allocate()
// returns completed blocks to their pools first; before an out-of-memory error and in
// empty_cache() the host waits for the pending ones. (PyTorch's record_stream and its
// event queue.)
//
// Note [Block owner]: a block keeps the category, scope and stream it was allocated
// under for its whole life; its free event copies them from the block. (Taking them from
// the thread at free time would file a gradient freed under no guard as "unknown".)
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/allocator_stats.h"
#include "core/error.h"
#include "core/memory_trace.h"
#include "core/segment_source.h"

namespace cg {

constexpr size_t kMinBlockSize = 512;                // every size rounds up to this
constexpr size_t kSmallSize = size_t{1} << 20;       // <= 1 MiB: small pool
constexpr size_t kSmallBuffer = size_t{2} << 20;     // small-pool segment size
constexpr size_t kLargeBuffer = size_t{20} << 20;    // segment for 1-10 MiB requests
constexpr size_t kMinLargeAlloc = size_t{10} << 20;  // from here, segment = request
constexpr size_t kRoundLarge = size_t{2} << 20;      // ... rounded up to 2 MiB
// The largest request: INT64_MAX rounded down to kRoundLarge, so that rounding never
// wraps and every byte count fits the int64 stats.
constexpr size_t kMaxAllocation = size_t{INT64_MAX} / kRoundLarge * kRoundLarge;

struct AllocatorConfig {
  // Reserved bytes never exceed this (0 = no limit beyond the source's own), so a CPU
  // run can behave like a 24 GB or 80 GB card.
  size_t memory_limit = 0;
  // Blocks at least this large are never split (PyTorch's max_split_size_mb).
  size_t max_split_size = SIZE_MAX;
};

// What a block looks like from outside, for snapshots and tests.
struct BlockInfo {
  uint64_t addr;
  size_t size;       // rounded size the block occupies
  size_t requested;  // what the caller asked for (0 when free)
  bool allocated;
  MemoryCategory category;  // of the allocation (unknown when free)
  uint32_t scope_id;        // MemoryTrace::scope_name(scope_id) = who allocated it
  StreamId stream;          // of the block's segment (Note [Streams])
};
struct SegmentInfo {
  uint64_t addr;
  size_t size;
  bool small_pool;
  std::vector<BlockInfo> blocks;  // tile the segment exactly, in address order
};

class CachingAllocator {
 public:
  explicit CachingAllocator(std::unique_ptr<SegmentSource> source, AllocatorConfig config = {});
  ~CachingAllocator();  // returns every segment to the source (live blocks included)
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // Returns memory for `nbytes` (nullptr for 0 bytes), from blocks of `stream` only.
  // Throws OutOfMemoryError (also for nbytes > kMaxAllocation).
  void* allocate(size_t nbytes, StreamId stream = kDefaultStream);
  // Returns a block obtained from allocate(). Throws cg::Error on an unknown pointer.
  void free(void* ptr);
  // The live block at `ptr` is also used by work queued on `stream` (Note [Streams]): its
  // reuse after free() waits for that work. A no-op for the block's own stream.
  void record_stream(void* ptr, StreamId stream);
  // Blocks freed but waiting for another stream's work (Note [Streams]).
  int64_t pending_frees() const;
  // Returns every fully free segment to the source (after waiting for pending frees).
  void empty_cache();

  AllocatorStats stats() const;
  void reset_peak_stats();
  void set_memory_limit(size_t bytes);
  size_t memory_limit() const;
  // AllocatorConfig::max_split_size after construction (SIZE_MAX: split every block); it
  // must be above 20 MiB (kLargeBuffer), as PyTorch's max_split_size_mb must: the 20 MiB
  // segments of 1-10 MiB requests would be kept whole and never reused. (The config
  // field itself is not checked: tests set small values to see the rules.) Cached blocks stay as
  // they are: call it before the work whose fragmentation it is meant to avoid, or after
  // empty_cache(). Note [Large blocks kept whole].
  void set_max_split_size(size_t bytes);
  size_t max_split_size() const;
  Device device() const;
  SegmentSource& source() { return *source_; }
  std::vector<SegmentInfo> snapshot() const;  // segments ordered by address

  // Both throw cg::Error above kMaxAllocation (where rounding would wrap).
  static size_t round_size(size_t nbytes);
  static size_t segment_size_for(size_t rounded);

 private:
  struct Block;
  struct BlockLess {
    bool operator()(const Block* a, const Block* b) const;
  };
  using Pool = std::set<Block*, BlockLess>;

  Block* find_free_block(Pool& pool, size_t size, StreamId stream);
  Block* alloc_segment(size_t segment_size, bool small, StreamId stream);
  // Returns fully free segments to the source (only those >= max_split_size when
  // oversize_only); true when anything was released.
  bool release_cached(bool oversize_only);
  std::string fragmentation_hint(size_t rounded, size_t segment_size,
                                 StreamId stream) const;  // Note [Large blocks kept whole]
  void release_segment(Block* head);
  void split(Block* block, size_t size, Pool& pool);
  Block* merge_with_free_neighbours(Block* block, Pool& pool);
  void return_to_pool(Block* block);
  // Returns the pending blocks whose events completed (all of them, waiting, when `wait`).
  void process_pending(bool wait);
  void pool_insert(Pool& pool, Block* block);
  void pool_erase(Pool& pool, Block* block);
  Pool& pool_of(const Block* block);
  std::string held_blocks_sentence() const;  // "Held: ..." (core/allocator_holders.h)
  [[noreturn]] void throw_oom(size_t nbytes, size_t rounded, size_t segment_size, StreamId stream);
  [[noreturn]] void throw_too_large(size_t nbytes);
  static bool is_split(const Block* b);

  mutable std::mutex mutex_;
  std::unique_ptr<SegmentSource> source_;
  AllocatorConfig config_;
  Pool small_pool_;
  Pool large_pool_;
  std::unordered_map<void*, Block*> live_;  // allocated blocks by address
  std::vector<Block*> segments_;            // first block of every segment
  struct PendingFree {
    Block* block;
    SegmentSource::Event event;
  };
  std::vector<PendingFree> pending_;  // Note [Streams]
  AllocatorStats stats_;
};

// The process-wide allocator of a device (created on first use, never destroyed so that
// tensors freed during static destruction stay safe). A device other than the host needs
// its backend (backend_for).
CachingAllocator& allocator_for(Device device);

// CHUNKGRAD_MAX_SPLIT_MB=N (a whole number of MiB above 20): the max split size of every
// allocator allocator_for() makes (Note [Large blocks kept whole]; PyTorch's
// PYTORCH_CUDA_ALLOC_CONF=max_split_size_mb:N). SIZE_MAX when it is not set; any other
// value throws, naming the variable (programs check it up front).
size_t max_split_size_from_env();

// Tests only: forgets (and destroys) a GPU device's allocator so that a backend swapped in
// afterwards gets a fresh one. Every block of it must be free. The CPU's is never dropped.
void drop_device_allocator(Device device);

}  // namespace cg
