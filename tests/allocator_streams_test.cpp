// Why this file exists: the caching allocator's cross-stream rule (Note [Streams],
// core/caching_allocator.h): a block that another stream used is reused only after an
// event recorded at its free has completed. On the fake source the events are switches
// the test flips; on a GPU (skipped without one) a side stream held back by a host
// callback writes into a block after its free, and the block's next owner must not see
// that write.
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "core/caching_allocator.h"
#include "core/segment_source.h"

#if defined(CHUNKGRAD_WITH_CUDA)
#include <cuda_runtime_api.h>

#include "cuda/compute_stream.h"
#include "cuda/cuda_check.h"
#include "cuda/cuda_segment_source.h"
#include "cuda/device_info.h"
#endif

namespace cg {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

struct FakeAllocator {
  FakeSegmentSource* source;
  std::unique_ptr<CachingAllocator> alloc;
  explicit FakeAllocator(size_t capacity = 256 * kMiB) {
    auto s = std::make_unique<FakeSegmentSource>(capacity);
    source = s.get();
    alloc = std::make_unique<CachingAllocator>(std::move(s));
  }
};

TEST(AllocatorStreams, OwnStreamReusesAtOnce) {
  FakeAllocator f;
  void* a = f.alloc->allocate(4 * kMiB);
  f.alloc->record_stream(a, kDefaultStream);  // its own stream: nothing to wait for
  f.alloc->free(a);
  EXPECT_EQ(f.source->events_recorded(), 0);
  EXPECT_EQ(f.alloc->allocate(4 * kMiB), a);
}

TEST(AllocatorStreams, BlockUsedByAnotherStreamWaitsForItsEvent) {
  FakeAllocator f;
  void* a = f.alloc->allocate(4 * kMiB);
  f.alloc->record_stream(a, 1);
  f.alloc->record_stream(a, 1);  // once per stream
  f.alloc->free(a);
  EXPECT_EQ(f.source->events_recorded(), 1);
  EXPECT_EQ(f.alloc->pending_frees(), 1);
  const AllocatorStats s = f.alloc->stats();
  EXPECT_EQ(s.allocated_bytes.current, 0) << "freed by its owner";
  EXPECT_GT(s.active_bytes.current, 0) << "but still in use on stream 1";
  void* b = f.alloc->allocate(4 * kMiB);
  EXPECT_NE(b, a) << "reused while stream 1's work on it may still run";
  f.source->complete_events();
  f.alloc->free(b);
  void* c = f.alloc->allocate(4 * kMiB);
  EXPECT_TRUE(c == a || c == b);
  EXPECT_EQ(f.alloc->pending_frees(), 0);
  EXPECT_EQ(f.alloc->stats().active_bytes.current, f.alloc->stats().allocated_bytes.current);
  EXPECT_EQ(f.source->host_waits(), 0) << "nothing had to wait on the host";
  f.alloc->free(c);
}

TEST(AllocatorStreams, EveryUsingStreamMustFinish) {
  FakeAllocator f;
  void* a = f.alloc->allocate(2 * kMiB);
  f.alloc->record_stream(a, 1);
  f.alloc->record_stream(a, 2);
  f.alloc->free(a);
  EXPECT_EQ(f.source->events_recorded(), 2);
  // A pending block keeps its neighbours from merging with it: the segment stays split.
  void* b = f.alloc->allocate(2 * kMiB);
  EXPECT_NE(b, a);
  f.alloc->free(b);
  f.source->complete_events();
  EXPECT_EQ(f.alloc->allocate(2 * kMiB), a) << "best fit again once both streams are done";
}

TEST(AllocatorStreams, OutOfMemoryWaitsForPendingBlocksBeforeFailing) {
  AllocatorConfig config;
  config.memory_limit = 20 * kMiB;  // one large segment
  auto s = std::make_unique<FakeSegmentSource>(256 * kMiB);
  FakeSegmentSource* source = s.get();
  CachingAllocator alloc(std::move(s), config);
  void* a = alloc.allocate(12 * kMiB);
  alloc.record_stream(a, 1);
  alloc.free(a);
  void* b = alloc.allocate(12 * kMiB);  // only fits in a's bytes: must wait for stream 1
  EXPECT_EQ(b, a);
  EXPECT_EQ(source->host_waits(), 1);
  alloc.free(b);
}

TEST(AllocatorStreams, EmptyCacheWaitsThenReleases) {
  FakeAllocator f;
  void* a = f.alloc->allocate(30 * kMiB);
  f.alloc->record_stream(a, 3);
  f.alloc->free(a);
  f.alloc->empty_cache();
  EXPECT_EQ(f.alloc->pending_frees(), 0);
  EXPECT_EQ(f.alloc->stats().reserved_bytes.current, 0);
  EXPECT_EQ(f.source->host_waits(), 1);
}

TEST(AllocatorStreams, RecordStreamOfAnUnknownPointerThrows) {
  FakeAllocator f;
  int x = 0;
  EXPECT_THROW(f.alloc->record_stream(&x, 1), Error);
}

#if defined(CHUNKGRAD_WITH_CUDA)

// Host callback that holds its stream back until the test releases it.
void CUDART_CB hold_stream(void* flag) {
  auto* go = static_cast<std::atomic<bool>*>(flag);
  while (!go->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

TEST(AllocatorStreamsGpu, SideStreamWriteAfterFreeNeverReachesTheNextOwner) {
  if (cuda::device_count() == 0) GTEST_SKIP() << "no CUDA device: " << cuda::unavailable_reason();
  CachingAllocator alloc(std::make_unique<cuda::CudaSegmentSource>(0));
  const size_t bytes = 8 * kMiB;
  const cudaStream_t side = cuda::stream_for(0, 1), compute = cuda::compute_stream(0);
  std::atomic<bool> go{false};
  void* a = alloc.allocate(bytes);
  // Stream 1 will write 0xAB into the block, but only after the test lets it go.
  CG_CUDA_CHECK(cudaLaunchHostFunc(side, hold_stream, &go));
  CG_CUDA_CHECK(cudaMemsetAsync(a, 0xAB, bytes, side));
  alloc.record_stream(a, 1);
  alloc.free(a);
  // The next owner on the compute stream fills its block with 0x11.
  void* b = alloc.allocate(bytes);
  CG_CUDA_CHECK(cudaMemsetAsync(b, 0x11, bytes, compute));
  CG_CUDA_CHECK(cudaStreamSynchronize(compute));
  go = true;
  CG_CUDA_CHECK(cudaStreamSynchronize(side));
  std::vector<unsigned char> host(bytes);
  CG_CUDA_CHECK(cudaMemcpy(host.data(), b, bytes, cudaMemcpyDeviceToHost));
  EXPECT_NE(b, a) << "the block was handed out while stream 1 still had work on it";
  size_t clobbered = 0;
  for (unsigned char c : host) clobbered += c != 0x11;
  EXPECT_EQ(clobbered, 0u) << "stream 1's late write reached the next owner";
  alloc.free(b);
  // Stream 1 is done now: its block is reused.
  void* c = alloc.allocate(bytes);
  EXPECT_TRUE(c == a || c == b);
  alloc.free(c);
  EXPECT_EQ(alloc.pending_frees(), 0);
}

#endif  // CHUNKGRAD_WITH_CUDA

}  // namespace
}  // namespace cg
