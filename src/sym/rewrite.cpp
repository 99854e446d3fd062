// sym::Context rewriting: substitute (replace symbols and re-simplify) and evaluate (concrete
// values), both by one structural recursion over the expression tree.
#include <span>
#include <unordered_map>

#include "coil/support/error.h"
#include "coil/sym/expr.h"
#include "expr_impl.h"

namespace coil::sym {

namespace {

Expr rebuild(Context& ctx, Expr e, std::span<const Expr> ops) {
  switch (e->kind) {
    case ExprKind::Add:
      return ctx.sum(ops);
    case ExprKind::Mul:
      return ctx.product(ops);
    case ExprKind::FloorDiv:
      return ctx.floordiv(ops[0], ops[1]);
    case ExprKind::Mod:
      return ctx.mod(ops[0], ops[1]);
    case ExprKind::Min:
      return ctx.min(ops[0], ops[1]);
    case ExprKind::Max:
      return ctx.max(ops[0], ops[1]);
    case ExprKind::Lt:
      return ctx.lt(ops[0], ops[1]);
    case ExprKind::Le:
      return ctx.le(ops[0], ops[1]);
    case ExprKind::Eq:
      return ctx.eq(ops[0], ops[1]);
    case ExprKind::Ne:
      return ctx.ne(ops[0], ops[1]);
    default:
      return e;
  }
}

Expr substitute_rec(Context& ctx, Expr e, const std::unordered_map<Expr, Expr>& map,
                    std::unordered_map<Expr, Expr>& memo) {
  if (auto it = map.find(e); it != map.end()) return it->second;
  if (e->operands.empty()) return e;
  if (auto it = memo.find(e); it != memo.end()) return it->second;
  std::vector<Expr> ops;
  ops.reserve(e->operands.size());
  bool changed = false;
  for (Expr o : e->operands) {
    ops.push_back(substitute_rec(ctx, o, map, memo));
    changed |= ops.back() != o;
  }
  Expr r = changed ? rebuild(ctx, e, ops) : e;
  memo.emplace(e, r);
  return r;
}

int64_t evaluate_rec(Expr e, const std::unordered_map<Expr, int64_t>& env,
                     std::unordered_map<Expr, int64_t>& memo) {
  switch (e->kind) {
    case ExprKind::Const:
      return e->value;
    case ExprKind::Symbol: {
      auto it = env.find(e);
      COIL_USER_CHECK(it != env.end()) << "evaluate: unbound symbol " << e->name;
      return it->second;
    }
    default:
      break;
  }
  if (auto it = memo.find(e); it != memo.end()) return it->second;
  auto op = [&](int i) { return evaluate_rec(e->operands[i], env, memo); };
  int64_t v = 0;
  switch (e->kind) {
    case ExprKind::Add:
      for (Expr o : e->operands) v = checked_add(v, evaluate_rec(o, env, memo));
      break;
    case ExprKind::Mul:
      v = 1;
      for (Expr o : e->operands) v = checked_mul(v, evaluate_rec(o, env, memo));
      break;
    case ExprKind::FloorDiv:
      v = py_floordiv(op(0), op(1));
      break;
    case ExprKind::Mod:
      v = py_mod(op(0), op(1));
      break;
    case ExprKind::Min:
      v = std::min(op(0), op(1));
      break;
    case ExprKind::Max:
      v = std::max(op(0), op(1));
      break;
    case ExprKind::Lt:
      v = op(0) < op(1);
      break;
    case ExprKind::Le:
      v = op(0) <= op(1);
      break;
    case ExprKind::Eq:
      v = op(0) == op(1);
      break;
    case ExprKind::Ne:
      v = op(0) != op(1);
      break;
    default:
      COIL_INTERNAL_ERROR() << "evaluate: unexpected kind";
  }
  memo.emplace(e, v);
  return v;
}

}  // namespace

Expr Context::substitute(Expr e, const std::unordered_map<Expr, Expr>& map) {
  if (map.empty()) return e;
  std::unordered_map<Expr, Expr> memo;
  return substitute_rec(*this, e, map, memo);
}

int64_t Context::evaluate(Expr e, const std::unordered_map<Expr, int64_t>& env) const {
  std::unordered_map<Expr, int64_t> memo;
  return evaluate_rec(e, env, memo);
}

}  // namespace coil::sym
