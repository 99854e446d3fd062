"""nn.EmbeddingBag (`_embedding_bag` and its backward), decomposed into gathers and index_put.

Both directions recompute the bag of every index from `offsets` instead of trusting the
`offset2bag` output: the CPU kernel's fast sum path leaves `offset2bag` empty, and the backward
receives whatever the forward returned. Sum and mean modes, optional per-sample weights and
padding_idx are handled; max mode, scale_grad_by_freq and sparse gradients keep the fused ops.
Accumulation runs in float32 for reduced-precision weights, as the CPU kernel does.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten

MODE_SUM, MODE_MEAN = 0, 1


def _opmath(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def _bags(indices, offsets, include_last_offset):
    """(bag of each index, number of bags)."""
    n = indices.shape[0]
    num_bags = offsets.shape[0] - (1 if include_last_offset else 0)
    starts = offsets[:num_bags]
    pos = torch.arange(n, device=indices.device, dtype=offsets.dtype)
    # The bag of index j is the last bag whose start is <= j.
    bag = (starts.unsqueeze(0) <= pos.unsqueeze(1)).sum(1) - 1
    return bag, num_bags


def _keep(indices, padding_idx):
    return None if padding_idx is None or padding_idx < 0 else indices != padding_idx


def _counts(bag, keep, num_bags, dtype):
    ones = torch.ones(bag.shape, dtype=dtype, device=bag.device)
    if keep is not None:
        ones = ones * keep.to(dtype)
    return torch.zeros(num_bags, dtype=dtype, device=bag.device).index_put(
        [bag], ones, accumulate=True)


def embedding_bag(weight, indices, offsets, scale_grad_by_freq=False, mode=0, sparse=False,
                  per_sample_weights=None, include_last_offset=False, padding_idx=-1):
    if mode not in (MODE_SUM, MODE_MEAN) or indices.dim() != 1:
        return NotImplemented
    ct = _opmath(weight.dtype)
    bag, num_bags = _bags(indices, offsets, include_last_offset)
    keep = _keep(indices, padding_idx)
    rows = weight[indices].to(ct)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.to(ct).unsqueeze(1)
    if keep is not None:
        rows = rows * keep.to(ct).unsqueeze(1)
    out = torch.zeros(num_bags, weight.shape[1], dtype=ct, device=weight.device).index_put(
        [bag], rows, accumulate=True)
    counts = _counts(bag, keep, num_bags, ct)
    if mode == MODE_MEAN:
        out = out / counts.clamp(min=1).unsqueeze(1)
    bag_size = counts.to(offsets.dtype)
    max_indices = torch.zeros(num_bags, dtype=offsets.dtype, device=offsets.device)
    return out.to(weight.dtype), bag.to(offsets.dtype), bag_size, max_indices


def embedding_bag_backward(grad, indices, offsets, offset2bag, bag_size, maximum_indices,
                           num_weights, scale_grad_by_freq, mode, sparse, per_sample_weights,
                           padding_idx=-1):
    if mode not in (MODE_SUM, MODE_MEAN) or sparse or scale_grad_by_freq or indices.dim() != 1:
        return NotImplemented
    ct = _opmath(grad.dtype)
    # A trailing offset equal to len(indices) (include_last_offset) starts an empty bag that
    # receives no index, so the rule "last start <= j" needs no flag here.
    bag, num_bags = _bags(indices, offsets[: grad.shape[0]], False)
    keep = _keep(indices, padding_idx)
    rows = grad.to(ct)[bag]
    if mode == MODE_MEAN:
        counts = _counts(bag, keep, num_bags, ct)
        rows = rows / counts.clamp(min=1)[bag].unsqueeze(1)
    if per_sample_weights is not None:
        rows = rows * per_sample_weights.to(ct).unsqueeze(1)
    if keep is not None:
        rows = rows * keep.to(ct).unsqueeze(1)
    gw = torch.zeros(num_weights, grad.shape[1], dtype=ct, device=grad.device).index_put(
        [indices], rows, accumulate=True)
    return gw.to(grad.dtype)


def embedding_bag_decompositions() -> dict:
    return {
        aten._embedding_bag.default: embedding_bag,
        aten._embedding_bag_forward_only.default: embedding_bag,
        aten._embedding_bag_backward.default: embedding_bag_backward,
    }
