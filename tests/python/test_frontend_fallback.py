"""Whole-graph fallback, strict mode, report, options and debug dumps."""

from __future__ import annotations

import json
import logging
import sys
import warnings

import pytest
import torch

import coil
from coil.options import build_options


def f(x, w):
    return torch.softmax(x @ w, dim=-1).sum(0)


X, W = torch.randn(4, 8), torch.randn(8, 8)


def test_compile_error_runs_eagerly(fake_coil, caplog):
    fake_coil.compile_error = fake_coil.CompileError("unsupported op aten.foo at node 3")
    x, w = X.clone().requires_grad_(), W.clone().requires_grad_()
    with caplog.at_level(logging.WARNING, logger="coil"), warnings.catch_warnings(record=True) as ws:
        warnings.simplefilter("always")
        out = torch.compile(f, backend="coil")(x, w)
        out.sum().backward()
    xr, wr = X.clone().requires_grad_(), W.clone().requires_grad_()
    ref = f(xr, wr)
    ref.sum().backward()
    torch.testing.assert_close(out, ref)
    torch.testing.assert_close(x.grad, xr.grad)
    torch.testing.assert_close(w.grad, wr.grad)
    r = coil.report()
    assert r.graphs_compiled == 0 and len(r.graphs_fallen_back) == 2  # forward and backward
    assert all(reason == "CompileError: unsupported op aten.foo at node 3"
               for _, reason in r.graphs_fallen_back)
    # One warning / log line for the one reason.
    assert sum("unsupported op aten.foo" in str(w.message) for w in ws) == 1
    assert sum("unsupported op aten.foo" in rec.getMessage() for rec in caplog.records) == 1
    assert "ran eagerly" in str(r)


@pytest.mark.parametrize("exc", ["InternalError", "ValueError"])
def test_other_errors_fall_back(fake_coil, exc):
    fake_coil.compile_error = (getattr(fake_coil, exc, None) or ValueError)("boom")
    torch.testing.assert_close(torch.compile(f, backend="coil")(X, W), f(X, W))
    assert coil.report().graphs_fallen_back[0][1] == f"{exc}: boom"


def test_strict_option_raises(fake_coil):
    fake_coil.compile_error = fake_coil.CompileError("unsupported op aten.foo")
    c = torch.compile(f, backend="coil", options={"strict": True})
    with pytest.raises(Exception, match="unsupported op aten.foo"):
        c(X, W)
    assert fake_coil.options[0]["strict"] is True


def test_strict_env_raises(fake_coil, monkeypatch):
    monkeypatch.setenv("COIL_STRICT", "1")
    fake_coil.compile_error = fake_coil.CompileError("nope")
    with pytest.raises(Exception, match="nope"):
        torch.compile(f, backend="coil")(X, W)


def test_missing_extension_falls_back(fake_coil, monkeypatch):
    monkeypatch.setitem(sys.modules, "coil._coil", None)  # import raises ImportError
    torch.testing.assert_close(torch.compile(f, backend="coil")(X, W), f(X, W))
    (_, reason), = coil.report().graphs_fallen_back
    assert "extension is not available" in reason


def test_runtime_failure_falls_back(fake_coil, monkeypatch):
    c = torch.compile(f, backend="coil")
    c(X, W)
    (g,) = fake_coil.compiled

    def bad_run(inputs):
        raise RuntimeError("kernel crashed")

    monkeypatch.setattr(g, "run", bad_run)
    torch.testing.assert_close(c(X, W), f(X, W))
    torch.testing.assert_close(c(X, W), f(X, W))
    assert [r for _, r in coil.report().graphs_fallen_back] == ["run failed: RuntimeError: kernel crashed"]


def test_per_op_fallbacks_in_report(fake_coil):
    torch.compile(f, backend="coil")(X, W)
    r = coil.report()
    assert r.graphs_compiled == 1
    assert r.fallback_ops["aten.mm.default"] == 1  # the fake reports every op as fallen back
    assert "aten.mm.default: 1" in str(r)


def test_compile_options_passed(fake_coil, tmp_path):
    torch.compile(f, backend="coil", options={"fuse": False, "num_threads": 2,
                                              "cache_dir": str(tmp_path)})(X, W)
    (o,) = fake_coil.options
    assert o["fuse"] is False and o["num_threads"] == 2 and o["cache_dir"] == str(tmp_path)
    assert o["strict"] is False


