// Why this file exists: every failure in chunkgrad is a C++ exception that names the
// file and line that raised it and says, in a sentence, what the user should change.
// Tests rely on that (EXPECT_THROW on cg::Error); nothing in the framework aborts.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace cg {

namespace detail {
// Note [Error locations]: errors name the file that raised them relative to the project
// root ("core/views.cpp:88"), not as the build saw it: __FILE__ is whatever path the
// compiler was given, absolute (/home/me/src/chunkgrad/core/views.cpp, which says where
// someone's clone is, not where the bug is) or relative to the build folder
// (../core/views.cpp, when ccache's base_dir rewrites paths). This header lives at
// <root>/core/error.h, so its own __FILE__ minus "core/error.h" is how the root is spelled
// in this build, and that prefix is cut from the raising file's path. Every file of one
// build is compiled with the same spelling of the root; a path that does not start with
// it (a file outside the project) is kept whole.
inline const char* project_relative_path(const char* file) {
  constexpr std::string_view self = __FILE__;
  constexpr std::string_view tail = "core/error.h";
  if (!self.ends_with(tail)) return file;
  const std::string_view root = self.substr(0, self.size() - tail.size());
  if (!root.empty() && std::string_view(file).starts_with(root)) return file + root.size();
  return file;
}
}  // namespace detail

// The one exception type of the framework. what() = "<message> (at file:line)", the file
// relative to the project root (Note [Error locations]).
class Error : public std::runtime_error {
 public:
  Error(const std::string& message, const char* file, int line)
      : std::runtime_error(message + " (at " + detail::project_relative_path(file) + ":" +
                           std::to_string(line) + ")"),
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
#define CG_CHECK(cond, ...)                                                                    \
  do {                                                                                         \
    if (!(cond)) { throw ::cg::Error(::cg::detail::concat(__VA_ARGS__), __FILE__, __LINE__); } \
  } while (0)

#define CG_FAIL(...) throw ::cg::Error(::cg::detail::concat(__VA_ARGS__), __FILE__, __LINE__)
