"""The model set of bench/models.py on CUDA (float32 and bfloat16, forward and, for the training
models, backward), strict mode, against eager on the same GPU: the checks of test_models.py."""

from __future__ import annotations

import copy

import pytest
import torch

C = pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
import accuracy  # noqa: E402  (bench/accuracy.py: the benchmark runner's rule)
import coil  # noqa: E402
import models as zoo  # noqa: E402  (bench/models.py, on sys.path via conftest)

# GPU reductions sum in another order than eager's kernels: a little more room than on the CPU.
TOL = {torch.float32: dict(rtol=1e-3, atol=1e-4), torch.bfloat16: dict(rtol=5e-2, atol=5e-2)}


def _to_cuda(model, inputs):
    return model.to("cuda"), tuple(i.to("cuda") for i in inputs)


def _close(got, want, dtype, what, fp64=None):
    """Close to eager; for bfloat16, failing that, no further from a float64 reference than the
    accuracy rule allows (a fused kernel rounds once where eager rounds after every op, and a
    large reduction such as a first convolution's weight gradient amplifies that noise)."""
    try:
        torch.testing.assert_close(got.float(), want.float(), **TOL[dtype],
                                   msg=lambda m: f"{what}: {m}")
    except AssertionError:
        if fp64 is None:
            raise
        verdict = accuracy.compare(got, want, fp64)
        assert verdict, f"{what}: {verdict.detail}"


def _check(name: str, dtype: torch.dtype):
    # In float32, cuDNN's default TF32 convolutions round to 10 mantissa bits, and coil's
    # channels-last graphs take other cuDNN algorithms than eager's NCHW ones: the two would
    # differ by 1e-2 relative. Full float32 compares what coil computes, not the algorithms.
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = dtype != torch.float32
    try:
        _check_model(name, dtype)
    finally:
        torch.backends.cudnn.allow_tf32 = tf32


def _check_model(name: str, dtype: torch.dtype):
    builder, trains = zoo.MODELS[name]
    model, inputs = builder("test")
    if dtype == torch.bfloat16:
        model, inputs = zoo.to_bf16(model, inputs)
    model, inputs = _to_cuda(model, inputs)
    reference = copy.deepcopy(model)
    ref64 = copy.deepcopy(model).double() if dtype == torch.bfloat16 else None
    inputs64 = tuple(i.double() if i.is_floating_point() else i for i in inputs)
    torch._dynamo.reset()
    coil.reset_report()
    compiled = torch.compile(model, backend="coil", options={"strict": True})
    if trains:
        # A first step compiles; the compared second one runs the backward graph that takes
        # its inputs over (backend.InputRelease), which the first call does not. The buffers
        # (BatchNorm's running stats) go back to the reference's before it.
        compiled(*inputs).backward()
        model.zero_grad(set_to_none=True)
        with torch.no_grad():
            for b, rb in zip(model.buffers(), reference.buffers()):
                b.copy_(rb)
        loss = compiled(*inputs)
        loss.backward()
        ref_loss = reference(*inputs)
        ref_loss.backward()
        loss64 = None
        if ref64 is not None:
            loss64 = ref64(*inputs64)
            loss64.backward()
        _close(loss, ref_loss, dtype, f"{name} loss", loss64)
        params64 = list(ref64.parameters()) if ref64 is not None else [None] * len(
            list(reference.parameters()))
        for (pname, p), q, r in zip(model.named_parameters(), reference.parameters(), params64):
            assert p.grad is not None, f"{name}: no gradient for {pname}"
            _close(p.grad, q.grad, dtype, f"{name} grad of {pname}", r.grad if r is not None else None)
    else:
        with torch.no_grad():
            out = compiled(*inputs)
            ref = reference(*inputs)
        assert out.device.type == "cuda"
        _close(out, ref, dtype, f"{name} output")
    for (bname, b), rb in zip(model.named_buffers(), reference.buffers()):
        if b.is_floating_point():
            _close(b, rb, dtype, f"{name} buffer {bname}")
        else:
            assert torch.equal(b, rb), f"{name} buffer {bname}"
    rep = coil.report()
    assert rep.graphs_compiled >= 1 and not rep.graphs_fallen_back, str(rep)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_model_cuda_float32(name):
    _check(name, torch.float32)


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_model_cuda_bfloat16(name):
    _check(name, torch.bfloat16)
