#include "coil/support/options.h"

#include <gtest/gtest.h>

#include "coil/support/error.h"

namespace coil {
namespace {

TEST(CompileOptions, CacheKeyChangesWithCodeAffectingFields) {
  CompileOptions a;
  CompileOptions b;
  EXPECT_EQ(a.cache_key(), b.cache_key());
  b.cxx_flags = "-O2";
  EXPECT_NE(a.cache_key(), b.cache_key());
  CompileOptions c;
  c.debug_dir = "/tmp/x";  // debug output never changes the code
  EXPECT_EQ(a.cache_key(), c.cache_key());
}

TEST(Errors, MacrosThrowTheRightType) {
  EXPECT_THROW({ COIL_USER_CHECK(1 == 2) << "bad input"; }, CompileError);
  EXPECT_THROW({ COIL_CHECK(1 == 2) << "bug"; }, InternalError);
  EXPECT_NO_THROW({ COIL_CHECK(1 == 1) << "fine"; });
  try {
    COIL_USER_CHECK(false) << "unsupported dtype " << 7;
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported dtype 7"), std::string::npos);
  }
}

}  // namespace
}  // namespace coil
