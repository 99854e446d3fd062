// The pass layer: registry, pipeline (parsing, verification naming the pass, the after-pass
// hook), node positions across passes, and the op rules dce and cse share.
#include <gtest/gtest.h>

#include "coil/graph/parser.h"
#include "coil/graph/printer.h"
#include "coil/passes/cse.h"
#include "coil/passes/dce.h"
#include "coil/passes/op_effects.h"
#include "coil/passes/pass.h"
#include "coil/support/error.h"

namespace coil::passes {
namespace {

std::vector<std::string> names(const Pipeline& p) {
  std::vector<std::string> out;
  for (const auto& pass : p.passes()) out.emplace_back(pass->name());
  return out;
}

TEST(PassRegistry, Builtins) {
  PassRegistry r = builtin_passes();
  ASSERT_EQ(r.entries().size(), 2u);
  EXPECT_EQ(r.entries()[0].name, "dce");
  EXPECT_EQ(r.entries()[1].name, "cse");
  EXPECT_TRUE(r.contains("cse"));
  EXPECT_EQ(r.create("cse")->name(), "cse");
  EXPECT_EQ(r.create("nope"), nullptr);
  EXPECT_THROW(r.add("cse", "again", make_cse_pass), InternalError);
  EXPECT_THROW(r.add("a,b", "bad name", make_cse_pass), InternalError);
  // A factory must make the pass it is registered as.
  r.add("other", "", make_dce_pass);
  EXPECT_THROW(r.create("other"), InternalError);
}

TEST(Pipeline, Parse) {
  PassRegistry r = builtin_passes();
  EXPECT_EQ(names(Pipeline::parse(" dce , cse,,dce ", r)),
            (std::vector<std::string>{"dce", "cse", "dce"}));
  EXPECT_TRUE(Pipeline::parse("", r).empty());
  EXPECT_TRUE(Pipeline::parse(" , ", r).empty());
  try {
    Pipeline::parse("dce,fold", r);
    FAIL() << "expected CompileError";
  } catch (const CompileError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown pass 'fold' (known: dce, cse)"),
              std::string::npos)
        << e.what();
  }
}

TEST(Pipeline, FromOptions) {
  CompileOptions o;
  EXPECT_EQ(names(build_pipeline(o)), (std::vector<std::string>{"dce", "cse"}));
  o.passes = "cse";
  EXPECT_EQ(names(build_pipeline(o)), (std::vector<std::string>{"cse"}));
  o.passes = "";
  EXPECT_TRUE(build_pipeline(o).empty());
  EXPECT_NE(CompileOptions{}.cache_key().find("passes=dce,cse;"), std::string::npos);
}

constexpr const char* kGraph = R"(graph(%0: f32[4]):
  %1: f32[4] = aten.exp.default(%0)
  %2: f32[4] = aten.exp.default(%0)
  %3: f32[4] = aten.neg.default(%0)
  %4: f32[4] = aten.add.Tensor(%1, %2)
  return (%4)
)";

TEST(Pipeline, ReportsChangesAndCallsTheHook) {
  sym::Context ctx;
  auto g = parse_graph(kGraph, ctx);
  Pipeline p = Pipeline::parse("cse,dce,cse", builtin_passes());
  std::vector<std::pair<std::string, bool>> seen;
  PipelineOptions po;
  po.verify_each = true;
  po.after_pass = [&](const Pass& pass, bool changed, const Graph&) {
    seen.emplace_back(pass.name(), changed);
  };
  EXPECT_EQ(p.run(*g, CompileOptions{}, po), (std::vector<std::string>{"cse", "dce"}));
  EXPECT_EQ(seen, (std::vector<std::pair<std::string, bool>>{
                      {"cse", true}, {"dce", true}, {"cse", false}}));
  EXPECT_EQ(print_graph(*g), R"(graph(%0: f32[4]):
  %1: f32[4] = aten.exp.default(%0)
  %2: f32[4] = aten.add.Tensor(%1, %1)
  return (%2)
)");
}

