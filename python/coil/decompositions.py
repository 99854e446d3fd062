"""coil's decomposition table (applied by AOTAutograd while it traces ATen graphs).

The choice: coil's C++ lowers a *primitive set* (docs/primitive-ops.md lists what the model
set produces), and everything composite is decomposed here, in Python, by PyTorch's own
reference decompositions (torch._decomp), so that C++ sees few op kinds:

  kept (lowered by C++, NOT in this table):
    pointwise math and comparisons, where, clamp, relu, gelu / gelu_backward,
    sigmoid_backward / tanh_backward / threshold_backward (one pointwise body each; the
    decompositions would only add nodes), prims.convert_element_type, _to_copy;
    creation: full, scalar_tensor, arange/iota, empty;
    reductions: sum, mean, amax, amin, max.dim, argmax, argmin, var / std / var_mean, prod,
    any, all (mean and var_mean are kept: a reduction node is easier to fuse than its
    decomposition, and layer/batch norm decompose *into* var_mean), _softmax (its
    decomposition's exp(x - max) has two readers, which the reuse rule may realize);
    views: view, _unsafe_view, permute, expand, squeeze, unsqueeze, slice, select, as_strided;
    cat, constant_pad_nd, embedding, index.Tensor, gather, index_select, index_put,
    scatter_add; mm / bmm / addmm (extern GEMM with a bias epilogue), convolution,
    convolution_backward (extern), max_pool2d_with_indices (+backward), avg_pool2d
    (+backward), _adaptive_avg_pool2d; rand_like / bernoulli (dropout's randomness);
    prims.rev (flip), sgn, prims.sum / prims.prod (cumsum / cumprod decompose into them),
    found missing by the OpInfo sweep (docs/opinfo.md).

  decomposed (this table): log_softmax, the backward of both softmaxes, layer / batch / group
    norm (all training and inference variants) and their backward, silu / hardswish /
    hardsigmoid / hardtanh / leaky_relu / elu / softplus / mish (+ backward), the losses
    (mse, nll, smooth_l1, huber, binary cross entropy), native_dropout (+backward),
    embedding_dense_backward (-> index_put with accumulate), addcmul / addcdiv / lerp, t /
    transpose (-> permute), baddbmm, split / split_with_sizes / unbind (-> slice/select),
    clone / copy (-> _to_copy), detach / alias (-> view), lift_fresh_copy, the *_like and
    new_* creation ops (-> full / empty), rsub, stack, flip, logsumexp,
    clamp_min / clamp_max, select_backward / slice_backward, _reshape_alias,
    _unsafe_index (-> index), tril / triu, mv / dot, bitwise not/and/or on bool (-> logical).

  coil's own decompositions of fused ops, one module each (docs/decisions.md): the CPU flash
    SDPA and its backward (decomp_sdpa.py), _embedding_bag and its backward
    (decomp_embedding_bag.py), the functional _foreach_* ops of a compiled optimizer step
    (decomp_foreach.py), topk with k <= 8 (decomp_topk.py); the composite ops the OpInfo
    sweep found running eagerly, by PyTorch's reference decompositions (decomp_opinfo.py);
    sort along a short dim, by pairwise ranks (decomp_sort.py); avg_pool3d (+ backward) as two
    avg_pool2d passes (decomp_pool.py); masked_scatter (+ backward) over small masks by a running
    count (decomp_masked.py); training batch norm in bf16/f16 on CPU normalized with the rounded
    statistics it saves, as eager's kernel does (decomp_batch_norm.py); CPU 1-d convolutions as
    2-d ones over a height of 1 (decomp_conv1d.py).

  left as extras (docs/primitive-ops.md): scatter.value (nll_loss_backward) and slice_scatter
    (slice_backward); Inductor lowers both directly, their decompositions are worse.

Ops that are neither lowered by C++ nor decomposed run through the per-op fallback (the
eager kernel), so a missing entry costs speed, never correctness.

Users add entries from outside the tree with coil.register_decomposition (extending.py,
docs/extending/custom-ops.md): coil_decompositions() lays them over this table, so they take
precedence over the entries here.
"""

from __future__ import annotations

import functools
from typing import Callable

import torch
from torch._decomp import get_decompositions

