"""The minifier (python/coil/minifier.py, docs/debugging.md "Minifying a failure"): a fault
injected into one op of a ~30-op graph is shrunk to that op, and the repro folder it writes
reproduces the failure in a fresh process; mode "error" with an op coil raises on in strict
mode.

The fault sits between the ATen graph and coil's C++ core (the exported graph text computes tanh
where the graph says sigmoid): a wrong user decomposition would not do, since it changes the ATen
graph itself, which the minifier runs eagerly as the reference."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import coil
import coil.backend
from coil import minifier

ROOT = Path(__file__).resolve().parents[2]

# The fault: coil's graph text says tanh where the FX graph has sigmoid (the text coil hands its
# C++ core is wrong for one op). The same lines, as a module, put it into a repro's process.
FAULT_MODULE = '''
import coil.backend as _backend

_real_export = _backend.export_graph


def _faulty_export(gm):
    ex = _real_export(gm)
    ex.text = ex.text.replace("aten.sigmoid.default", "aten.tanh.default")
    return ex


_backend.export_graph = _faulty_export
'''


@pytest.fixture
def faulty_sigmoid(real_coil, monkeypatch):
    real_export = coil.backend.export_graph

    def faulty(gm):
        ex = real_export(gm)
        ex.text = ex.text.replace("aten.sigmoid.default", "aten.tanh.default")
        return ex

    monkeypatch.setattr(coil.backend, "export_graph", faulty)
    yield
    torch._dynamo.reset()


class Block(torch.nn.Module):
    """About 30 ATen ops in inference: two Linear, LayerNorm, GELU, a sigmoid gate, a
    softmax and a residual."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(16, 32)
        self.ln = torch.nn.LayerNorm(32)
        self.b = torch.nn.Linear(32, 16)

    def forward(self, x):
        h = self.ln(torch.nn.functional.gelu(self.a(x)))
        h = h * torch.sigmoid(h - h.mean(-1, keepdim=True)) + 0.1 * h.pow(2)
        y = self.b(h).softmax(-1) + x.clamp(-1, 1)
        return y.abs().amax(0), (y * 2).exp().sum()


def _run_repro(folder: Path, fault: bool) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(folder), str(ROOT / "python"), env.get("PYTHONPATH", "")])
    if fault:
        (folder / "fault_module.py").write_text(FAULT_MODULE)
        cmd = [sys.executable, "-c", "import runpy, fault_module; "
               "runpy.run_path('repro.py', run_name='__main__')"]
    else:
        cmd = [sys.executable, "repro.py"]
    return subprocess.run(cmd, cwd=folder, env=env, capture_output=True, text=True, timeout=120)


def _call_ops(gm) -> list[str]:
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def test_accuracy_fault_shrinks_to_the_faulty_op(faulty_sigmoid, monkeypatch, tmp_path):
    torch.manual_seed(0)
    model = Block()
    x = torch.randn(8, 16)
    with torch.no_grad():
        res = coil.minify(model, x, mode="accuracy", out_dir=tmp_path / "min")
    assert res is not None
    assert res.kind == "inference" and res.original_ops >= 25, res
    ops = _call_ops(res.gm)
    assert len(ops) <= 3, res.gm.code
    assert "aten.sigmoid.default" in ops, res.gm.code
    assert "rmse vs fp64" in res.detail

    out = tmp_path / "min"
    # graph.txt is what coil handed its C++ core (the faulty text: tanh), a graph coil parses.
    text = (out / "graph.txt").read_text()
    assert "aten.tanh.default" in text and text.startswith("graph(")
    assert real_coil_parses(text)
    assert len(list((out / "coil_debug").glob("*/05_kernels.cpp"))) == 1
    assert (out / "original" / "repro.py").is_file()

    # The repro, in a fresh process with the fault: reproduces (exit 1).
    p = _run_repro(out, fault=True)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "failure reproduced (accuracy)" in p.stdout
    # Loaded here: the same graph and check; it passes once the fault is gone.
    mod = runpy.run_path(str(out / "repro.py"), run_name="not_main")
    gm, inputs = mod["load"]()
    assert _call_ops(gm) == ops
    assert minifier.check_graph(gm, inputs, "accuracy", {}, mod["KIND"]).failed
    monkeypatch.undo()
    outcome = minifier.check_graph(gm, inputs, "accuracy", {}, mod["KIND"])
    assert not outcome.failed, outcome


def real_coil_parses(text: str) -> bool:
    import coil._coil as C

    return C.parse_and_print(text).strip() == text.strip()


def test_error_mode_shrinks_to_the_op_coil_raises_on(real_coil, tmp_path):
    # aten.special_erfcx has no lowering and no decomposition: it runs through the per-op
    # fallback, which strict mode (COIL_STRICT=1) turns into an error.
    def f(x, w):
        h = torch.relu(x @ w) * 2 + 1
        d = torch.special.erfcx(h)
        return (d * h).sum(0), torch.tanh(h).exp().mean()

    torch.manual_seed(0)
    x, w = torch.randn(8, 16), torch.randn(16, 16)
    res = coil.minify(f, x, w, mode="error", out_dir=tmp_path / "min")
    assert res is not None
    assert _call_ops(res.gm) == ["aten.special_erfcx.default"], res.gm.code
    assert "no lowering" in res.detail and "erfcx" in res.detail
    p = _run_repro(tmp_path / "min", fault=False)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "failure reproduced (error): CompileError" in p.stdout
    # The command line's check of a repro (the original graph here): fails the same way.
    assert minifier.main([str(tmp_path / "min" / "original"), "--check"]) == 1
    torch._dynamo.reset()


def test_nothing_fails(real_coil, tmp_path):
    with torch.no_grad():
        res = coil.minify(lambda x: torch.sigmoid(x) * 2, torch.randn(4, 4),
                          out_dir=tmp_path / "min")
    assert res is None and not (tmp_path / "min").exists()
    with pytest.raises(RuntimeError, match="does not fail"):
        from torch.fx.experimental.proxy_tensor import make_fx

        x = torch.randn(4, 4)
        minifier.minify_graph(make_fx(lambda x: x.exp() + 1)(x), [x], "error")
    torch._dynamo.reset()


def test_ddmin_finds_a_one_minimal_subset():
    calls = []

    def test(sub):
        calls.append(list(sub))
        return {3, 11}.issubset(sub)

    assert sorted(minifier._ddmin(list(range(16)), test)) == [3, 11]
    assert minifier._ddmin([5], lambda s: True) == [5]


def test_cuts_keep_shapes_strides_and_input_mutations():
    """A cut makes a value an input with the value an eager run gave it (its strides too), and
    keeps the graph's input mutations (copy_ nodes) as roots."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x, buf):
        t = x.t()
        y = torch.sigmoid(t) + 1
        buf.add_(y.sum())
        return y * 2

    x, buf = torch.randn(3, 5), torch.zeros(())
    gm = make_fx(torch.func.functionalize(f))(x, buf.clone())  # buf.add_ -> copy_ at the end
    orig = minifier._Original(gm, [x, buf])
    assert [k for k, _ in orig.roots] == ["out", "effect"]
    (t,) = [n.name for n in gm.graph.nodes if n.target is torch.ops.aten.t.default]
    small, inputs = orig.build(minifier.Cut(frozenset({t}), orig.roots[:1]))
    assert [n.name for n in small.graph.nodes if n.op == "placeholder"] == [t]
    assert inputs[0].stride() == (1, 5) and torch.equal(inputs[0], x.t())
    (out,) = small(*inputs)
    assert torch.allclose(out, (torch.sigmoid(x.t()) + 1) * 2)
