"""The default mode's CUDA graphs for training (python/coil/training_graphs.py): a model's
forward and backward graphs are captured in one pool and kept only where their replays measured
faster. On a GPU: steps match eager whichever way the choice goes (forced both ways), with
gradients the optimizer keeps, BatchNorm's running statistics and dropout; released captures
run ordinarily and the backward frees its saved values again; a forward called without its
backward gives the captures up. On the CPU: the option exists and the training graphs there
get no replayer."""

from __future__ import annotations

import collections
import copy
import gc

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
from coil import backend, training_graphs  # noqa: E402
from coil.options import build_options  # noqa: E402
from coil.training_graphs import MeasuredReplayer  # noqa: E402
from test_reduce_overhead import check_dropout_steps  # noqa: E402  (tests/python is on sys.path)



def gpu(test):
    """A GPU test: marked `gpu`, skipped visibly without one."""
    test = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")(test)
    return pytest.mark.gpu(test)


# The option, explicitly: the tests hold whatever the default is.
ON = {"cuda_graphs_training": True}


def _fresh():
    torch._dynamo.reset()
    backend._graph_fns.clear()
    gc.collect()  # earlier tests' choices (a choice and its replayers reference each other)


def _fns():
    return [fn for fn in list(backend._graph_fns) if fn.name]


def _choices():
    return training_graphs.choices()


def _mlp(p=0.0, norm="layer"):
    torch.manual_seed(0)
    layers = [nn.Linear(64, 128)]
    if norm == "batch":
        layers.append(nn.BatchNorm1d(128))
    layers += [nn.GELU(), nn.Dropout(p), nn.Linear(128, 32), nn.LayerNorm(32)]
    return nn.Sequential(*layers).cuda()


def _train(model, steps, set_to_none=True, tol=None, compare=True):
    """Trains an eager copy and a compiled one side by side; asserts equal losses and
    parameters at each step (`compare`)."""
    tol = tol or dict(rtol=2e-4, atol=2e-4)
    mine = copy.deepcopy(model)
    compiled = torch.compile(mine, backend="coil", options=ON)
    opt_e = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    opt_c = torch.optim.SGD(mine.parameters(), lr=0.05, momentum=0.9)
    for step in range(steps):
        x = torch.randn(16, 64, device="cuda")
        t = torch.randn(16, 32, device="cuda")
        losses = []
        for fn, opt in ((model, opt_e), (compiled, opt_c)):
            opt.zero_grad(set_to_none=set_to_none)
            loss = F.mse_loss(fn(x), t)
            loss.backward()
            opt.step()
            losses.append(loss.detach())
        if compare:
            torch.testing.assert_close(losses[1], losses[0], **tol)
            for (n, p), q in zip(model.named_parameters(), mine.parameters()):
                torch.testing.assert_close(q, p, **tol, msg=lambda m, n=n: f"{n} step {step}: {m}")
            for b, c in zip(model.buffers(), mine.buffers()):
                torch.testing.assert_close(c, b, **tol)
    return mine


@gpu
@pytest.mark.parametrize("set_to_none", [True, False])
@pytest.mark.parametrize("norm", ["layer", "batch"])
def test_kept_captures_replay_and_match_eager(monkeypatch, set_to_none, norm):
    monkeypatch.setattr(training_graphs, "KEEP_IF_BELOW", float("inf"))
    _fresh()
    _train(_mlp(norm=norm), 14, set_to_none)
    ((names, state, reason),) = _choices()
    assert state == "kept" and "replayed" in reason, _choices()
    replayers = [fn.replayer for fn in _fns() if isinstance(fn.replayer, MeasuredReplayer)]
    assert len(replayers) == 2
    assert all(r.pooled.replays >= 3 for r in replayers), [dict(r.pooled.events)
                                                             for r in replayers]


@gpu
def test_released_captures_run_ordinarily_and_the_backward_frees_its_inputs(monkeypatch):
    monkeypatch.setattr(training_graphs, "KEEP_IF_BELOW", 0.0)
    _fresh()
    _train(_mlp(), 14)
    ((names, state, reason),) = _choices()
    assert state == "released" and "ordinary calls are as fast" in reason, _choices()
    fns = _fns()
    assert fns and all(fn.replayer is None for fn in fns)
    (bw,) = [fn for fn in fns if fn.consume_wanted]
    assert bw.consume  # the backward frees each saved value after its last reader again
    (choice,) = list(training_graphs._CHOICES)
    for m in choice.members:  # the captures, and the pool's memory with them, are let go
        assert m.pooled.disabled == reason and not m.pooled.captures
    assert not choice.members[0].pooled.pool.captures


@gpu
def test_the_measured_choice_matches_eager_with_dropout():
    """Whatever the measurement decides: dropout's masks stay fresh and the backward uses the
    forward's mask (a replay repeats no seed)."""
    _fresh()
    torch.manual_seed(0)
    lin = nn.Linear(64, 256).cuda()

    def f(x):
        return F.dropout(lin(x), 0.5, training=True)

    compiled = torch.compile(f, backend="coil", options=ON)
    check_dropout_steps(compiled, lin, 0.5, 16)
    ((names, state, reason),) = _choices()
    assert state in ("kept", "released") and reason, _choices()


