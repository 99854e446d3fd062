// Every tests/golden/passes/<case>.graph names its passes on its first line ("# passes: cse")
// and holds the input graph; the pipeline's printout (what coil-opt prints: the graph after
// each pass that changed it, under "# after <pass>", or the graph as it was when none did)
// must be <case>.out. COIL_UPDATE_GOLDEN=1 rewrites the .out files. The ctest coil_opt.passes
// runs the coil-opt binary on the same files.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "coil/graph/parser.h"
#include "coil/graph/printer.h"
#include "coil/graph/verifier.h"
#include "coil/passes/pass.h"

namespace coil::passes {
namespace {

namespace fs = std::filesystem;

fs::path golden_dir() { return fs::path(COIL_SOURCE_DIR) / "tests" / "golden" / "passes"; }

std::vector<fs::path> cases() {
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(golden_dir())) {
    if (e.path().extension() == ".graph") out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

std::string read(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string passes_line(const std::string& text) {
  const std::string prefix = "# passes:";
  EXPECT_EQ(text.rfind(prefix, 0), 0u) << "the first line must be '# passes: a,b'";
  return text.substr(prefix.size(), text.find('\n') - prefix.size());
}

// Compares with `path` (COIL_UPDATE_GOLDEN=1 rewrites it).
void expect_golden(const fs::path& path, const std::string& text) {
  if (std::getenv("COIL_UPDATE_GOLDEN")) {
    std::ofstream(path, std::ios::binary) << text;
    return;
  }
  std::ifstream in(path, std::ios::binary);
  ASSERT_TRUE(in.good()) << "missing golden " << path << "; run with COIL_UPDATE_GOLDEN=1";
  EXPECT_EQ(read(path), text) << "golden " << path;
}

TEST(PassGolden, EachCase) {
  const auto files = cases();
  ASSERT_GE(files.size(), 8u);
  const PassRegistry registry = builtin_passes();
  for (const fs::path& f : files) {
    SCOPED_TRACE(f.filename().string());
    const std::string text = read(f);
    const Pipeline pipeline = Pipeline::parse(passes_line(text), registry);
    ASSERT_FALSE(pipeline.empty());
    sym::Context ctx;
    auto g = parse_graph(text, ctx);
    std::string printed;
    PipelineOptions po;
    po.verify_each = true;
    po.after_pass = [&](const Pass& p, bool changed, const Graph& graph) {
      if (changed) printed += "# after " + std::string(p.name()) + "\n" + print_graph(graph);
    };
    pipeline.run(*g, CompileOptions{}, po);
    if (printed.empty()) printed = print_graph(*g);
    fs::path out = f;
    out.replace_extension(".out");
    expect_golden(out, printed);

    // The result is canonical text, and the passes are idempotent: a second run finds nothing.
    const std::string final_text = print_graph(*g);
    sym::Context ctx2;
    auto g2 = parse_graph(final_text, ctx2);
    EXPECT_EQ(print_graph(*g2), final_text);
    EXPECT_TRUE(pipeline.run(*g2, CompileOptions{}, po).empty()) << "not idempotent";
  }
}

}  // namespace
}  // namespace coil::passes
