// The C++ expression of one scalar loop-IR instruction, shared by the C++ (CPU) and CUDA
// emitters: both generated languages compute in the same types (bf16/f16 in float) and call the
// same coil::m:: math functions (runtime_headers/coil/vmath.h, runtime_headers/coil/cuda/
// prelude.cuh), so only loads and index math differ between them.
#pragma once

#include <functional>
#include <string>

#include "coil/graph/dtype.h"
#include "coil/loop/body.h"

namespace coil::backend {

// The C++ type values of `t` are computed in (bfloat16 and float16 compute in float).
std::string compute_ctype(DType t);

// A floating literal of the compute type of `t` (nan and inf through coil::numeric).
std::string float_literal(double v, DType t);

// `v` (a compute-type expression) converted to the stored type `t`: coil::to_bf16 /
// coil::to_half for the 16-bit floats, a C++ cast otherwise.
std::string stored_value(DType t, const std::string& v);

// `v` rounded to `t` and kept in the compute type (a bf16/f16 value held in a float register
// as the store would round it); other types unchanged.
std::string rounded_value(DType t, const std::string& v);

struct ScalarExprHooks {
  std::function<std::string(loop::InstrId)> value;  // the name holding an instruction's value
  std::function<std::string(sym::Expr)> index;      // index math printed as C++
  std::function<std::string(const loop::Instr&, loop::InstrId)> load;  // a Load instruction
};

// The expression computing instruction `id` of `b` (its operands by h.value).
std::string scalar_instr_expr(const loop::Body& b, loop::InstrId id, const ScalarExprHooks& h);

}  // namespace coil::backend
