// The op table by id (coil/ops/registry.h) and op schemas (coil/ops/schema.h): lookups by id
// agree with lookups by name, schemas parse PyTorch's text, and the verifier checks nodes'
// arguments against them.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include "coil/graph/parser.h"
#include "coil/ops/meta_util.h"
#include "coil/ops/registry.h"
#include "coil/ops/schema.h"
#include "coil/ops/verify.h"
#include "coil/support/error.h"

namespace coil::ops {
namespace {

TEST(OpTable, LookupByIdAgreesWithName) {
  const auto& defs = op_registry().ops();
  ASSERT_GT(defs.size(), 100u);
  for (const OpDef& d : defs) {
    ASSERT_TRUE(d.id.valid()) << d.name;
    EXPECT_EQ(d.id, OpId::of(d.name));
    EXPECT_EQ(find_op(d.id), &d) << d.name;
    EXPECT_EQ(find_op(d.name), &d) << d.name;
    EXPECT_NE(d.meta, nullptr) << d.name;
  }
  EXPECT_EQ(find_op(opid::aten_add_Tensor)->name, "aten.add.Tensor");
}

TEST(OpTable, UnknownOps) {
  // Interned (a node of it exists) but not registered.
  EXPECT_EQ(find_op(OpId::of("test_op_table.unknown.default")), nullptr);
  // Never interned: the name lookup interns nothing.
  const size_t before = OpId::count();
  EXPECT_EQ(find_op("test_op_table.never.default"), nullptr);
  EXPECT_EQ(OpId::count(), before);
  EXPECT_EQ(find_op(OpId()), nullptr);
}

TEST(OpSchema, ParsesPyTorchSchemaText) {
  auto s = parse_schema("aten::add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor");
  ASSERT_TRUE(s.has_value());
  ASSERT_EQ(s->args.size(), 3u);
  EXPECT_EQ(s->args[0].name, "self");
  EXPECT_EQ(s->args[0].kind, ArgKind::Tensor);
  EXPECT_FALSE(s->args[1].kwarg_only);
  EXPECT_EQ(s->args[2].name, "alpha");
  EXPECT_EQ(s->args[2].kind, ArgKind::Number);
  EXPECT_TRUE(s->args[2].kwarg_only);
  EXPECT_TRUE(s->args[2].has_default);
  EXPECT_EQ(s->num_outputs, 1);
  EXPECT_EQ(s->index_of("alpha"), 2);
  EXPECT_EQ(s->index_of("beta"), -1);

  s = parse_schema("(Tensor self, int dim, bool keepdim=False) -> (Tensor values, Tensor indices)");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->num_outputs, 2);
  // Alias annotations, list returns, optional lists.
  s = parse_schema("(Tensor(a -> *) self, SymInt[] split_sizes, int dim=0) -> Tensor(a)[]");
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->args[0].name, "self");
  EXPECT_EQ(s->args[0].kind, ArgKind::Tensor);
  EXPECT_EQ(s->args[1].kind, ArgKind::NumberList);
  EXPECT_EQ(s->num_outputs, -1);
  // Defaults holding commas and quotes; Tensor?[]; results "()".
  s = parse_schema(
      "(Tensor self, Tensor?[] indices, int[2] stride=[1, 1], str pad=\"a,b\", "
      "ScalarType? dtype=None) -> ()");
  ASSERT_TRUE(s.has_value());
  ASSERT_EQ(s->args.size(), 5u);
  EXPECT_EQ(s->args[1].kind, ArgKind::TensorList);
  EXPECT_EQ(s->args[2].name, "stride");
  EXPECT_EQ(s->args[3].name, "pad");
  EXPECT_EQ(s->args[4].kind, ArgKind::Other);
  EXPECT_TRUE(s->args[4].optional);
  EXPECT_EQ(s->num_outputs, 0);

  EXPECT_FALSE(parse_schema("not a schema").has_value());
  EXPECT_FALSE(parse_schema("(Tensor self").has_value());
  EXPECT_FALSE(parse_schema("(Tensor) -> Tensor").has_value());  // no name
}

TEST(OpSchema, BuiltinOpsHaveSchemas) {
  // Every registered op finds its schema in the generated table, except the one overload
  // coil registers that torch does not have (floor_divide's Tensor overload is .default).
  const std::set<std::string> exempt = {"aten.floor_divide.Tensor"};
  std::string missing;
  for (const OpDef& d : op_registry().ops()) {
    if (!d.schema.known && !exempt.count(d.name)) missing += d.name + " ";
  }
  EXPECT_EQ(missing, "");
  for (const std::string& name : exempt) EXPECT_FALSE(find_op(name)->schema.known) << name;
  const OpDef* mm = find_op(opid::aten_mm_default);
  ASSERT_TRUE(mm->schema.known);
  ASSERT_EQ(mm->schema.args.size(), 2u);
  EXPECT_EQ(mm->schema.args[1].name, "mat2");
  EXPECT_EQ(builtin_schema_text("aten.mm.default"), "(Tensor self, Tensor mat2) -> Tensor");
  EXPECT_EQ(builtin_schema_text("aten.nope.default"), "");
}

