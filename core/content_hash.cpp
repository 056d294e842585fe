// Why this file exists: the content hashes of content_hash.h, over xxHash's XXH3-128.
#include "core/content_hash.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <vector>

#include <xxhash.h>

#include "core/error.h"

namespace cg {

namespace {
std::string hex_of(const XXH128_hash_t& h) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return buf;
}
}  // namespace

std::string content_hash(const void* data, size_t bytes) {
  return hex_of(XXH3_128bits(data, bytes));
}

std::string content_hash(std::string_view bytes) {
  return content_hash(bytes.data(), bytes.size());
}

struct ContentHasher::State {
  XXH3_state_t* xxh = nullptr;
  ~State() { XXH3_freeState(xxh); }
};

ContentHasher::ContentHasher() : state_(std::make_unique<State>()) {
  state_->xxh = XXH3_createState();
  CG_CHECK(state_->xxh != nullptr && XXH3_128bits_reset(state_->xxh) == XXH_OK,
           "cannot start a content hash");
}

ContentHasher::~ContentHasher() = default;

void ContentHasher::update(const void* data, size_t bytes) {
  if (bytes > 0) XXH3_128bits_update(state_->xxh, data, bytes);
}

std::string ContentHasher::hex() const { return hex_of(XXH3_128bits_digest(state_->xxh)); }

std::string file_content_hash(const std::string& path, const std::string& what) {
  errno = 0;
  std::ifstream in(path, std::ios::binary);
  const int err = errno;
  CG_CHECK(in.is_open(), what, ": cannot read ", path,
           err ? std::string(": ") + std::strerror(err) : std::string());
  ContentHasher hasher;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    hasher.update(buf.data(), static_cast<size_t>(in.gcount()));
  }
  CG_CHECK(in.eof(), what, ": reading ", path, " failed");
  return hasher.hex();
}

}  // namespace cg
