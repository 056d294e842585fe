// Why this file exists: the pool behind parallel_for (see thread_pool.h for the contract).
//
// Note [Pool protocol]: one region at a time holds the pool (job_mutex_; a second caller
// runs its region inline). The caller writes the job (function, context, n), then
// publishes it in one 64-bit word, claim_ = generation (32 bits) | pieces (16) | next
// piece (16), and bumps generation_ under mutex_ to wake sleepers. Every participant --
// the caller too -- takes pieces by compare-and-swap on claim_, so a piece runs exactly
// once and a worker that wakes late finds nothing left (or a newer generation) and goes
// back to waiting. The job's fields stay valid while `remaining_` is above zero, which a
// claimed piece guarantees until it finishes. Workers spin for kSpin before sleeping on
// wake_cv_; the caller spins as long before sleeping on done_cv_ until remaining_ is 0.
#include "cpu/thread_pool.h"

#include <sched.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

#include "core/error.h"

namespace cg::cpu {

namespace {

// How long an idle thread polls before it sleeps: long enough to catch the next region
// of a busy training step (kernels follow each other within microseconds), short enough
// that a loaded machine loses almost nothing to it (Note [Threads under load]).
constexpr auto kSpin = std::chrono::microseconds(50);
constexpr int kMaxThreads = 1024;  // pieces must fit the 16-bit fields of claim_

thread_local bool t_in_region = false;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#else
  std::this_thread::yield();
#endif
}

// Polls ready() for up to kSpin; true as soon as it holds.
template <typename Ready>
bool spin_until(Ready&& ready) {
  const auto deadline = std::chrono::steady_clock::now() + kSpin;
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      cpu_relax();
    }
    if (std::chrono::steady_clock::now() >= deadline) return ready();
  }
}

// A positive thread count from an environment variable, or 0 when unset. OMP_NUM_THREADS
// may be a list ("4,2"): its first entry counts.
int threads_from_env(const char* name, bool strict) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return 0;
  char* end = nullptr;
  const long n = std::strtol(value, &end, 10);
  const bool ok = end != value && n >= 1 && (*end == '\0' || *end == ',');
  if (!ok) {
    CG_CHECK(!strict, name, "=\"", value,
             "\" is not a thread count: set it to a whole "
             "number >= 1 (e.g. ",
             name, "=4) or unset it to use every core");
    return 0;
  }
  return static_cast<int>(std::min<long>(n, kMaxThreads));
}

int cores_available() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return std::min(n, kMaxThreads);
  }
  const unsigned n = std::thread::hardware_concurrency();
  return n == 0 ? 1 : std::min(static_cast<int>(n), kMaxThreads);
}

}  // namespace

int threads_from_environment() {
  if (int n = threads_from_env("CHUNKGRAD_NUM_THREADS", true)) return n;
  if (int n = threads_from_env("OMP_NUM_THREADS", false)) return n;
  return cores_available();
}

namespace {

class Pool {
 public:
  static Pool& get() {
    static Pool* pool = new Pool();  // never destroyed: workers may outlive static destructors
    return *pool;
  }

  int threads() const { return threads_.load(std::memory_order_relaxed); }

  void set_threads(int n) {
    std::lock_guard<std::mutex> job(job_mutex_);
    stop_workers();
    threads_.store(n, std::memory_order_relaxed);
  }

  void run(int64_t n, PieceFn fn, void* context) {
    std::unique_lock<std::mutex> job(job_mutex_, std::try_to_lock);
    const int64_t pieces = std::min<int64_t>(n, threads());
    if (!job.owns_lock() || pieces <= 1) {  // another thread's region holds the pool
      run_inline(n, fn, context);
      return;
    }
    start_workers();
    fn_ = fn;
    context_ = context;
    n_ = n;
    error_ = nullptr;
    remaining_.store(static_cast<int>(pieces), std::memory_order_relaxed);
    const uint64_t generation = generation_.load(std::memory_order_relaxed) + 1;
    claim_.store(((generation & 0xffffffffu) << 32) | (static_cast<uint64_t>(pieces) << 16),
                 std::memory_order_release);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      generation_.store(generation, std::memory_order_release);
      if (sleepers_ > 0) wake_cv_.notify_all();
    }
    take_pieces(generation);
    if (!spin_until([&] { return remaining_.load(std::memory_order_acquire) == 0; })) {
      std::unique_lock<std::mutex> lock(mutex_);
      done_cv_.wait(lock, [&] { return remaining_.load(std::memory_order_acquire) == 0; });
    }
    if (error_) std::rethrow_exception(error_);
  }

