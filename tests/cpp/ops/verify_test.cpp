#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "coil/graph/parser.h"
#include "coil/ops/verify.h"
#include "coil/support/error.h"

namespace coil::ops {
namespace {

std::string verify_error(std::string_view text) {
  sym::Context ctx;
  auto g = parse_graph(text, ctx);
  try {
    verify_graph_meta(*g);
  } catch (const CompileError& e) {
    return e.what();
  }
  return "<ok>";
}

// The hand-written golden graphs agree with the meta functions (each written from PyTorch's
// documented semantics, so this cross-checks both).
TEST(VerifyMeta, GoldenGraphsAreConsistent) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(COIL_SOURCE_DIR) /
                                                           "tests" / "golden" / "graph")) {
    if (e.path().extension() != ".graph") continue;
    SCOPED_TRACE(e.path().filename().string());
    std::ifstream in(e.path());
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(verify_error(ss.str()), "<ok>");
    ++n;
  }
  EXPECT_GE(n, 8);
}

TEST(VerifyMeta, CatchesWrongMetas) {
  // Wrong size.
  std::string err = verify_error(
      "graph(%0: f32[4, 1], %1: f32[3]):\n"
      "  %2: f32[4, 4] = aten.add.Tensor(%0, %1)\n"
      "  return (%2)\n");
  EXPECT_NE(err.find("node 0 (aten.add.Tensor) output 0 is f32[4, 4], its meta function says "
                     "f32[4, 3]"),
            std::string::npos)
      << err;
  // Wrong dtype (int / int is true division).
  err = verify_error("graph(%0: i64[4]):\n  %1: i64[4] = aten.div.Tensor(%0, 2)\n  return (%1)\n");
  EXPECT_NE(err.find("says f32[4]"), std::string::npos) << err;
  // A view with the wrong strides.
  err = verify_error(
      "graph(%0: f32[4, 3]):\n  %1: f32[3, 4] = aten.permute.default(%0, [1, 0])\n  return "
      "(%1)\n");
  EXPECT_NE(err.find("says f32[3, 4]{1, 3}"), std::string::npos) << err;
  // A view with the wrong offset.
  err = verify_error(
      "graph(%0: f32[4, 3]):\n  %1: f32[3] = aten.select.int(%0, 0, 1)\n  return (%1)\n");
  EXPECT_NE(err.find("says f32[3]+3"), std::string::npos) << err;
  // Wrong number of outputs.
  err = verify_error("graph(%0: f32[4, 3]):\n  %1: f32[4] = aten.max.dim(%0, 1)\n  return (%1)\n");
  EXPECT_NE(err.find("has 1 outputs, its op has 2"), std::string::npos) << err;
  // Invalid arguments surface as verification errors.
  err = verify_error(
      "graph(%0: f32[4, 3], %1: f32[4, 3]):\n  %2: f32[4, 3] = aten.mm.default(%0, %1)\n  return "
      "(%2)\n");
  EXPECT_NE(err.find("graph verification failed: node 0 (aten.mm.default)"), std::string::npos)
      << err;
  // Ops without a meta function are accepted as they are (they fall back to eager).
  EXPECT_EQ(verify_error(
                "graph(%0: f32[4]):\n  %1: f32[99] = aten.unknown_op.default(%0)\n  return (%1)\n"),
            "<ok>");
}

// Found by the OpInfo sweep (tools/opinfo_sweep.py): PyTorch gives size-1 dims and empty
// tensors strides that differ from what coil's view meta functions compute; such strides
// address nothing, so they must not fail verification (the graphs fell back to eager).
TEST(VerifyMeta, IgnoresStridesThatAddressNothing) {
  // expand: PyTorch says stride 5 for the new leading size-1 dims, the meta function 0.
  EXPECT_EQ(verify_error("graph(%0: f32[5]):\n"
                         "  %1: f32[1, 1, 5] = aten.expand.default(%0, [1, 1, 5])\n"
                         "  return (%1)\n"),
            "<ok>");
  // view of an empty tensor: any strides.
  EXPECT_EQ(verify_error("graph(%0: f32[0, 3]):\n"
                         "  %1: f32[1, 0, 3]{3, 3, 1} = aten.view.default(%0, [1, 0, 3])\n"
                         "  return (%1)\n"),
            "<ok>");
  // A wrong stride of a dim of size > 1 is still caught.
  std::string err = verify_error(
      "graph(%0: f32[5]):\n  %1: f32[1, 2, 5]{5, 5, 1} = aten.expand.default(%0, [1, 2, 5])\n"
      "  return (%1)\n");
  EXPECT_NE(err.find("its meta function says f32[1, 2, 5]{0, 0, 1}"), std::string::npos) << err;
}

// The moe zoo model's backward: PyTorch gave a view's size-1 dim the stride 1 where the meta
// function computes 16. Strides of size-1 dims address nothing; the view is consistent.
TEST(VerifyMeta, IgnoresStridesOfSizeOneDims) {
  EXPECT_EQ(verify_error("graph(%0: f32[16, 16]):\n"
                         "  %1: f32[16, 1, 16]{16, 1, 1} = aten.view.default(%0, [16, 1, 16])\n"
                         "  return (%1)\n"),
            "<ok>");
  // Size > 1 dims are still checked.
  std::string err = verify_error(
      "graph(%0: f32[16, 16]):\n"
      "  %1: f32[16, 2, 8]{16, 1, 1} = aten.view.default(%0, [16, 2, 8])\n"
      "  return (%1)\n");
  EXPECT_NE(err.find("its meta function says f32[16, 2, 8]"), std::string::npos) << err;
}

// Fuzzer seed 8: PyTorch gives the size-1 dim of a view of a strided slice the slice's stride
// (6 here), the meta function a contiguous one (3). Such strides address nothing and must not
// fail verification; the strides of other dims still must agree.
TEST(VerifyMeta, IgnoresStridesOfSizeOneDimsOfSlices) {
  EXPECT_EQ(verify_error("graph(%0: f32[1, 2, 3]):\n"
                         "  %1: f32[1, 1, 3]{6, 6, 1}+3 = aten.slice.Tensor(%0, 1, 1, 2, 2)\n"
                         "  %2: f32[1, 3]{6, 1}+3 = aten.view.default(%1, [1, 3])\n"
                         "  return (%2)\n"),
            "<ok>");
  std::string err = verify_error(
      "graph(%0: f32[2, 3]):\n  %1: f32[3, 2]{1, 2} = aten.permute.default(%0, [1, 0])\n"
      "  return (%1)\n");
  EXPECT_NE(err.find("says f32[3, 2]{1, 3}"), std::string::npos) << err;
}

}  // namespace
}  // namespace coil::ops