// A pass that leaves a graph output that is not defined in the graph.
class BreakOutputs final : public Pass {
 public:
  explicit BreakOutputs(Value* foreign) : foreign_(foreign) {}
  std::string_view name() const override { return "break"; }
  bool run(Graph& g, const CompileOptions&) override {
    g.set_outputs({foreign_});
    return true;
  }

 private:
  Value* foreign_;
};

TEST(Pipeline, VerifyNamesThePass) {
  sym::Context ctx;
  auto other = parse_graph("graph(%0: f32[2]):\n  return (%0)\n", ctx);
  auto make = [&] {
    Pipeline p = Pipeline::parse("cse", builtin_passes());
    p.add(std::make_unique<BreakOutputs>(other->inputs()[0]));
    return p;
  };
  {
    auto g = parse_graph(kGraph, ctx);
    PipelineOptions po;
    po.verify_each = true;
    try {
      make().run(*g, CompileOptions{}, po);
      FAIL() << "expected InternalError";
    } catch (const InternalError& e) {
      EXPECT_NE(std::string(e.what()).find("after pass 'break': graph verification failed"),
                std::string::npos)
          << e.what();
    }
  }
  {  // Without verification nothing notices.
    auto g = parse_graph(kGraph, ctx);
    PipelineOptions po;
    po.verify_each = false;
    EXPECT_NO_THROW(make().run(*g, CompileOptions{}, po));
  }
}

TEST(Pipeline, BadInputIsACompileError) {
  sym::Context ctx;
  auto g = parse_graph(kGraph, ctx);
  auto other = parse_graph("graph(%0: f32[2]):\n  return (%0)\n", ctx);
  g->set_outputs({other->inputs()[0]});
  PipelineOptions po;
  po.verify_each = true;
  EXPECT_THROW(Pipeline::parse("dce", builtin_passes()).run(*g, CompileOptions{}, po),
               CompileError);
}

TEST(NodeOrigins, PositionsAfterPasses) {
  sym::Context ctx;
  auto g = parse_graph(R"(graph(%0: f32[4]):
  %1: f32[4] = aten.neg.default(%0)
  %2: f32[4] = aten.exp.default(%0)
  %3: f32[4] = aten.exp.default(%0)
  %4: f32[4] = aten.add.Tensor(%2, %3)
  return (%4, %3)
)",
                       ctx);
  NodeOrigins origins(*g);
  Pipeline::parse("dce,cse", builtin_passes()).run(*g, CompileOptions{});
  // neg removed, the second exp merged (its output use became a clone, appended).
  EXPECT_EQ(origins.positions(*g), (std::vector<int>{1, 3, -1}));
  EXPECT_EQ(g->nodes().back()->op(), "aten.clone.default");
}

TEST(Cse, FloatsCompareAsPrinted) {
  sym::Context ctx;
  auto g = parse_graph(R"(graph(%0: f32[4]):
  %1: f32[4] = aten.add.Tensor(%0, nan)
  %2: f32[4] = aten.add.Tensor(%0, nan)
  %3: f32[4] = aten.add.Tensor(%0, 0.0)
  %4: f32[4] = aten.add.Tensor(%0, -0.0)
  %5: f32[4] = aten.add.Tensor(%0, true)
  %6: f32[4] = aten.add.Tensor(%0, 1)
  return (%1, %2, %3, %4, %5, %6)
)",
                       ctx);
  EXPECT_EQ(eliminate_common_subexpressions(*g), 1);  // only the NaNs
}

TEST(Cse, DifferentOutputMetasStay) {
  sym::Context ctx;
  auto g = parse_graph(R"(graph(%0: f32[4, 4]):
  %1: f32[4, 4] = aten.clone.default(%0)
  %2: f32[4, 4]{1, 4} = aten.clone.default(%0)
  %3: f32[4, 4] = aten.add.Tensor(%1, %2)
  return (%3)
)",
                       ctx);
  EXPECT_EQ(eliminate_common_subexpressions(*g), 0);
}

