"""masked_scatter (and its backward) with static shapes: a running count of the mask.

Out-of-place masked_scatter broadcasts self and mask; the k-th True position (row-major) takes
source's k-th element. Position i's k is the cumulative sum of the flattened mask up to i, minus
one, so the result is where(mask, source.flatten()[k], self). The backward hands source's k-th
element the gradient of the position that took it (zero where none did): a dense [source
elements x positions] match, summed. Both cost O(n^2) work for n mask positions (cumsum
decomposes into a masked sum, the backward's match is quadratic too): only small masks
(DENSE_LIMIT) are decomposed; larger ones keep the eager op.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten

# Largest n * n (n = mask positions after broadcasting; for the backward, source elements x n).
DENSE_LIMIT = 1 << 20


def _numel(shape) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def _running_index(mask_flat):
    """For each position, how many True positions come before it (its index into source)."""
    count = aten.cumsum.default(aten._to_copy.default(mask_flat, dtype=torch.int64), 0)
    return aten.sub.Tensor(count, 1)


def masked_scatter(x, mask, source):
    shape = list(torch.broadcast_shapes(x.shape, mask.shape))
    n, m = _numel(shape), source.numel()
    if n == 0 or m == 0 or n * n > DENSE_LIMIT or x.is_complex():
        return NotImplemented
    flat_x = aten.reshape.default(aten.expand.default(x, shape), [n])
    flat_m = aten.reshape.default(aten.expand.default(mask, shape), [n])
    # Positions whose mask is False read a clamped index; where() drops what they read.
    k = aten.clamp.default(_running_index(flat_m), 0, m - 1)
    taken = aten.index_select.default(aten.reshape.default(source, [m]), 0, k)
    return aten.reshape.default(aten.where.self(flat_m, taken, flat_x), shape)


def masked_scatter_backward(grad, mask, sizes):
    n, m = grad.numel(), _numel(sizes)
    if n == 0 or m == 0 or n * m > DENSE_LIMIT:
        return NotImplemented
    flat_g = aten.reshape.default(grad, [n])
    flat_m = aten.reshape.default(aten.expand.default(mask, list(grad.shape)), [n])
    k = _running_index(flat_m)  # [n]
    j = aten.view.default(aten.arange.default(m, dtype=torch.int64, device=grad.device), [m, 1])
    hit = aten.logical_and.default(aten.eq.Tensor(aten.unsqueeze.default(k, 0), j),
                                   aten.unsqueeze.default(flat_m, 0))  # [m, n]
    picked = aten.where.self(hit, aten.unsqueeze.default(flat_g, 0),
                             aten.scalar_tensor.default(0, dtype=grad.dtype))
    return aten.reshape.default(aten.sum.dim_IntList(picked, [1]), list(sizes))


def masked_decompositions() -> dict:
    return {aten.masked_scatter.default: masked_scatter,
            aten.masked_scatter_backward.default: masked_scatter_backward}
