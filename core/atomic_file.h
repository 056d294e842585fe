// Why this file exists: every file chunkgrad writes for the user -- a checkpoint, the
// target cache, summary.json, a trace, a report -- must be either the old file or the
// complete new one, never a truncated mix: a failed or interrupted run must not destroy
// what an earlier run left. One mechanism, used by every writer:
//
//   AtomicFile out(path, "the summary");   // makes <path>.tmp now: an unwritable folder fails here
//   ... the work ...                       // the target is untouched
//   out.write(text);
//   out.commit();                          // flush, fsync, rename over <path>
//
// An AtomicFile that is destroyed without commit() (an exception on the way) removes its
// temporary, and so does a failed write or commit: a full disk leaves no half file behind
// for the retry to trip on. The temporary is always <path>.tmp (one suffix, never two; the
// run lock of train/run_lock.h keeps two runs from sharing it).
//
// Note [Outputs that are not files]: a path that is a device, a pipe or a socket
// (/dev/null, /dev/stdout, >(...)) is written straight through, without a temporary: a
// rename would put a regular file in the device's place (an outside tester's `--html
// /dev/null`, run as root, replaced /dev/null). A symlink to a regular file has its
// target replaced, through <target>.tmp, and stays a symlink.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace cg {

class AtomicFile {
 public:
  // Creates <path>.tmp for writing (truncating a leftover one). Throws cg::Error naming
  // `what`, the path and the system's reason when it cannot; the target is not touched.
  AtomicFile(std::string path, std::string what);
  ~AtomicFile();
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;

  // Appends bytes; throws (and removes the temporary) when the write fails.
  void write(const void* data, size_t bytes);
  void write(std::string_view text) { write(text.data(), text.size()); }
  // Whether the start can be written again: a regular file (through its temporary), not a
  // device or a pipe (Note [Outputs that are not files]).
  bool can_rewrite_start() const { return !direct_; }
  // Writes `bytes` over the first bytes.size() bytes already written (a header that is
  // known only once the data after it is: Note [Tensor checksums], nn/safetensors.h).
  void rewrite_start(std::string_view bytes);
  // Flushes to disk and renames the temporary over the target; throws (and removes the
  // temporary) when that fails. Nothing may be written after it.
  void commit();

  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_; }

 private:
  void discard() noexcept;  // closes and removes the temporary
  void write_all(const char* p, size_t bytes, int64_t at);
  std::string path_, temp_, what_;
  std::string target_;   // the file renamed over: path_, or a symlink's regular target
  bool direct_ = false;  // written straight through (Note [Outputs that are not files])
  int fd_ = -1;
};

// The whole of `content` into `path`, atomically (AtomicFile).
void write_file_atomically(const std::string& path, std::string_view content,
                           const std::string& what);

// Throws cg::Error naming `what` and the reason when `dir` is not a folder in which new
// files can be made (a probe file is created and removed; nothing else is touched).
void check_writable_dir(const std::string& dir, const std::string& what);

}  // namespace cg