def test_build_options_env_and_precedence(tmp_path):
    env = {"COIL_STRICT": "1", "COIL_DEBUG": "true", "COIL_DEBUG_DIR": "/d",
           "COIL_CACHE_DIR": "/c", "COIL_CXX": "clang++"}
    o = build_options(None, env)
    assert o.strict and o.debug and o.debug_dir == "/d" and o.cache_dir == "/c"
    assert o.compile_options()["cxx"] == "clang++"
    o = build_options({"strict": False, "cxx": "g++-13", "max_inline_reads": "4"}, env)
    assert not o.strict and o.compile_options()["cxx"] == "g++-13"
    assert o.compile_options()["max_inline_reads"] == 4
    d = build_options(None, {})
    assert not d.strict and not d.debug and d.debug_dir == "coil_debug"
    assert d.cache_dir.endswith("/.cache/coil/kernels")
    assert build_options(None, {"COIL_CACHE_DIR": ""}).cache_dir == ""
    with pytest.raises(ValueError, match="unknown coil option"):
        build_options({"fusee": True}, {})
    with pytest.raises(ValueError):
        build_options({"strict": "maybe"}, {})


def test_debug_dump(fake_coil, tmp_path):
    c = torch.compile(f, backend="coil", options={"debug": True, "debug_dir": str(tmp_path)})
    x = X.clone().requires_grad_()
    c(x, W).sum().backward()
    dirs = sorted(p for p in tmp_path.iterdir() if p.is_dir())
    assert len(dirs) == 2 and "forward" in dirs[0].name and "backward" in dirs[1].name
    for d in dirs:
        names = {p.name for p in d.iterdir()}
        # The stage files (02..06) come from C++: tests/python/test_debug_dump.py.
        assert {"00_fx_graph.py", "01_graph.txt", "timings.json", "fallbacks.txt"} <= names
        assert (d / "01_graph.txt").read_text().startswith("graph(")
        assert "def forward" in (d / "00_fx_graph.py").read_text()
        assert "python_export" in json.loads((d / "timings.json").read_text())
        assert "aten." in (d / "fallbacks.txt").read_text()


def test_debug_dump_of_fallen_back_graph(fake_coil, tmp_path, monkeypatch):
    monkeypatch.setenv("COIL_DEBUG", "1")
    monkeypatch.setenv("COIL_DEBUG_DIR", str(tmp_path))
    fake_coil.compile_error = fake_coil.CompileError("nope")
    torch.compile(f, backend="coil")(X, W)
    (d,) = [p for p in tmp_path.iterdir() if p.is_dir()]
    assert "CompileError: nope" in (d / "fallbacks.txt").read_text()
    assert (d / "01_graph.txt").exists()


def test_backend_registered():
    from torch._dynamo import list_backends, lookup_backend

    assert "coil" in list_backends(exclude_tags=())
    assert lookup_backend("coil") is coil.coil_backend


def test_host_convolution_without_its_bias_gets_a_zero_one():
    """A GPU convolution whose bias coil adds itself reaches the host fallback (where cuDNN
    refused it at run time) with input and weight only: ATen runs it with a zero bias, so
    coil's own add after it is not doubled. With all three tensors nothing changes."""
    import torch.fx as fx
    from types import SimpleNamespace

    from coil import node_fallback as nf

    aten = torch.ops.aten
    g = fx.Graph()
    x, w, b = g.placeholder("x"), g.placeholder("w"), g.placeholder("b")
    conv = g.call_function(aten.convolution.default,
                           (x, w, b, [1, 1], [1, 1], [1, 1], False, [0, 0], 1))
    g.output(conv)
    exported = SimpleNamespace(scalar_inputs=frozenset(), folded={})
    _, arg_slots, _, _, _ = nf._call_plan(exported, conv)
    xt, wt, bt = torch.randn(2, 3, 5, 5), torch.randn(4, 3, 3, 3), torch.randn(4)
    args = nf._with_zero_bias(conv, arg_slots, [xt, wt])
    assert len(args) == 3 and torch.equal(args[2], torch.zeros(4))
    torch.testing.assert_close(aten.convolution.default(args[0], args[1], args[2], [1, 1], [1, 1],
                                                        [1, 1], False, [0, 0], 1),
                               torch.nn.functional.conv2d(xt, wt, padding=1))
    assert nf._with_zero_bias(conv, arg_slots, [xt, wt, bt]) == [xt, wt, bt]
