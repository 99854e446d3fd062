"""The Python <-> C++ boundary: fallbacks, aliasing, lifetimes, errors."""

from __future__ import annotations

import gc

import pytest
import torch

C = pytest.importorskip("coil._coil")

CUMSUM = """graph(%0: f32[4, 5]):
  %1: f32[4, 5] = aten.mul.Tensor(%0, 2.0)
  %2: f32[4, 5] = aten.cumsum.default(%1, 1)
  %3: f32[4, 5] = aten.add.Tensor(%2, 1.0)
  return (%3)
"""


def test_fallback_callable_runs_unlowered_op():
    seen = []

    def fallback(node, inputs):
        seen.append((node, [t.shape for t in inputs]))
        assert node == 1  # aten.cumsum is the second node
        return [torch.cumsum(inputs[0], 1)]

    g = C.compile(CUMSUM, {}, fallback)
    assert any("cumsum" in op for op in g.artifacts["fallback_ops"])
    x = torch.randn(4, 5)
    (out,) = g.run([x])
    torch.testing.assert_close(out, torch.cumsum(x * 2, 1) + 1)
    assert seen == [(1, [torch.Size([4, 5])])]


def test_fallback_returning_non_contiguous_result_is_copied():
    def fallback(node, inputs):
        # A transposed result (strides differ from the buffer's): the runtime copies it.
        return [torch.cumsum(inputs[0], 1).t().contiguous().t()]

    g = C.compile(CUMSUM, {}, fallback)
    x = torch.randn(4, 5)
    (out,) = g.run([x])
    torch.testing.assert_close(out, torch.cumsum(x * 2, 1) + 1)


def test_fallback_errors_propagate():
    def fallback(node, inputs):
        raise ValueError("boom from the host")

    g = C.compile(CUMSUM, {}, fallback)
    with pytest.raises(ValueError, match="boom from the host"):
        g.run([torch.randn(4, 5)])


def test_strict_mode_raises_compile_error():
    with pytest.raises(C.CompileError):
        C.compile(CUMSUM, {"strict": True}, None)
    assert issubclass(C.CompileError, RuntimeError)
    assert issubclass(C.InternalError, RuntimeError)


def test_missing_fallback_is_a_compile_error():
    with pytest.raises(C.CompileError):
        C.compile(CUMSUM, {}, None)


def test_bad_text_and_bad_options():
    with pytest.raises(C.CompileError):
        C.compile("graph(%0: f32[4]):\n  %1 = nonsense(\n", {}, None)
    with pytest.raises(ValueError):
        C.compile(CUMSUM, {"no_such_option": 1}, None)
    with pytest.raises(C.CompileError):
        C.compile(CUMSUM, {"extern_provider": "gpu"}, lambda n, i: [])


def test_output_aliases_input_view():
    text = """graph(%0: f32[4, 6]):
  %1: f32[6, 4]{1, 6} = aten.permute.default(%0, [1, 0])
  %2: f32[4, 6] = aten.add.Tensor(%0, 1.0)
  return (%1, %2, %0)
"""
    g = C.compile(text, {}, None)
    x = torch.randn(4, 6)
    v, y, same = g.run([x])
    torch.testing.assert_close(v, x.t())
    assert v.data_ptr() == x.data_ptr() and v.stride() == (1, 6)
    assert same.data_ptr() == x.data_ptr()
    torch.testing.assert_close(y, x + 1)
    # The view keeps the input's memory alive after the caller drops it.
    expected = x.t().clone()
    del x, same
    gc.collect()
    torch.testing.assert_close(v, expected)


def test_outputs_outlive_the_graph():
    g = C.compile(CUMSUM.replace("aten.cumsum.default(%1, 1)", "aten.exp.default(%1)"), {}, None)
    x = torch.randn(4, 5)
    (out,) = g.run([x])
    del g
    gc.collect()
    torch.testing.assert_close(out, torch.exp(x * 2) + 1)
    out.add_(1)  # outputs are ordinary, writable tensors


