// Why this file exists: a run that does not fit its memory limit ends on one line that
// names what held the memory (issue 19): the forward's blocks as activations, the batch as
// input, the weights and optimizer state as such, none of it "unknown".
#include <string>

#include <gtest/gtest.h>

#include "tests/train_program_fixture.h"

namespace {

using train_program_fixture::TrainProgram;
using train_program_fixture::TrainRun;

// The default toy run under 82 MiB runs out in the target's first step.
TEST_F(TrainProgram, OutOfMemoryNamesTheActivationsThatHeldIt) {
  const TrainRun r =
      train("--set run_dir=" + path("run") + " --set progress=false --memory-limit-mb 82");
  expect_error(r, "at target step 1: out of memory");
  EXPECT_NE(r.err.find("Held: activation "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("optimizer_state "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("parameter "), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("input "), std::string::npos) << r.err;
  EXPECT_EQ(r.err.find("unknown ", r.err.find("Held: ")), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("layers.*/mlp"), std::string::npos) << r.err;
}

}  // namespace
