"""Host convolutions of channels-last activations run in the layout measured faster
(python/coil/node_fallback.py: ConvLayoutChoice): the results are eager's whichever is chosen,
and the choice goes to the faster candidate."""

from __future__ import annotations

import time

import pytest
import torch
import torch.nn as nn

pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
from coil.node_fallback import ConvLayoutChoice  # noqa: E402


def _slow_unless(contiguous: bool):
    """A stand-in op that sleeps 20 ms unless its first input's contiguity is `contiguous`."""
    seen = []

    def op(x, w):
        seen.append(x.is_contiguous())
        if x.is_contiguous() != contiguous:
            time.sleep(0.02)
        return x * w

    return op, seen


@pytest.mark.parametrize("contiguous_fast", [True, False])
def test_the_faster_layout_is_kept(contiguous_fast):
    op, seen = _slow_unless(contiguous_fast)
    x = torch.randn(2, 4, 3, 3).to(memory_format=torch.channels_last)
    w = torch.ones(1)
    choice = ConvLayoutChoice()
    for _ in range(2 * ConvLayoutChoice._SAMPLES):
        torch.testing.assert_close(choice.run(op, [x, w]), x)
    # Both candidates were measured, alternating.
    assert sorted(seen) == [False] * ConvLayoutChoice._SAMPLES + [True] * ConvLayoutChoice._SAMPLES
    assert choice.chosen == (1 if contiguous_fast else 0)
    seen.clear()
    choice.run(op, [x, w])
    assert seen == [contiguous_fast]


def _schedules(tmp_path) -> str:
    return "\n".join(p.read_text() for p in tmp_path.glob("*/03_schedule.txt"))


def test_host_convolution_matches_eager_while_and_after_measuring(tmp_path):
    # 151 MFLOP over 2048 pixels: a host (oneDNN) convolution, forward and backward.
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(64, 64, 3, padding=1), nn.ReLU())
    x = torch.randn(2, 64, 32, 32).to(memory_format=torch.channels_last)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="coil", options={"debug_dir": str(tmp_path)})
    for _ in range(2 * ConvLayoutChoice._SAMPLES + 1):
        for q in model.parameters():
            q.grad = None
        got = compiled(x)
        got.square().mean().backward()
        grads = [q.grad for q in model.parameters()]
        for q in model.parameters():
            q.grad = None
        want = model(x)
        want.square().mean().backward()
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        for g, q in zip(grads, model.parameters()):
            torch.testing.assert_close(g, q.grad, rtol=1e-3, atol=1e-4)
    assert "extern convolution" in _schedules(tmp_path)
