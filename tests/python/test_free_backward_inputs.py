"""Backward graphs take their inputs over (backend.InputRelease, CompiledGraph.run_consuming):
from the second call on, the caller's list of saved activations is emptied once the inputs
pass coil's checks, and the run drops each input after its last reader. The C++ side (that an
input dies before a later step) is tested in tests/cpp/runtime/compile_test.cpp; here the glue,
against eager, on the CPU; tests/python/test_cuda_glue.py measures the peak on the GPU."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

coil = pytest.importorskip("coil")
pytest.importorskip("coil._coil")

from coil.backend import compile_aten_graph  # noqa: E402
from coil.options import build_options  # noqa: E402


def _graph(a, b):
    # Output 1 is a view of input 0, rebuilt from the caller's args: input 0 must stay there.
    return (torch.relu(b) * 2 + a, a.t())


def _compiled(kind: str, **options):
    a, b = torch.randn(8, 16), torch.randn(8, 16)
    gm = make_fx(_graph)(a, b)
    return compile_aten_graph(gm, [a, b], build_options({"strict": True, **options}), kind)


def _call(fn, seed: int):
    torch.manual_seed(seed)
    a, b = torch.randn(8, 16), torch.randn(8, 16)
    want = _graph(a, b)
    args = [a, b]
    got = fn(args)
    torch.testing.assert_close(got[0], want[0])
    torch.testing.assert_close(got[1], want[1])
    return args


def test_backward_graph_empties_the_callers_args_from_its_second_call():
    fn = _compiled("backward")
    first = _call(fn, 0)
    assert all(x is not None for x in first), "the first call keeps its inputs (eager fallback)"
    for seed in (1, 2):
        args = _call(fn, seed)
        assert args[0] is not None, "an output is rebuilt from input 0"
        assert args[1] is None, "input 1 was handed over to the run"


@pytest.mark.parametrize("kind,options", [("forward", {}), ("inference", {}),
                                          ("backward", {"free_backward_inputs": False})])
def test_other_graphs_keep_the_callers_args(kind, options):
    fn = _compiled(kind, **options)
    for seed in range(3):
        assert all(x is not None for x in _call(fn, seed))


def test_training_matches_eager_over_several_steps():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.GELU(), torch.nn.Linear(64, 32),
                                torch.nn.LayerNorm(32))
    compiled = torch.compile(model, backend="coil", options={"strict": True})
    for step in range(3):
        x = torch.randn(16, 32, requires_grad=True)
        compiled(x).square().sum().backward()
        got = [x.grad] + [p.grad.clone() for p in model.parameters()]
        x.grad = None
        model.zero_grad(set_to_none=True)
        model(x).square().sum().backward()
        want = [x.grad] + [p.grad for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-3, atol=1e-4)


def test_retain_graph_runs_the_backward_twice():
    # AOTAutograd keeps the saved activations in its context when the graph is retained and
    # builds a new list for each backward: the second one finds them all. (AOTAutograd refuses
    # retain_graph where it found buffers to donate to the backward; off, as a user would.)
    torch._dynamo.reset()
    with torch._functorch.config.patch(donated_buffer=False):
        _retained_backward_steps()


def _retained_backward_steps():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 4))
    compiled = torch.compile(model, backend="coil", options={"strict": True})
    for step in range(3):
        x = torch.randn(8, 16)
        loss = compiled(x).square().sum()
        loss.backward(retain_graph=True)
        loss.backward()
        got = [p.grad.clone() for p in model.parameters()]
        model.zero_grad(set_to_none=True)
        model(x).square().sum().backward()
        for g, p in zip(got, model.parameters()):
            torch.testing.assert_close(g, 2 * p.grad, rtol=1e-4, atol=1e-5)
        model.zero_grad(set_to_none=True)


def test_a_failure_after_the_release_is_an_error_and_later_calls_run_eagerly():
    fn = _compiled("backward", strict=False)
    _call(fn, 0)

    class FailsMidRun:
        def run(self, inputs, checked=None, **kwargs):
            checked()
            raise RuntimeError("device lost")

    fn.compiled = FailsMidRun()
    with pytest.warns(RuntimeWarning, match="device lost"):
        with pytest.raises(RuntimeError, match="failed after it released its inputs"):
            _call(fn, 1)
    assert all(x is not None for x in _call(fn, 2)), "eager from now on"


def _backward_peak_above_saved(free: bool) -> float:
    """MiB the backward of an MLP allocates above what its forward left alive: a wide first
    layer (its backward's temporaries are [8192, 8192], 256 MiB each, made last) under 12
    narrow ones (each saving [8192, 1024], 32 MiB, read early in the backward)."""
    torch.manual_seed(0)
    layers = [torch.nn.Linear(1024, 8192), torch.nn.Tanh(), torch.nn.Linear(8192, 1024)]
    for _ in range(12):
        layers += [torch.nn.Tanh(), torch.nn.Linear(1024, 1024)]
    model = torch.nn.Sequential(*layers).cuda()
    compiled = torch.compile(model, backend="coil",
                             options={"strict": True, "free_backward_inputs": free})
    x = torch.randn(8192, 1024, device="cuda")
    for _ in range(2):  # the first backward keeps its inputs
        compiled(x).sum().backward()
    model.zero_grad(set_to_none=True)
    loss = compiled(x).sum()
    torch.cuda.synchronize()
    saved = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss.backward()
    torch.cuda.synchronize()
    torch._dynamo.reset()
    return (torch.cuda.max_memory_allocated() - saved) / 2**20


@pytest.mark.gpu
def test_cuda_backward_peak_falls_when_inputs_are_freed():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    kept, freed = _backward_peak_above_saved(False), _backward_peak_above_saved(True)
    # Kept, the wide layer's temporaries come on top of every saved activation; freed, the
    # narrow layers' 384 MiB are gone by then.
    print(f"backward peak above the saved activations: kept {kept:.0f} MiB, freed {freed:.0f}")
    assert freed < kept - 192, (kept, freed)
