"""End to end through the fake all-fallback `_coil` (conftest.py): every node of every
exported graph runs through the fallback callable, in the order and with the inputs the graph
text says. Results must match PyTorch eager (forward, gradients, BatchNorm buffers)."""

from __future__ import annotations

import copy

import pytest
import torch

import coil
import models as M

TOL = dict(rtol=1e-4, atol=1e-5)
# Gradients: decomposed batch/layer norm backward sums in another order than the eager kernels.
GRAD_TOL = dict(rtol=1e-3, atol=1e-4)


def aot_eager_coil_decomps(gm, example_inputs):
    """The same AOTAutograd graphs as coil gets, run by FX directly: the exact reference for
    the export + fallback plumbing (same ops, same order)."""
    from torch._functorch.aot_autograd import aot_module_simplified, make_boxed_func

    nop = lambda g, _: make_boxed_func(g)  # noqa: E731
    return aot_module_simplified(gm, example_inputs, fw_compiler=nop, bw_compiler=nop,
                                 decompositions=coil.coil_decompositions())


def _grads(model):
    return {n: p.grad.clone() for n, p in model.named_parameters() if p.grad is not None}


def _run(model, inputs, trains):
    out = model(*inputs)
    loss = out if trains else (out.float() ** 2).sum()
    loss.backward()
    return out.detach()


# Models also compared bit-for-bit with the same AOTAutograd graphs run by FX (a second
# compile; skipped for the big ones to keep each test within a few seconds).
EXACT = {"attention_block", "transformer_block", "mlp_sgd"}


@pytest.mark.parametrize("name", list(M.MODELS))
def test_model_matches_eager(fake_coil, name):
    builder, trains = M.MODELS[name]
    model, inputs = builder()
    ref_model = copy.deepcopy(model)
    aot_model = copy.deepcopy(model)
    ref = _run(ref_model, inputs, trains)
    exact = name in EXACT
    if exact:
        aot = _run(torch.compile(aot_model, backend=aot_eager_coil_decomps), inputs, trains)
        torch._dynamo.reset()

    out = _run(torch.compile(model, backend="coil"), inputs, trains)

    torch.testing.assert_close(out, ref, **TOL)
    ref_g, got_g = _grads(ref_model), _grads(model)
    assert ref_g.keys() == got_g.keys() and ref_g
    for k in ref_g:
        torch.testing.assert_close(got_g[k], ref_g[k], **GRAD_TOL, msg=lambda m: f"{k}: {m}")
    if exact:
        torch.testing.assert_close(out, aot, rtol=0, atol=0)
        aot_g = _grads(aot_model)
        for k in ref_g:
            torch.testing.assert_close(got_g[k], aot_g[k], rtol=0, atol=0,
                                       msg=lambda m: f"{k}: {m}")
    # Buffers (BatchNorm running stats, num_batches_tracked) updated as in eager.
    for (k, b), (_, rb) in zip(model.named_buffers(), ref_model.named_buffers()):
        torch.testing.assert_close(b, rb, **TOL, msg=lambda m: f"buffer {k}: {m}")

    r = coil.report()
    assert r.graphs_fallen_back == [], r
    # Forward + backward, or inference, all went through the fake compiler and ran.
    assert r.graphs_compiled == len(fake_coil.compiled) >= 2
    assert all(g.runs >= 1 for g in fake_coil.compiled)


def test_mlp_sgd_steps(fake_coil):
    model, inputs = M.mlp_sgd()
    ref_model = copy.deepcopy(model)
    ref = M.sgd_train_step(ref_model, ref_model, inputs, steps=3)
    got = M.sgd_train_step(model, torch.compile(model, backend="coil"), inputs, steps=3)
    torch.testing.assert_close(torch.stack(got), torch.stack(ref), **TOL)
    assert ref[2] < ref[0]  # it trains
    for p, rp in zip(model.parameters(), ref_model.parameters()):
        torch.testing.assert_close(p, rp, **GRAD_TOL)


def test_bf16_transformer(fake_coil):
    model, inputs = M.to_bf16(*M.transformer_block())
    ref_model = copy.deepcopy(model)
    ref = _run(ref_model, inputs, False)
    out = _run(torch.compile(model, backend="coil"), inputs, False)
    assert out.dtype == torch.bfloat16
    # Same kernels in the same order: bit-identical is expected, allow bf16 rounding anyway.
    torch.testing.assert_close(out, ref, rtol=1.6e-2, atol=1e-2)
    for (k, g), (_, rg) in zip(_grads(model).items(), _grads(ref_model).items()):
        torch.testing.assert_close(g, rg, rtol=1.6e-2, atol=1e-2)
    assert any("bf16[" in t for t in fake_coil.texts)


def test_input_mutation_and_aliasing(fake_coil):
    def f(x, buf):
        buf.add_(1.0)  # input mutation: a copy_ at the end of coil's graph
        y = x * 2
        return y, x.t(), x[1:], buf.view(-1)  # outputs aliasing inputs

    x = torch.randn(4, 3)
    buf = torch.zeros(2, 2)
    ref_buf = buf.clone()
    ref = f(x, ref_buf)
    got = torch.compile(f, backend="coil")(x, buf)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r)
    torch.testing.assert_close(buf, ref_buf)
    # Aliases are real views of the inputs, as in eager.
    assert got[1].data_ptr() == x.data_ptr() and got[1].stride() == (1, 3)
    assert got[2].data_ptr() == x[1:].data_ptr()
    assert got[3].data_ptr() == buf.data_ptr()
    # The mutation reaches coil as one copy_ into the input (input_mutations_in_graph).
    (text,) = fake_coil.texts
    assert "add_" not in text and text.count("aten.copy_.default(") == 1, text


def test_batchnorm_eval_and_train_buffers(fake_coil):
    bn = torch.nn.BatchNorm2d(3)
    ref_bn = copy.deepcopy(bn)
    x = torch.randn(2, 3, 4, 4)
    c = torch.compile(bn, backend="coil")
    for _ in range(2):
        torch.testing.assert_close(c(x), ref_bn(x), **TOL)
    torch.testing.assert_close(bn.running_mean, ref_bn.running_mean, **TOL)
    torch.testing.assert_close(bn.running_var, ref_bn.running_var, **TOL)
    assert bn.num_batches_tracked.item() == ref_bn.num_batches_tracked.item() == 2


@pytest.mark.parametrize("name", ["attention_block", "mlp_sgd"])
def test_real_extension_matches_eager(real_coil, name, tmp_path, monkeypatch):
    # With the C++ extension built: compile for real (kernel cache in a temp dir).
    monkeypatch.delenv("COIL_STRICT", raising=False)
    coil.reset_report()
    torch._dynamo.reset()
    builder, trains = M.MODELS[name]
    model, inputs = builder()
    ref_model = copy.deepcopy(model)
    ref = _run(ref_model, inputs, trains)
    out = _run(torch.compile(model, backend="coil", options={"cache_dir": str(tmp_path)}),
               inputs, trains)
    torch._dynamo.reset()
    torch.testing.assert_close(out, ref, **TOL)
    for (k, g), (_, rg) in zip(_grads(model).items(), _grads(ref_model).items()):
        torch.testing.assert_close(g, rg, **GRAD_TOL)
    r = coil.report()
    assert r.graphs_compiled == 2 and r.graphs_fallen_back == [], r
