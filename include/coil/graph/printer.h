// Text form of a Graph (the syntax is documented at the top of graph.h).
#pragma once

#include <string>

#include "coil/graph/graph.h"

namespace coil {

// The whole graph, one line per node, ending with a newline. Values are renumbered densely in
// definition order (inputs first). print_graph(parse_graph(print_graph(g))) == print_graph(g).
std::string print_graph(const Graph& g);

// Pieces of the text form, for debug output and other printers.
std::string print_meta(sym::Context& ctx, const TensorMeta& meta);  // "f32[4, s0]{1, 4}"
// A double that parses back bit-exactly and always reads as a float: "1.0", "1e-05", "inf",
// "-inf", "nan" (every NaN prints as "nan"; the sign and payload of a NaN are not kept).
std::string format_double(double v);
// A double-quoted string with C escapes (\\, \", \n, \t, \r, and \xHH for other bytes outside
// printable ASCII; \xHH always has exactly two hex digits).
std::string quote_string(std::string_view s);

}  // namespace coil
