// Why this file exists: the tensor/dtype/views/factories tests check not only THAT a bad
// call throws cg::Error but that its message names what the user got wrong.
#pragma once

#include <gtest/gtest.h>

#include <initializer_list>
#include <string>

#include "core/error.h"

namespace cg::testing_tensor {

// Runs f, which must throw cg::Error whose message contains every word.
template <typename F>
void expect_error_mentions(F&& f, std::initializer_list<const char*> words, const char* expr) {
  try {
    f();
  } catch (const cg::Error& e) {
    for (const char* word : words) {
      EXPECT_NE(e.message().find(word), std::string::npos)
          << expr << "\n  message: " << e.message() << "\n  lacks: '" << word << "'";
    }
    return;
  }
}

}  // namespace cg::testing_tensor

// EXPECT_THROW(stmt, cg::Error), then checks the message contains each of the words.
#define TENSOR_EXPECT_ERROR(stmt, ...)                                                  \
  do {                                                                                  \
    EXPECT_THROW(stmt, ::cg::Error);                                                    \
    ::cg::testing_tensor::expect_error_mentions([&] { stmt; }, {__VA_ARGS__}, #stmt); \
  } while (0)
