// Why this file exists: the stop flag and its signal handlers (stop_signal.h).
#include "train/stop_signal.h"

#include <atomic>
#include <csignal>

namespace cg::train {

namespace {

std::atomic<bool> g_stop{false};
struct sigaction g_old_int {}, g_old_term {};

extern "C" void on_stop_signal(int sig) {
  g_stop.store(true, std::memory_order_relaxed);
  std::signal(sig, SIG_DFL);  // a second signal kills at once
}

}  // namespace

StopSignals::StopSignals() {
  g_stop.store(false);
  struct sigaction sa {};
  sa.sa_handler = on_stop_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  sigaction(SIGINT, &sa, &g_old_int);
  sigaction(SIGTERM, &sa, &g_old_term);
}

StopSignals::~StopSignals() {
  sigaction(SIGINT, &g_old_int, nullptr);
  sigaction(SIGTERM, &g_old_term, nullptr);
  g_stop.store(false);  // a later run in this process starts unasked
}

bool stop_requested() { return g_stop.load(std::memory_order_relaxed); }

bool stop_agreed() { return stop_requested(); }

void request_stop() { g_stop.store(true); }

Interrupted::Interrupted(const std::string& phase, int64_t step)
    : std::runtime_error(phase + " training: interrupted at step " + std::to_string(step) +
                         "; run the same command to resume"),
      phase_(phase), step_(step) {}

}  // namespace cg::train
