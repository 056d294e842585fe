// Why this file exists: the CPU thread pool's contract (cpu/thread_pool.h): every
// index runs exactly once in contiguous pieces, worker indices can index per-thread
// scratch, nested and concurrent calls run inline, exceptions reach the caller, the count
// comes from the environment -- and idle workers sleep instead of spinning, which is the
// reason the pool exists (Note [Threads under load] in cpu/parallel.h).
#include <gtest/gtest.h>

#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <thread>
#include <vector>

#include "core/error.h"
#include "cpu/thread_pool.h"
#include "ops/threads.h"

namespace cg {
namespace {

// Restores the thread count when a test ends.
struct ThreadCount {
  explicit ThreadCount(int n) : before(get_num_threads()) { set_num_threads(n); }
  ~ThreadCount() { set_num_threads(before); }
  int before;
};

TEST(ThreadPool, EveryIndexOnceInContiguousPieces) {
  for (int threads : {1, 2, 3, 8}) {
    ThreadCount count(threads);
    for (int64_t n : {1, 2, 3, 7, 8, 100, 1001}) {
      std::vector<std::atomic<int>> hits(n);
      std::vector<std::atomic<int>> worker_used(threads);
      std::atomic<int> calls{0};
      cpu::parallel_for(n, [&](int64_t begin, int64_t end, int worker) {
        ASSERT_GE(worker, 0);
        ASSERT_LT(worker, threads);
        EXPECT_EQ(worker_used[worker].fetch_add(1), 0)
            << "worker index " << worker << " used twice";
        EXPECT_TRUE(cpu::in_parallel_region() || n == 1);
        calls.fetch_add(1);
        for (int64_t i = begin; i < end; ++i) hits[i].fetch_add(1);
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n " << n << " index " << i;
      EXPECT_EQ(calls.load(), std::min<int64_t>(n, threads)) << "n " << n;
    }
  }
  EXPECT_FALSE(cpu::in_parallel_region());
}

TEST(ThreadPool, NestedCallsRunInline) {
  ThreadCount count(4);
  std::vector<std::atomic<int>> hits(40 * 40);
  cpu::parallel_for(40, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const std::thread::id outer = std::this_thread::get_id();
      int pieces = 0;
      cpu::parallel_for(40, [&](int64_t b, int64_t e, int worker) {
        EXPECT_EQ(std::this_thread::get_id(), outer);
        EXPECT_EQ(worker, 0);
        ++pieces;
        for (int64_t j = b; j < e; ++j) hits[i * 40 + j].fetch_add(1);
      });
      EXPECT_EQ(pieces, 1);
    }
  });
  for (auto& h : hits) ASSERT_EQ(h.load(), 1);
}

TEST(ThreadPool, ExceptionsReachTheCaller) {
  ThreadCount count(4);
  for (int attempt = 0; attempt < 20; ++attempt) {
    EXPECT_THROW(cpu::parallel_for(100,
                                   [&](int64_t begin, int64_t) {
                                     if (begin >= 50) CG_FAIL("piece at ", begin, " failed");
                                   }),
                 Error);
  }
  // The pool still works afterwards.
  std::atomic<int64_t> total{0};
  cpu::parallel_for(100, [&](int64_t begin, int64_t end) { total += end - begin; });
  EXPECT_EQ(total.load(), 100);
}

// Two threads calling at once: one holds the pool, the other runs inline; both complete.
TEST(ThreadPool, ConcurrentCallersBothComplete) {
  ThreadCount count(3);
  auto work = [](int64_t* out) {
    for (int rep = 0; rep < 300; ++rep) {
      std::vector<int64_t> v(1000, 0);
      cpu::parallel_for(1000, [&](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) v[i] = i;
      });
      int64_t s = 0;
      for (int64_t x : v) s += x;
      *out += s;
    }
  };
  int64_t r1 = 0, r2 = 0;
  std::thread t1(work, &r1), t2(work, &r2);
  t1.join();
  t2.join();
  EXPECT_EQ(r1, 300 * 999 * 1000 / 2);
  EXPECT_EQ(r2, r1);
}

double process_cpu_seconds() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// After a region the workers spin at most briefly, then sleep: while the caller sleeps
// 200 ms the whole process uses (almost) no CPU. libgomp's default spinning used ~2x
// 200 ms here; with 4 workers on a loaded 2-core machine that is what made training stall.
TEST(ThreadPool, IdleWorkersSleep) {
  ThreadCount count(4);
  std::atomic<int64_t> sink{0};
  for (int rep = 0; rep < 50; ++rep) {
    cpu::parallel_for(4, [&](int64_t begin, int64_t end) { sink += end - begin; });
  }
  const double before = process_cpu_seconds();
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  const double used = process_cpu_seconds() - before;
  EXPECT_LT(used, 0.02) << "idle workers used " << used << " s of CPU in 0.2 s";
}

TEST(ThreadPool, CountFromTheEnvironment) {
  auto with_env = [](const char* chunkgrad, const char* omp) {
    if (chunkgrad)
      setenv("CHUNKGRAD_NUM_THREADS", chunkgrad, 1);
    else
      unsetenv("CHUNKGRAD_NUM_THREADS");
    if (omp)
      setenv("OMP_NUM_THREADS", omp, 1);
    else
      unsetenv("OMP_NUM_THREADS");
    return cpu::threads_from_environment();
  };
  const char* saved_cg = std::getenv("CHUNKGRAD_NUM_THREADS");
  const char* saved_omp = std::getenv("OMP_NUM_THREADS");
  const std::string keep_cg = saved_cg ? saved_cg : "", keep_omp = saved_omp ? saved_omp : "";
  EXPECT_EQ(with_env("3", "5"), 3);  // CHUNKGRAD_NUM_THREADS wins
  EXPECT_EQ(with_env(nullptr, "5"), 5);
  EXPECT_EQ(with_env(nullptr, "6,2"), 6);  // OpenMP's nested list: its first entry
  const int cores = with_env(nullptr, nullptr);
  EXPECT_GE(cores, 1);
  EXPECT_EQ(with_env(nullptr, "lots"), cores);  // not ours to reject
  try {
    with_env("0", nullptr);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("CHUNKGRAD_NUM_THREADS"), std::string::npos) << e.what();
  }
  if (saved_cg)
    setenv("CHUNKGRAD_NUM_THREADS", keep_cg.c_str(), 1);
  else
    unsetenv("CHUNKGRAD_NUM_THREADS");
  if (saved_omp)
    setenv("OMP_NUM_THREADS", keep_omp.c_str(), 1);
  else
    unsetenv("OMP_NUM_THREADS");
}

TEST(ThreadPool, SetNumThreadsChecksItsArgument) {
  EXPECT_THROW(set_num_threads(0), Error);
  ThreadCount count(2);
  EXPECT_EQ(get_num_threads(), 2);
  EXPECT_EQ(cpu::num_threads(), 2);
  EXPECT_THROW(cpu::parallel_for(2, [](int64_t, int64_t) { set_num_threads(3); }), Error);
  EXPECT_EQ(get_num_threads(), 2);
}

}  // namespace
}  // namespace cg
