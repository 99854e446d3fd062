// Interned op names: an OpId is a small integer that stands for one op overload name
// ("aten.add.Tensor"), so that passes, lowering and the verifier compare and index by an
// integer instead of comparing strings at each use.
//
// A name is interned once, when a Node is created or parsed (Graph::add_node); the same name
// always gives the same id, in every graph of the process (like PyTorch's c10::Symbol). The
// table is process-wide, append-only and thread-safe: interning takes a lock, reading a name
// back (OpId::name, printing) takes none, and an id stays valid for the life of the process.
//
// The ops that code refers to by name (lower/, passes/) are interned first, in the order of
// COIL_KNOWN_OPS, so their ids are compile-time constants: `n.op_id() == opid::aten_mm_default`
// is one integer compare. Every other name (the op table's entries, a plugin's, an op coil does
// not know) gets the next free id when first seen.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace coil {

// X(identifier, "overload name"): the identifier is the name with '.' spelled '_'.
#define COIL_KNOWN_OPS(X)                                                   \
  X(aten_copy__default, "aten.copy_.default")                               \
  X(aten_clone_default, "aten.clone.default")                               \
  X(aten_mm_default, "aten.mm.default")                                     \
  X(aten_addmm_default, "aten.addmm.default")                               \
  X(aten_convolution_default, "aten.convolution.default")                   \
  X(aten_convolution_backward_default, "aten.convolution_backward.default") \
  X(aten_bmm_default, "aten.bmm.default")                                   \
  X(aten_baddbmm_default, "aten.baddbmm.default")                           \
  X(aten_permute_default, "aten.permute.default")                           \
  X(aten_t_default, "aten.t.default")                                       \
  X(aten_transpose_int, "aten.transpose.int")                               \
  X(aten_view_default, "aten.view.default")                                 \
  X(aten__unsafe_view_default, "aten._unsafe_view.default")                 \
  X(aten_reshape_default, "aten.reshape.default")                           \
  X(aten_expand_default, "aten.expand.default")                             \
  X(aten_unsqueeze_default, "aten.unsqueeze.default")                       \
  X(aten_squeeze_dim, "aten.squeeze.dim")                                   \
  X(aten_squeeze_dims, "aten.squeeze.dims")                                 \
  X(aten_add_Tensor, "aten.add.Tensor")                                     \
  X(aten_scatter_value, "aten.scatter.value")                               \
  X(aten_as_strided_scatter_default, "aten.as_strided_scatter.default")     \
  X(aten__scaled_dot_product_flash_attention_default,                       \
    "aten._scaled_dot_product_flash_attention.default")

class OpId {
 public:
  // An invalid id (no name); valid() is false.
  constexpr OpId() = default;
  // The id with this index. For the known-op constants and tables indexed by id; an index
  // that was never handed out fails in name().
  constexpr explicit OpId(uint32_t index) : index_(index) {}

  // The id of `name`, interning it when first seen. Thread-safe.
  static OpId of(std::string_view name);
  // The id of `name` if it was ever interned, else nullopt (interns nothing: a lookup by a name
  // nobody has used cannot find an op).
  static std::optional<OpId> find(std::string_view name);
  // How many names are interned (ids are 0 .. count-1).
  static size_t count();

  // The name; stays valid (and at the same address) for the life of the process.
  const std::string& name() const;
  constexpr uint32_t index() const { return index_; }
  constexpr bool valid() const { return index_ != kInvalid; }

  friend constexpr bool operator==(OpId a, OpId b) = default;
  friend constexpr auto operator<=>(OpId a, OpId b) = default;

 private:
  static constexpr uint32_t kInvalid = UINT32_MAX;
  uint32_t index_ = kInvalid;
};

// The known ops' ids, as constants: opid::aten_mm_default.
namespace opid {
namespace detail {
enum : uint32_t {
#define COIL_KNOWN_OP_INDEX(ident, name) ident,
  COIL_KNOWN_OPS(COIL_KNOWN_OP_INDEX)
#undef COIL_KNOWN_OP_INDEX
      kKnownCount
};
}  // namespace detail
#define COIL_KNOWN_OP_CONST(ident, name) inline constexpr OpId ident{detail::ident};
COIL_KNOWN_OPS(COIL_KNOWN_OP_CONST)
#undef COIL_KNOWN_OP_CONST
inline constexpr size_t kKnownCount = detail::kKnownCount;
}  // namespace opid

}  // namespace coil

template <>
struct std::hash<coil::OpId> {
  size_t operator()(coil::OpId id) const noexcept { return id.index(); }
};
