// Error messages name source files from the repository's src/ or include/ on, whatever the
// build directory or machine the library was built in.
#include <gtest/gtest.h>

#include <string>

#include "coil/support/error.h"

namespace coil::testing {
namespace {

TEST(Error, SourcePathsAreRelativeToTheRepository) {
  EXPECT_STREQ(detail::source_relative("/abs/checkout/src/lower/view.cpp"), "src/lower/view.cpp");
  EXPECT_STREQ(detail::source_relative("../../src/lower/view.cpp"), "src/lower/view.cpp");
  EXPECT_STREQ(detail::source_relative("/x/include/coil/support/error.h"),
               "include/coil/support/error.h");
  // "src/" only as a whole path component; other paths are left as they are.
  EXPECT_STREQ(detail::source_relative("/home/mysrc/tools/x.cpp"), "/home/mysrc/tools/x.cpp");
  EXPECT_STREQ(detail::source_relative("x.cpp"), "x.cpp");
}

TEST(Error, CheckMessagesStartWithTheRelativeFile) {
  try {
    ::coil::detail::ErrorStream<CompileError>("/abs/checkout/src/ops/view.cpp", 12, nullptr)
        << "view size is not compatible";
    FAIL() << "no exception";
  } catch (const CompileError& e) {
    EXPECT_EQ(std::string(e.what()), "src/ops/view.cpp:12: view size is not compatible");
  }
}

}  // namespace
}  // namespace coil::testing
