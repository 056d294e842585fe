// Why this file exists: an error deep in a run -- the allocator's out-of-memory above all --
// says what failed but not where in the run: an outside tester's run trained its 30 steps,
// then ran out of memory in the evaluation, and the one line named neither. A stage that
// knows where it is catches, says so first, and rethrows:
//
//   try { ... step ... } catch (const Error&) { rethrow_with_context("at drafter step 21: "); }
//
// giving "chunkgrad train: error: at drafter step 21: out of memory ...". The error keeps its
// type (OutOfMemoryError, dist::EveryRankError) and its "(at file:line)".
#pragma once

#include <string>

namespace cg::train {

// Inside a catch of a cg::Error: throws it again with `context` before its message.
[[noreturn]] void rethrow_with_context(const std::string& context);

}  // namespace cg::train
