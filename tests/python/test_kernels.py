"""Kernel shapes the CPU emitter treats specially, against eager: reductions over a
non-contiguous dim (blocked "outer" reductions), transposed pointwise stores, NaN propagation."""

import pytest
import torch

C = pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")


def _check(fn, *args, **tol):
    torch._dynamo.reset()
    got = torch.compile(fn, backend="coil", options={"strict": True})(*args)
    torch.testing.assert_close(got, fn(*args), equal_nan=True, **tol)


@pytest.mark.parametrize("op", ["sum", "amax", "amin", "prod", "mean"])
@pytest.mark.parametrize("shape,dim", [((300, 100), 0), ((4, 33, 70), 1), ((5, 7, 130), (0, 1))])
def test_reduction_over_strided_dims(op, shape, dim):
    if op == "prod" and isinstance(dim, tuple):
        pytest.skip("torch.prod takes one dim")
    x = torch.rand(shape) + 0.5
    if op == "prod":
        x = 1 + (x - 1) * 0.01  # keep the product finite
    _check(lambda t: getattr(torch, op)(t, dim=dim), x, rtol=1e-4, atol=1e-4)


def test_outer_max_propagates_nan():
    x = torch.randn(200, 70)
    x[17, 3] = float("nan")
    x[150, 69] = float("nan")
    _check(lambda t: t.amax(0), x)
    _check(lambda t: t.amin(0), x)


@pytest.mark.parametrize("shape", [(64, 48), (3, 130, 70)])
def test_transposed_pointwise(shape):
    x = torch.randn(shape)
    _check(lambda t: t.transpose(-1, -2) * 2 + 1, x)
    _check(lambda t: (t.transpose(-1, -2) * 2).contiguous(), x)


def test_reduction_fuses_with_consumer_behind_a_view():
    # The consumer's [32, 16] loops are split into [4, 8, 16] to match the reduction's [4, 8]
    # (sched/align.cpp), so both end up in one kernel.
    text = """graph(%0: f32[4, 8, 16]):
  %1: f32[4, 8, 1] = aten.amax.default(%0, [-1], true)
  %2: f32[4, 8, 16] = aten.sub.Tensor(%0, %1)
  %3: f32[32, 16] = aten.view.default(%2, [32, 16])
  %4: f32[32, 16] = aten.exp.default(%3)
  return (%4)
"""
    g = C.compile(text, {"cache_dir": ""}, None)
    art = g.artifacts
    assert "split" in art["fusion_log"], art["fusion_log"]
    assert art["num_kernels"] == 1, art["schedule"]
    x = torch.randn(4, 8, 16)
    (out,) = g.run([x])
    torch.testing.assert_close(out, torch.exp(x - x.amax(-1, keepdim=True)).view(32, 16))
