"""Differential tests of the model set against eager, through the real C++ compiler.

Every model compiles in strict mode (no op falls back to eager): forward outputs and, for the
training models, the loss and every parameter gradient must match eager within PyTorch's
default tolerances for the dtype. The MLP trains 50 SGD steps compiled and eagerly from the
same weights; the loss curves must agree.
"""

from __future__ import annotations

import copy

import pytest
import torch

C = pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
import coil  # noqa: E402
import models as zoo  # noqa: E402  (bench/models.py, on sys.path via conftest)

TOL = {torch.float32: dict(rtol=1.3e-4, atol=1e-5), torch.bfloat16: dict(rtol=5e-2, atol=5e-2)}


def _compile(model, **options):
    torch._dynamo.reset()
    return torch.compile(model, backend="coil", options={"strict": True, **options})


def _assert_close(got, want, dtype, what):
    tol = TOL[dtype]
    torch.testing.assert_close(got.float(), want.float(), **tol, msg=lambda m: f"{what}: {m}")


def _check(name: str, dtype: torch.dtype, **options):
    builder, trains = zoo.MODELS[name]
    model, inputs = builder("test")
    if dtype == torch.bfloat16:
        model, inputs = zoo.to_bf16(model, inputs)
    reference = copy.deepcopy(model)
    compiled = _compile(model, **options)
    if trains:
        loss = compiled(*inputs)
        loss.backward()
        ref_loss = reference(*inputs)
        ref_loss.backward()
        _assert_close(loss, ref_loss, dtype, f"{name} loss")
        for (pname, p), q in zip(model.named_parameters(), reference.parameters()):
            assert p.grad is not None, f"{name}: no gradient for {pname}"
            _assert_close(p.grad, q.grad, dtype, f"{name} grad of {pname}")
    else:
        with torch.no_grad():
            out = compiled(*inputs)
            ref = reference(*inputs)
        _assert_close(out, ref, dtype, f"{name} output")
    # Buffers mutated in the graph (BatchNorm running statistics) must match too.
    for (bname, b), rb in zip(model.named_buffers(), reference.buffers()):
        if b.is_floating_point():
            _assert_close(b, rb, dtype, f"{name} buffer {bname}")
        else:
            assert torch.equal(b, rb), f"{name} buffer {bname}"


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_model_float32_strict(name):
    _check(name, torch.float32)


def test_resnet_training_with_library_kernels():
    # Without ATen's kernels: OpenBLAS matmuls and coil's own convolution (forward, backward).
    _check("resnet18_train", torch.float32, extern_provider="library")


@pytest.mark.parametrize("name", [n for n, (_, trains) in zoo.MODELS.items() if trains])
def test_training_with_min_cut_partition(name):
    # Option recompute: AOTAutograd's min-cut partitioner moves recomputation into the backward.
    _check(name, torch.float32, recompute=True)


@pytest.mark.parametrize("name", list(zoo.MODELS))
def test_model_bfloat16_strict(name):
    _check(name, torch.bfloat16)


def test_mlp_50_sgd_steps_match_eager():
    builder, _ = zoo.MODELS["mlp_sgd"]
    model, inputs = builder("test")
    reference = copy.deepcopy(model)
    compiled = _compile(model)

    def train(m, fn, steps=50, lr=0.05):
        opt = torch.optim.SGD(m.parameters(), lr=lr)
        losses = []
        for _ in range(steps):
            opt.zero_grad()
            loss = fn(*inputs)
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    got = train(model, compiled)
    want = train(reference, reference)
    assert got[-1] < got[0], "training did not reduce the loss"
    torch.testing.assert_close(torch.tensor(got), torch.tensor(want), rtol=1e-4, atol=1e-5)
