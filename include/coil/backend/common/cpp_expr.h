// Printing sym::Expr as C++ integer arithmetic, shared by the C++ (CPU) and CUDA emitters: both
// generated languages print index math the same way.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "coil/sym/expr.h"

namespace coil::backend {

// `name` maps a symbol to its C++ variable (nullptr: the sanitized symbol name).
// FloorDiv / Mod print as `/` / `%` when both operands are provably nonnegative (divisor
// positive), else through coil::m::floordiv / remainder (Python semantics); each backend's
// prelude provides those two.
std::string cpp_index_expr(const sym::Context& ctx, sym::Expr e,
                           const std::function<std::string(sym::Expr)>& name = nullptr);

// A C++ identifier for a symbol name ("s0" stays "s0").
std::string cpp_identifier(std::string_view name);

// An integer literal (suffixed L beyond 32 bits).
std::string cpp_int_literal(int64_t v);

}  // namespace coil::backend
