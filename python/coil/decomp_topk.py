"""topk for small k (mixture-of-experts routing), decomposed into k argmax/gather rounds.

Round i takes the argmax along `dim` (first occurrence on ties, NaN counts as largest: both as
eager topk on CPU), gathers its value, and masks that position out for the next round, so the
results come out sorted, as topk's `sorted=True` gives them. The cost is k passes over the row,
fine for routers (k = 1, 2, 4 over a handful of experts); larger k keeps the eager op. (A row
holding -inf, or +inf for largest=False, may repeat an index where eager picks another equal
value.)
"""

from __future__ import annotations

import torch

aten = torch.ops.aten

MAX_K = 8


def topk(x, k, dim=-1, largest=True, sorted=True):
    if x.dim() == 0 and k == 1 and dim in (0, -1):
        # A 0-d tensor is its own top element, at index 0.
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    if k > MAX_K or x.dim() == 0 or x.dtype == torch.bool or x.is_complex():
        return NotImplemented
    dim = dim % x.dim()
    n = x.shape[dim]
    if x.is_floating_point():
        fill = float("-inf") if largest else float("inf")
    else:
        info = torch.iinfo(x.dtype)
        fill = info.min if largest else info.max
    shape = [1] * x.dim()
    shape[dim] = n
    pos = torch.arange(n, device=x.device).view(shape)
    pick = torch.argmax if largest else torch.argmin
    values, indices = [], []
    for i in range(k):
        idx = pick(x, dim, keepdim=True)
        values.append(torch.gather(x, dim, idx))
        indices.append(idx)
        if i + 1 < k:
            x = torch.where(pos == idx, fill, x)
    return torch.cat(values, dim), torch.cat(indices, dim)


def topk_decompositions() -> dict:
    return {aten.topk.default: topk}
