// Why this file exists: the run directory's lock (run_lock.h).
#include "train/run_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "core/error.h"

namespace cg::train {

namespace {

long pid_in(int fd) {
  char buf[32] = {};
  const ssize_t n = ::pread(fd, buf, sizeof buf - 1, 0);
  if (n <= 0) return 0;
  return std::strtol(buf, nullptr, 10);
}

}  // namespace

RunLock::RunLock(const std::string& run_dir) : path_(run_dir + "/.lock") {
  // Note: the file is removed on release, so between open() and flock() another run may
  // have released and removed it: a lock on a file that is no longer at path_ locks
  // nothing, and the loop opens the path again.
  for (int attempt = 0; attempt < 16; ++attempt) {
    const int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    const int err = errno;
    CG_CHECK(fd >= 0, "run_dir: cannot create the lock file ", path_, ": ", std::strerror(err),
             ". Give a writable run directory.");
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int lock_err = errno;
      const long holder = pid_in(fd);
      ::close(fd);
      CG_CHECK(lock_err == EWOULDBLOCK, "run_dir: cannot lock ", path_, ": ",
               std::strerror(lock_err));
      CG_FAIL("run_dir ", run_dir, " is in use by another chunkgrad train (pid ",
              holder > 0 ? std::to_string(holder) : std::string("unknown"),
              "); wait for it to finish, stop it, or give another --run-dir");
    }
    struct stat held {
    }, now{};
    if (::fstat(fd, &held) != 0 || ::stat(path_.c_str(), &now) != 0 || held.st_ino != now.st_ino ||
        held.st_dev != now.st_dev) {
      ::close(fd);
      continue;
    }
    // A PID left in the file belongs to a run that died holding the lock (a run that ends
    // normally removes the file): taken over.
    const long old = pid_in(fd);
    stale_pid_ = old != static_cast<long>(::getpid()) ? old : 0;
    const std::string pid = std::to_string(::getpid()) + "\n";
    if (::ftruncate(fd, 0) != 0 ||
        ::pwrite(fd, pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size())) {
      const int write_err = errno;
      ::close(fd);
      CG_FAIL("run_dir: cannot write the lock file ", path_, ": ", std::strerror(write_err));
    }
    fd_ = fd;
    return;
  }
  CG_FAIL("run_dir: the lock file ", path_, " keeps being replaced by other runs; try again");
}

RunLock::~RunLock() {
  if (fd_ < 0) return;
  ::unlink(path_.c_str());  // while still held: no other run can have it now
  ::close(fd_);
}

}  // namespace cg::train
