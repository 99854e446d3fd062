"""sort (and so argsort, msort) along a short dim, decomposed into a dense rank computation.

Element i's place in its row is the number of elements that come before it: those less than it,
and those equal to it at a lower index (a stable sort; eager's CPU sort is stable too, whether
or not `stable=True` is asked for). NaN sorts after every number, ascending, and before every
number, descending, as in eager; NaNs compare equal among themselves, so they keep their order.
The permutation is then read off the ranks (indices[r] = the i with rank[i] == r) and the values
gathered from it. Both steps compare every pair of a row, n * n per row: only rows short enough
that the comparisons stay small (DENSE_LIMIT) are decomposed; longer ones keep the eager op.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten

# Largest numel * n (the pairwise comparisons of all rows) decomposed.
DENSE_LIMIT = 1 << 16


def _before(a, b, descending: bool):
    """a strictly before b by value (NaN last ascending, first descending)."""
    if not a.is_floating_point():
        return aten.gt.Tensor(a, b) if descending else aten.lt.Tensor(a, b)
    if descending:
        a, b = b, a
    # a < b, or b is NaN and a is not.
    b_nan = aten.isnan.default(b)
    return aten.logical_or.default(
        aten.lt.Tensor(a, b), aten.logical_and.default(b_nan, aten.logical_not.default(
            aten.isnan.default(a))))


def _equal(a, b):
    eq = aten.eq.Tensor(a, b)
    if not a.is_floating_point():
        return eq
    return aten.logical_or.default(
        eq, aten.logical_and.default(aten.isnan.default(a), aten.isnan.default(b)))


def sort(x, dim=-1, descending=False, stable=None):
    if x.dim() == 0:
        if dim not in (0, -1):
            return NotImplemented
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    dim = dim % x.dim()
    n = x.shape[dim]
    if n == 0 or x.numel() * n > DENSE_LIMIT or x.is_complex():
        return NotImplemented
    key = x
    if x.dtype == torch.bool:
        key = aten._to_copy.default(x, dtype=torch.uint8)
    # Pairs along two dims: j at `dim` (the other element), i at dim + 1 (this element).
    xi = aten.unsqueeze.default(key, dim)  # [.., 1, n_i, ..]
    xj = aten.unsqueeze.default(key, dim + 1)  # [.., n_j, 1, ..]
    shape = [1] * (x.dim() + 1)
    shape[dim] = n
    j = aten.view.default(aten.arange.default(n, dtype=torch.int64, device=x.device), shape)
    shape[dim], shape[dim + 1] = 1, n
    i = aten.view.default(aten.arange.default(n, dtype=torch.int64, device=x.device), shape)
    first = aten.logical_or.default(
        _before(xj, xi, descending),
        aten.logical_and.default(_equal(xj, xi), aten.lt.Tensor(j, i)))
    rank = aten.sum.dim_IntList(first, [dim], dtype=torch.int64)  # [.., n_i, ..]
    # indices[r] = sum_i i * (rank[i] == r): r at `dim`, i at dim + 1.
    hit = aten.eq.Tensor(aten.unsqueeze.default(rank, dim), j)
    indices = aten.sum.dim_IntList(aten.mul.Tensor(hit, i), [dim + 1], dtype=torch.int64)
    values = aten.gather.default(x, dim, indices)
    return values, indices


def sort_stable(x, *, stable=None, dim=-1, descending=False):
    return sort(x, dim, descending, stable)


def sort_decompositions() -> dict:
    return {aten.sort.default: sort, aten.sort.stable: sort_stable}
