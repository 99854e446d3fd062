#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <limits>

#include "coil/graph/parser.h"
#include "coil/graph/printer.h"
#include "coil/support/error.h"

namespace coil {
namespace {

// The args of the single node of `graph(%0: f32[2]): %1: f32[2] = op(ARGS) ...`.
struct OneNode {
  sym::Context ctx;
  std::unique_ptr<Graph> g;
  const Node* node() const { return g->nodes().at(0); }
};

std::unique_ptr<OneNode> parse_args(const std::string& args) {
  auto r = std::make_unique<OneNode>();
  r->g = parse_graph(
      "graph(%0: f32[2]):\n  %1: f32[2] = aten.foo.default(" + args + ")\n  return (%1)\n", r->ctx);
  return r;
}

std::string error_of(std::string_view text) {
  sym::Context ctx;
  try {
    parse_graph(text, ctx);
  } catch (const CompileError& e) {
    return e.what();
  }
  return "<no error>";
}

TEST(Parser, FloatsReadBackBitExact) {
  const double values[] = {0.1,
                           1.0,
                           -0.0,
                           1e-05,
                           1e+20,
                           2.5e-08,
                           1.0 / 3.0,
                           5e-324,
                           1.7976931348623157e+308,
                           123456789.0,
                           -2.5,
                           1e16,
                           std::numeric_limits<double>::infinity(),
                           -std::numeric_limits<double>::infinity()};
  for (double v : values) {
    std::string text = format_double(v);
    SCOPED_TRACE(text);
    EXPECT_NE(text.find_first_of(".ein"), std::string::npos) << "must not read as an int";
    auto n = parse_args(text);
    const Arg& a = n->node()->args().at(0);
    ASSERT_TRUE(a.is_double());
    EXPECT_EQ(std::bit_cast<uint64_t>(a.as_double()), std::bit_cast<uint64_t>(v));
  }
  EXPECT_EQ(format_double(1.0), "1.0");
  EXPECT_EQ(format_double(1e-05), "1e-05");
  EXPECT_EQ(format_double(-0.0), "-0.0");
  EXPECT_EQ(format_double(0.1), "0.1");
  EXPECT_EQ(format_double(std::nan("")), "nan");
  auto n = parse_args("nan");
  EXPECT_TRUE(std::isnan(n->node()->args()[0].as_double()));
}

TEST(Parser, ArgKinds) {
  auto n = parse_args(
      "%0, 3, -7, 2.0, true, false, None, \"a\\\"b\\n\\x7f\", dtype(i64), device(cuda), "
      "sym(s9*2), [1, [None, %0]], 9223372036854775807, alpha=1, name=\"x\"");
  const auto& a = n->node()->args();
  ASSERT_EQ(a.size(), 13u);
  EXPECT_EQ(a[0].value(), n->g->inputs()[0]);
  EXPECT_TRUE(a[1].is_int());
  EXPECT_EQ(a[1].as_int(), 3);
  EXPECT_EQ(a[2].as_int(), -7);
  EXPECT_TRUE(a[3].is_double());
  EXPECT_EQ(a[3].as_double(), 2.0);
  EXPECT_TRUE(a[4].is_bool());
  EXPECT_EQ(a[4].as_int(), 1);
  EXPECT_EQ(a[5].as_int(), 0);
  EXPECT_TRUE(a[6].is_none());
  EXPECT_EQ(std::get<std::string>(a[7].v), std::string("a\"b\n\x7f"));
  EXPECT_EQ(std::get<DType>(a[8].v), DType::Int64);
  EXPECT_EQ(std::get<Device>(a[9].v), Device::CUDA);
  ASSERT_TRUE(a[10].is_sym());
  EXPECT_EQ(std::get<sym::Expr>(a[10].v), n->ctx.mul(n->ctx.symbol("s9"), n->ctx.constant(2)));
  ASSERT_TRUE(a[11].is_list());
  ASSERT_EQ(a[11].list().size(), 2u);
  EXPECT_TRUE(a[11].list()[1].list()[0].is_none());
  EXPECT_EQ(a[11].list()[1].list()[1].value(), n->g->inputs()[0]);
  EXPECT_EQ(a[12].as_int(), std::numeric_limits<int64_t>::max());
  ASSERT_EQ(n->node()->kwargs().size(), 2u);
  EXPECT_EQ(n->node()->kwarg("alpha")->as_int(), 1);
  EXPECT_EQ(n->node()->arg(13, "alpha")->as_int(), 1);
  EXPECT_EQ(n->node()->kwarg("beta"), nullptr);
  // The input is used twice by the node: once per use in its users list.
  EXPECT_EQ(n->g->inputs()[0]->users().size(), 2u);
  // A constant sym(...) is a plain int after printing; a symbolic one stays sym(...).
  EXPECT_NE(print_graph(*n->g).find("sym(2*s9)"), std::string::npos);
}

TEST(Parser, MetaSyntax) {
  sym::Context ctx;
  TensorMeta m = parse_meta("bf16[s0, 4]{1, s0}+(s0 + 2)@cuda", ctx);
  EXPECT_EQ(m.dtype, DType::BFloat16);
  EXPECT_EQ(m.device, Device::CUDA);
  sym::Expr s0 = ctx.symbol("s0");
  ASSERT_EQ(m.sizes.size(), 2u);
  EXPECT_EQ(m.sizes[0], s0);
  EXPECT_EQ(m.sizes[1], ctx.constant(4));
  EXPECT_EQ(m.strides[0], ctx.one());
  EXPECT_EQ(m.strides[1], s0);
  EXPECT_EQ(m.storage_offset, ctx.add(s0, ctx.constant(2)));
  EXPECT_EQ(print_meta(ctx, m), "bf16[s0, 4]{1, s0}+(s0 + 2)@cuda");

  TensorMeta c = parse_meta("f32[2, s1, 3]", ctx);
  EXPECT_EQ(c.strides, contiguous_strides(ctx, c.sizes));
  EXPECT_EQ(c.storage_offset, nullptr);
  TensorMeta scalar = parse_meta("i64[]+7", ctx);
  EXPECT_EQ(scalar.rank(), 0);
  EXPECT_EQ(scalar.storage_offset, ctx.constant(7));
  EXPECT_EQ(print_meta(ctx, scalar), "i64[]+7");
  // A size-1 dim with an unusual stride keeps it.
  TensorMeta odd = parse_meta("f32[4, 1]{1, 4}", ctx);
  EXPECT_EQ(print_meta(ctx, odd), "f32[4, 1]{1, 4}");
  // torch names are accepted, short names printed.
  EXPECT_EQ(print_meta(ctx, parse_meta("float16[3]", ctx)), "f16[3]");
}

TEST(Parser, InputSymbolsGetSizeRanges) {
  sym::Context ctx;
  auto g = parse_graph(
      "graph(%0: f32[s0, s1*2]):\n  %1: f32[s0] = aten.foo.default(%0, sym(s7))\n  return (%1)\n",
      ctx);
  sym::Range r0 = ctx.symbol_range(ctx.symbol("s0"));
  EXPECT_EQ(r0.lo, 2);
  EXPECT_EQ(r0.hi, sym::kMaxSize);
  EXPECT_EQ(ctx.symbol_range(ctx.symbol("s1")).lo, 2);
  // Only symbols in input sizes are specialized.
  EXPECT_EQ(ctx.symbol_range(ctx.symbol("s7")).lo, 0);
}

TEST(Parser, MultiOutputAndZeroOutputNodes) {
  sym::Context ctx;
  std::string text =
      "graph(%0: f32[8, 3]):\n"
      "  %1: f32[8], %2: i64[8] = aten.max.dim(%0, 1)\n"
      "  aten._assert_async.msg(%2, \"ok\")\n"
      "  return ()\n";
  auto g = parse_graph(text, ctx);
  ASSERT_EQ(g->nodes().size(), 2u);
  const Node* n = g->nodes()[0];
  ASSERT_EQ(n->outputs().size(), 2u);
  EXPECT_EQ(n->output(1)->output_index(), 1);
  EXPECT_EQ(n->output(1)->producer(), n);
  EXPECT_EQ(n->output(1)->meta().dtype, DType::Int64);
  EXPECT_TRUE(g->nodes()[1]->outputs().empty());
  EXPECT_EQ(print_graph(*g), text);
}

TEST(Parser, CommentsAndWhitespace) {
  sym::Context ctx;
  auto g = parse_graph(
      "# leading comment\n"
      "graph( %0 : f32[ 4 ,s0 ] ) :   # inputs\n"
      "\n"
      "  %5 : f32[4, s0] = aten.neg.default( %0 )  # negate\n"
      "return(%5)",
      ctx);
  EXPECT_EQ(print_graph(*g),
            "graph(%0: f32[4, s0]):\n  %1: f32[4, s0] = aten.neg.default(%0)\n  return (%1)\n");
}

TEST(Parser, ErrorsCarryLineAndColumn) {
  // Each case: text, expected "line:col: " prefix, and a piece of the message.
  struct Case {
    std::string text, where, what;
  };
  const Case cases[] = {
      {"graph(%0: f32[4]):\n  %1: f32[4] = aten.neg.default(%2)\n  return (%1)\n",
       "2:33: ", "undefined value %2"},
      {"graph(%0: f32[4]):\n  %0: f32[4] = aten.neg.default(%0)\n  return (%0)\n",
       "2:3: ", "redefinition of %0"},
      {"graph(%0: q32[4]):\n  return (%0)\n", "1:11: ", "unknown dtype 'q32'"},
      {"graph(%0: f32[4]):\n  %1: f32[4] = aten.neg.default(%0\n  return (%1)\n",
       "3:3: ", "expected ')'"},
      {"graph(%0: f32[4]):\n  %1: f32[4] = aten.neg.default(%0, @)\n  return (%1)\n",
       "2:37: ", "expected an argument"},
      {"graph(%0: f32[4]):\n  %1: f32[4] = aten.foo.default(\"abc)\n  return (%1)\n",
       "2:33: ", "unterminated string"},
      {"graph(%0: f32[4]):\n  %1: f32[4] = aten.foo.default(a=1, %0)\n  return (%1)\n",
       "2:38: ", "positional argument after keyword"},
      {"graph(%0: f32[4]):\n  return (%0)\n  %1: f32[4] = aten.neg.default(%0)\n",
       "3:3: ", "unexpected text after 'return'"},
      {"graph(%0: f32[4]):\n  %1: f32[4] = aten.neg.default(%0)\n",
       "3:1: ", "expected a node or 'return'"},
      {"graph(%0: f32[4, s0 +]):\n  return (%0)\n", "1:18: ", "bad symbolic expression"},
      {"graph(%0: f32[4]{1, 1}):\n  return (%0)\n", "1:17: ", "expected 1 strides, got 2"},
      {"graph(%0: f32[4]@tpu):\n  return (%0)\n", "1:18: ", "unknown device 'tpu'"},
      {"graph(%0: f32[4]):\n  %1: f32[4] = aten.foo.default(99999999999999999999)\n  return "
       "(%1)\n",
       "2:33: ", "out of range"},
      {"grph(%0: f32[4]):\n  return (%0)\n", "1:1: ", "expected 'graph'"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.text);
    std::string msg = error_of(c.text);
    EXPECT_EQ(msg.substr(0, c.where.size()), c.where) << msg;
    EXPECT_NE(msg.find(c.what), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace coil
