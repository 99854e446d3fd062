"""Constant attention masks folded before AOTAutograd (python/coil/attention_mask_fold.py):
an all-keeping mask is dropped, SDPA's causal pattern becomes is_causal=True, every other mask
(input-dependent, random, mutated, another pattern) is left alone, and compiled results match
eager in each case."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import coil  # noqa: F401  (registers the backend)
from coil.attention_mask_fold import fold_attention_masks

torch.manual_seed(0)
B, H, L, E = 2, 3, 16, 8


def _qkv(kv_len: int = L):
    g = torch.Generator().manual_seed(1)
    return (torch.randn(B, H, L, E, generator=g), torch.randn(B, H, kv_len, E, generator=g),
            torch.randn(B, H, kv_len, E, generator=g))


def keep_all_broadcast(q, k, v):
    # As Hugging Face's traced mask builder: `index >= 0` on one axis, expanded (last stride 0).
    idx = torch.arange(q.shape[-2], device=q.device) + 0
    mask = (idx[None, None, :, None] >= 0).expand(q.shape[0], -1, q.shape[-2], k.shape[-2])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def keep_all_float(q, k, v):
    mask = torch.zeros(q.shape[-2], k.shape[-2], device=q.device)
    return F.scaled_dot_product_attention(q, k, v, mask)


def causal_bool(q, k, v):
    qi = torch.arange(q.shape[-2], device=q.device)
    ki = torch.arange(k.shape[-2], device=q.device)
    mask = (ki[None, :] <= qi[:, None])[None, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def causal_float(q, k, v):
    keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    mask = torch.zeros(q.shape[-2], k.shape[-2], device=q.device).masked_fill(~keep, float("-inf"))
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def sliding_window(q, k, v):  # a constant mask of another pattern: kept
    qi = torch.arange(q.shape[-2], device=q.device)
    ki = torch.arange(k.shape[-2], device=q.device)
    mask = (ki[None, :] <= qi[:, None]) & (ki[None, :] > qi[:, None] - 4)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def float_bias(q, k, v):  # a constant additive bias (not only 0 / -inf): kept
    qi = torch.arange(q.shape[-2], device=q.device, dtype=torch.float32)
    ki = torch.arange(k.shape[-2], device=q.device, dtype=torch.float32)
    return F.scaled_dot_product_attention(q, k, v, -0.1 * (qi[:, None] - ki[None, :]).abs())


def input_mask(q, k, v):  # built from an input: kept
    mask = (q.sum(-1, keepdim=True) > -1e9).expand(-1, -1, -1, k.shape[-2])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def random_mask(q, k, v):  # random: kept
    mask = torch.rand(q.shape[-2], k.shape[-2], device=q.device) >= 0
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def mutated_mask(q, k, v):  # all zero when built, then written in place: kept
    mask = torch.zeros(q.shape[-2], k.shape[-2], device=q.device)
    mask[0, 1] = float("-inf")
    return F.scaled_dot_product_attention(q, k, v, mask)


CASES = {
    keep_all_broadcast: {"all": 1, "causal": 0},
    keep_all_float: {"all": 1, "causal": 0},
    causal_bool: {"all": 0, "causal": 1},
    causal_float: {"all": 0, "causal": 1},
    sliding_window: {"all": 0, "causal": 0},
    float_bias: {"all": 0, "causal": 0},
    input_mask: {"all": 0, "causal": 0},
    random_mask: {"all": 0, "causal": 0},
    mutated_mask: {"all": 0, "causal": 0},
}


def _dynamo_graph(fn, args):
    graphs = []

    def capture(gm, example_inputs):
        graphs.append(gm)
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=capture, fullgraph=True)(*args)
    assert len(graphs) == 1
    return graphs[0]


def _sdpa_nodes(gm):
    return [n for n in gm.graph.nodes if n.op == "call_function" and "scaled_dot" in str(n.target)]


@pytest.mark.parametrize("fn", list(CASES), ids=lambda f: f.__name__)
def test_fold_rewrites_only_constant_keep_all_and_causal_masks(fn):
    args = _qkv()
    gm = _dynamo_graph(fn, args)
    before = len(gm.graph.nodes)
    counts = fold_attention_masks(gm)
    assert counts == CASES[fn]
    (sdpa,) = _sdpa_nodes(gm)
    folded = any(counts.values())
    mask = sdpa.kwargs.get("attn_mask", sdpa.args[3] if len(sdpa.args) > 3 else None)
    assert (mask is None) == folded
    if folded:
        assert len(gm.graph.nodes) < before  # the mask's computation is gone
    causal = sdpa.kwargs.get("is_causal", False)
    assert causal == bool(counts["causal"])
    # The rewritten graph computes what the function does.
    torch.testing.assert_close(gm(*args)[0] if isinstance(gm(*args), tuple) else gm(*args),
                               fn(*args), rtol=1e-5, atol=1e-5)


def test_causal_pattern_needs_top_left_alignment():
    """With fewer queries than keys, the bottom-right causal pattern of a decoder with a cache
    is not SDPA's is_causal (top-left): it stays a mask, and the result is still right."""

    def bottom_right(q, k, v):
        qi = torch.arange(q.shape[-2], device=q.device) + (k.shape[-2] - q.shape[-2])
        ki = torch.arange(k.shape[-2], device=q.device)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=ki[None, :] <= qi[:, None])

    args = _qkv(kv_len=L + 5)
    gm = _dynamo_graph(bottom_right, args)
    assert fold_attention_masks(gm) == {"all": 0, "causal": 0}