from .decomp_batch_norm import batch_norm_decompositions
from .decomp_conv1d import conv1d_decompositions
from .decomp_embedding_bag import embedding_bag_decompositions
from .decomp_foreach import foreach_decompositions
from .decomp_masked import masked_decompositions
from .decomp_opinfo import opinfo_decompositions
from .decomp_pool import pool_decompositions
from .decomp_sdpa import sdpa_decompositions
from .decomp_sort import sort_decompositions
from .decomp_topk import topk_decompositions
from .extending import user_decompositions

aten = torch.ops.aten

# The primitive set coil's C++ is meant to lower (op packet names, any overload). Ops in the
# graphs outside this set are listed as extras in docs/primitive-ops.md.
PRIMITIVE_OPS = frozenset("""
    add sub mul div neg abs exp log tanh sigmoid erf sqrt rsqrt reciprocal pow maximum minimum
    where eq ne lt le gt ge logical_and logical_or logical_not logical_xor clamp relu gelu
    gelu_backward sigmoid_backward tanh_backward threshold_backward convert_element_type
    _to_copy full scalar_tensor arange iota empty empty_strided sum mean amax amin max argmax
    _softmax
    argmin var_mean prod any all view _unsafe_view permute expand squeeze unsqueeze slice
    select as_strided cat constant_pad_nd embedding index index_select index_put gather
    scatter_add mm bmm addmm convolution convolution_backward max_pool2d_with_indices
    max_pool2d_with_indices_backward avg_pool2d avg_pool2d_backward _adaptive_avg_pool2d
    rand_like bernoulli rev sgn
""".split())

# OpOverloadPackets (all overloads) or single OpOverloads to decompose.
_DECOMPOSE = [
    # softmax family (aten._softmax itself is lowered by C++: src/lower/reduction.cpp)
    aten._log_softmax,
    # softmax with fully masked rows giving 0 (SDPA's math path with a mask, HF's BERT and T5 on
    # CUDA): a where() around the softmax coil lowers
    aten._safe_softmax,
    aten._softmax_backward_data,
    aten._log_softmax_backward_data,
    aten.logsumexp,
    # normalization
    aten.native_layer_norm,
    aten.native_layer_norm_backward,
    aten.native_batch_norm,
    aten.native_batch_norm_backward,
    aten._native_batch_norm_legit,
    aten._native_batch_norm_legit_no_training,
    aten._native_batch_norm_legit_functional,
    aten._batch_norm_with_update,
    aten._batch_norm_with_update_functional,
    aten._batch_norm_no_update,
    aten.batch_norm_backward,
    aten.native_group_norm,
    aten.native_group_norm_backward,
    # activations (and their backward)
    aten.silu,
    aten.silu_backward,
    aten.hardswish,
    aten.hardswish_backward,
    aten.hardsigmoid,
    aten.hardsigmoid_backward,
    aten.hardtanh,
    aten.hardtanh_backward,
    aten.leaky_relu,
    aten.leaky_relu_backward,
    aten.elu,
    aten.elu_backward,
    aten.softplus,
    aten.softplus_backward,
    aten.mish,
    aten.log_sigmoid_forward,
    aten.log_sigmoid_backward,
    aten.clamp_min,
    aten.clamp_max,
    # losses
    aten.mse_loss,
    aten.mse_loss_backward,
    aten.nll_loss_forward,
    aten.nll_loss_backward,
    aten.smooth_l1_loss,
    aten.smooth_l1_loss_backward,
    aten.huber_loss,
    aten.huber_loss_backward,
    aten.binary_cross_entropy,
    aten.binary_cross_entropy_backward,
    aten.binary_cross_entropy_with_logits,
    # dropout
    aten.native_dropout,
    aten.native_dropout_backward,
    # embedding / indexing backward
    aten.embedding_dense_backward,
    aten.select_backward,
    aten.slice_backward,
    aten._unsafe_index,
    aten._unsafe_masked_index,
    aten._unsafe_masked_index_put_accumulate,
    # pointwise composites
    aten.addcmul,
    aten.addcdiv,
    aten.lerp,
    aten.rsub,
    aten.tril,
    aten.triu,
    aten.masked_fill,
    # linear algebra composites
    aten.t,
    aten.transpose.int,
    aten.baddbmm,
    aten.mv,
    aten.dot,
    # views / shape composites
    # split.Tensor / split_with_sizes: see _coil_overrides (-> slice)
    aten.unbind,
    aten.stack,
    aten.flip,
    aten._reshape_alias,
    # copies and aliases: see _coil_overrides below
    aten.lift_fresh_copy,
    # creation composites
    aten.zeros_like,
    aten.ones_like,
    aten.empty_like,
    aten.full_like,
    aten.new_zeros,
    aten.new_ones,
    aten.new_full,
    aten.new_empty,
    aten.zero,
    aten.fill,
    aten.ones,
    aten.zeros,
    # core ATen ops the OpInfo sweep found running eagerly (docs/op_coverage.md)
    aten.cumsum,  # -> where(arange <= arange) + prims.sum
    aten.diagonal,  # -> as_strided
    aten.repeat,  # -> expand + clone + view
    aten.cumprod,  # -> where(arange <= arange) + prims.prod
    aten.index_add,  # -> index_put(accumulate=True)
    aten.grid_sampler_2d,  # -> pointwise + index
]


