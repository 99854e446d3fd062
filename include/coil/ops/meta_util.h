// Helpers shared by the meta functions of the op families: argument access, dims,
// broadcasting and PyTorch's type promotion.
#pragma once

#include <optional>
#include <vector>

#include "coil/ops/registry.h"

namespace coil::ops {

// The tensor meta of a Value argument (CompileError when the argument is not a tensor).
const TensorMeta& tensor_arg(const OpCall& c, size_t i, std::string_view name);
// Optional typed scalar args (nullopt when absent or None).
std::optional<int64_t> opt_int(const OpCall& c, size_t i, std::string_view name);
bool bool_arg(const OpCall& c, size_t i, std::string_view name, bool dflt);
std::optional<DType> opt_dtype(const OpCall& c, size_t i, std::string_view name);
// An int list argument (a single int reads as a one-element list); nullopt if absent/None.
std::optional<std::vector<int64_t>> opt_int_list(const OpCall& c, size_t i, std::string_view name);
// A size: int or sym argument.
sym::Expr size_arg(sym::Context& ctx, const Arg& a);

// Wraps a possibly negative dim into [0, rank); rank 0 accepts -1 and 0 (PyTorch).
int64_t wrap_dim(int64_t dim, int64_t rank);

// Broadcast shape of several shapes (CompileError if sizes provably differ and neither is 1).
std::vector<sym::Expr> broadcast_shapes(sym::Context& ctx,
                                        const std::vector<std::vector<sym::Expr>>& shapes);

// One operand of type promotion (PyTorch's at::result_type): a tensor (dim > 0 or zero-dim)
// or a Python scalar (which only counts through its category: bool < int < float).
struct PromoOperand {
  DType dtype;
  enum Kind { Tensor, ZeroDimTensor, Scalar } kind;
};
DType result_type(const std::vector<PromoOperand>& operands);
// The promotion operand of an arg: tensor values and Python numbers; nullopt for others.
std::optional<PromoOperand> promo_operand(const Arg& a);
// Whether positional operand `i` of pointwise op `op` is a Scalar in its schema
// (aten.mul.Scalar's `other`, where.ScalarOther's `other`, ...). A graph value there is a 0-d
// carrier of a symbolic Python number (a SymFloat passed as f64[]): it promotes as the number
// it carries, not as a 0-d tensor (f32[] * f64[] carrier is f32, as mul.Scalar(f32, 2.5) is).
// Read from the op's schema (a number kind at that position); for an op without one, from
// the overload name (".Scalar": `other`, ".Scalar_Tensor": `self`, ...).
bool is_scalar_slot(OpId op, size_t i);

// Strides of a fresh result of `sizes` laid out like the inputs (PyTorch's TensorIterator
// rule: dims ordered by the inputs' strides, broadcast dims ignored); row-major when the
// inputs do not decide.
std::vector<sym::Expr> pointwise_strides(sym::Context& ctx, const std::vector<sym::Expr>& sizes,
                                         const std::vector<const TensorMeta*>& inputs);

TensorMeta make_contiguous(sym::Context& ctx, DType dtype, Device device,
                           std::vector<sym::Expr> sizes);

// Memory formats (PyTorch's suggest_memory_format / are_strides_like_channels_last): whether a
// 4-D (5-D) tensor's strides look channels-last (channels-last-3d). Undecidable symbolic
// comparisons count as "no", as PyTorch's guard_or_true does.
bool strides_like_channels_last(sym::Context& ctx, const TensorMeta& m);
// A fresh tensor of `sizes`, channels-last (4-d) or channels-last-3d (5-d; C fastest, then the
// spatial dims innermost-first, then N) when `channels_last`, else row-major
// (torch.empty(..., memory_format=suggest_memory_format(m)) with channels_last from
// strides_like_channels_last(m)).
TensorMeta make_like_format(sym::Context& ctx, DType dtype, Device device,
                            std::vector<sym::Expr> sizes, bool channels_last);
// PyTorch's is_non_overlapping_and_dense (size-0/1 dims ignored); false when undecidable.
bool non_overlapping_and_dense(sym::Context& ctx, const TensorMeta& m);
// Strides of torch.empty_like(m) / m.clone() (memory_format=preserve_format): m's own strides
// when it is non-overlapping and dense, else dense strides in m's stride order.
std::vector<sym::Expr> preserve_format_strides(sym::Context& ctx, const TensorMeta& m);

// ---- Creation and layout helpers (factory ops, *_like ops, memory_format).

// A device argument (nullopt when absent or None).
std::optional<Device> opt_device(const OpCall& c, size_t i, std::string_view name);
// A size list argument (ints and syms; a single int reads as a one-element list).
std::vector<sym::Expr> size_list_arg(sym::Context& ctx, const OpCall& c, size_t i,
                                     std::string_view name);
// The dtype PyTorch's factories infer from a fill value when dtype= is absent (full,
// full_like's value is cast instead): bool -> bool, int -> i64, float -> the default (f32).
DType scalar_default_dtype(const Arg& a);

enum class MemoryFormat { Preserve, Contiguous, ChannelsLast };
// A memory_format argument ("torch.preserve_format", ... as the exporter writes it).
MemoryFormat memory_format_arg(const OpCall& c, size_t i, std::string_view name, MemoryFormat dflt);

// A fresh tensor shaped like `in` (empty_like and the *_like ops): preserve_format gives
// preserve_format_strides(in), the other formats their own strides.
TensorMeta like_meta(sym::Context& ctx, const TensorMeta& in, DType dtype, Device device,
                     MemoryFormat format = MemoryFormat::Preserve);

}  // namespace coil::ops
