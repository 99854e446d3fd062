"""Dynamic shapes on CUDA (docs/dynamic-shapes.md, docs/cuda-backend.md): bench/models.py's
transformer block and ResNet compiled once with symbolic sizes, run on the GPU over many sizes
(odd, prime, 1 and 2, not multiples of the vector width), forward and backward against eager on
the same GPU. The CPU twin, with the reasoning about graph counts, is test_dynamic_shapes.py;
here the counts are checked the same way: after the first dynamic compile, a new coil graph only
for a new pattern of size-1 dims (which Dynamo specializes)."""

from __future__ import annotations

import copy

import pytest
import torch

C = pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
import coil  # noqa: E402
import models as zoo  # noqa: E402  (bench/models.py, on sys.path via conftest)

SIZES = [(2, 8), (3, 5), (1, 7), (4, 13), (5, 2), (7, 11), (2, 1), (6, 9), (11, 3), (1, 1),
         (3, 16), (13, 6), (8, 15), (9, 4), (2, 17), (17, 2)]
# GPU reductions sum in another order than eager's kernels.
TOL = dict(rtol=1e-3, atol=1e-4)


def _inputs(name, b, t, gen):
    if name == "transformer_block":
        return (torch.randn(b, t, 16, generator=gen).cuda(),)
    return (torch.randn(b, 3, 16, 16, generator=gen).cuda(),
            torch.randint(0, 10, (b,), generator=gen).cuda())


def _step(fn, model, inputs):
    for p in model.parameters():
        p.grad = None
    out = fn(*inputs)
    loss = out if out.dim() == 0 else (out.float() ** 2).sum()
    loss.backward()
    return out.detach(), {n: p.grad for n, p in model.named_parameters()}


def _run(name, sizes, size1_pattern):
    builder, _ = zoo.MODELS[name]
    model, _ = builder("test")
    model = model.cuda()
    reference = copy.deepcopy(model)
    torch._dynamo.reset()
    coil.reset_report()
    compiled = torch.compile(model, backend="coil", dynamic=True, options={"strict": True})
    gen = torch.Generator().manual_seed(0)
    seen = set()
    for b, t in sizes:
        inputs = _inputs(name, b, t, gen)
        out, grads = _step(compiled, model, inputs)
        ref_out, ref_grads = _step(reference, reference, inputs)
        assert out.device.type == "cuda"
        torch.testing.assert_close(out, ref_out, **TOL, msg=lambda m: f"b={b} t={t}: {m}")
        for k, g in ref_grads.items():
            torch.testing.assert_close(grads[k], g, **TOL, msg=lambda m: f"b={b} t={t} {k}: {m}")
        pattern = size1_pattern(b, t)
        if any(pattern):
            seen.add(pattern)
        # One forward and one backward graph per Dynamo graph, and no other.
        assert coil.report().graphs_compiled == 2 * (1 + len(seen)), (b, t, coil.report())
    assert coil.report().graphs_fallen_back == []


@pytest.mark.gpu
def test_transformer_block_dynamic_on_cuda():
    _run("transformer_block", SIZES, lambda b, t: (b == 1, t == 1))


@pytest.mark.gpu
def test_resnet18_train_dynamic_batch_on_cuda():
    _run("resnet18_train", [(2, 0), (3, 0), (5, 0), (7, 0), (1, 0), (4, 0)],
         lambda b, t: (b == 1, False))