# Largest (index elements x destination size along dim) that _scatter_reduce_dense expands to
# a dense mask; bigger scatters run eagerly (per-op fallback) instead of costing quadratic work.
SCATTER_REDUCE_DENSE_LIMIT = 1 << 16


def _scatter_reduce_dense(x, dim, index, src, reduce, include_self):
    """scatter_reduce as a masked dense reduction: out[.., j, ..] combines self with the src
    elements p where index[.., p, ..] == j, via a [.., n, m, ..] mask (n = self.size(dim),
    m = index.size(dim)) reduced over m. Only when the mask is small
    (SCATTER_REDUCE_DENSE_LIMIT); NotImplemented otherwise (the op runs eagerly).
    Integer mean divides with floor, as ATen does."""
    rank = x.dim()
    if rank == 0 or index.dim() != rank or x.dtype == torch.bool or src.dim() != rank:
        return NotImplemented
    if reduce not in ("sum", "prod", "mean", "amax", "amin"):
        return NotImplemented
    dim = dim % rank
    # Outside dim, index may be smaller than self: reduce into that leading window of self and
    # write it back with slice_scatter.
    windows = []
    for k in range(rank):
        if k != dim and index.shape[k] != x.shape[k]:
            if index.shape[k] > x.shape[k]:
                return NotImplemented
            windows.append((k, x))
            x = aten.slice.Tensor(x, k, 0, index.shape[k])
    n, m = x.shape[dim], index.shape[dim]
    if index.numel() * n > SCATTER_REDUCE_DENSE_LIMIT or index.numel() == 0:
        return NotImplemented
    for k in range(rank):  # src's leading window of index's shape
        if src.shape[k] != index.shape[k]:
            src = aten.slice.Tensor(src, k, 0, index.shape[k])
    floating = x.is_floating_point()
    j = aten.arange.default(n, dtype=torch.int64, device=x.device)
    j = aten.view.default(j, [n] + [1] * (rank - dim))
    mask = aten.eq.Tensor(aten.unsqueeze.default(index, dim), j)  # [.., n, m, ..]
    s = aten.unsqueeze.default(src, dim)
    red = dim + 1
    cnt = aten.sum.dim_IntList(mask, [red])
    scattered = aten.gt.Scalar(cnt, 0)
    if reduce in ("sum", "mean"):
        r = aten.sum.dim_IntList(aten.where.ScalarOther(mask, s, 0.0 if floating else 0), [red],
                                 dtype=x.dtype)
    elif reduce == "prod":
        r = aten.prod.dim_int(aten.where.ScalarOther(mask, s, 1.0 if floating else 1), red,
                              dtype=x.dtype)
    else:
        if floating:
            fill = float("-inf") if reduce == "amax" else float("inf")
        else:
            info = torch.iinfo(x.dtype)
            fill = info.min if reduce == "amax" else info.max
        r = getattr(aten, reduce).default(aten.where.ScalarOther(mask, s, fill), [red])
    if include_self:
        if reduce in ("sum", "mean"):
            r = aten.add.Tensor(x, r)
        elif reduce == "prod":
            r = aten.mul.Tensor(x, r)
        else:
            r = (aten.maximum if reduce == "amax" else aten.minimum).default(x, r)
        if reduce == "mean":
            cnt = aten.add.Tensor(cnt, 1)
    if reduce == "mean":
        cnt = aten.clamp_min.default(cnt, 1)
        r = (aten.div.Tensor(r, cnt) if floating else
             aten.div.Tensor_mode(r, cnt, rounding_mode="floor"))
    if not include_self:
        r = aten.where.self(scattered, r, x)
    for k, outer in reversed(windows):
        r = aten.slice_scatter.default(outer, r, k, 0, index.shape[k])
    return r


