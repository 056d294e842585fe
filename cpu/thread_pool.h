// Why this file exists: the CPU kernels' threads, owned by the library instead of OpenMP.
// libgomp's workers spin for a long time between parallel regions; on a busy machine that
// spinning takes the cores the serial parts of a training step need (the 300-step MLP
// demo took 15-69 s instead of 1 s next to other builds; see Note [Threads under load] in
// cpu/parallel.h). This pool's workers spin only briefly, then sleep on a condition
// variable, and the calling thread takes pieces no worker has started, so a worker the
// scheduler has not run yet never holds a region up.
//
//   parallel_for(n, [&](int64_t begin, int64_t end, int worker) { ... });
//
// cuts [0, n) into min(n, num_threads()) contiguous pieces of (almost) equal size, runs
// each exactly once, and returns when all are done. `worker` is the piece's index, in
// [0, num_threads()): at most one piece with a given index runs at a time, so it can
// index per-thread scratch. The body may also take just (begin, end).
//   - Nested calls (from inside a body) and calls while another thread's region holds the
//     pool run inline on the calling thread, as one piece with worker 0.
//   - An exception thrown by a body is rethrown to the caller (the first one, once every
//     piece has finished).
//   - Splits depend on n and num_threads() only: Note [Deterministic threads].
// Internal to ops/: not a public header (ops/threads.h is).
#pragma once

#include <cstdint>
#include <type_traits>

#include "ops/threads.h"

namespace cg::cpu {

// Threads a region uses (the caller included); from CHUNKGRAD_NUM_THREADS, else
// OMP_NUM_THREADS, else the cores this process may run on; cg::set_num_threads changes it.
int num_threads();

// The count the environment asks for now: CHUNKGRAD_NUM_THREADS (an invalid value
// throws), else OMP_NUM_THREADS (its first entry; an invalid value is ignored), else the
// cores this process may run on. Read once, when the pool is first used.
int threads_from_environment();

// True inside a parallel_for body (on any thread): a nested parallel_for runs inline.
bool in_parallel_region();

using PieceFn = void (*)(void* context, int64_t begin, int64_t end, int worker);
void parallel_for_impl(int64_t n, PieceFn fn, void* context);

template <typename F>
void parallel_for(int64_t n, F&& body) {
  if (n <= 0) return;
  using Body = std::remove_reference_t<F>;
  parallel_for_impl(
      n,
      [](void* context, int64_t begin, int64_t end, int worker) {
        Body& b = *static_cast<Body*>(context);
        if constexpr (std::is_invocable_v<Body&, int64_t, int64_t, int>) {
          b(begin, end, worker);
        } else {
          b(begin, end);
        }
      },
      const_cast<void*>(static_cast<const void*>(&body)));
}

}  // namespace cg::cpu
