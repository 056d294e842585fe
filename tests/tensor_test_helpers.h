// Why this file exists: the tensor/dtype/views/factories tests check not only THAT a bad
// call throws cg::Error but that its message names what the user got wrong. The check is
// the shared one (error_helpers.h); this name stays for the tests written with it.
#pragma once

#include "error_helpers.h"

// EXPECT_THROW(stmt, cg::Error), then checks the message contains each of the words.
#define TENSOR_EXPECT_ERROR(stmt, ...) EXPECT_ERROR_HAS(stmt, __VA_ARGS__)
