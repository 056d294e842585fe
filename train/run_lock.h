// Why this file exists: two `chunkgrad train` on one run directory both "succeeded" while
// each replaced the other's metrics log, checkpoints and summary. A run holds the lock of
// its run directory from start to end; a second run on the same directory is refused with
// the holder's PID:
//
//   RunLock lock(config.run_dir);   // throws when another live process holds it
//
// Note [One lock per run]: the lock is the run's, not a process's: with several ranks of
// one data-parallel run, rank 0 takes it before any rank writes, and the other ranks,
// which write nothing of their own to the run directory, do not. The lock is an advisory
// flock() on run_dir/.lock, which holds the PID as text for the refusal. The kernel drops
// a flock when its process dies however it dies, so a lock left by a killed run is stale
// by construction and the next run takes it over (and says so).
#pragma once

#include <string>

namespace cg::train {

class RunLock {
 public:
  // Takes the lock of `run_dir` (which must exist). Throws cg::Error naming the PID of the
  // live process that holds it.
  explicit RunLock(const std::string& run_dir);
  ~RunLock();
  RunLock(const RunLock&) = delete;
  RunLock& operator=(const RunLock&) = delete;

  const std::string& path() const { return path_; }
  // The PID a holder that died left in the lock file (taken over), or 0.
  long stale_pid() const { return stale_pid_; }

 private:
  std::string path_;
  int fd_ = -1;
  long stale_pid_ = 0;
};

}  // namespace cg::train
