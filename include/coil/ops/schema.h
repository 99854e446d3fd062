// An op's schema: its arguments' names and kinds and how many results it returns, parsed from
// PyTorch's schema text ("add.Tensor(Tensor self, Tensor other, *, Scalar alpha=1) -> Tensor").
//
// coil's built-in ops take their schemas from a table generated from torch
// (src/ops/schemas.inc, tools/gen_op_schemas.py); a plugin passes its op's schema text to
// Registrar::add_op. An op without one is not checked against it (schema.known() is false).
// verify_graph_meta checks every node of an op with a schema: keyword names, arguments given
// twice, missing required arguments, too many positional arguments; OpCall::arg checks that
// the name a meta function asks for is the schema's name of that position.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace coil::ops {

enum class ArgKind : uint8_t {
  Tensor,      // Tensor (a graph value, or a Python number where PyTorch wraps one)
  TensorList,  // Tensor[], Tensor?[]
  Number,      // Scalar, int, SymInt, float, bool
  NumberList,  // int[], SymInt[], float[], bool[]
  Other,       // ScalarType, Device, Layout, MemoryFormat, str, Generator, ...
};

struct ArgSchema {
  std::string name;
  ArgKind kind = ArgKind::Other;
  bool optional = false;     // "T?": None is allowed
  bool has_default = false;  // "=..." in the schema: may be left out
  bool kwarg_only = false;   // after the "*"
};

struct OpSchema {
  std::vector<ArgSchema> args;
  // Number of results; -1 when the schema returns a list (Tensor[]) or is unknown.
  int num_outputs = -1;
  bool known = false;

  // The index of the argument `name`, or -1.
  int index_of(std::string_view name) const;
};

// Parses PyTorch's schema text, with or without the leading "namespace::name.overload" (only
// the part from the '(' on is read). nullopt when the text is not a schema.
std::optional<OpSchema> parse_schema(std::string_view text);

// The schema text of a built-in op from the generated table (src/ops/schemas.inc), or "" when
// the table has none (coil's own ops, ops added after the table was generated).
std::string_view builtin_schema_text(std::string_view op);

}  // namespace coil::ops