// Scalar slots come from the schema; an op without one falls back to the overload name.
TEST(OpSchema, ScalarSlots) {
  auto slot = [](std::string_view op, size_t i) { return is_scalar_slot(OpId::of(op), i); };
  EXPECT_TRUE(slot("aten.mul.Scalar", 1));
  EXPECT_FALSE(slot("aten.mul.Scalar", 0));
  EXPECT_FALSE(slot("aten.mul.Tensor", 1));
  EXPECT_TRUE(slot("aten.pow.Scalar", 0));
  EXPECT_FALSE(slot("aten.pow.Scalar", 1));
  EXPECT_TRUE(slot("aten.remainder.Scalar_Tensor", 0));
  EXPECT_TRUE(slot("aten.where.ScalarOther", 2));
  EXPECT_FALSE(slot("aten.where.ScalarOther", 1));
  EXPECT_TRUE(slot("aten.where.Scalar", 1));
  // masked_fill.Scalar(Tensor self, Tensor mask, Scalar value): the name rule would call the
  // mask the scalar; the schema knows it is `value`.
  EXPECT_FALSE(slot("aten.masked_fill.Scalar", 1));
  EXPECT_TRUE(slot("aten.masked_fill.Scalar", 2));
  // div.Scalar_mode's rounding_mode is keyword-only (and a string).
  EXPECT_TRUE(slot("aten.div.Scalar_mode", 1));
  EXPECT_FALSE(slot("aten.div.Scalar_mode", 2));
  // No schema (not registered): the name rules.
  EXPECT_TRUE(slot("test_op_table.mul.Scalar", 1));
  EXPECT_FALSE(slot("test_op_table.mul.Tensor", 1));
}

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

TEST(OpSchema, VerifierChecksArgumentsAgainstTheSchema) {
  auto graph = [](std::string call) {
    return "graph(%0: f32[2, 3], %1: f32[2, 3]):\n  %2: f32[2, 3] = " + call + "\n  return (%2)\n";
  };
  EXPECT_EQ(verify_error(graph("aten.add.Tensor(%0, %1, alpha=2)")), "<ok>");
  EXPECT_EQ(verify_error(graph("aten.add.Tensor(%0, other=%1)")), "<ok>");
  EXPECT_NE(verify_error(graph("aten.add.Tensor(%0, %1, beta=2)"))
                .find("keyword argument 'beta' is not an argument of its op"),
            std::string::npos);
  EXPECT_NE(verify_error(graph("aten.add.Tensor(%0, %1, other=%1)"))
                .find("argument 'other' is given by position and by keyword"),
            std::string::npos);
  EXPECT_NE(verify_error(graph("aten.add.Tensor(%0, %1, 1, 2)"))
                .find("4 positional arguments, its op takes 3"),
            std::string::npos);
  EXPECT_NE(verify_error(graph("aten.add.Tensor(%0)")).find("required argument 'other' is missing"),
            std::string::npos);
}

// A meta function asking for an argument under another name than the schema's is a bug in
// the meta function; it is caught where the name decides (the argument is not positional).
TEST(OpSchema, ArgNamesAreCheckedAgainstTheSchema) {
  sym::Context ctx;
  auto g = parse_graph(
      "graph(%0: f32[2, 3], %1: f32[2, 3]):\n"
      "  %2: f32[2, 3] = aten.add.Tensor(%0, other=%1)\n"
      "  return (%2)\n",
      ctx);
  const Node& n = *g->nodes()[0];
  const OpDef* def = find_op(n.op_id());
  ASSERT_NE(def, nullptr);
  OpCall call(n.op_id(), n.args(), n.kwargs(), &def->schema);
  EXPECT_EQ(call.arg(1, "other"), &n.kwargs()[0].second);
  EXPECT_EQ(call.arg(2, "alpha"), nullptr);
  EXPECT_EQ(call.arg(0, "anything"), &n.args()[0]);  // positional: found by position
  EXPECT_THROW(call.arg(1, "src"), InternalError);
  // Past the schema's arguments: a keyword lookup by name, unchecked (a meta shared by
  // several overloads asks for keywords only some have).
  EXPECT_EQ(call.arg(99, "other"), &n.kwargs()[0].second);
  EXPECT_EQ(call.arg(99, "dtype"), nullptr);
  // A keyword-only argument's place is no position: a meta shared by several overloads asking
  // for `dim` there (sum.default has only `dtype`) gets nullptr.
  const OpDef* sum = find_op("aten.sum.default");
  ASSERT_NE(sum, nullptr);
  const std::vector<Arg> self_only = {n.args()[0]};
  const std::vector<std::pair<std::string, Arg>> no_kwargs;
  OpCall sum_call(sum->id, self_only, no_kwargs, &sum->schema);
  EXPECT_EQ(sum_call.arg(1, "dim"), nullptr);
  // Without a schema the names are not checked.
  OpCall plain(n.op_id(), n.args(), n.kwargs());
  EXPECT_EQ(plain.arg(1, "src"), nullptr);
  // infer_meta hands the schema to the meta function.
  EXPECT_EQ(infer_meta(ctx, n).size(), 1u);
}

}  // namespace
}  // namespace coil::ops
