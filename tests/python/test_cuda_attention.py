"""scaled_dot_product_attention on the GPU: ATen's fused kernel (flash, memory-efficient or
cuDNN, whichever PyTorch picks) as a coil extern, forward and backward, in strict mode (so the
fused op is lowered, not a fallback), inside a compiled block with projections around it."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

C = pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
import coil  # noqa: E402

TOL = {torch.float32: dict(rtol=2e-4, atol=2e-4), torch.bfloat16: dict(rtol=3e-2, atol=3e-2)}


def _attention(w_qkv, w_out, heads, causal, mask):
    def block(x):
        b, t, d = x.shape
        q, k, v = (x @ w_qkv).split(d, dim=-1)
        q, k, v = (y.view(b, t, heads, d // heads).transpose(1, 2) for y in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=causal)
        return torch.relu(y.transpose(1, 2).reshape(b, t, d) @ w_out)

    return block


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("mask", ["none", "causal", "additive"])
def test_sdpa_forward_backward(dtype, mask):
    torch.manual_seed(0)
    b, t, d, heads = 2, 128, 256, 4
    dev = "cuda"
    x = torch.randn(b, t, d, device=dev, dtype=dtype, requires_grad=True)
    w_qkv = (torch.randn(d, 3 * d, device=dev, dtype=dtype) / d**0.5).requires_grad_()
    w_out = (torch.randn(d, d, device=dev, dtype=dtype) / d**0.5).requires_grad_()
    attn_mask = None
    if mask == "additive":
        attn_mask = torch.randn(b, heads, t, t, device=dev, dtype=dtype)
    fn = _attention(w_qkv, w_out, heads, mask == "causal", attn_mask)

    torch._dynamo.reset()
    coil.reset_report()
    compiled = torch.compile(fn, backend="coil", options={"strict": True})
    got = compiled(x)
    gout = torch.randn_like(got)
    got_grads = torch.autograd.grad(got, (x, w_qkv, w_out), gout)
    rep = coil.report()
    assert rep.graphs_compiled == 2 and not rep.graphs_fallen_back, str(rep)
    assert not rep.fallback_ops, str(rep)

    want = fn(x)
    want_grads = torch.autograd.grad(want, (x, w_qkv, w_out), gout)
    torch.testing.assert_close(got, want, **TOL[dtype])
    for g, w in zip(got_grads, want_grads):
        torch.testing.assert_close(g, w, **TOL[dtype])


@pytest.mark.gpu
def test_sdpa_inference_graph():
    # Without gradients AOTAutograd makes one inference graph (the fused op's logsumexp unused).
    torch.manual_seed(0)
    q, k, v = (torch.randn(4, 8, 256, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    fn = lambda q, k, v: F.scaled_dot_product_attention(q * 2, k, v, is_causal=True) + 1  # noqa
    torch._dynamo.reset()
    coil.reset_report()
    with torch.no_grad():
        got = torch.compile(fn, backend="coil", options={"strict": True})(q, k, v)
    rep = coil.report()
    assert rep.graphs_compiled == 1 and not rep.graphs_fallen_back, str(rep)
    torch.testing.assert_close(got, fn(q, k, v), **TOL[torch.bfloat16])
