// Why this file exists: Ctrl-C (SIGINT) or a scheduler's SIGTERM used to kill a run at
// once: a half progress line, no checkpoint, every step since the last one lost (all of
// an interrupted target training). Now a signal only asks the run to stop: the training
// loops finish the step they are in, save a checkpoint, and end with
//
//   chunkgrad train: drafter training: interrupted at step N; run the same command to resume
//
// and exit code 130 (128 + SIGINT, what shells expect of an interrupted program). A second
// signal kills at once, as before (a run stuck in a long step can still be stopped).
//
//   StopSignals signals;                       // handlers for the run's lifetime
//   ... after each step: if (stop_agreed()) { save; throw Interrupted("drafter", step); }
//
// A run with drafter.checkpoint_every -1 (a benchmark: a full-scale checkpoint is about
// 24 GB) saves nothing, and both lines say so (StopSignals(false), Interrupted(..., false)):
// an outside tester was told "training saves a checkpoint first" and "run the same command
// to resume", and the same command started over.
//
// Note [Stopping together]: with several ranks of one data-parallel run, each rank would
// see the signal at a different moment, and a rank that stops while another takes one more
// step deadlocks the next collective. So the decision is made at a step boundary by
// stop_agreed(), the one place that would combine the ranks' flags (an all-reduce of "any
// rank asked"): every rank gets the same answer after the same step and saves the same
// step. With one process it is the local flag.
#pragma once

#include <signal.h>

#include <cstdint>
#include <stdexcept>
#include <string>

namespace cg::train {

// Installs SIGINT and SIGTERM handlers that set the stop flag (the previous handlers come
// back when it is destroyed). The flag is cleared when the handlers are installed and
// when they are removed. `saves`: whether the run saves a checkpoint when it stops (false:
// drafter.checkpoint_every -1), which the line said at the signal tells.
class StopSignals {
 public:
  explicit StopSignals(bool saves = true);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

 private:
  struct sigaction old_int_ {
  }, old_term_{};  // what comes back (nesting restores in order)
};

// Whether a signal asked this process to stop.
bool stop_requested();
// The decision every rank takes at a step boundary (Note [Stopping together]).
bool stop_agreed();
// Sets the flag as a signal would (tests; a future rank that learns of the stop otherwise).
void request_stop();

// Thrown after the checkpoint of an interrupted phase is saved (`saved` false: none was,
// drafter.checkpoint_every -1); the programs turn it into the "interrupted" line and exit
// code kExitInterrupted.
class Interrupted : public std::runtime_error {
 public:
  Interrupted(const std::string& phase, int64_t step, bool saved = true);
  // A stop outside a training loop (making the drafter's data, the evaluation), whose
  // message says what was kept and what the same command does next.
  static Interrupted with_message(const std::string& phase, int64_t step,
                                  const std::string& message);
  const std::string& phase() const { return phase_; }
  int64_t step() const { return step_; }

 private:
  struct Message {};
  Interrupted(Message, const std::string& phase, int64_t step, const std::string& message);
  std::string phase_;
  int64_t step_;
};

constexpr int kExitInterrupted = 130;

}  // namespace cg::train
