"""Accumulating index_put on the GPU runs coil's own atomic scatter (runtime/cuda_index.cpp),
not ATen's sort-based kernel: checked against eager for the shapes index_put allows (several
index tensors, broadcast values and indices, non-adjacent indexed dims, negative indices),
float32 and float64, the shared-memory path (a small table hit many times: an embedding's
gradient over relative positions) and the global-atomics path (a large table), and through
the profile that the step ran on the device kernel ("library"), not through ATen ("host")."""

from __future__ import annotations

import pytest
import torch

C = pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
import coil  # noqa: E402
from coil import backend  # noqa: E402


def _compiled_steps(fn, *inputs, train=False):
    """(outputs, the profile's step names of every graph compiled for fn)."""
    torch._dynamo.reset()
    coil.reset_report()
    before = set(map(id, backend._graph_fns))
    compiled = torch.compile(fn, backend="coil", options={"strict": True})
    coil.set_profiling(True)
    try:
        out = compiled(*inputs)
        if train:
            out.sum().backward()
        torch.cuda.synchronize()
    finally:
        coil.set_profiling(False)
    rep = coil.report()
    assert rep.graphs_compiled >= 1 and not rep.graphs_fallen_back, str(rep)
    steps = [s for f in list(backend._graph_fns) if id(f) not in before
             for s, _ in f.compiled.profile()[1]]
    return out, steps


def _on_device(steps, op):
    hits = [s for s in steps if op in s]
    assert hits, steps
    assert all(s.endswith("(library)") for s in hits), hits


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_index_put_accumulate_matches_eager(dtype):
    torch.manual_seed(0)
    dev = "cuda"
    x = torch.randn(7, 5, 6, dtype=dtype, device=dev)
    i = torch.randint(-7, 7, (4, 3), device=dev)  # negative indices wrap
    j = torch.randint(0, 6, (3,), device=dev)  # broadcast against i
    v = torch.randn(4, 3, 5, dtype=dtype, device=dev)
    w = torch.randn(5, dtype=dtype, device=dev)  # broadcast values

    def adjacent(x, i, v):
        return torch.index_put(x * 2, (i,), v[..., None], accumulate=True)

    def non_adjacent(x, i, j, w):
        # Dims 0 and 2 indexed: the broadcast index shape [4, 3] goes first, then dim 1.
        return torch.ops.aten.index_put(x + 1, [i, None, j], w, True)

    got, steps = _compiled_steps(adjacent, x, i, v)
    torch.testing.assert_close(got, adjacent(x, i, v))
    _on_device(steps, "index_put")
    got, steps = _compiled_steps(non_adjacent, x, i, j, w)
    torch.testing.assert_close(got, non_adjacent(x, i, j, w))
    _on_device(steps, "index_put")


@pytest.mark.gpu
@pytest.mark.parametrize("rows,positions", [(32, 256), (5000, 4096)])
def test_embedding_gradient_scatters_on_the_device(rows, positions):
    """A small table hit thousands of times per row (shared-memory sums) and a large one hit
    about once per row (global atomics): the weight gradient against eager's."""
    torch.manual_seed(0)
    emb = torch.nn.Embedding(rows, 8).cuda()
    idx = torch.randint(0, rows, (positions, positions // 64 if rows == 32 else 1),
                        device="cuda")
    scale = torch.randn(idx.shape + (8,), device="cuda")

    def f(idx, scale):
        return (emb(idx) * scale).relu()

    _, steps = _compiled_steps(f, idx, scale, train=True)
    got = emb.weight.grad.clone()
    emb.weight.grad = None
    f(idx, scale).sum().backward()
    torch.testing.assert_close(got, emb.weight.grad, rtol=1e-4, atol=1e-4)
    assert any("(library)" in s and ("index_put" in s or "embedding" in s) for s in steps), steps
