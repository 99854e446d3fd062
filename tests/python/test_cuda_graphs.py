"""CUDA graph replay of coil's inference graphs (python/coil/cuda_graphs.py): which graphs may
be captured (on the CPU), and on a GPU that replays give eager's numbers for fresh inputs, inputs
changed in place and moved inputs, that returned outputs are not overwritten by later calls, and
that random graphs are never captured."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.fx.experimental.proxy_tensor import make_fx

pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
import coil  # noqa: E402
from coil import backend  # noqa: E402
from coil import cuda_graphs  # noqa: E402
from coil.cuda_graphs import WARMUP_CALLS, capture_blocker  # noqa: E402
from coil.options import build_options  # noqa: E402


def _fx(fn, *args):
    return make_fx(fn, tracing_mode="fake")(*args)


def test_capture_blockers():
    x = torch.randn(4, 4)
    assert capture_blocker(_fx(lambda a: torch.rand_like(a) + a, x)).startswith("random op")
    assert capture_blocker(_fx(lambda a: a * 2, x)) == "input a_1 is on cpu"
    assert capture_blocker(_fx(lambda a: a * 2, x.to("meta"))) == "input a_1 is on meta"
    sym = make_fx(lambda a: a * 2, tracing_mode="symbolic")(x)
    assert capture_blocker(sym) == "symbolic sizes"


def test_option_parses():
    assert build_options({}).cuda_graphs is True
    assert build_options({"cuda_graphs": "0"}).cuda_graphs is False


def _replayers():
    return [fn.replayer for fn in list(backend._graph_fns) if fn.replayer is not None]


def _mlp():
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Linear(128, 32), nn.LayerNorm(32)).cuda()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_replays_match_eager_for_new_moved_and_mutated_inputs(dtype, monkeypatch):
    monkeypatch.setattr(cuda_graphs, "KEEP_IF_BELOW", float("inf"))  # keep it, however timed
    model = _mlp().to(dtype)
    torch._dynamo.reset()
    backend._graph_fns.clear()
    compiled = torch.compile(model, backend="coil", options={"strict": True})
    kept = []
    fixed = torch.randn(8, 64, device="cuda", dtype=dtype)
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    with torch.no_grad():
        for step in range(WARMUP_CALLS + 6):
            if step % 3 == 2:
                x = torch.randn(8, 64, device="cuda", dtype=dtype)  # another address
            else:
                fixed.normal_()  # same address, new values
                x = fixed
            got = compiled(x)
            want = model(x)
            torch.testing.assert_close(got, want, **tol)
            kept.append((got, want.clone()))
        for got, want in kept:  # earlier results were not overwritten by later replays
            torch.testing.assert_close(got, want, **tol)
    (r,) = _replayers()
    assert r.graph is not None and not r.disabled
    assert 1 <= r.captures <= 2
    assert r.copied  # the moving input is copied in


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_random_graphs_and_the_option_off_are_not_captured():
    model = nn.Sequential(nn.Linear(64, 64), nn.Dropout(0.5)).cuda().train()
    torch._dynamo.reset()
    backend._graph_fns.clear()
    compiled = torch.compile(model, backend="coil", options={"strict": True})
    x = torch.randn(8, 64, device="cuda")
    with torch.no_grad():
        outs = [compiled(x) for _ in range(WARMUP_CALLS + 3)]
    assert not _replayers()
    assert not torch.equal(outs[-1], outs[-2])  # fresh dropout masks on every call

    torch._dynamo.reset()
    backend._graph_fns.clear()
    model = _mlp()
    compiled = torch.compile(model, backend="coil", options={"strict": True, "cuda_graphs": False})
    with torch.no_grad():
        for _ in range(WARMUP_CALLS + 2):
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    assert not _replayers()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_capture_slower_than_ordinary_calls_is_dropped(monkeypatch):
    monkeypatch.setattr(cuda_graphs, "KEEP_IF_BELOW", 0.0)  # no replay is fast enough
    model = _mlp()
    torch._dynamo.reset()
    backend._graph_fns.clear()
    compiled = torch.compile(model, backend="coil", options={"strict": True})
    x = torch.randn(8, 64, device="cuda")
    with torch.no_grad():
        for _ in range(WARMUP_CALLS + 3):
            x.normal_()
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
    (r,) = _replayers()
    assert r.graph is None and r.disabled.startswith("ordinary calls are as fast")
    assert r.timings is not None and r.captures == 1


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_outputs_held_past_a_replay_or_a_dropped_graph_keep_their_values(monkeypatch):
    """The default mode's replays hand out the graph's own output memory: an output still
    held at the next replay moves out first, and so does one held when the capture is dropped
    (a parameter moved to new memory)."""
    monkeypatch.setattr(cuda_graphs, "KEEP_IF_BELOW", float("inf"))  # keep it, however timed
    model = _mlp()
    torch._dynamo.reset()
    backend._graph_fns.clear()
    compiled = torch.compile(model, backend="coil", options={"strict": True})
    tol = dict(rtol=1e-4, atol=1e-4)
    xs = [torch.randn(8, 64, device="cuda") for _ in range(WARMUP_CALLS + 4)]
    with torch.no_grad():
        held = [(compiled(x), model(x)) for x in xs]  # every output held past the next call
        (r,) = _replayers()
        assert r.graph is not None and r.captures == 1
        for got, want in held:
            torch.testing.assert_close(got, want, **tol)
        last, want = held[-1]
        model[0].weight.set_(model[0].weight.clone())  # the capture's parameter moves
        x = torch.randn(8, 64, device="cuda")
        torch.testing.assert_close(compiled(x), model(x), **tol)
        assert r.graph is None or r.captures == 2
        junk = [torch.full((1 << 20,), float("nan"), device="cuda") for _ in range(16)]
        torch.testing.assert_close(last, want, **tol)
        del junk
