// Why this file exists: how the project measures time on the host, written once. The
// benches, the CUDA autotuners (cuBLASLt algorithms, cuDNN attention plans) and the CUDA
// event timer (cuda/event_timer.h) all report the median of a few timed runs; the CPU
// bench times with a wall clock. Both are here so each program keeps only what it times.
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

#include "core/error.h"

namespace cg {

// The median of `values` (the upper one of an even count); `values` must not be empty.
template <typename T>
T median(std::vector<T> values) {
  CG_CHECK(!values.empty(), "median: no values (time at least one run)");
  std::nth_element(values.begin(), values.begin() + values.size() / 2, values.end());
  return values[values.size() / 2];
}

// Wall-clock time since construction (or restart()), on the monotonic clock.
class Stopwatch {
 public:
  Stopwatch() : start_(std::chrono::steady_clock::now()) {}
  void restart() { start_ = std::chrono::steady_clock::now(); }
  double seconds() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  }
  double ms() const { return seconds() * 1e3; }

 private:
  std::chrono::steady_clock::time_point start_;
};

// Median wall-clock seconds of f() over `repeats` runs (at least one), after one untimed
// warm-up run.
template <typename F>
double median_seconds(int repeats, F&& f) {
  f();
  std::vector<double> times;
  for (int i = 0; i < std::max(1, repeats); ++i) {
    const Stopwatch watch;
    f();
    times.push_back(watch.seconds());
  }
  return median(std::move(times));
}

}  // namespace cg
