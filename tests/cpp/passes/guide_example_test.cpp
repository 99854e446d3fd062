// The example pass of docs/extending/write-a-pass.md, compiled and run as the guide shows it
// (registered in a registry of the test's own, run as "noop_views,dce"). The code between the
// "--- the guide's code" markers must be the guide's first ```cpp block (checked below).
#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "coil/graph/parser.h"
#include "coil/graph/printer.h"
#include "coil/passes/pass.h"

namespace coil::passes {
namespace {

// --- the guide's code, step 2
sym::Expr offset_of(const TensorMeta& m) {  // nullptr and 0 both mean "no offset"
  sym::Expr e = m.storage_offset;
  return e != nullptr && e->is_const() && e->value == 0 ? nullptr : e;
}

bool same_meta(const TensorMeta& a, const TensorMeta& b) {
  return a.dtype == b.dtype && a.device == b.device && a.sizes == b.sizes &&
         a.strides == b.strides && offset_of(a) == offset_of(b);
}

class NoopViewsPass final : public Pass {
 public:
  std::string_view name() const override { return "noop_views"; }
  bool run(Graph& g, const CompileOptions& options) override {
    bool changed = false;
    for (Node* n : g.nodes()) {
      if (n->op() != "aten.view.default") continue;
      Value* in = n->args().at(0).value();
      Value* out = n->output();
      if (!same_meta(in->meta(), out->meta())) continue;
      // What the graph returns stays as it is (replace_all_uses would change it too).
      const auto& outs = g.outputs();
      if (std::find(outs.begin(), outs.end(), out) != outs.end()) continue;
      if (out->users().empty()) continue;  // nothing to rewrite: dce's business
      g.replace_all_uses(out, in);         // the view is dead now; dce removes it
      changed = true;
    }
    return changed;
  }
};
// --- end of the guide's code

TEST(WriteAPassGuide, NoopViews) {
  PassRegistry registry = builtin_passes();
  registry.add("noop_views", "forward views that change nothing to their input",
               [] { return std::make_unique<NoopViewsPass>(); });
  sym::Context ctx;
  auto g = parse_graph(R"(graph(%0: f32[4, 8]):
  %1: f32[4, 8] = aten.view.default(%0, [4, 8])
  %2: f32[32] = aten.view.default(%1, [32])
  %3: f32[4, 8] = aten.view.default(%0, [4, -1])
  %4: f32[4, 8] = aten.exp.default(%1)
  return (%2, %3, %4)
)",
                       ctx);
  PipelineOptions po;
  po.verify_each = true;
  std::vector<std::string> changed =
      Pipeline::parse("noop_views,dce", registry).run(*g, CompileOptions{}, po);
  EXPECT_EQ(changed, (std::vector<std::string>{"noop_views", "dce"}));
  EXPECT_EQ(print_graph(*g), R"(graph(%0: f32[4, 8]):
  %1: f32[32] = aten.view.default(%0, [32])
  %2: f32[4, 8] = aten.view.default(%0, [4, -1])
  %3: f32[4, 8] = aten.exp.default(%0)
  return (%1, %2, %3)
)");
}

std::string read(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST(WriteAPassGuide, GuideShowsThisCode) {
  const std::string src = std::string(COIL_SOURCE_DIR);
  const std::string test = read(src + "/tests/cpp/passes/guide_example_test.cpp");
  const std::string begin = "// --- the guide's code, step 2\n";
  const std::string end = "// --- end of the guide's code\n";
  const size_t b = test.find(begin) + begin.size();
  const std::string code = test.substr(b, test.find(end) - b);
  const std::string guide = read(src + "/docs/extending/write-a-pass.md");
  const size_t g = guide.find("```cpp\n");
  ASSERT_NE(g, std::string::npos) << "the guide has no ```cpp block";
  const size_t body = g + 7;
  EXPECT_EQ(guide.substr(body, guide.find("```\n", body) - body), code)
      << "docs/extending/write-a-pass.md's first ```cpp block differs from this test's code";
}

}  // namespace
}  // namespace coil::passes
