// Lowering reads the backend's LoweringPolicy, not the device: the same CPU graph lowers to the
// other extern provider under a policy that says so.
#include <gtest/gtest.h>

#include "../test_policies.h"
#include "family_test_util.h"

namespace coil::lower {
namespace {

std::vector<loop::ExternKind> extern_kinds(const LowerResult& r) {
  std::vector<loop::ExternKind> out;
  for (const loop::Step& s : r.program.steps)
    if (const auto* e = std::get_if<loop::ExternNode>(&s)) out.push_back(e->kind);
  return out;
}

LowerResult lower_with(const Graph& g, const backend::TargetPolicy& policy) {
  CompileOptions o;
  o.strict = true;
  return lower_graph(g, o, policy);
}

TEST(TargetPolicy, IndexingThroughHostIsThePolicysChoice) {
  sym::Context ctx;
  auto g = parse_graph(
      "graph(%0: f32[8, 4], %1: i64[5], %2: f32[5, 4]):\n"
      "  %3: f32[8, 4] = aten.index_put.default(%0, [%1], %2, false)\n"
      "  return (%3)\n",
      ctx);
  // The CPU policy: the runtime's own index kernel.
  EXPECT_EQ(extern_kinds(lower_with(*g, backend::cpu::cpu_policy())),
            std::vector<loop::ExternKind>{loop::ExternKind::IndexPut});
  // A policy whose extern kernels cannot read the tensors: the host's ATen op, on a CPU graph.
  backend::TargetPolicy host_indexing;
  host_indexing.lowering.indexing_through_host = true;
  EXPECT_EQ(extern_kinds(lower_with(*g, host_indexing)),
            std::vector<loop::ExternKind>{loop::ExternKind::Fallback});
}

TEST(TargetPolicy, CatByCopiesIsThePolicysChoice) {
  sym::Context ctx;
  std::string text = "graph(%0: f32[2, 3]):\n  %1: f32[2, 30] = aten.cat.default([";
  for (int i = 0; i < 10; ++i) text += std::string(i ? ", " : "") + "%0";
  text += "], 1)\n  return (%1)\n";
  auto g = parse_graph(text, ctx);
  EXPECT_EQ(extern_kinds(lower_with(*g, backend::cpu::cpu_policy())),
            std::vector<loop::ExternKind>{loop::ExternKind::Cat});
  backend::TargetPolicy where_chain;
  where_chain.lowering.cat_by_copies = false;
  EXPECT_TRUE(extern_kinds(lower_with(*g, where_chain)).empty());
}

TEST(TargetPolicy, SplitReductionsIsThePolicysChoice) {
  sym::Context ctx;
  auto g = parse_graph(
      "graph(%0: f32[64, 65536]):\n"
      "  %1: f32[64] = aten.sum.dim_IntList(%0, [1])\n"
      "  return (%1)\n",
      ctx);
  auto reductions = [](const LowerResult& r) {
    int n = 0;
    for (const loop::Step& s : r.program.steps)
      if (const auto* c = std::get_if<loop::ComputeNode>(&s)) n += c->is_reduction() ? 1 : 0;
    return n;
  };
  EXPECT_EQ(reductions(lower_with(*g, backend::cpu::cpu_policy())), 1);
  backend::TargetPolicy split;
  split.lowering.split_reductions = true;
  EXPECT_EQ(reductions(lower_with(*g, split)), 2);  // partial sums, then their sum
}

}  // namespace
}  // namespace coil::lower
