"""Decompositions for ops the OpInfo sweep found running eagerly (docs/op_coverage.md).

Each op here is composite: PyTorch's own reference decomposition (torch._decomp) rewrites it
into ops coil's C++ lowers (pointwise math, reductions, views, index/gather, cat, pad), so the
op compiles instead of going through the per-op eager fallback. An op is listed only after the
sweep ran its OpInfo entries in strict mode with it and every sample passed (no wrong answer,
no new fallback): an op whose reference decomposition still produces something coil cannot
lower (prims.* ops, data-dependent shapes) stays out, as it would only trade one fallback for
another. tests/python/test_opinfo_decomps.py checks each against eager.
Ops coil lowers natively (copysign) or that already passed through other paths stay out.
"""

from __future__ import annotations

import torch
from torch._decomp import get_decompositions

aten = torch.ops.aten

# Op packets whose torch._decomp reference decompositions coil takes (all overloads there).
_REFERENCE = [
    # norms and distances
    aten.linalg_vector_norm,
    aten.norm,
    aten.dist,
    aten.renorm,
    aten._euclidean_dist,
    # pointwise composites
    aten.logaddexp,
    aten.logaddexp2,
    aten.logit,
    aten.logit_backward,
    aten.xlogy,
    aten.special_xlog1py,
    aten.special_entr,
    aten.deg2rad,
    aten.rad2deg,
    aten.frac,
    aten.heaviside,
    aten.isneginf,
    aten.isposinf,
    aten.nan_to_num,
    aten.sinc,
    aten.ldexp,
    aten.celu,
    aten.glu,
    aten.glu_backward,
    aten.mish_backward,
    aten._prelu_kernel,
    aten._prelu_kernel_backward,
    # reductions
    aten.nansum,
    aten.count_nonzero,
    aten.aminmax,
    aten.trace,
    # linear algebra composites
    aten.addmv,
    aten.addr,
    aten.vdot,
    aten.linalg_cross,
    # shape, copy and scatter composites
    aten.roll,
    aten.diag_embed,
    aten.diagonal_copy,
    aten.diagonal_backward,
    aten.narrow_copy,
    aten.expand_copy,
    aten.alias_copy,
    aten.squeeze_copy,
    aten.unsqueeze_copy,
    aten.permute_copy,
    aten.t_copy,
    aten.transpose_copy,
    aten.view_copy,
    aten.unbind_copy,
    aten.unfold_copy,
    aten.unfold,  # -> as_strided (unfold_copy's reference decomposition keeps it)
    aten.unfold_backward,
    aten.unsafe_split,
    aten.block_diag,
    aten._chunk_cat,
    aten.pixel_shuffle,
    aten.pixel_unshuffle,
    aten.channel_shuffle,
    aten.index_copy,
    aten.index_fill,
    aten.take,
    # creation
    aten.eye,
    aten.linspace,
    aten.logspace,
    # padding, pooling, resampling
    aten.reflection_pad1d,
    aten.reflection_pad2d,
    aten.reflection_pad3d,
    aten.reflection_pad1d_backward,
    aten.reflection_pad2d_backward,
    aten.reflection_pad3d_backward,
    aten.replication_pad1d,
    aten.replication_pad2d,
    aten.replication_pad3d,
    aten.upsample_nearest1d,
    aten.im2col,
    aten.col2im,
    # losses
    aten.nll_loss2d_forward,
    aten.nll_loss2d_backward,
]


def _fmax_fmin(pick):
    # maximum / minimum, except that a NaN loses to a number (prims.fmax has no lowering).
    def fn(a, b):
        m = pick(a, b)
        if not (torch.is_floating_point(a) or torch.is_floating_point(b)):
            return m
        return aten.where.self(aten.isnan.default(a), b,
                               aten.where.self(aten.isnan.default(b), a, m))
    return fn


def _zero_tensor(size, *, dtype=None, layout=None, device=None, pin_memory=None):
    # autograd's zero gradients (sgn's backward): a ZeroTensor has no storage; full(0) is the
    # same values.
    return aten.full.default(list(size), 0, dtype=dtype or torch.get_default_dtype(),
                             layout=layout, device=device, pin_memory=pin_memory)


def _float_only(decomp):
    # linspace / logspace: PyTorch's reference decompositions compute in the requested dtype's
    # float type from the untruncated start (linspace(4.3, -3, 50, dtype=int64) gives 4, 4, 4,
    # 3, eager 4, 3, 3, 3) and raise bf16 powers with a more exact exponent than eager (logspace
    # bf16: 19968 against eager's 20480). Found by the every-sample OpInfo sweep. Integer and
    # 16-bit results are left to eager (NotImplemented keeps the op, which then falls back).
    def fn(*args, **kwargs):
        dtype = kwargs.get("dtype")
        if dtype is not None and dtype not in (torch.float32, torch.float64):
            return NotImplemented
        return decomp(*args, **kwargs)
    return fn


def _diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    # input with its diagonal (offset, dim1, dim2) replaced by src, functionally: a mask of the
    # diagonal's positions, src (its last dim the diagonal's) moved onto them. PyTorch's
    # reference writes into a view of a strided clone (prims.copy_strided, copy_). Found by the
    # fuzzer (seeds 8169, 8599, 9274, 9287, 9807: diagonal's backward, diagonal_scatter).
    nd = input.dim()
    d1, d2 = dim1 % nd, dim2 % nd
    if d1 == d2:
        return NotImplemented
    n1, n2 = input.shape[d1], input.shape[d2]

    def along(n, d):  # arange(n) viewed along dim d of input
        shape = [1] * nd
        shape[d] = n
        return aten.view.default(aten.arange.default(n, device=input.device), shape)

    mask = aten.eq.Scalar(aten.sub.Tensor(along(n2, d2), along(n1, d1)), offset)
    # src[..., k] sits at i = k along d1 (offset >= 0) or at j = k along d2 (offset < 0).
    k_dim, other = (d1, d2) if offset >= 0 else (d2, d1)
    n_k = input.shape[k_dim]
    s = src
    if s.shape[-1] != n_k:  # a diagonal shorter than its dim: the rest is masked out
        s = aten.constant_pad_nd.default(s, [0, n_k - s.shape[-1]])
    s = aten.unsqueeze.default(s, -1)  # [rest..., diagonal, other]
    rest = iter(range(nd - 2))
    order = [nd - 2 if p == k_dim else nd - 1 if p == other else next(rest) for p in range(nd)]
    s = aten.permute.default(s, order)
    if s.dtype != input.dtype:  # the result keeps input's dtype, as eager's
        s = aten._to_copy.default(s, dtype=input.dtype)
    return aten.where.self(mask, s, input)


def opinfo_decompositions() -> dict:
    table = dict(get_decompositions(_REFERENCE))
    for op, decomp in list(table.items()):
        if op.overloadpacket in (aten.linspace, aten.logspace):
            table[op] = _float_only(decomp)
    table[aten._efficientzerotensor.default] = _zero_tensor
    table[aten.diagonal_scatter.default] = _diagonal_scatter
    table[aten.fmax.default] = _fmax_fmin(aten.maximum.default)
    table[aten.fmin.default] = _fmax_fmin(aten.minimum.default)
    return table