TEST(Cse, SharedOutputsAreTheEarlierValue) {
  // Outputs from position 1 on may share memory (a forward graph's saved values): %3 becomes
  // %1 itself there. %4 merges into %2, which is output 0 (the caller's): a clone, as without
  // the option.
  const char* text = R"(graph(%0: f32[4]):
  %1: f32[4] = aten.sigmoid.default(%0)
  %2: f32[4] = aten.neg.default(%0)
  %3: f32[4] = aten.sigmoid.default(%0)
  %4: f32[4] = aten.neg.default(%0)
  return (%2, %1, %3, %4)
)";
  sym::Context ctx;
  auto g = parse_graph(text, ctx);
  EXPECT_EQ(eliminate_common_subexpressions(*g, 1), 2);
  const auto& outs = g->outputs();
  ASSERT_EQ(outs.size(), 4u);
  EXPECT_EQ(outs[1], outs[2]);
  EXPECT_NE(outs[3], outs[0]);
  EXPECT_EQ(outs[3]->producer()->op_id(), opid::aten_clone_default);
  // Without the option every merged output is a clone.
  sym::Context ctx2;
  auto h = parse_graph(text, ctx2);
  EXPECT_EQ(eliminate_common_subexpressions(*h), 2);
  EXPECT_NE(h->outputs()[1], h->outputs()[2]);
}

TEST(Dce, CountsRemovedNodes) {
  sym::Context ctx;
  auto g = parse_graph(kGraph, ctx);
  EXPECT_EQ(eliminate_dead_code(*g), 1);
  EXPECT_EQ(eliminate_dead_code(*g), 0);
}

TEST(OpEffects, Names) {
  EXPECT_TRUE(is_random_op("aten.rand_like.default"));
  EXPECT_TRUE(is_random_op("aten.native_dropout.default"));
  EXPECT_TRUE(is_random_op("prims.uniform.default"));
  EXPECT_FALSE(is_random_op("aten.randomish.default"));
  EXPECT_FALSE(is_random_op("aten.add.Tensor"));
  EXPECT_FALSE(is_random_op("mylib.rand.default"));

  EXPECT_FALSE(has_side_effects("aten.add.Tensor"));
  EXPECT_FALSE(has_side_effects("prims.convert_element_type.default"));
  EXPECT_TRUE(has_side_effects("aten.copy_.default"));
  EXPECT_TRUE(has_side_effects("aten.index_put_.default"));
  EXPECT_TRUE(has_side_effects("aten.add.out"));
  EXPECT_TRUE(has_side_effects("aten._assert_async.msg"));
  EXPECT_TRUE(has_side_effects("aten._functional_assert_async.msg"));
  EXPECT_TRUE(has_side_effects("aten.sym_constrain_range_for_size.default"));
  EXPECT_TRUE(has_side_effects("mylib.foo.default"));
  EXPECT_TRUE(has_side_effects("coil_functional.mylib__foo.default"));
  EXPECT_TRUE(has_side_effects("aten"));
  // The per-run cache by id gives the rules' answers, asked twice (computed, then looked up).
  OpEffectCache cache;
  for (int round = 0; round < 2; ++round) {
    for (std::string_view op :
         {"aten.rand_like.default", "prims.uniform.default", "aten.add.Tensor",
          "aten.copy_.default", "aten.add.out", "mylib.foo.default", "mylib.rand.default"}) {
      EXPECT_EQ(cache.is_random_op(OpId::of(op)), is_random_op(op)) << op;
      EXPECT_EQ(cache.has_side_effects(OpId::of(op)), has_side_effects(op)) << op;
    }
  }
}

}  // namespace
}  // namespace coil::passes
