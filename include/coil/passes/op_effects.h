// What the passes may assume about an op from its name alone. The graph text carries no
// schema or tags, so these are conservative rules on the overload name
// ("namespace.packet.overload"), shared by dce and cse.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include "coil/graph/graph.h"

namespace coil::passes {

// The op draws random numbers (PyTorch's Tag.nondeterministic_seeded: rand, randn_like,
// bernoulli, native_dropout, normal, ...; the list in op_effects.cpp was taken from torch's
// tags). Two such nodes are two draws, never one.
bool is_random_op(std::string_view op);

// The op writes memory or does something besides computing its outputs: in-place ops (packet
// name ending in '_': aten.copy_.default, an input mutation), out= overloads, asserts and
// effect tokens (aten._assert_async, aten._functional_assert_async, sym_constrain_range, ...),
// and every op outside the aten and prims namespaces (custom ops: their schema, and so their
// effects, are not in the text).
bool has_side_effects(std::string_view op);

// A node the passes must keep even when nothing reads its outputs: one without outputs (it
// exists for its effect) or of an op with side effects.
bool must_keep(const Node& n);

// The same rules, applied once per op and then looked up by the node's interned id (a graph
// has a few dozen distinct ops among thousands of nodes). One per pass run: no state outlives
// it.
class OpEffectCache {
 public:
  bool is_random_op(OpId op) { return (bits(op) & kRandom) != 0; }
  bool has_side_effects(OpId op) { return (bits(op) & kEffects) != 0; }
  bool must_keep(const Node& n) { return n.outputs().empty() || has_side_effects(n.op_id()); }

 private:
  enum : uint8_t { kKnown = 1, kRandom = 2, kEffects = 4 };
  uint8_t bits(OpId op);
  std::vector<uint8_t> bits_;  // by OpId index; 0: not computed yet
};

}  // namespace coil::passes
