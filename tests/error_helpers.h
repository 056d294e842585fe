// Why this file exists: every test of bad input checks the same two things -- that a
// cg::Error is thrown, and that its message says what a user needs -- so the helpers
// for that live here once.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "core/error.h"

namespace cg::testing {

// The message of the cg::Error `f` throws ("" when it does not throw).
template <typename F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) { return e.message(); }
  return "";
}

}  // namespace cg::testing

// EXPECT_THROW(expr, cg::Error), then checks that the message contains each word.
#define EXPECT_ERROR_HAS(expr, ...)                                                         \
  do {                                                                                      \
    EXPECT_THROW((void)(expr), ::cg::Error);                                                \
    const std::string msg_ = ::cg::testing::error_of([&] { (void)(expr); });                \
    for (const char* word : {__VA_ARGS__}) {                                                \
      EXPECT_NE(msg_.find(word), std::string::npos) << "'" << word << "' not in: " << msg_; \
    }                                                                                       \
  } while (0)
