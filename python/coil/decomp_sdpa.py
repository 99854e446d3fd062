"""scaled_dot_product_attention on CPU, decomposed into coil's primitive set.

F.scaled_dot_product_attention reaches AOTAutograd as the fused CPU op
`_scaled_dot_product_flash_attention_for_cpu` -> (output, logsumexp), and its derivative is the
fused `..._backward` op taking that logsumexp. PyTorch's own decomposition of the forward returns
the attention *probabilities* in place of the logsumexp (it is meant for inference export), so it
cannot be paired with a backward. Both are written here with the same contract as the fused
kernels: the logsumexp [N, H, L] is in float32 for reduced-precision inputs, all math runs in
that "opmath" dtype (as the fused kernel accumulates); the output is contiguous, as the fused
kernel's is.
"""

from __future__ import annotations

import math

import torch

aten = torch.ops.aten


def _opmath(dtype: torch.dtype) -> torch.dtype:
    return torch.float32 if dtype in (torch.bfloat16, torch.float16) else dtype


def _scores(q, k, is_causal, attn_mask, scale):
    """Scaled, masked scores q @ k^T in opmath; the mask as the fused kernel applies it."""
    e = q.shape[-1]
    scale = 1.0 / math.sqrt(e) if scale is None else scale
    ct = _opmath(q.dtype)
    s = torch.matmul(q.to(ct), k.to(ct).transpose(-2, -1)) * scale
    if is_causal:
        ql, kl = q.shape[-2], k.shape[-2]
        keep = torch.ones(ql, kl, dtype=torch.bool, device=q.device).tril()
        s = torch.where(keep, s, float("-inf"))
    if attn_mask is not None:
        if attn_mask.dtype == torch.bool:
            s = torch.where(attn_mask, s, float("-inf"))
        else:
            s = s + attn_mask.to(ct)
    return s, scale


def _finite(lse):
    """The logsumexp with a fully masked row's -inf as 0: exp(-inf - 0) makes the row's
    probabilities 0 (its output 0, its gradients 0), as the fused kernel gives; exp(-inf - -inf)
    was NaN."""
    return torch.where(lse == float("-inf"), torch.zeros_like(lse), lse)


def _supported(q, k, v, dropout_p) -> bool:
    # Grouped-query shapes (fewer k/v heads) and dropout keep the fused kernel.
    return dropout_p == 0.0 and q.dim() == 4 and q.shape[1] == k.shape[1] == v.shape[1]


def flash_for_cpu(query, key, value, dropout_p=0.0, is_causal=False, *, attn_mask=None,
                  scale=None):
    if not _supported(query, key, value, dropout_p):
        return NotImplemented
    s, _ = _scores(query, key, is_causal, attn_mask, scale)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - _finite(lse).unsqueeze(-1))
    out = torch.matmul(p, value.to(p.dtype)).to(query.dtype)
    return out, lse


def flash_for_cpu_backward(grad_out, query, key, value, out, logsumexp, dropout_p, is_causal, *,
                           attn_mask=None, scale=None):
    if not _supported(query, key, value, dropout_p):
        return NotImplemented
    s, scale = _scores(query, key, is_causal, attn_mask, scale)
    ct = s.dtype
    p = torch.exp(s - _finite(logsumexp.to(ct)).unsqueeze(-1))
    do = grad_out.to(ct)
    dv = torch.matmul(p.transpose(-2, -1), do)
    dp = torch.matmul(do, value.to(ct).transpose(-2, -1))
    # softmax backward: dS = P * (dP - rowsum(dO * O))
    ds = p * (dp - (do * out.to(ct)).sum(-1, keepdim=True))
    dq = torch.matmul(ds, key.to(ct)) * scale
    dk = torch.matmul(ds.transpose(-2, -1), query.to(ct)) * scale
    return dq.to(query.dtype), dk.to(key.dtype), dv.to(value.dtype)


def sdpa_decompositions() -> dict:
    return {
        aten._scaled_dot_product_flash_attention_for_cpu.default: flash_for_cpu,
        aten._scaled_dot_product_flash_attention_for_cpu_backward.default: flash_for_cpu_backward,
    }
