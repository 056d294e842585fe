// Why this file exists: GPU time measured one way everywhere. The benches and the
// autotuners (cuda/lt_autotune.cpp, cuda/cudnn_sdpa.cpp) each time work on a stream
// with a pair of CUDA events; EventTimer owns the pair, and median_event_ms is the
// "warm up once, time N runs, take the median" loop they share (median: core/timing.h).
#pragma once

#include <cuda_runtime_api.h>

#include <vector>

#include "core/timing.h"
#include "cuda/cuda_check.h"

namespace cg::cuda {

// Milliseconds between start() and stop_ms() on `stream`, as the GPU saw them.
class EventTimer {
 public:
  explicit EventTimer(cudaStream_t stream) : stream_(stream) {
    CG_CUDA_CHECK(cudaEventCreate(&start_));
    CG_CUDA_CHECK(cudaEventCreate(&stop_));
  }
  ~EventTimer() {
    cudaEventDestroy(start_);  // unchecked: a destructor must not throw
    cudaEventDestroy(stop_);
  }
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;

  void start() { CG_CUDA_CHECK(cudaEventRecord(start_, stream_)); }
  // Records the stop event and waits for it on the host (a host sync).
  float stop_ms() {
    CG_CUDA_CHECK(cudaEventRecord(stop_, stream_));
    CG_CUDA_CHECK(cudaEventSynchronize(stop_));
    float ms = 0;
    CG_CUDA_CHECK(cudaEventElapsedTime(&ms, start_, stop_));
    return ms;
  }

 private:
  cudaStream_t stream_;
  cudaEvent_t start_{}, stop_{};
};

// Median milliseconds of f() on `stream` over `repeats` runs (at least one), after one
// untimed warm-up run (algorithm choice, workspace, caches).
template <typename F>
double median_event_ms(cudaStream_t stream, int repeats, F&& f) {
  f();
  EventTimer timer(stream);
  std::vector<double> ms;
  for (int i = 0; i < (repeats > 1 ? repeats : 1); ++i) {
    timer.start();
    f();
    ms.push_back(timer.stop_ms());
  }
  return median(std::move(ms));
}

}  // namespace cg::cuda
