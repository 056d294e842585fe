// Why this file exists: an error's "(at file:line)" is for debugging chunkgrad, so it must
// name the file in the project ("core/views.cpp:88"), not the path the build happened to
// use (the absolute path of someone's clone, or ../core/... relative to the build folder).
#include <gtest/gtest.h>

#include <string>

#include "core/error.h"
#include "core/factories.h"

namespace cg {
namespace {

std::string what_of_empty_with_negative_size() {
  try {
    (void)empty({-5, 3});
  } catch (const Error& e) { return e.what(); }
  return "";
}

TEST(ErrorLocation, LibraryErrorsNameTheFileRelativeToTheProject) {
  const std::string what = what_of_empty_with_negative_size();
  ASSERT_FALSE(what.empty()) << "empty({-5, 3}) did not throw";
  EXPECT_NE(what.find("(at core/"), std::string::npos) << what;
  EXPECT_EQ(what.find("(at /"), std::string::npos) << what;
  EXPECT_EQ(what.find("(at ../"), std::string::npos) << what;
}

TEST(ErrorLocation, ErrorsRaisedInTestsToo) {
  try {
    CG_FAIL("boom");
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("(at tests/error_location_test.cpp:"), std::string::npos) << what;
    EXPECT_EQ(e.message(), "boom");
  }
}

TEST(ErrorLocation, PathsOutsideTheProjectAreKeptWhole) {
  EXPECT_STREQ(detail::project_relative_path("/usr/include/foo.h"), "/usr/include/foo.h");
  EXPECT_STREQ(detail::project_relative_path("core/views.cpp"), "core/views.cpp");
}

}  // namespace
}  // namespace cg
