// Why this file exists: content hashes of bytes (XXH3-128 from xxHash, libxxhash-dev),
// for what must be recognised by its bytes rather than its path -- a run's corpus and
// target (train/fingerprint.h), and each tensor of a safetensors file chunkgrad writes,
// so that a bit that flipped on disk is found when the tensor is read back (Note [Tensor
// checksums], nn/safetensors.h). XXH3 hashes tens of GB/s a core, and 128 bits make an
// accidental match out of the question; it is not a defence against a forged collision.
#pragma once

#include <cstddef>
#include <memory>
#include <string>
#include <string_view>

namespace cg {

// XXH3-128 of the bytes, as 32 lowercase hex digits.
std::string content_hash(std::string_view bytes);
std::string content_hash(const void* data, size_t bytes);
// XXH3-128 of a file's bytes, read in pieces; throws cg::Error naming `what` and the path.
std::string file_content_hash(const std::string& path, const std::string& what);

// The same hash over bytes handed in pieces: update(a); update(b) hashes a then b.
class ContentHasher {
 public:
  ContentHasher();
  ~ContentHasher();
  ContentHasher(const ContentHasher&) = delete;
  ContentHasher& operator=(const ContentHasher&) = delete;
  void update(const void* data, size_t bytes);
  std::string hex() const;  // of everything updated so far

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace cg
