"""Extending coil from outside the tree (python/coil/extending.py, docs/extending/custom-ops.md):
custom ops (torch.library.custom_op) in compiled graphs, through the per-op fallback or a user
decomposition; coil.register_decomposition over coil's own table; strict mode; custom ops that
mutate their arguments."""

from __future__ import annotations

import copy

import pytest
import torch

import coil
from coil.decompositions import coil_decompositions

aten = torch.ops.aten

# -- a custom op with a fake (meta) function and an autograd formula ---------------------------

EAGER_CALLS = [0]  # runs of the op's real (eager) kernel


@torch.library.custom_op("coil_test_ext::scaled_tanh", mutates_args=())
def scaled_tanh(x: torch.Tensor, scale: float) -> torch.Tensor:
    EAGER_CALLS[0] += 1
    return torch.tanh(x) * scale


@scaled_tanh.register_fake
def _(x, scale):
    return torch.empty_like(x)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(output)
    ctx.scale = inputs[1]


def _backward(ctx, grad):
    (out,) = ctx.saved_tensors
    return grad * (ctx.scale - out * out / ctx.scale), None


scaled_tanh.register_autograd(_backward, setup_context=_setup_context)

OP = torch.ops.coil_test_ext.scaled_tanh.default
OP_NAME = "coil_test_ext.scaled_tanh.default"


def scaled_tanh_decomposition(x, scale):
    DECOMPOSED[0] += 1
    return aten.mul.Tensor(aten.tanh.default(x), scale)


DECOMPOSED = [0]  # calls of the decomposition (during AOTAutograd's tracing)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(8, 16)
        self.b = torch.nn.Linear(16, 4)

    def forward(self, x):
        return self.b(torch.ops.coil_test_ext.scaled_tanh(self.a(x), 1.5).relu())


@pytest.fixture
def fresh():
    torch._dynamo.reset()
    coil.reset_report()
    EAGER_CALLS[0] = DECOMPOSED[0] = 0
    yield
    torch._dynamo.reset()


def _train_step(model, x, run=None):
    out = (model if run is None else run)(x)
    out.square().mean().backward()
    return out.detach(), {n: p.grad.clone() for n, p in model.named_parameters()}


def _compare_training(model):
    """One training step compiled vs eager; returns the report."""
    torch.manual_seed(0)
    x = torch.randn(6, 8)
    ref_model = copy.deepcopy(model)
    ref_out, ref_grads = _train_step(ref_model, x)
    out, grads = _train_step(model, x, torch.compile(model, backend="coil"))
    torch.testing.assert_close(out, ref_out)
    for name, g in ref_grads.items():
        torch.testing.assert_close(grads[name], g, msg=name)
    return coil.report()


def test_custom_op_runs_through_the_per_op_fallback(real_coil, fresh):
    torch.manual_seed(0)
    model = Model()
    x = torch.randn(6, 8)
    with torch.no_grad():
        ref = model(x)
        before = EAGER_CALLS[0]
        out = torch.compile(model, backend="coil")(x)
    torch.testing.assert_close(out, ref)
    assert EAGER_CALLS[0] == before + 1  # the op's own kernel ran once, inside the graph
    r = coil.report()
    # The graph compiled (no whole-graph fallback); only the custom op ran eagerly, with its
    # one-line reason.
    assert r.graphs_compiled == 1 and r.graphs_fallen_back == []
    assert dict(r.fallback_ops) == {f"{OP_NAME}: no lowering": 1}
    assert f"{OP_NAME}: no lowering: 1" in str(r)


def test_custom_op_training_uses_its_autograd_formula(real_coil, fresh):
    torch.manual_seed(0)
    r = _compare_training(Model())
    # Forward and backward compiled; the forward ran the op per node, the backward is the
    # register_autograd formula traced into ATen ops coil lowers.
    assert r.graphs_compiled == 2 and r.graphs_fallen_back == []
    assert dict(r.fallback_ops) == {f"{OP_NAME}: no lowering": 1}


def test_custom_op_with_a_coil_decomposition_fuses(real_coil, fresh):
    torch.manual_seed(0)
    model = Model()
    with coil.temporary_decomposition(OP, scaled_tanh_decomposition):
        x = torch.randn(6, 8)
        with torch.no_grad():
            ref = model(x)
            before = EAGER_CALLS[0]
            out = torch.compile(model, backend="coil")(x)
        torch.testing.assert_close(out, ref)
        assert EAGER_CALLS[0] == before  # decomposed: the op's kernel never ran
        assert DECOMPOSED[0] >= 1
        r = coil.report()
        assert r.graphs_compiled == 1 and r.graphs_fallen_back == [] and not r.fallback_ops

        torch._dynamo.reset()
        coil.reset_report()
        r = _compare_training(Model())
        assert r.graphs_compiled == 2 and r.graphs_fallen_back == [] and not r.fallback_ops
    assert OP not in coil_decompositions()  # the `with` block ended