 private:
  Pool() : threads_(threads_from_environment()) {}

  static void run_inline(int64_t n, PieceFn fn, void* context) {
    const bool outer = t_in_region;
    t_in_region = true;
    try {
      fn(context, 0, n, 0);
    } catch (...) {
      t_in_region = outer;
      throw;
    }
    t_in_region = outer;
  }

  // Takes and runs pieces of `generation` until none is left. Note [Pool protocol].
  void take_pieces(uint64_t generation) {
    const uint64_t tag = generation & 0xffffffffu;
    uint64_t c = claim_.load(std::memory_order_acquire);
    while (true) {
      if ((c >> 32) != tag) return;  // that region is over
      const int pieces = static_cast<int>((c >> 16) & 0xffff), next = static_cast<int>(c & 0xffff);
      if (next >= pieces) return;
      if (!claim_.compare_exchange_weak(c, c + 1, std::memory_order_acq_rel,
                                        std::memory_order_acquire)) {
        continue;
      }
      run_piece(next, pieces);
      c = claim_.load(std::memory_order_acquire);
    }
  }

  void run_piece(int piece, int pieces) {
    const int64_t begin = n_ * piece / pieces, end = n_ * (piece + 1) / pieces;
    t_in_region = true;
    try {
      if (begin < end) fn_(context_, begin, end, piece);
    } catch (...) {
      std::lock_guard<std::mutex> lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
    t_in_region = false;
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
      std::lock_guard<std::mutex> lock(mutex_);  // the caller checks under mutex_: no lost wake-up
      done_cv_.notify_one();
    }
  }

  void worker_main(uint64_t seen) {
    while (true) {
      auto ready = [&] {
        return generation_.load(std::memory_order_acquire) != seen ||
               stop_.load(std::memory_order_acquire);
      };
      if (!spin_until(ready)) {
        std::unique_lock<std::mutex> lock(mutex_);
        ++sleepers_;
        wake_cv_.wait(lock, ready);
        --sleepers_;
      }
      if (stop_.load(std::memory_order_acquire)) return;
      seen = generation_.load(std::memory_order_acquire);
      take_pieces(seen);
    }
  }

  // Both with job_mutex_ held, so no region is running.
  void start_workers() {
    const int wanted = threads() - 1;
    if (static_cast<int>(workers_.size()) == wanted) return;
    stop_workers();
    const uint64_t seen = generation_.load(std::memory_order_acquire);
    for (int i = 0; i < wanted; ++i) workers_.emplace_back([this, seen] { worker_main(seen); });
  }

  void stop_workers() {
    if (workers_.empty()) return;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      stop_.store(true, std::memory_order_release);
      wake_cv_.notify_all();
    }
    for (std::thread& w : workers_) w.join();
    workers_.clear();
    stop_.store(false, std::memory_order_release);
  }

  std::atomic<int> threads_;
  std::vector<std::thread> workers_;
  std::mutex job_mutex_;  // held by the caller of a region for its whole duration

  // The current job; written by the caller before it publishes claim_.
  PieceFn fn_ = nullptr;
  void* context_ = nullptr;
  int64_t n_ = 0;
  std::atomic<uint64_t> claim_{0};
  std::atomic<int> remaining_{0};
  std::exception_ptr error_;
  std::mutex error_mutex_;

  std::mutex mutex_;  // guards sleeping and waking
  std::condition_variable wake_cv_, done_cv_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<bool> stop_{false};
  int sleepers_ = 0;
};

}  // namespace

int num_threads() { return Pool::get().threads(); }

bool in_parallel_region() { return t_in_region; }

void parallel_for_impl(int64_t n, PieceFn fn, void* context) {
  if (n <= 0) return;
  // Nested: inline, still inside the region. One piece at top level: inline too, leaving
  // the pool free for the work inside it.
  if (t_in_region || n == 1) {
    fn(context, 0, n, 0);
    return;
  }
  Pool::get().run(n, fn, context);
}

}  // namespace cg::cpu

namespace cg {

void set_num_threads(int threads) {
  CG_CHECK(threads >= 1 && threads <= cpu::kMaxThreads, "set_num_threads(", threads,
           "): the thread count must be in [1, ", cpu::kMaxThreads, "]");
  CG_CHECK(!cpu::in_parallel_region(),
           "set_num_threads: called from inside a parallel "
           "region (a CPU kernel's body); call it between ops");
  cpu::Pool::get().set_threads(threads);
}

int get_num_threads() { return cpu::num_threads(); }

}  // namespace cg