def _coil_overrides() -> dict:
    """Decompositions of coil's own, where PyTorch's reference ones would produce prims.* ops
    (prims.view_of, prims.clone) that are not in coil's primitive set."""

    def alias(x):
        # A view with the same sizes is an alias (same storage, strides, offset).
        return aten.view.default(x, list(x.shape))

    def clone(x, *, memory_format=None):
        # _to_copy is a primitive; with no dtype/device it is a clone.
        if memory_format is None:
            return aten._to_copy.default(x)
        return aten._to_copy.default(x, memory_format=memory_format)

    def copy(self, src, non_blocking=False):
        # Functional copy: src broadcast to self's shape, in self's dtype; strides like clone.
        out = src
        if out.dtype != self.dtype or out.device != self.device:
            out = aten._to_copy.default(out, dtype=self.dtype, device=self.device)
        if list(out.shape) != list(self.shape):
            out = aten.expand.default(out, list(self.shape))
        return aten._to_copy.default(out, memory_format=torch.preserve_format)

    def full_like(x, fill_value, *, dtype=None, layout=None, device=None, pin_memory=None,
                  memory_format=None):
        # -> full when the result is contiguous; otherwise keep full_like (strided result).
        mf = memory_format or torch.preserve_format
        if not (mf == torch.contiguous_format or x.is_contiguous()):
            return NotImplemented
        return aten.full.default(list(x.shape), fill_value, dtype=dtype or x.dtype,
                                 layout=layout or x.layout, device=device or x.device,
                                 pin_memory=pin_memory)

    ref_index_add = get_decompositions([aten.index_add])[aten.index_add.default]

    def index_add(x, dim, index, source, *, alpha=1):
        # PyTorch's reference (index_put with accumulate) rounds bf16/f16 after every add; eager
        # index_add sums in float32 and rounds once: with 5 indices equal, the reference's
        # error was 10x eager's (fuzz seed 419). So low precision goes through float32.
        if x.dtype not in (torch.bfloat16, torch.float16):
            return ref_index_add(x, dim, index, source, alpha=alpha)
        out = ref_index_add(aten._to_copy.default(x, dtype=torch.float32), dim, index,
                            aten._to_copy.default(source, dtype=torch.float32), alpha=alpha)
        return aten._to_copy.default(out, dtype=x.dtype)

    def split_with_sizes(x, split_sizes, dim=0):
        dim = dim % max(x.dim(), 1)
        out, start = [], 0
        for n in split_sizes:
            out.append(aten.slice.Tensor(x, dim, start, start + n))
            start += n
        return out

    def split(x, split_size, dim=0):
        dim = dim % max(x.dim(), 1)
        size = x.shape[dim]
        if split_size == 0:
            return NotImplemented
        sizes = [min(split_size, size - i) for i in range(0, size, split_size)] or [0]
        return split_with_sizes(x, sizes, dim)

    def unsafe_index_put(x, indices, values, accumulate=False):
        # Same semantics as index_put without the bounds check, which coil does not do anyway.
        return aten.index_put.default(x, indices, values, accumulate)

    def bitwise_not(x):
        return aten.logical_not.default(x) if x.dtype == torch.bool else NotImplemented

    def bitwise_and(a, b):
        if a.dtype == torch.bool and b.dtype == torch.bool:
            return aten.logical_and.default(a, b)
        return NotImplemented

    def bitwise_or(a, b):
        if a.dtype == torch.bool and b.dtype == torch.bool:
            return aten.logical_or.default(a, b)
        return NotImplemented

    def round_decimals(x, decimals=0):
        # ATen's kernel: nearbyint(x * 10^d) / 10^d (d < 0: nearbyint(x / 10^-d) * 10^-d) in
        # the op-math type (float for bf16/f16); PyTorch's decomposition uses prims ops.
        if not x.is_floating_point():
            return NotImplemented
        low = x.dtype in (torch.bfloat16, torch.float16)
        y = torch.ops.prims.convert_element_type.default(x, torch.float32) if low else x
        t = 10.0 ** abs(decimals)
        if decimals < 0:
            r = aten.mul.Tensor(aten.round.default(aten.div.Tensor(y, t)), t)
        else:
            r = aten.div.Tensor(aten.round.default(aten.mul.Tensor(y, t)), t)
        return torch.ops.prims.convert_element_type.default(r, x.dtype) if low else r

    def scatter_add(x, dim, index, src):
        # An empty index (gather's backward for an empty index of another rank) adds nothing.
        if index.numel() == 0:
            return aten._to_copy.default(x)
        # The runtime kernel needs rank >= 1: a 0-d scatter_add is one on a [1] view.
        if x.dim() != 0 or index.numel() != 1:
            return NotImplemented
        out = aten.scatter_add.default(
            aten.view.default(x, [1]), 0, aten.view.default(index, [1]),
            aten.slice.Tensor(aten.view.default(src, [-1]), 0, 0, 1))
        return aten.view.default(out, [])

    def scatter_src(x, dim, index, src):
        # 0-d (max/min along a dim of a 0-d tensor, backward): a scatter on [1] views.
        if x.dim() != 0 or index.numel() != 1:
            return NotImplemented
        out = aten.scatter.src(aten.view.default(x, [1]), 0, aten.view.default(index, [1]),
                               aten.slice.Tensor(aten.view.default(src, [-1]), 0, 0, 1))
        return aten.view.default(out, [])

    def scatter_value(x, dim, index, value):
        if x.dim() != 0 or index.numel() != 1:
            return NotImplemented
        out = aten.scatter.value(aten.view.default(x, [1]), 0, aten.view.default(index, [1]),
                                 value)
        return aten.view.default(out, [])

    def scatter_reduce(x, dim, index, src, reduce, include_self=True):
        return _scatter_reduce_dense(x, dim, index, src, reduce, include_self)

    def scatter_reduce_legacy(x, dim, index, src, *, reduce):
        # scatter(..., reduce="add" | "multiply") is scatter_reduce with include_self.
        mode = {"add": "sum", "multiply": "prod"}.get(reduce)
        if mode is None:
            return NotImplemented
        return _scatter_reduce_dense(x, dim, index, src, mode, True)

    return {
        aten.scatter_add.default: scatter_add,
        aten.scatter.src: scatter_src,
        aten.scatter.value: scatter_value,
        aten.scatter_reduce.two: scatter_reduce,
        aten.scatter.reduce: scatter_reduce_legacy,
        aten.round.decimals: round_decimals,
        # On bool tensors (masks) the bitwise ops are the logical ones.
        aten.bitwise_not.default: bitwise_not,
        aten.bitwise_and.Tensor: bitwise_and,
        aten.bitwise_or.Tensor: bitwise_or,
        aten._unsafe_index_put.default: unsafe_index_put,
        aten.index_add.default: index_add,
        aten.split.Tensor: split,
        aten.split_with_sizes.default: split_with_sizes,
        aten.full_like.default: full_like,
        aten.alias.default: alias,
        aten.detach.default: alias,
        aten.clone.default: clone,
        aten.copy.default: copy,
    }


@functools.lru_cache(maxsize=1)
def _table() -> dict:
    table = dict(get_decompositions(_DECOMPOSE))
    table.update(_coil_overrides())
    # Fused ops with coil's own decompositions, one module each.
    table.update(sdpa_decompositions())
    table.update(foreach_decompositions())
    table.update(embedding_bag_decompositions())
    table.update(topk_decompositions())
    # Composite ops the OpInfo sweep found running eagerly.
    table.update(opinfo_decompositions())
    table.update(sort_decompositions())
    table.update(pool_decompositions())
    table.update(masked_decompositions())
    # Training batch norm in bf16/f16 on CPU normalizes with its saved (rounded) statistics.
    table.update(batch_norm_decompositions())
    # CPU 1-d convolutions as 2-d ones, which coil computes itself.
    table.update(conv1d_decompositions())
    return table


def coil_decompositions() -> dict[torch._ops.OpOverload, Callable]:
    """The table to pass as `decompositions=` to AOTAutograd (a fresh dict each call): coil's
    own entries, then the user's (coil.register_decomposition, extending.py), which take
    precedence. Read once per compile."""
    table = dict(_table())
    table.update(user_decompositions())
    return table