@gpu
def test_a_forward_without_its_backward_gives_the_captures_up():
    _fresh()
    model = _mlp()
    compiled = torch.compile(model, backend="coil", options=ON)
    x = torch.randn(16, 64, device="cuda")
    for _ in range(training_graphs.WARMUP_CALLS + training_graphs.MAX_UNTIMED + 2):
        y = compiled(x)  # requires grad, never differentiated
        torch.testing.assert_close(y, model(x), rtol=2e-4, atol=2e-4)
    compiled(x).sum().backward()
    ((names, state, reason),) = _choices()
    assert state == "released" and "too few timed" in reason, _choices()


def test_the_option_and_no_replayer_on_the_cpu():
    assert build_options({"cuda_graphs_training": False}).cuda_graphs_training is False
    assert build_options({}).cuda_graphs_training is False
    _fresh()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4))
    compiled = torch.compile(model, backend="coil", options=ON)
    for _ in range(3):
        compiled(torch.randn(4, 8)).sum().backward()
    fns = _fns()
    assert fns and all(fn.replayer is None for fn in fns)


def _no_memory(monkeypatch):
    """The CPU has no CUDA allocator: the fake forward leaves 3 MiB, the fake pool holds 5."""
    calls = iter(range(10**6))
    monkeypatch.setattr(training_graphs, "_allocated", lambda: next(calls) % 2 * 3 * 2**20)
    monkeypatch.setattr(training_graphs, "_pool_bytes", lambda pool: 5 * 2**20)


class _FakePooled:
    """A PooledReplayer's interface without CUDA: its first call of a key runs ordinarily, the
    second captures (and replays once), later ones replay."""

    def __init__(self, kind):
        self.kind = self.name = kind
        self.replays = self.num_captures = self.calls = 0
        self.events = collections.Counter()
        self.released = ""
        self.last = False
        self.pool = None

    def run(self, inputs):
        return ["ordinary"]

    def __call__(self, inputs, extra=()):
        self.calls += 1
        if self.calls == 1:
            self.events["first call of a key"] += 1
            return ["ordinary"]
        self.replays += 1
        if self.calls == 2:
            self.num_captures += 1
            return ["capture"]
        return ["replay"]

    def release(self, reason):
        self.released = reason


@pytest.mark.parametrize("replay_cost", [0.5, 0.99])
def test_the_choice_times_both_phases_then_keeps_or_releases(monkeypatch, replay_cost):
    """The state machine on the CPU, with a fake clock: ordinary calls cost 1, a capture 5, a
    replay `replay_cost`."""
    cost = {"ordinary": 1.0, "capture": 5.0, "replay": replay_cost}
    monkeypatch.setattr(training_graphs, "_timed",
                        lambda call: (lambda out: (cost[out[0]], out))(call()))
    monkeypatch.setattr(training_graphs, "_capturing", lambda: False)
    _no_memory(monkeypatch)
    choice = training_graphs.StepChoice()
    fw = MeasuredReplayer(_FakePooled("forward"), choice)
    bw = MeasuredReplayer(_FakePooled("backward"), choice)
    warm, timed = training_graphs.WARMUP_CALLS, training_graphs.TIMED_CALLS
    for _ in range(warm + timed):
        assert fw([]) == ["ordinary"] and bw([]) == ["ordinary"]
    assert choice.state == "replay" and choice.ordinary == {"forward": [1.0] * timed,
                                                            "backward": [1.0] * timed}
    outs = [(fw([]), bw([])) for _ in range(2 + timed)]
    assert outs[0] == (["ordinary"], ["ordinary"]) and outs[1] == (["capture"], ["capture"])
    # Only replays are timed: the first call of a key and the capture are not.
    assert choice.untimed == {"forward": 2, "backward": 2}
    if replay_cost < training_graphs.KEEP_IF_BELOW:
        assert choice.state == "kept" and choice.reason == (
            "forward + backward 2000.000 ms ordinarily, 1000.000 ms replayed; the pool holds "
            "5 MiB, an ordinary forward left 3 MiB for its backward")
        assert fw([]) == ["replay"] and not fw.pooled.released
    else:
        assert choice.state == "released" and "ordinary calls are as fast" in choice.reason
        assert fw.pooled.released == bw.pooled.released == choice.reason
        assert fw.released and fw([]) == ["ordinary"] and bw([]) == ["ordinary"]


def test_the_choice_gives_up_without_the_timings_it_needs(monkeypatch):
    monkeypatch.setattr(training_graphs, "_timed", lambda call: (1.0, call()))
    monkeypatch.setattr(training_graphs, "_capturing", lambda: False)
    _no_memory(monkeypatch)
    choice = training_graphs.StepChoice()
    fw = MeasuredReplayer(_FakePooled("forward"), choice)
    MeasuredReplayer(_FakePooled("backward"), choice)
    for _ in range(training_graphs.WARMUP_CALLS + training_graphs.MAX_UNTIMED):
        fw([])  # a forward whose backward never runs
    assert choice.state == "released" and "too few timed ordinary calls of the backward" in (
        choice.reason)
