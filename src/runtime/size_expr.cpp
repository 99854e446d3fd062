#include "size_expr.h"

#include <stdexcept>

#include "coil/support/error.h"

namespace coil::runtime::detail {

namespace {
constexpr int kMaxDepth = 64;
}

SizeExpr SizeCompiler::compile(sym::Expr e) {
  SizeExpr r;
  if (e == nullptr) return r;
  if (e->kind == sym::ExprKind::Const) {
    r.constant = e->value;
    return r;
  }
  if (e->kind == sym::ExprKind::Symbol) {
    auto it = slots_->find(e);
    COIL_USER_CHECK(it != slots_->end())
        << "size symbol " << e->name << " is not bound by any graph input";
    r.slot = it->second;
    return r;
  }
  r.begin = static_cast<int32_t>(code.size());
  emit(e, 1);
  r.end = static_cast<int32_t>(code.size());
  return r;
}

void SizeCompiler::emit(sym::Expr e, int depth) {
  using K = sym::ExprKind;
  if ((e->kind == K::Add || e->kind == K::Mul) && e->operands.size() > 2) {
    // A long flat sum (a cat of many symbolic pieces) accumulates pairwise, so the stack
    // stays two deep whatever the number of terms.
    emit(e->operands[0], depth);
    for (size_t i = 1; i < e->operands.size(); ++i) {
      emit(e->operands[i], depth + 1);
      code.push_back({e->kind == K::Add ? SizeCode::Add : SizeCode::Mul, 2, 0});
    }
    return;
  }
  COIL_USER_CHECK(depth + static_cast<int>(e->operands.size()) < kMaxDepth)
      << "size expression too deep";
  switch (e->kind) {
    case K::Const:
      code.push_back({SizeCode::Const, 0, e->value});
      return;
    case K::Symbol: {
      auto it = slots_->find(e);
      COIL_USER_CHECK(it != slots_->end())
          << "size symbol " << e->name << " is not bound by any graph input";
      code.push_back({SizeCode::Slot, it->second, 0});
      return;
    }
    default:
      break;
  }
  for (size_t i = 0; i < e->operands.size(); ++i) emit(e->operands[i], depth + static_cast<int>(i));
  SizeCode::Op op = SizeCode::Add;
  switch (e->kind) {
    case K::Add:
      op = SizeCode::Add;
      break;
    case K::Mul:
      op = SizeCode::Mul;
      break;
    case K::FloorDiv:
      op = SizeCode::FloorDiv;
      break;
    case K::Mod:
      op = SizeCode::Mod;
      break;
    case K::Min:
      op = SizeCode::Min;
      break;
    case K::Max:
      op = SizeCode::Max;
      break;
    case K::Lt:
      op = SizeCode::Lt;
      break;
    case K::Le:
      op = SizeCode::Le;
      break;
    case K::Eq:
      op = SizeCode::Eq;
      break;
    case K::Ne:
      op = SizeCode::Ne;
      break;
    case K::Const:
    case K::Symbol:
      break;
  }
  code.push_back({op, static_cast<int32_t>(e->operands.size()), 0});
}

int64_t eval_size(const SizeExpr& e, const int64_t* env, const SizeCode* code) {
  if (e.begin == e.end) return e.slot >= 0 ? env[e.slot] : e.constant;
  int64_t st[kMaxDepth];
  int sp = 0;
  for (int32_t pc = e.begin; pc < e.end; ++pc) {
    const SizeCode& c = code[pc];
    switch (c.op) {
      case SizeCode::Const:
        st[sp++] = c.value;
        break;
      case SizeCode::Slot:
        st[sp++] = env[c.n];
        break;
      case SizeCode::Add: {
        int64_t v = 0;
        for (int i = 0; i < c.n; ++i) v += st[--sp];
        st[sp++] = v;
        break;
      }
      case SizeCode::Mul: {
        int64_t v = 1;
        for (int i = 0; i < c.n; ++i) v *= st[--sp];
        st[sp++] = v;
        break;
      }
      default: {
        int64_t b = st[--sp], a = st[--sp], v = 0;
        switch (c.op) {
          case SizeCode::FloorDiv:
          case SizeCode::Mod: {
            if (b == 0) throw std::runtime_error("coil: division by zero in a size expression");
            int64_t q = a / b, r = a % b;
            if (r != 0 && ((r < 0) != (b < 0))) {
              --q;
              r += b;
            }
            v = c.op == SizeCode::FloorDiv ? q : r;
            break;
          }
          case SizeCode::Min:
            v = a < b ? a : b;
            break;
          case SizeCode::Max:
            v = a < b ? b : a;
            break;
          case SizeCode::Lt:
            v = a < b;
            break;
          case SizeCode::Le:
            v = a <= b;
            break;
          case SizeCode::Eq:
            v = a == b;
            break;
          case SizeCode::Ne:
            v = a != b;
            break;
          default:
            break;
        }
        st[sp++] = v;
      }
    }
  }
  return st[0];
}

}  // namespace coil::runtime::detail
