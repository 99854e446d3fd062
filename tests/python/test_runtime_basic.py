"""coil._coil end to end from Python: compile graph text, run on torch tensors, compare with
torch eager (docs/python-binding.md)."""

from __future__ import annotations

import pytest
import torch

C = pytest.importorskip("coil._coil")

SOFTMAX = """graph(%0: f32[8, 32]):
  %1: f32[8, 1] = aten.amax.default(%0, [1], true)
  %2: f32[8, 32] = aten.sub.Tensor(%0, %1)
  %3: f32[8, 32] = aten.exp.default(%2)
  %4: f32[8, 1] = aten.sum.dim_IntList(%3, [1], true)
  %5: f32[8, 32] = aten.div.Tensor(%3, %4)
  return (%5)
"""


def chain_text(dtype: str, n: int = 1000) -> str:
    return f"""graph(%0: {dtype}[{n}], %1: {dtype}[{n}]):
  %2: {dtype}[{n}] = aten.mul.Tensor(%0, %1)
  %3: {dtype}[{n}] = aten.add.Tensor(%2, 1.0)
  %4: {dtype}[{n}] = aten.tanh.default(%3)
  %5: {dtype}[{n}] = aten.mul.Tensor(%4, 0.5)
  return (%5)
"""


def chain_eager(a, b):
    return torch.tanh(a * b + 1.0) * 0.5


def test_pointwise_chain_f32():
    g = C.compile(chain_text("f32"), {}, None)
    a, b = torch.randn(1000), torch.randn(1000)
    (out,) = g.run([a, b])
    assert out.dtype == torch.float32 and out.shape == (1000,)
    torch.testing.assert_close(out, chain_eager(a, b))
    assert g.artifacts["num_kernels"] >= 1


def test_pointwise_chain_bf16():
    g = C.compile(chain_text("bf16"), {}, None)
    a = torch.randn(1000, dtype=torch.bfloat16)
    b = torch.randn(1000, dtype=torch.bfloat16)
    (out,) = g.run([a, b])
    assert out.dtype == torch.bfloat16
    # coil keeps intermediates in f32 (as Inductor): compare with an f32 computation rounded.
    ref = chain_eager(a.float(), b.float()).bfloat16()
    torch.testing.assert_close(out, ref, atol=1e-2, rtol=1e-2)


def test_softmax():
    g = C.compile(SOFTMAX, {}, None)
    x = torch.randn(8, 32)
    (out,) = g.run([x])
    torch.testing.assert_close(out, torch.softmax(x, dim=1))


def test_input_with_strides_and_offset():
    # The compiled graph wants a transposed layout {1, 8}; pass a view with a storage offset.
    text = """graph(%0: f32[8, 4]{1, 8}):
  %1: f32[8, 4] = aten.mul.Tensor(%0, 3.0)
  return (%1)
"""
    g = C.compile(text, {}, None)
    base = torch.randn(40)
    x = base[8:].view(4, 8).t()  # sizes [8, 4], strides [1, 8], offset 8
    assert x.stride() == (1, 8) and x.storage_offset() == 8
    (out,) = g.run([x])
    torch.testing.assert_close(out, x * 3.0)


@pytest.mark.parametrize("provider", ["library", "host"])
def test_mm_transposed_operand(provider):
    text = """graph(%0: f32[16, 32], %1: f32[24, 32]):
  %2: f32[32, 24]{1, 32} = aten.permute.default(%1, [1, 0])
  %3: f32[16, 24] = aten.mm.default(%0, %2)
  return (%3)
"""
    calls = []

    def fallback(node, inputs):
        calls.append(node)
        assert node == 1
        return [torch.mm(*inputs)]

    g = C.compile(text, {"extern_provider": provider}, fallback)
    a, b = torch.randn(16, 32), torch.randn(24, 32)
    (out,) = g.run([a, b])
    torch.testing.assert_close(out, a @ b.t())
    assert ("(host)" in g.describe()) == (provider == "host")
    assert bool(calls) == (provider == "host")


def test_addmm_library():
    text = """graph(%0: f32[24], %1: f32[16, 32], %2: f32[32, 24]):
  %3: f32[16, 24] = aten.addmm.default(%0, %1, %2, beta=0.5, alpha=2.0)
  return (%3)
"""
    g = C.compile(text, {"extern_provider": "library"}, None)
    bias, a, b = torch.randn(24), torch.randn(16, 32), torch.randn(32, 24)
    (out,) = g.run([bias, a, b])
    torch.testing.assert_close(out, torch.addmm(bias, a, b, beta=0.5, alpha=2.0))


