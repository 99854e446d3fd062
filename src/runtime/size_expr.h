// Symbolic sizes compiled for the run-time path (private to the runtime): a sym::Expr becomes
// a constant, a slot of the int64 environment, or a short postfix program over it, so that
// evaluating every size of a call costs a few loads instead of a hash-map walk.
#pragma once

#include <cstdint>
#include <unordered_map>
#include <vector>

#include "coil/sym/expr.h"

namespace coil::runtime::detail {

struct SizeCode {
  enum Op : uint8_t { Const, Slot, Add, Mul, FloorDiv, Mod, Min, Max, Lt, Le, Eq, Ne } op;
  int32_t n = 0;  // Add/Mul: operand count; Slot: the slot
  int64_t value = 0;
};

struct SizeExpr {
  int64_t constant = 0;
  int32_t slot = -1;           // >= 0: the value is env[slot]
  int32_t begin = 0, end = 0;  // non-empty: a program in SizeCompiler::code
  bool is_const() const { return slot < 0 && begin == end; }
};

class SizeCompiler {
 public:
  // `slots` maps every symbol that may occur to its environment slot; an expression over
  // another symbol is a CompileError (a size the runtime cannot know).
  explicit SizeCompiler(const std::unordered_map<sym::Expr, int>* slots) : slots_(slots) {}
  SizeExpr compile(sym::Expr e);  // nullptr compiles to 0
  std::vector<SizeCode> code;

 private:
  void emit(sym::Expr e, int depth);
  const std::unordered_map<sym::Expr, int>* slots_;
};

// Evaluates a compiled expression; throws std::runtime_error on division by zero.
int64_t eval_size(const SizeExpr& e, const int64_t* env, const SizeCode* code);

}  // namespace coil::runtime::detail
