// Interned op ids (coil/graph/op_id.h): one id per name, process-wide and thread-safe, names
// read back unchanged, the known ops' constants, and nodes holding the id of their op.
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <thread>
#include <vector>

#include "coil/graph/op_id.h"
#include "coil/graph/parser.h"
#include "coil/graph/printer.h"
#include "coil/support/error.h"

namespace coil {
namespace {

TEST(OpId, SameNameSameId) {
  const OpId a = OpId::of("test_op_id.same.default");
  const OpId b = OpId::of(std::string("test_op_id.same") + ".default");
  EXPECT_TRUE(a.valid());
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.name(), "test_op_id.same.default");
  const OpId c = OpId::of("test_op_id.other.default");
  EXPECT_NE(a, c);
  EXPECT_EQ(c.name(), "test_op_id.other.default");
  // The name is stored once: the same string object each time.
  EXPECT_EQ(&a.name(), &b.name());
}

TEST(OpId, FindInternsNothing) {
  const size_t before = OpId::count();
  EXPECT_FALSE(OpId::find("test_op_id.never_seen.default").has_value());
  EXPECT_EQ(OpId::count(), before);
  const OpId id = OpId::of("test_op_id.seen.default");
  EXPECT_EQ(OpId::count(), before + 1);
  ASSERT_TRUE(OpId::find("test_op_id.seen.default").has_value());
  EXPECT_EQ(*OpId::find("test_op_id.seen.default"), id);
}

TEST(OpId, InvalidAndUnknownIds) {
  EXPECT_FALSE(OpId().valid());
  EXPECT_THROW(OpId().name(), InternalError);
  // An index nobody was handed out.
  EXPECT_THROW(OpId(static_cast<uint32_t>(OpId::count() + 1000)).name(), InternalError);
}

TEST(OpId, KnownOpsAreConstantsInTheirOrder) {
  static_assert(opid::aten_copy__default.index() == 0);
  static_assert(opid::aten_mm_default != opid::aten_addmm_default);
  EXPECT_EQ(opid::aten_copy__default.name(), "aten.copy_.default");
  EXPECT_EQ(opid::aten__unsafe_view_default.name(), "aten._unsafe_view.default");
  EXPECT_EQ(OpId::of("aten.mm.default"), opid::aten_mm_default);
  std::set<std::string> names;
  for (uint32_t i = 0; i < opid::kKnownCount; ++i) {
    const std::string& n = OpId(i).name();
    EXPECT_TRUE(names.insert(n).second) << n << " listed twice";
    EXPECT_EQ(OpId::of(n).index(), i);
  }
}

// Threads interning overlapping names (and reading names back while others append) agree on
// every id. Run under TSan this is the race check; here it checks the answers.
TEST(OpId, ConcurrentInterningAgrees) {
  constexpr int kThreads = 8, kNames = 3000;
  std::vector<std::vector<OpId>> got(kThreads, std::vector<OpId>(kNames));
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t, &got] {
      for (int k = 0; k < kNames; ++k) {
        // Each thread walks the names in its own order.
        const int i = (k * 7 + t * 389) % kNames;
        const std::string name = "test_op_id.concurrent" + std::to_string(i) + ".default";
        const OpId id = OpId::of(name);
        got[t][i] = id;
        if (id.name() != name) got[t][i] = OpId();  // a mismatch fails below
      }
    });
  }
  for (auto& th : threads) th.join();
  std::set<uint32_t> distinct;
  for (int i = 0; i < kNames; ++i) {
    for (int t = 0; t < kThreads; ++t) {
      ASSERT_TRUE(got[t][i].valid()) << "thread " << t << " name " << i;
      ASSERT_EQ(got[t][i], got[0][i]) << "thread " << t << " name " << i;
    }
    distinct.insert(got[0][i].index());
    EXPECT_EQ(got[0][i].name(), "test_op_id.concurrent" + std::to_string(i) + ".default");
  }
  EXPECT_EQ(distinct.size(), static_cast<size_t>(kNames));
}

TEST(OpId, NodesHoldTheirOpsId) {
  sym::Context ctx;
  const std::string text =
      "graph(%0: f32[2, 3], %1: f32[3, 4]):\n"
      "  %2: f32[2, 4] = aten.mm.default(%0, %1)\n"
      "  %3: f32[2, 4] = test_op_id.custom.default(%2)\n"
      "  return (%3)\n";
  auto g = parse_graph(text, ctx);
  ASSERT_EQ(g->nodes().size(), 2u);
  EXPECT_EQ(g->nodes()[0]->op_id(), opid::aten_mm_default);
  EXPECT_EQ(g->nodes()[0]->op(), "aten.mm.default");
  EXPECT_EQ(g->nodes()[1]->op_id(), OpId::of("test_op_id.custom.default"));
  // Printing reads the name back.
  EXPECT_EQ(print_graph(*g), text);
  // Both add_node forms give the same id.
  Node* n = g->add_node("aten.mm.default", {Arg(g->inputs()[0]), Arg(g->inputs()[1])}, {},
                        {g->nodes()[0]->output()->meta()});
  EXPECT_EQ(n->op_id(), opid::aten_mm_default);
}

}  // namespace
}  // namespace coil
