// Kernel bodies: the scalar computation of one element, as an SSA list of instructions.
//
// A body computes one value from an iteration point (the index symbols i0.. and r0.. of its
// ComputeNode). Instructions refer to earlier ones by position (InstrId). The set of scalar
// operations is declared once, in COIL_BODY_OPS; every consumer (C++ emitter, printer,
// interpreter, dependency extraction) switches over InstrKind without a default, so adding an
// op without handling it everywhere fails to compile (-Wswitch).
//
// Types: each instruction has a result dtype. Float16/BFloat16 values are computed in float32
// (dtype_compute) and rounded only when stored or cast, as Inductor does.
#pragma once

#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

#include "coil/graph/dtype.h"
#include "coil/sym/expr.h"

namespace coil::loop {

using BufferId = int;
using InstrId = int;

// X(Name, arity, text). Arity counts operand instructions.
// clang-format off
#define COIL_BODY_OPS(X)                                                                          \
  X(Neg, 1, "neg")                                                                                \
  X(Abs, 1, "abs") X(Exp, 1, "exp") X(Exp2, 1, "exp2") X(Expm1, 1, "expm1") X(Log, 1, "log")      \
      X(Log2, 1, "log2") X(Log10, 1, "log10") X(Log1p, 1, "log1p") X(Sqrt, 1, "sqrt") X(          \
          Rsqrt, 1, "rsqrt") X(Reciprocal, 1, "reciprocal") X(Sin, 1, "sin") X(Cos, 1, "cos")     \
          X(Tan, 1, "tan") X(Asin, 1, "asin") X(Acos, 1, "acos") X(Atan, 1, "atan") X(            \
              Sinh, 1, "sinh") X(Cosh, 1, "cosh") X(Tanh, 1, "tanh") X(Asinh, 1, "asinh")         \
              X(Acosh, 1, "acosh") X(Atanh, 1, "atanh") X(Sigmoid, 1, "sigmoid") X(Erf, 1, "erf") \
                  X(Erfc, 1, "erfc") X(Erfinv, 1, "erfinv") X(Lgamma, 1, "lgamma")                \
                      X(Digamma, 1, "digamma") X(Floor, 1, "floor") X(Ceil, 1, "ceil")            \
                      X(Round, 1, "round")                                                        \
                          X(Trunc, 1, "trunc") X(Sign, 1, "sign") X(IsNan, 1, "isnan")            \
                              X(IsInf, 1, "isinf") X(LogicalNot, 1, "not") X(                     \
                                  BitwiseNot, 1, "bitwise_not") X(Add, 2, "add") X(Sub, 2, "sub") \
                                  X(Mul, 2, "mul") X(Div, 2, "div") X(FloorDiv, 2, "floordiv")    \
                                      X(TruncDiv, 2, "truncdiv") X(Remainder, 2, "remainder") X(  \
                                          Fmod, 2, "fmod") X(Pow, 2, "pow")                       \
                                          X(Maximum, 2, "maximum") X(Minimum, 2, "minimum") X(    \
                                              Atan2, 2, "atan2") X(Hypot, 2, "hypot")             \
                                              X(CopySign, 2, "copysign") X(Eq, 2, "eq") X(        \
                                                  Ne, 2, "ne") X(Lt, 2, "lt") X(Le, 2, "le")      \
                                                  X(Gt, 2, "gt") X(Ge, 2, "ge") X(                \
                                                      LogicalAnd, 2, "and") X(LogicalOr, 2, "or") \
                                                      X(LogicalXor, 2, "xor")                     \
                                                          X(BitwiseAnd, 2, "bitwise_and")         \
                                                              X(BitwiseOr, 2, "bitwise_or")       \
                                                                  X(BitwiseXor, 2, "bitwise_xor") \
                                                                      X(ShiftLeft, 2, "shl")      \
                                                                          X(ShiftRight, 2, "shr") \
                                                                              X(Where, 3, "where")
// clang-format on

enum class InstrKind : uint8_t {
  Load,       // buffer[index] (logical index into the buffer's dims); optional mask
  Constant,   // a scalar literal of `dtype`
  IndexExpr,  // the value of a sym expression over index symbols (dtype Int64 or Int32)
  Cast,       // operand 0 converted to `dtype`
  Rand,       // uniform [0, 1) float from seed operand 0 (an Int64 value) and `expr` (offset)
  Randn,      // standard normal, same inputs as Rand
  // Indirect (data-dependent) indexing, as Inductor's ops.indirect_indexing: binds the symbol
  // in `expr` (a fresh symbol "t<N>" from LoweringContext::fresh_vars(1, 't')) to the value of
  // operand 0 (an integer instruction), for the Load indices of later instructions of the same
  // body. The result is that value as Int64. Lowerings wrap negative indices before it and set
  // the symbol's range to the valid index range. A Load whose index depends on such a symbol
  // reads a data-dependent location (dependency analysis must treat it as reading the whole
  // buffer).
  Indirect,
#define COIL_BODY_OP_ENUM(name, arity, text) name,
  COIL_BODY_OPS(COIL_BODY_OP_ENUM)
#undef COIL_BODY_OP_ENUM
};

std::string_view instr_kind_name(InstrKind k);  // "load", "add", ...
int instr_kind_arity(InstrKind k);              // operands; Load: 0 (+ optional mask)

struct Instr {
  InstrKind kind = InstrKind::Constant;
  DType dtype = DType::Float32;  // result type
  InstrId operands[3] = {-1, -1, -1};
  // Load
  BufferId buffer = -1;
  std::vector<sym::Expr> index;  // one expr per buffer dim
  InstrId mask = -1;             // Load: if >= 0 and false, no memory access; the value is 0
  // IndexExpr / Rand offset / Indirect: the bound symbol
  sym::Expr expr = nullptr;
  // Constant: floats in `fvalue`, integers and bools in `ivalue`
  double fvalue = 0;
  int64_t ivalue = 0;
};

struct Body {
  std::vector<Instr> instrs;
  InstrId result = -1;
};

// Removes the instructions that neither the result nor an Indirect binding (whose symbol a
// load's index may use) reaches, and renumbers the rest in order. Builders leave such
// instructions behind: a folded cast appends its converted constant beside the original, and
// a lowering may build a value it then does not use. Kept, they would be printed in generated
// code meant to be read and counted as loads by the scheduler.
void drop_unused_instrs(Body& body);

// Appends instructions to a Body, with common-subexpression elimination (an identical
// instruction already present is returned instead of appended). Instructions already in the
// body when the builder is created take part in CSE too.
//
// Load's dtype is the loaded value's type after conversion: dtype_compute(buffer dtype), so a
// load from an f16 buffer yields f32.
class BodyBuilder {
 public:
  explicit BodyBuilder(Body& body) : body_(&body) {}
  InstrId load(BufferId buffer, DType dtype, std::vector<sym::Expr> index, InstrId mask = -1);
  InstrId constant(double v, DType dtype);  // integral dtypes: v is converted
  InstrId int_constant(int64_t v, DType dtype);
  InstrId index_expr(sym::Expr e, DType dtype = DType::Int64);
  InstrId cast(InstrId v, DType dtype);  // returns v when already of that dtype
  InstrId op(InstrKind kind, DType dtype, InstrId a, InstrId b = -1, InstrId c = -1);
  InstrId rand(InstrId seed, sym::Expr offset, bool normal);
  // Binds `symbol` to integer value v (see InstrKind::Indirect); returns the Indirect instr.
  InstrId indirect(InstrId v, sym::Expr symbol);
  DType dtype(InstrId v) const { return body_->instrs.at(v).dtype; }
  Body& body() { return *body_; }

 private:
  InstrId append(Instr instr);
  void index_pending();
  Body* body_;
  std::unordered_map<size_t, std::vector<InstrId>> cse_;  // instruction hash -> ids
  size_t indexed_ = 0;                                    // instrs [0, indexed_) are in cse_
};

}  // namespace coil::loop
