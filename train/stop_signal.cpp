// Why this file exists: the stop flag and its signal handlers (stop_signal.h).
#include "train/stop_signal.h"

#include <unistd.h>

#include <atomic>
#include <csignal>

namespace cg::train {

namespace {

std::atomic<bool> g_stop{false};

// Said at once (an outside tester's first SIGTERM during data generation went unanswered
// for half a minute): the stop waits for the next step boundary, which the stages before
// training reach only when training starts.
constexpr char kStopping[] =
    "\nchunkgrad: stopping at the next step boundary (training saves a checkpoint first); "
    "signal again to stop at once\n";

extern "C" void on_stop_signal(int sig) {
  g_stop.store(true, std::memory_order_relaxed);
  std::signal(sig, SIG_DFL);  // a second signal kills at once
  // (write(2) is async-signal-safe; nothing to do if it fails)
  const ssize_t ignored = ::write(STDERR_FILENO, kStopping, sizeof kStopping - 1);
  (void)ignored;
}

}  // namespace

StopSignals::StopSignals() {
  g_stop.store(false);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &old_int_);
  sigaction(SIGTERM, &sa, &old_term_);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &old_int_, nullptr);
  sigaction(SIGTERM, &old_term_, nullptr);
  g_stop.store(false);  // a later run in this process starts unasked
}

bool stop_requested() { return g_stop.load(std::memory_order_relaxed); }

bool stop_agreed() { return stop_requested(); }

void request_stop() { g_stop.store(true); }

Interrupted::Interrupted(const std::string& phase, int64_t step)
    : std::runtime_error(phase + " training: interrupted at step " + std::to_string(step) +
                         "; run the same command to resume"),
      phase_(phase),
      step_(step) {}

}  // namespace cg::train