@pytest.mark.parametrize("fn", [keep_all_broadcast, causal_float, sliding_window, mutated_mask],
                         ids=lambda f: f.__name__)
def test_compiled_matches_eager_with_and_without_folding(fn):
    q, k, v = (t.requires_grad_() for t in _qkv())
    ref = fn(q, k, v)
    ref_grads = torch.autograd.grad(ref.sum(), (q, k, v))
    for fold in (True, False):
        torch._dynamo.reset()
        compiled = torch.compile(fn, backend="coil", options={"fold_attention_masks": fold})
        out = compiled(q, k, v)
        torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
        for g, r in zip(torch.autograd.grad(out.sum(), (q, k, v)), ref_grads):
            torch.testing.assert_close(g, r, rtol=1e-4, atol=1e-4)


def _traced_attention_ops(gm, args) -> set[str]:
    from torch.fx.experimental.proxy_tensor import make_fx

    traced = make_fx(gm)(*args)
    return {str(n.target) for n in traced.graph.nodes
            if n.op == "call_function" and ("attention" in str(n.target)
                                            or "softmax" in str(n.target))}


@pytest.mark.gpu
@pytest.mark.parametrize("fn", [keep_all_broadcast, causal_bool], ids=lambda f: f.__name__)
def test_folded_mask_lets_cuda_pick_a_fused_kernel(fn):
    """On CUDA the broadcast mask rules the fused kernels out (the math composition: a float32
    softmax over [B, H, L, S]); folded, the dispatcher picks flash, cuDNN or memory-efficient
    attention, and coil's result matches eager's."""
    args = tuple(t.to("cuda", torch.bfloat16) for t in _qkv())
    gm = _dynamo_graph(fn, args)
    if fn is keep_all_broadcast:  # (a materialised causal mask may take the efficient kernel)
        unfolded = _traced_attention_ops(gm, args)
        assert not any("_scaled_dot_product_" in op for op in unfolded), unfolded
    assert any(fold_attention_masks(gm).values())
    folded = _traced_attention_ops(gm, args)
    assert any("_scaled_dot_product_" in op for op in folded), folded
    assert not any("softmax" in op for op in folded), folded
    torch._dynamo.reset()
    out = torch.compile(fn, backend="coil")(*args)
    torch.testing.assert_close(out, fn(*args), rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
def test_float32_cuda_masks_stay_for_the_tf32_math_path():
    """In float32 on CUDA the fused kernels compute in full float32, slower than the math
    composition's TF32 products: the mask is not folded."""
    args = tuple(t.to("cuda") for t in _qkv())
    gm = _dynamo_graph(keep_all_broadcast, args)
    assert fold_attention_masks(gm) == {"all": 0, "causal": 0}


def test_fake_tensor_context_leaves_the_mask():
    """Where the backend runs under fake tensors (values unreadable), the mask stays and
    nothing raises."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    gm = _dynamo_graph(keep_all_broadcast, _qkv())
    with FakeTensorMode():
        assert fold_attention_masks(gm) == {"all": 0, "causal": 0}
