// The CPU emitter's names for the shared index-expression printer (backend/common).
#pragma once

#include "coil/backend/common/cpp_expr.h"

namespace coil::backend::cpu {

using backend::cpp_identifier;
using backend::cpp_index_expr;
using backend::cpp_int_literal;

}  // namespace coil::backend::cpu
