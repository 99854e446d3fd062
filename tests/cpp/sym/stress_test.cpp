// Stress tests of the symbolic algebra on the shapes dynamic graphs produce
// (docs/dynamic-shapes.md): deep reshape chains and concatenations of many pieces must not blow
// up the expressions. Sizes are measured as distinct nodes of the expression DAG and as
// printed length, and must stay bounded (flat, or linear in the number of pieces).
#include <gtest/gtest.h>

#include <string>
#include <unordered_set>
#include <vector>

#include "coil/sym/expr.h"

namespace coil::sym {
namespace {

size_t dag_size(Expr e) {
  std::unordered_set<Expr> seen;
  std::vector<Expr> todo{e};
  while (!todo.empty()) {
    Expr x = todo.back();
    todo.pop_back();
    if (!seen.insert(x).second) continue;
    for (Expr o : x->operands) todo.push_back(o);
  }
  return seen.size();
}

// Index expressions of a row-major reshape: the multi-index `idx` of a tensor with `sizes`
// re-read as a tensor of `new_sizes` (what lowering a chain of views does).
std::vector<Expr> reshape_index(Context& c, const std::vector<Expr>& idx,
                                const std::vector<Expr>& sizes,
                                const std::vector<Expr>& new_sizes) {
  Expr flat = c.zero();
  for (size_t d = 0; d < idx.size(); ++d) flat = c.add(c.mul(flat, sizes[d]), idx[d]);
  std::vector<Expr> out(new_sizes.size());
  Expr stride = c.one();
  for (size_t d = new_sizes.size(); d-- > 0;) {
    Expr q = c.floordiv(flat, stride);
    out[d] = d == 0 ? q : c.mod(q, new_sizes[d]);
    stride = c.mul(stride, new_sizes[d]);
  }
  return out;
}

TEST(SymStress, DeepReshapeChainStaysFlat) {
  Context c;
  Expr s0 = c.symbol("s0", {2, kMaxSize}), s1 = c.symbol("s1", {2, kMaxSize});
  Expr s2 = c.symbol("s2", {2, kMaxSize});
  Expr i0 = c.symbol("i0"), i1 = c.symbol("i1"), i2 = c.symbol("i2");
  c.set_upper_bound(i0, s0);
  c.set_upper_bound(i1, s1);
  c.set_upper_bound(i2, s2);
  // [s0, s1, s2] -> [s0*s1, s2] -> [s0, s1*s2] -> [s0*s1*s2] -> [s0, s1, s2], 200 times.
  std::vector<Expr> shape3{s0, s1, s2};
  std::vector<std::vector<Expr>> cycle{
      {c.mul(s0, s1), s2}, {s0, c.mul(s1, s2)}, {c.mul(c.mul(s0, s1), s2)}, shape3};
  // The output's loop indices (with their symbolic bounds) read through the whole chain back
  // to the input: composing index maps from the output side, as lowering does.
  std::vector<Expr> idx{i0, i1, i2};
  std::vector<Expr> shape = shape3;
  size_t max_nodes = 0;
  for (int round = 0; round < 200; ++round) {
    for (const auto& next : cycle) {
      idx = reshape_index(c, idx, shape, next);
      shape = next;
      for (Expr e : idx) max_nodes = std::max(max_nodes, dag_size(e));
    }
  }
  // Back at [s0, s1, s2], the index is the identity, and no intermediate grew.
  EXPECT_EQ(idx, (std::vector<Expr>{i0, i1, i2}));
  EXPECT_LE(max_nodes, 40u);
}

TEST(SymStress, TransposingReshapeChainIsBounded) {
  // [s0, s1] -> [s1, s0] (a reinterpretation, not a transpose) -> [s0, s1] ...: each step is
  // flat -> (flat // n, flat % n) -> flat, which the (q // n) * n + q % n rule folds back.
  Context c;
  Expr s0 = c.symbol("s0", {2, kMaxSize}), s1 = c.symbol("s1", {2, kMaxSize});
  Expr i0 = c.symbol("i0"), i1 = c.symbol("i1");
  c.set_upper_bound(i0, s0);
  c.set_upper_bound(i1, s1);
  std::vector<Expr> idx{i0, i1};
  std::vector<Expr> a{s0, s1}, b{s1, s0};
  size_t max_len = 0;
  for (int k = 0; k < 300; ++k) {
    idx = reshape_index(c, idx, k % 2 ? b : a, k % 2 ? a : b);
    max_len = std::max({max_len, c.str(idx[0]).size(), c.str(idx[1]).size()});
  }
  // 300 reinterpretations later (an even number: back to [s0, s1]) the flat index is i0*s1 + i1.
  Expr flat = c.add(c.mul(idx[0], s1), idx[1]);
  EXPECT_EQ(flat, c.add(c.mul(i0, s1), i1)) << c.str(flat);
  EXPECT_LE(max_len, 60u);
}

TEST(SymStress, CatOfManyPiecesIsLinear) {
  // cat of 128 pieces along a dim with symbolic sizes t0..t127: piece k starts at
  // o_k = t0 + ... + t(k-1), and an output index i reads piece k at i - o_k when
  // o_k <= i < o_(k+1). Every offset and condition must stay a flat sum (size linear in k),
  // never a nest of earlier offsets.
  Context c;
  const int n = 128;
  std::vector<Expr> t;
  for (int k = 0; k < n; ++k) t.push_back(c.symbol("t" + std::to_string(k), {2, kMaxSize}));
  Expr total = c.zero();
  for (Expr x : t) total = c.add(total, x);
  Expr i = c.symbol("i");
  c.set_upper_bound(i, total);
  Expr offset = c.zero();
  size_t worst_ratio_num = 0, worst_ratio_den = 1;
  for (int k = 0; k < n; ++k) {
    Expr local = c.sub(i, offset);
    Expr next = c.add(offset, t[k]);
    Expr in_piece = c.lt(i, next);
    size_t sz = dag_size(local) + dag_size(in_piece);
    // Linear: at most a constant number of nodes per piece before it.
    if (sz * worst_ratio_den > worst_ratio_num * static_cast<size_t>(k + 1)) {
      worst_ratio_num = sz;
      worst_ratio_den = static_cast<size_t>(k + 1);
    }
    EXPECT_EQ(c.bounds(local).hi >= 0, true);
    offset = next;
  }
  EXPECT_EQ(offset, total);
  EXPECT_LE(worst_ratio_num, 6 * worst_ratio_den) << worst_ratio_num << "/" << worst_ratio_den;
  // The last piece's local index prints as one flat sum.
  std::string last = c.str(c.sub(i, c.sub(total, t[n - 1])));
  EXPECT_EQ(last.find('('), std::string::npos) << last;
}

}  // namespace
}  // namespace coil::sym