def test_user_decomposition_overrides_a_builtin_one(real_coil, fresh):
    builtin = coil_decompositions()[aten.silu.default]
    calls = []

    def silu(x):
        calls.append(tuple(x.shape))
        return aten.mul.Tensor(x, aten.sigmoid.default(x))

    def f(x):
        return torch.nn.functional.silu(x * 2) + 1

    x = torch.randn(4, 8)
    with coil.temporary_decomposition(aten.silu, silu):
        assert coil_decompositions()[aten.silu.default] is silu
        out = torch.compile(f, backend="coil")(x)
    torch.testing.assert_close(out, f(x))
    assert calls == [(4, 8)]  # applied while AOTAutograd traced the graph
    r = coil.report()
    assert r.graphs_compiled == 1 and r.graphs_fallen_back == [] and not r.fallback_ops
    assert coil_decompositions()[aten.silu.default] is builtin  # restored


def test_registration_api():
    def one(x, scale):
        return aten.mul.Tensor(x, scale)

    def two(x, scale):
        return aten.mul.Tensor(x, 2 * scale)

    try:
        # As a decorator; returns the function.
        assert coil.register_decomposition(OP)(one) is one
        assert coil_decompositions()[OP] is one
        # Registering again for the op replaces the entry.
        assert coil.register_decomposition(OP, two) is two
        assert coil_decompositions()[OP] is two
        # temporary_decomposition restores the previous user entry.
        with coil.temporary_decomposition(OP, one):
            assert coil_decompositions()[OP] is one
        assert coil_decompositions()[OP] is two
    finally:
        coil.unregister_decomposition(OP)
    assert OP not in coil_decompositions()
    coil.unregister_decomposition(OP)  # nothing registered: no error
    # The custom_op object and the packet name the op too.
    with coil.temporary_decomposition(scaled_tanh, one):
        assert coil_decompositions()[OP] is one
    with coil.temporary_decomposition(torch.ops.coil_test_ext.scaled_tanh, two):
        assert coil_decompositions()[OP] is two
    assert OP not in coil_decompositions()
    # A packet registers every overload.
    with coil.temporary_decomposition(aten.hardtanh, one):
        table = coil_decompositions()
        assert table[aten.hardtanh.default] is one and table[aten.hardtanh.out] is one
    assert coil_decompositions()[aten.hardtanh.default] is not one
    with pytest.raises(TypeError, match="expected an ATen or custom op"):
        coil.register_decomposition("aten::silu", one)
    with pytest.raises(TypeError, match="not callable"):
        coil.register_decomposition(OP, 3)


def test_strict_mode_names_the_unlowerable_custom_op(real_coil, fresh):
    def f(x):
        return torch.ops.coil_test_ext.scaled_tanh(x * 2, 3.0) + 1

    c = torch.compile(f, backend="coil", options={"strict": True})
    with pytest.raises(Exception, match=rf"CompileError: .*{OP_NAME}: no lowering"):
        c(torch.randn(4))
    # With a decomposition the same function compiles under strict.
    torch._dynamo.reset()
    with coil.temporary_decomposition(OP, scaled_tanh_decomposition):
        x = torch.randn(4)
        out = torch.compile(f, backend="coil", options={"strict": True})(x)
    torch.testing.assert_close(out, torch.tanh(x * 2) * 3.0 + 1)


# -- a custom op that mutates an argument -------------------------------------------------------


@torch.library.custom_op("coil_test_ext::accumulate", mutates_args=("acc",))
def accumulate(x: torch.Tensor, acc: torch.Tensor, k: int, alpha: float, dims: list[int],
               dtype: torch.dtype) -> torch.Tensor:
    acc.add_(x, alpha=alpha)
    return (x * k).sum(dims).to(dtype)


@accumulate.register_fake
def _(x, acc, k, alpha, dims, dtype):
    return x.sum(dims).to(dtype)


@pytest.mark.parametrize("dynamic", [False, True])
def test_mutating_custom_op_keeps_the_graph(real_coil, fresh, dynamic):
    def f(x, buf):
        # The op updates a slice of an input.
        y = torch.ops.coil_test_ext.accumulate(x.exp(), buf[1:], 3, 0.5, [1], torch.float64)
        return y + buf[1:].sum(1)

    torch.manual_seed(0)
    x, buf = torch.randn(3, 5), torch.randn(4, 5)
    ref_buf = buf.clone()
    ref = f(x, ref_buf)
    out = torch.compile(f, backend="coil", dynamic=dynamic)(x, buf)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(buf, ref_buf)  # the caller's tensor was updated
    r = coil.report()
    # Formerly "ExportError: unsupported call target auto_functionalized_v2" for the graph.
    assert r.graphs_compiled == 1 and r.graphs_fallen_back == []
    assert dict(r.fallback_ops) == {
        "coil_functional.coil_test_ext__accumulate.default: no lowering": 1}
