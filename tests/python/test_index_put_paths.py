"""index_put's fast path on the CPU (src/runtime/extern_index.cpp: index_by_offsets) against
eager. It takes every float index set with contiguous values:
- embedding's backward: [batch, seq] token ids on dim 0, whole rows;
- bilinear upsampling's backward: indices on H and W under N and C.

Repeated indices accumulate in order.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import coil  # noqa: F401


def _grads(fn, *args):
    args = [a.detach().clone().requires_grad_() for a in args]
    out = fn(*args)
    (out * torch.linspace(-1, 1, out.numel()).reshape(out.shape)).sum().backward()
    return out.detach(), [a.grad for a in args]


@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("size", [(24, 20), (7, 9)], ids=["up", "down"])
def test_bilinear_resize_gradient_matches_eager(size, align_corners):
    torch.manual_seed(0)
    x = torch.randn(2, 3, 10, 12)

    def f(t):
        return F.interpolate(t, size=size, mode="bilinear", align_corners=align_corners)

    torch._dynamo.reset()
    want, (gw,) = _grads(f, x)
    got, (gg,) = _grads(torch.compile(f, backend="coil"), x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(gg, gw, rtol=1e-5, atol=1e-5)


def test_embedding_with_repeated_token_ids_gradient_matches_eager():
    torch.manual_seed(1)
    w = torch.randn(50, 16)
    ids = torch.tensor([[3, 7, 3, 49], [0, 3, 7, 7]])

    def f(weight):
        return F.embedding(ids, weight)

    torch._dynamo.reset()
    want, (gw,) = _grads(f, w)
    got, (gg,) = _grads(torch.compile(f, backend="coil"), w)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(gg, gw, rtol=1e-6, atol=1e-6)


def test_index_put_accumulate_on_inner_dims_matches_eager():
    torch.manual_seed(2)
    base = torch.randn(2, 3, 5, 6)
    vals = torch.randn(2, 3, 4)
    hi = torch.tensor([4, 0, 4, 1])
    wi = torch.tensor([5, 0, 5, -1])

    n = torch.arange(2)[:, None, None]
    c = torch.arange(3)[None, :, None]

    def f(b, v):
        return torch.index_put(b, (n, c, hi, wi), v, accumulate=True)

    torch._dynamo.reset()
    want = f(base, vals)
    got = torch.compile(f, backend="coil")(base, vals)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=1e-6)