@pytest.mark.parametrize("provider", ["library", "host"])
def test_convolution(provider):
    text = """graph(%0: f32[2, 3, 10, 10], %1: f32[4, 3, 3, 3], %2: f32[4]):
  %3: f32[2, 4, 5, 5] = aten.convolution.default(%0, %1, %2, [2, 2], [1, 1], [1, 1], false, [0, 0], 1)
  return (%3)
"""

    def fallback(node, inputs):
        x, w, b = inputs
        return [torch.ops.aten.convolution.default(x, w, b, [2, 2], [1, 1], [1, 1], False, [0, 0], 1)]

    # (A small dense convolution is coil's own on the CPU unless told otherwise.)
    g = C.compile(text, {"extern_provider": provider, "cpu_native_convolutions": False}, fallback)
    x, w, b = torch.randn(2, 3, 10, 10), torch.randn(4, 3, 3, 3), torch.randn(4)
    (out,) = g.run([x, w, b])
    torch.testing.assert_close(out, torch.nn.functional.conv2d(x, w, b, stride=2, padding=1),
                               atol=1e-4, rtol=1e-4)


def test_measured_provider_times_both_then_runs_the_faster():
    # extern_provider="measured" (mode="max-autotune"): the first run of each input size runs
    # coil's library kernel and ATen's (the fallback) in turn, three times each, and keeps the
    # faster; later runs take it. Every run's answer is right whichever ran last.
    text = """graph(%0: f32[2, 3, 10, 10], %1: f32[4, 3, 3, 3], %2: f32[4]):
  %3: f32[2, 4, 5, 5] = aten.convolution.default(%0, %1, %2, [2, 2], [1, 1], [1, 1], false, [0, 0], 1)
  return (%3)
"""
    calls = []

    def fallback(node, inputs):
        calls.append(node)
        x, w, b = inputs
        return [torch.ops.aten.convolution.default(x, w, b, [2, 2], [1, 1], [1, 1], False, [0, 0], 1)]

    g = C.compile(text, {"extern_provider": "measured", "cpu_native_convolutions": False}, fallback)
    assert "(measured)" in g.describe() and "measured:" not in g.describe()
    x, w, b = torch.randn(2, 3, 10, 10), torch.randn(4, 3, 3, 3), torch.randn(4)
    expect = torch.nn.functional.conv2d(x, w, b, stride=2, padding=1)
    (out,) = g.run([x, w, b])
    torch.testing.assert_close(out, expect, atol=1e-4, rtol=1e-4)
    assert len(calls) == 3
    chosen = [line for line in g.describe().splitlines() if "measured:" in line]
    assert len(chosen) == 1, g.describe()
    host = chosen[0].split()[1] == "host"
    for _ in range(2):
        x = torch.randn(2, 3, 10, 10)
        (out,) = g.run([x, w, b])
        torch.testing.assert_close(out, torch.nn.functional.conv2d(x, w, b, stride=2, padding=1),
                                   atol=1e-4, rtol=1e-4)
    assert len(calls) == 3 + (2 if host else 0)


def test_measured_provider_is_a_known_value():
    with pytest.raises(Exception, match="auto, host, library or measured"):
        C.compile("graph(%0: f32[2, 2]):\n  %1: f32[2, 2] = aten.mm.default(%0, %0)\n"
                  "  return (%1)\n",
                  {"extern_provider": "fastest"}, None)


def test_index_put_accumulate_and_scatter_add():
    text = """graph(%0: f32[6, 3], %1: i64[5], %2: f32[5, 3], %3: i64[2, 3], %4: f32[2, 3]):
  %5: f32[6, 3] = aten.index_put.default(%0, [%1], %2, true)
  %6: f32[6, 3] = aten.scatter_add.default(%5, 0, %3, %4)
  return (%5, %6)
"""
    g = C.compile(text, {}, None)
    x = torch.randn(6, 3)
    idx = torch.tensor([0, 2, 2, -1, 5])
    vals = torch.randn(5, 3)
    sidx = torch.tensor([[0, 1, 2], [2, 2, 0]])
    src = torch.randn(2, 3)
    out5, out6 = g.run([x, idx, vals, sidx, src])
    ref5 = torch.index_put(x, (idx,), vals, accumulate=True)
    torch.testing.assert_close(out5, ref5)
    torch.testing.assert_close(out6, torch.scatter_add(ref5, 0, sidx, src))


def test_symbolic_sizes():
    text = """graph(%0: f32[s0, 4]):
  %1: f32[s0, 4] = aten.mul.Tensor(%0, 2.0)
  %2: f32[s0] = aten.sum.dim_IntList(%1, [1])
  return (%1, %2)
"""
    g = C.compile(text, {}, None)
    for n in (3, 17, 64):
        x = torch.randn(n, 4)
        a, b = g.run([x])
        torch.testing.assert_close(a, x * 2)
        torch.testing.assert_close(b, (x * 2).sum(1))


