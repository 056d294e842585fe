// Why this file exists: writing files whole or not at all (atomic_file.h).
#include "core/atomic_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "core/error.h"

namespace cg {

namespace {
std::string reason(int err) {
  return err ? std::string(std::strerror(err)) : std::string("unknown reason");
}
}  // namespace

AtomicFile::AtomicFile(std::string path, std::string what)
    : path_(std::move(path)), temp_(path_ + ".tmp"), what_(std::move(what)), target_(path_) {
  namespace fs = std::filesystem;
  CG_CHECK(!fs::is_directory(path_), what_, ": ", path_, " is a directory; give a file path");
  std::error_code ec;
  const fs::file_status status = fs::status(path_, ec);
  if (!ec && fs::exists(status) && !fs::is_regular_file(status)) {
    // Note [Outputs that are not files]: no temporary, no rename.
    direct_ = true;
    temp_.clear();
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CLOEXEC);
    const int err = errno;
    CG_CHECK(fd_ >= 0, what_, ": cannot open ", path_, " for writing: ", reason(err));
    return;
  }
  if (!ec && fs::is_regular_file(status) && fs::is_symlink(fs::symlink_status(path_, ec))) {
    const fs::path real = fs::canonical(path_, ec);
    if (!ec) {
      target_ = real.string();
      temp_ = target_ + ".tmp";
    }
  }
  fd_ = ::open(temp_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err = errno;
  CG_CHECK(fd_ >= 0, what_, ": cannot open ", path_, " for writing (through ", temp_,
           ", renamed when complete): ", reason(err), ". Give a path in a writable directory.");
}

AtomicFile::~AtomicFile() { discard(); }

void AtomicFile::discard() noexcept {
  if (fd_ < 0) return;
  ::close(fd_);
  fd_ = -1;
  if (!direct_) ::unlink(temp_.c_str());
}

// All of `bytes` at the end (`at` < 0) or at byte `at`; a failure discards the temporary.
void AtomicFile::write_all(const char* p, size_t bytes, int64_t at) {
  CG_CHECK(fd_ >= 0, what_, ": ", path_, " was already written (AtomicFile::commit came first)");
  while (bytes > 0) {
    const ssize_t n =
        at < 0 ? ::write(fd_, p, bytes) : ::pwrite(fd_, p, bytes, static_cast<off_t>(at));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = n < 0 ? errno : ENOSPC;
      discard();
      CG_FAIL(what_, ": writing ", path_, " failed: ", reason(err),
              " (the old file, if any, is kept)");
    }
    p += n;
    bytes -= static_cast<size_t>(n);
    if (at >= 0) at += n;
  }
}

void AtomicFile::write(const void* data, size_t bytes) {
  write_all(static_cast<const char*>(data), bytes, -1);
}

void AtomicFile::rewrite_start(std::string_view bytes) {
  CG_CHECK(!direct_, what_, ": ", path_, " is a device or a pipe; its start cannot be rewritten");
  write_all(bytes.data(), bytes.size(), 0);
}

void AtomicFile::commit() {
  CG_CHECK(fd_ >= 0, what_, ": ", path_, " was already written (AtomicFile::commit twice)");
  if (direct_) {  // a device or pipe: nothing to sync or rename
    const int fd = fd_;
    fd_ = -1;
    CG_CHECK(::close(fd) == 0 || errno == EINTR, what_, ": writing ", path_,
             " failed: ", reason(errno));
    return;
  }
  if (::fsync(fd_) != 0 && errno != EINVAL) {
    const int err = errno;
    discard();
    CG_FAIL(what_, ": writing ", path_, " failed: ", reason(err),
            " (the old file, if any, is kept)");
  }
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {
    const int err = errno;
    ::unlink(temp_.c_str());
    CG_FAIL(what_, ": writing ", path_, " failed: ", reason(err),
            " (the old file, if any, is kept)");
  }
  if (std::rename(temp_.c_str(), target_.c_str()) != 0) {
    const int err = errno;
    ::unlink(temp_.c_str());
    CG_FAIL(what_, ": cannot rename ", temp_, " to ", target_, ": ", reason(err));
  }
  // The rename itself is durable once the folder is synced; best effort (some file
  // systems refuse fsync on a directory).
  const std::string dir = std::filesystem::path(target_).parent_path().string();
  const int dfd = ::open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

void write_file_atomically(const std::string& path, std::string_view content,
                           const std::string& what) {
  AtomicFile out(path, what);
  out.write(content);
  out.commit();
}

void check_writable_dir(const std::string& dir, const std::string& what) {
  CG_CHECK(std::filesystem::is_directory(dir), what, ": ", dir, " is not a directory");
  const std::string probe = (std::filesystem::path(dir) / ".chunkgrad_write_probe").string();
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const int err = errno;
  CG_CHECK(fd >= 0, what, ": cannot create files in ", dir, ": ", reason(err),
           ". Make it writable or give another directory.");
  ::close(fd);
  ::unlink(probe.c_str());
}

}  // namespace cg
