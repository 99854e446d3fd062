#include <gtest/gtest.h>

#include "coil/graph/graph.h"
#include "coil/graph/parser.h"
#include "coil/graph/printer.h"
#include "coil/graph/verifier.h"
#include "coil/support/error.h"

namespace coil {
namespace {

TensorMeta meta(sym::Context& ctx, std::vector<int64_t> sizes, DType dt = DType::Float32) {
  TensorMeta m;
  m.dtype = dt;
  for (int64_t s : sizes) m.sizes.push_back(ctx.constant(s));
  m.strides = contiguous_strides(ctx, m.sizes);
  return m;
}

std::string verify_error(const Graph& g) {
  try {
    verify_graph(g);
  } catch (const CompileError& e) {
    return e.what();
  }
  return "<ok>";
}

TEST(Graph, BuildUsersAndInputValues) {
  sym::Context ctx;
  Graph g(ctx);
  Value* a = g.add_input(meta(ctx, {4}));
  Value* b = g.add_input(meta(ctx, {4}));
  Node* add = g.add_node("aten.add.Tensor", {a, b}, {{"alpha", 1}}, {meta(ctx, {4})});
  Node* cat =
      g.add_node("aten.cat.default", {Arg::List{a, add->output(), a}}, {}, {meta(ctx, {12})});
  g.set_outputs({cat->output()});
  EXPECT_TRUE(a->is_input());
  EXPECT_EQ(add->output()->producer(), add);
  EXPECT_EQ(a->users(), (std::vector<Node*>{add, cat, cat}));
  EXPECT_EQ(b->users(), (std::vector<Node*>{add}));
  EXPECT_EQ(cat->input_values(), (std::vector<Value*>{a, add->output(), a}));
  EXPECT_EQ(add->kwarg("alpha")->as_int(), 1);
  EXPECT_EQ(add->arg(2, "alpha")->as_int(), 1);
  EXPECT_EQ(add->arg(0, "self")->value(), a);
  EXPECT_EQ(add->arg(3, "beta"), nullptr);
  EXPECT_EQ(verify_error(g), "<ok>");
  EXPECT_EQ(print_graph(g),
            "graph(%0: f32[4], %1: f32[4]):\n"
            "  %2: f32[4] = aten.add.Tensor(%0, %1, alpha=1)\n"
            "  %3: f32[12] = aten.cat.default([%0, %2, %0])\n"
            "  return (%3)\n");
}

TEST(Graph, ArgConversions) {
  sym::Context ctx;
  EXPECT_EQ(Arg(true).as_int(), 1);
  EXPECT_EQ(Arg(int64_t{5}).as_double(), 5.0);
  EXPECT_EQ(Arg(ctx.constant(7)).as_int(), 7);
  EXPECT_THROW(Arg(ctx.symbol("s0")).as_int(), CompileError);
  EXPECT_THROW(Arg(std::string("x")).as_int(), CompileError);
  EXPECT_THROW(Arg(NoneArg{}).as_double(), CompileError);
}

TEST(Graph, ReplaceAllUses) {
  sym::Context ctx;
  auto g = parse_graph(
      "graph(%0: f32[4], %1: f32[4]):\n"
      "  %2: f32[4] = aten.neg.default(%0)\n"
      "  %3: f32[4] = aten.add.Tensor(%2, %2)\n"
      "  %4: f32[8] = aten.cat.default([%2, %1])\n"
      "  return (%2, %3, %4)\n",
      ctx);
  Value* neg = g->nodes()[0]->output();
  Value* in1 = g->inputs()[1];
  g->replace_all_uses(neg, in1);
  EXPECT_TRUE(neg->users().empty());
  EXPECT_EQ(in1->users().size(), 4u);
  EXPECT_EQ(verify_error(*g), "<ok>");
  EXPECT_EQ(g->remove_dead_nodes(), 1);
  EXPECT_EQ(print_graph(*g),
            "graph(%0: f32[4], %1: f32[4]):\n"
            "  %2: f32[4] = aten.add.Tensor(%1, %1)\n"
            "  %3: f32[8] = aten.cat.default([%1, %1])\n"
            "  return (%1, %2, %3)\n");
}

TEST(Graph, DeadCodeElimination) {
  sym::Context ctx;
  auto g = parse_graph(
      "graph(%0: f32[4, 4]):\n"
      "  %1: f32[4, 4] = aten.exp.default(%0)\n"  // dead chain: %1 -> %2
      "  %2: f32[4] = aten.sum.dim_IntList(%1, [1])\n"
      "  %3: f32[4], %4: i64[4] = aten.max.dim(%0, 1)\n"  // live through %4 only
      "  %5: f32[4, 4] = aten.relu.default(%0)\n"         // dead
      "  %6: f32[4] = aten.neg.default(%3)\n"             // dead, keeps nothing alive
      "  aten._assert_async.msg(%4, \"check\")\n"         // no outputs: kept
      "  return (%4)\n",
      ctx);
  EXPECT_EQ(g->remove_dead_nodes(), 4);
  EXPECT_EQ(verify_error(*g), "<ok>");
  EXPECT_EQ(g->inputs()[0]->users().size(), 1u);
  EXPECT_EQ(print_graph(*g),
            "graph(%0: f32[4, 4]):\n"
            "  %1: f32[4], %2: i64[4] = aten.max.dim(%0, 1)\n"
            "  aten._assert_async.msg(%2, \"check\")\n"
            "  return (%2)\n");
  EXPECT_EQ(g->remove_dead_nodes(), 0);
}

TEST(Verifier, CatchesUseBeforeDefinition) {
  sym::Context ctx;
  auto g = parse_graph(
      "graph(%0: f32[4]):\n"
      "  %1: f32[4] = aten.neg.default(%0)\n"
      "  %2: f32[4] = aten.exp.default(%0)\n"
      "  return (%2)\n",
      ctx);
  // A buggy rewrite: uses of %0 now refer to %2, which is defined after %1.
  g->replace_all_uses(g->inputs()[0], g->nodes()[1]->output());
  std::string err = verify_error(*g);
  EXPECT_NE(err.find("before its definition"), std::string::npos) << err;
}

TEST(Verifier, CatchesValuesFromAnotherGraph) {
  sym::Context ctx;
  Graph other(ctx);
  Value* foreign = other.add_input(meta(ctx, {4}));
  Graph g(ctx);
  Value* a = g.add_input(meta(ctx, {4}));
  g.add_node("aten.add.Tensor", {a, foreign}, {}, {meta(ctx, {4})});
  g.set_outputs({g.nodes()[0]->output()});
  EXPECT_NE(verify_error(g).find("uses %0 before its definition"), std::string::npos)
      << verify_error(g);

  Graph h(ctx);
  h.add_input(meta(ctx, {4}));
  h.set_outputs({foreign});
  EXPECT_NE(verify_error(h).find("graph output 0 is not defined"), std::string::npos)
      << verify_error(h);
}

TEST(Verifier, CatchesStridesOfTheWrongRank) {
  sym::Context ctx;
  Graph g(ctx);
  TensorMeta bad = meta(ctx, {4, 4});
  bad.strides.pop_back();
  Value* a = g.add_input(bad);
  g.set_outputs({a});
  EXPECT_NE(verify_error(g).find("2 sizes but 1 strides"), std::string::npos) << verify_error(g);
}

}  // namespace
}  // namespace coil
