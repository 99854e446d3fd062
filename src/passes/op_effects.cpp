#include "coil/passes/op_effects.h"

#include <algorithm>
#include <iterator>

namespace coil::passes {
namespace {

struct OpName {
  std::string_view ns, packet, overload;
};

// "aten.add.Tensor" -> {aten, add, Tensor}; "aten.add" -> {aten, add, ""}.
OpName split(std::string_view op) {
  OpName n;
  size_t a = op.find('.');
  if (a == std::string_view::npos) {
    n.packet = op;
    return n;
  }
  n.ns = op.substr(0, a);
  std::string_view rest = op.substr(a + 1);
  size_t b = rest.find('.');
  n.packet = rest.substr(0, b);
  if (b != std::string_view::npos) n.overload = rest.substr(b + 1);
  return n;
}

// Packets of aten ops with an overload tagged nondeterministic_seeded, listed from torch 2.13:
//   [p for p in dir(torch.ops.aten) if any(torch.Tag.nondeterministic_seeded in
//    getattr(getattr(torch.ops.aten, p), o).tags for o in getattr(torch.ops.aten, p).overloads())]
// In-place ones (bernoulli_, ...) are side effects anyway.
constexpr std::string_view kRandomAten[] = {
    "_cudnn_rnn",
    "_efficient_attention_forward",
    "_flash_attention_forward",
    "_flash_attention_forward_no_dropout_inplace",
    "_fused_dropout",
    "_scaled_dot_product_attention_math_for_mps",
    "_scaled_dot_product_cudnn_attention",
    "_scaled_dot_product_cudnn_attention_backward",
    "_scaled_dot_product_efficient_attention",
    "_scaled_dot_product_efficient_attention_backward",
    "_scaled_dot_product_flash_attention",
    "_scaled_dot_product_flash_attention_for_cpu",
    "_scaled_dot_product_fused_attention_overrideable",
    "_standard_gamma",
    "alpha_dropout",
    "bernoulli",
    "bernoulli_",
    "cauchy",
    "cauchy_",
    "dropout",
    "exponential",
    "exponential_",
    "geometric",
    "geometric_",
    "gru",
    "log_normal",
    "log_normal_",
    "lstm",
    "miopen_rnn",
    "multinomial",
    "native_dropout",
    "normal",
    "normal_",
    "poisson",
    "rand",
    "rand_like",
    "randint",
    "randint_like",
    "randn",
    "randn_like",
    "randperm",
    "rnn_relu",
    "rnn_tanh",
    "rrelu_with_noise",
    "rrelu_with_noise_",
    "rrelu_with_noise_functional",
    "uniform",
    "uniform_",
};
// prims tagged the same way.
constexpr std::string_view kRandomPrims[] = {"normal", "uniform"};

// Prefixes of aten packets that exist for an effect: asserts, shape constraints, effect tokens
// (the functional variants return a token tensor nothing reads), printing.
constexpr std::string_view kEffectfulAtenPrefixes[] = {"_assert",
                                                       "_functional_assert",
                                                       "_functional_sym_constrain_range",
                                                       "sym_constrain_range",
                                                       "_make_dep_token",
                                                       "_print"};

template <size_t N>
bool contains(const std::string_view (&list)[N], std::string_view s) {
  return std::find(std::begin(list), std::end(list), s) != std::end(list);
}

}  // namespace

bool is_random_op(std::string_view op) {
  OpName n = split(op);
  if (n.ns == "aten") return contains(kRandomAten, n.packet);
  if (n.ns == "prims") return contains(kRandomPrims, n.packet);
  return false;
}

bool has_side_effects(std::string_view op) {
  OpName n = split(op);
  if (n.ns != "aten" && n.ns != "prims") return true;
  if (n.packet.empty() || n.packet.back() == '_') return true;  // in place
  if (n.overload == "out" || n.overload.ends_with("_out")) return true;
  if (n.ns == "aten") {
    for (std::string_view p : kEffectfulAtenPrefixes) {
      if (n.packet.starts_with(p)) return true;
    }
  }
  return false;
}

bool must_keep(const Node& n) { return n.outputs().empty() || has_side_effects(n.op()); }

uint8_t OpEffectCache::bits(OpId op) {
  if (op.index() >= bits_.size()) bits_.resize(op.index() + 1, 0);
  uint8_t& b = bits_[op.index()];
  if (b == 0) {
    const std::string& name = op.name();
    b = kKnown | (passes::is_random_op(name) ? kRandom : 0) |
        (passes::has_side_effects(name) ? kEffects : 0);
  }
  return b;
}

}  // namespace coil::passes