def test_repeated_runs_reuse_allocations():
    text = """graph(%0: f32[65536]):
  %1: f32[65536] = aten.mul.Tensor(%0, 2.0)
  %2: f32[] = aten.sum.default(%1)
  return (%1, %2)
"""
    g = C.compile(text, {}, None)
    x = torch.randn(65536)
    for _ in range(3):  # warm up with the loop's pattern: the previous outputs stay alive
        y, s = g.run([x])
    before = C.allocator_stats()
    for _ in range(20):
        y, s = g.run([x])
    after = C.allocator_stats()
    assert after["allocations"] > before["allocations"]
    assert after["system_allocations"] == before["system_allocations"]
    torch.testing.assert_close(s, (x * 2).sum(), rtol=1e-4, atol=1e-3)


def test_input_mismatch_errors():
    g = C.compile(CUMSUM.replace("aten.cumsum.default(%1, 1)", "aten.exp.default(%1)"), {}, None)
    with pytest.raises(C.InputMismatchError, match="expected 1 inputs"):
        g.run([])
    with pytest.raises(C.InputMismatchError, match="dtype"):
        g.run([torch.randn(4, 5, dtype=torch.float64)])
    with pytest.raises(C.InputMismatchError, match="size of dim 1"):
        g.run([torch.randn(4, 6)])
    with pytest.raises(C.InputMismatchError, match="rank"):
        g.run([torch.randn(20)])
    with pytest.raises(C.InputMismatchError, match="stride"):
        g.run([torch.randn(5, 4).t()])
    with pytest.raises(TypeError):
        g.run([[1.0, 2.0]])


def test_symbol_range_is_checked():
    text = """graph(%0: f32[s0]):
  %1: f32[s0] = aten.neg.default(%0)
  return (%1)
"""
    g = C.compile(text, {}, None)
    torch.testing.assert_close(g.run([torch.ones(5)])[0], -torch.ones(5))
    with pytest.raises(C.InputMismatchError, match="s0"):
        g.run([torch.ones(1)])  # the parser gives size symbols the range [2, inf)


def test_requires_grad_and_parameter_inputs():
    g = C.compile(CUMSUM.replace("aten.cumsum.default(%1, 1)", "aten.exp.default(%1)"), {}, None)
    p = torch.nn.Parameter(torch.randn(4, 5))
    (out,) = g.run([p])
    torch.testing.assert_close(out, torch.exp(p.detach() * 2) + 1)


def test_zero_dim_and_bool_outputs():
    text = """graph(%0: f32[7]):
  %1: f32[] = aten.sum.default(%0)
  %2: b8[7] = aten.gt.Scalar(%0, 0.0)
  return (%1, %2)
"""
    g = C.compile(text, {}, None)
    x = torch.randn(7)
    s, m = g.run([x])
    assert s.dim() == 0 and m.dtype == torch.bool
    torch.testing.assert_close(s, x.sum())
    assert torch.equal(m, x > 0)


def test_artifacts_and_helpers():
    g = C.compile(CUMSUM.replace("aten.cumsum.default(%1, 1)", "aten.exp.default(%1)"), {}, None)
    a = g.artifacts
    for key in ("input_graph", "loop_program", "schedule", "fusion_log", "source",
                "compiler_command", "compiler_log"):
        assert isinstance(a[key], str)
    assert "aten.exp.default" in a["input_graph"]
    assert a["source"] and a["compiler_command"]
    stages = [s for s, _ in a["timings"]]
    # Each graph pass is a stage of its own, between verification and lowering.
    assert stages[:5] == ["parse", "verify", "pass:dce", "pass:cse", "lower"]
    assert "host_compile" in stages
    assert a["pass_graphs"] == []  # no debug dir: the graphs after the passes are not kept
    assert isinstance(a["cache_hit"], bool) and a["num_kernels"] >= 1
    assert C.parse_and_print(a["input_graph"]) == a["input_graph"]
    assert "aten.mm.default" in C.lowered_ops()


def test_cache_dir_hit(tmp_path):
    text = CUMSUM.replace("aten.cumsum.default(%1, 1)", "aten.sin.default(%1)")
    opts = {"cache_dir": str(tmp_path)}
    g1 = C.compile(text, opts, None)
    g2 = C.compile(text, opts, None)
    assert not g1.artifacts["cache_hit"] and g2.artifacts["cache_hit"]
    x = torch.randn(4, 5)
    torch.testing.assert_close(g2.run([x])[0], torch.sin(x * 2) + 1)


def test_python_option_table_matches_cpp():
    from coil import options

    cpp = {k: {"bool": bool, "int": int, "str": str}[v] for k, v in C.option_fields().items()}
    assert options.COMPILE_OPTION_FIELDS == cpp
