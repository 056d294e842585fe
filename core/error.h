// Why this file exists: every failure in chunkgrad is a C++ exception that names the
// file and line that raised it and says, in a sentence, what the user should change.
// Tests rely on that (EXPECT_THROW on cg::Error); nothing in the framework aborts.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>

namespace cg {

// The one exception type of the framework. what() = "<message> (at file:line)".
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, const char* file, int line)
      : std::runtime_error(message + " (at " + file + ":" + std::to_string(line) + ")"),
        message_(message) {}
  // The message without the location, for tests that compare text.
  const std::string& message() const { return message_; }

 private:
  std::string message_;
};

// Raised by the caching allocator when memory cannot be had even after freeing its cache.
class OutOfMemoryError : public Error {
 public:
  using Error::Error;
};

namespace detail {
template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}
}  // namespace detail

}  // namespace cg

// CG_CHECK(cond, "parts", of, "the message") throws cg::Error when cond is false.
#define CG_CHECK(cond, ...)                                                     \
  do {                                                                          \
    if (!(cond)) {                                                              \
      throw ::cg::Error(::cg::detail::concat(__VA_ARGS__), __FILE__, __LINE__); \
    }                                                                           \
  } while (0)

#define CG_FAIL(...) throw ::cg::Error(::cg::detail::concat(__VA_ARGS__), __FILE__, __LINE__)
