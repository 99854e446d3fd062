// Every tests/golden/graph/*.graph file is in canonical form: parsing and printing it gives the
// file back, and printing is a fixed point.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "coil/graph/parser.h"
#include "coil/graph/printer.h"
#include "coil/graph/verifier.h"
#include "coil/support/error.h"

namespace coil {
namespace {

std::vector<std::filesystem::path> golden_files() {
  std::vector<std::filesystem::path> out;
  for (const auto& e : std::filesystem::directory_iterator(std::filesystem::path(COIL_SOURCE_DIR) /
                                                           "tests" / "golden" / "graph")) {
    if (e.path().extension() == ".graph") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string read(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(GoldenGraph, EachFileIsItsOwnPrintout) {
  auto files = golden_files();
  ASSERT_GE(files.size(), 8u);
  for (const auto& f : files) {
    SCOPED_TRACE(f.filename().string());
    std::string text = read(f);
    sym::Context ctx;
    std::unique_ptr<Graph> g;
    ASSERT_NO_THROW(g = parse_graph(text, ctx));
    EXPECT_NO_THROW(verify_graph(*g));
    std::string printed = print_graph(*g);
    EXPECT_EQ(printed, text);
    // A second round trip in a fresh context gives the same text.
    sym::Context ctx2;
    auto g2 = parse_graph(printed, ctx2);
    EXPECT_EQ(print_graph(*g2), printed);
  }
}

// Every prefix and every one-character corruption of a valid file either parses or throws
// CompileError (never another exception, never a crash).
TEST(GoldenGraph, DamagedTextFailsCleanly) {
  for (const auto& f : golden_files()) {
    SCOPED_TRACE(f.filename().string());
    std::string text = read(f);
    for (size_t len = 0; len < text.size(); len += 7) {
      sym::Context ctx;
      try {
        parse_graph(std::string_view(text).substr(0, len), ctx);
      } catch (const CompileError&) {
      }
    }
    for (size_t i = 0; i < text.size(); i += 5) {
      for (char c : {'%', '(', ']', ',', 'x', '9', '"', '-'}) {
        std::string bad = text;
        bad[i] = c;
        sym::Context ctx;
        try {
          parse_graph(bad, ctx);
        } catch (const CompileError&) {
        }
      }
    }
  }
}

TEST(GoldenGraph, RenumbersSparseIds) {
  sym::Context ctx;
  auto g = parse_graph(
      "graph(%10: f32[4], %3: f32[4]):\n"
      "  %7: f32[4] = aten.add.Tensor(%10, %3)\n"
      "  return (%7)\n",
      ctx);
  EXPECT_EQ(print_graph(*g),
            "graph(%0: f32[4], %1: f32[4]):\n"
            "  %2: f32[4] = aten.add.Tensor(%0, %1)\n"
            "  return (%2)\n");
}

}  // namespace
}  // namespace coil
