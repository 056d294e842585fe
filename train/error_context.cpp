// Why this file exists: an error rethrown with where it happened said first (error_context.h).
#include "train/error_context.h"

#include <algorithm>
#include <cstdlib>

#include "core/error.h"
#include "dist/communicator.h"

namespace cg::train {

namespace {

// The same error, `context` first, its location kept: what() ends in " (at FILE:LINE)",
// and FILE is already relative to the project (Note [Error locations], core/error.h).
template <typename E>
[[noreturn]] void rethrow_as(const E& e, const std::string& context) {
  const std::string what = e.what();
  const std::string tail = what.substr(std::min(what.size(), e.message().size()));
  const size_t colon = tail.rfind(':');
  if (tail.starts_with(" (at ") && tail.ends_with(")") && colon != std::string::npos) {
    const std::string file = tail.substr(5, colon - 5);
    const int line = std::atoi(tail.substr(colon + 1).c_str());
    throw E(context + e.message(), file.c_str(), line);
  }
  throw E(context + e.message(), __FILE__, __LINE__);
}

}  // namespace

void rethrow_with_context(const std::string& context) {
  try {
    throw;
  } catch (const OutOfMemoryError& e) {
    rethrow_as(e, context);
  } catch (const dist::EveryRankError& e) { rethrow_as(e, context); } catch (const Error& e) {
    rethrow_as(e, context);
  }
}

}  // namespace cg::train