def test_random_draws_fresh_numbers():
    text = """graph(%0: f32[256]):
  %1: f32[256] = aten.rand_like.default(%0)
  return (%1)
"""
    g = C.compile(text, {"seed": 1}, None)
    x = torch.empty(256)
    (a,) = g.run([x])
    (b,) = g.run([x])
    assert not torch.equal(a, b)
    assert 0.0 <= a.min() and a.max() < 1.0
    assert abs(a.mean().item() - 0.5) < 0.1
    # The same seed gives the same sequence.
    g2 = C.compile(text, {"seed": 1}, None)
    (a2,) = g2.run([x])
    assert torch.equal(a, a2)


def test_auto_provider_matmul_library_conv_host():
    calls = []

    def fallback(node, inputs):
        calls.append(len(inputs))
        if len(inputs) == 2 and inputs[0].dim() == 2:
            return [torch.mm(*inputs)]
        return [torch.ops.aten.convolution.default(inputs[0], inputs[1], None, [1, 1], [1, 1],
                                                   [1, 1], False, [0, 0], 1)]

    mm = """graph(%0: f32[64, 64], %1: f32[64, 64]):
  %2: f32[64, 64] = aten.mm.default(%0, %1)
  return (%2)
"""
    g = C.compile(mm, {}, fallback)
    assert "(library)" in g.describe()
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    torch.testing.assert_close(g.run([a, b])[0], a @ b, rtol=1e-4, atol=1e-4)
    assert calls == []
    # (1x1, depthwise and small dense convolutions are coil's own on the CPU unless told
    # otherwise.)
    conv = """graph(%0: f32[1, 2, 5, 5], %1: f32[3, 2, 3, 3]):
  %2: f32[1, 3, 5, 5] = aten.convolution.default(%0, %1, None, [1, 1], [1, 1], [1, 1], false, [0, 0], 1)
  return (%2)
"""
    g = C.compile(conv, {"cpu_native_convolutions": False}, fallback)
    assert "(host)" in g.describe()
    x, w = torch.randn(1, 2, 5, 5), torch.randn(3, 2, 3, 3)
    torch.testing.assert_close(g.run([x, w])[0], torch.nn.functional.conv2d(x, w, padding=1))
    assert calls == [2]


SAVED_TWICE = """graph(%0: f32[4, 8], %1: b8[4, 8]):
  %2: f32[4, 8] = aten.where.self(%1, %0, 0.5)
  %3: f32[4, 8] = aten.sigmoid.default(%0)
  %4: f32[4, 8] = aten.where.self(%1, %0, 0.5)
  %5: f32[4, 8] = aten.mul.Tensor(%2, %3)
  %6: f32[4, 8] = aten.mul.Tensor(%5, %4)
  return (%6, %2, %4, %3, %2)
"""


@pytest.mark.parametrize("shared_from", [-1, 1])
def test_outputs_that_may_share_memory(shared_from):
    # Outputs from shared_outputs_from on are a forward graph's saved values: cse merges %4
    # into %2 and returns that one tensor at position 2 instead of a copy (position 4 is %2 in
    # the graph as written). Position 0 (what the caller sees) never shares.
    g = C.compile(SAVED_TWICE, {"shared_outputs_from": shared_from}, None)
    x, m = torch.randn(4, 8), torch.rand(4, 8) > 0.5
    outs = g.run([x, m])
    w = torch.where(m, x, 0.5)
    for got, want in zip(outs, [w * x.sigmoid() * w, w, w, x.sigmoid(), w]):
        torch.testing.assert_close(got, want)
    ptrs = [t.data_ptr() for t in outs]
    assert ptrs[1] == ptrs[4]
    assert (ptrs[2] == ptrs[1]) == (shared_from == 1)
    assert ptrs[0] not in ptrs[1:]


def test_shared_positions_start_past_every_output_the_caller_sees(monkeypatch):
    # backend._shared_outputs_from: the first coil output from which on all are a forward's
    # saved values; a user output read through a view counts as reading its coil output.
    import types

    from coil import backend

    monkeypatch.setattr(backend, "user_outputs_of", lambda kind: 2)
    spec = [("tensor", 0), ("view", (2, 0, ())), ("tensor", 1), ("tensor", 3), ("input", 0)]
    ex = types.SimpleNamespace(output_spec=spec, num_tensor_outputs=4)
    assert backend._shared_outputs_from(ex, "forward") == 3  # coil output 2 reaches the caller
    assert backend._shared_outputs_from(ex, "backward") == -1  # gradients never share
    assert backend._shared_outputs_from(ex, "inference") == -1
    ex.num_tensor_outputs = 3  # nothing past the caller's
    assert backend._shared_outputs_from(ex, "forward") == -1
