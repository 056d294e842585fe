// Why this file exists: the stop flag and its signal handlers (stop_signal.h).
#include "train/stop_signal.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <csignal>
#include <cstdio>

#include "core/error.h"
#include "dist/communicator.h"

namespace cg::train {

namespace {

std::atomic<bool> g_stop{false};

// Said at once (an outside tester's first SIGTERM during data generation went unanswered
// for half a minute): the stop waits for the next step boundary, which the stages before
// training reach only when training starts.
constexpr char kStopping[] =
    "\nchunkgrad: stopping at the next step boundary (training saves a checkpoint first; "
    "making the drafter's data or evaluating, after the prompt in hand); signal again to stop "
    "at once\n";
// Under mpirun a signal may also be mpirun ending the job because a rank failed (MPI_Abort,
// or a rank that died): the ranks left are then killed within seconds and save nothing, so
// the line says both (a handler cannot tell which: mpirun sends SIGTERM for either).
constexpr char kStoppingRank[] =
    "\nchunkgrad: rank %d got a stop signal: if it is a stop, every rank stops at the next "
    "step boundary and rank 0 saves a checkpoint first (signal again to stop at once); if "
    "mpirun is ending the job because a rank failed (that rank's error is printed), nothing "
    "is saved\n";
// drafter.checkpoint_every -1: nothing is saved, and the lines say so.
constexpr char kStoppingNoSave[] =
    "\nchunkgrad: stopping at the next step boundary; drafter.checkpoint_every is -1, so the "
    "drafter saves no checkpoint and a rerun trains it from the start; signal again to stop "
    "at once\n";
constexpr char kStoppingRankNoSave[] =
    "\nchunkgrad: rank %d got a stop signal: every rank stops at the next step boundary and "
    "nothing is saved (drafter.checkpoint_every is -1); if mpirun is ending the job because a "
    "rank failed, that rank's error is printed\n";
char g_message[512];  // written before the handlers are installed
size_t g_message_size = 0;

extern "C" void on_stop_signal(int sig) {
  g_stop.store(true, std::memory_order_relaxed);
  std::signal(sig, SIG_DFL);  // a second signal kills at once
  // (write(2) is async-signal-safe; nothing to do if it fails)
  const ssize_t ignored = ::write(STDERR_FILENO, g_message, g_message_size);
  (void)ignored;
}

}  // namespace

StopSignals::StopSignals(bool saves) {
  g_stop.store(false);
  dist::LaunchInfo launch;  // (a launch environment it cannot read: the one-process line)
  try {
    launch = dist::detect_launch();
  } catch (const Error&) {}
  const char* rank_line = saves ? kStoppingRank : kStoppingRankNoSave;
  const int n =
      launch.world_size > 1
          ? std::snprintf(g_message, sizeof g_message, rank_line, launch.rank)
          : std::snprintf(g_message, sizeof g_message, "%s", saves ? kStopping : kStoppingNoSave);
  g_message_size = std::min(sizeof g_message - 1, static_cast<size_t>(std::max(n, 0)));
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

Interrupted::Interrupted(const std::string& phase, int64_t step, bool saved)
    : std::runtime_error(phase + " training: interrupted at step " + std::to_string(step) +
                         (saved ? "; run the same command to resume"
                                : "; nothing was saved (drafter.checkpoint_every is -1), so the "
                                  "same command trains the drafter from the start")),
      phase_(phase),
      step_(step) {}

Interrupted::Interrupted(Message, const std::string& phase, int64_t step,
                         const std::string& message)
    : std::runtime_error(message), phase_(phase), step_(step) {}

Interrupted Interrupted::with_message(const std::string& phase, int64_t step,
                                      const std::string& message) {
  return Interrupted(Message{}, phase, step, message);
}

}  // namespace cg::train
