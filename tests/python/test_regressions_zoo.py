"""Minimal reproducers of the bugs the model zoo (bench/zoo.py) found, each compiled strict
(no eager fallback) through the real C++ compiler and compared with eager."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

C = pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
import coil  # noqa: E402

STRICT = {"strict": True}


def _compile(fn):
    torch._dynamo.reset()
    return torch.compile(fn, backend="coil", options=STRICT)


def _grads(fn, *inputs):
    """Output and gradients of the floating inputs for a fixed output gradient."""
    xs = [x.detach().clone().requires_grad_(x.is_floating_point()) for x in inputs]
    out = fn(*xs)
    g = torch.randn(out.shape, generator=torch.Generator().manual_seed(3)).to(out.dtype)
    out.backward(g)
    return out.detach(), [x.grad for x in xs if x.is_floating_point()]


def _check_fwd_bwd(fn, *inputs, tol=1e-5):
    out, grads = _grads(_compile(fn), *inputs)
    ref, ref_grads = _grads(fn, *inputs)
    torch.testing.assert_close(out, ref, rtol=tol, atol=tol)
    for a, b in zip(grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def test_assert_async_node_is_dropped_not_an_export_error():
    # F.one_hot traces an _assert_async (index range check) that has no meta['val']; the
    # exporter looked up the meta before dropping the node and failed the whole graph.
    def f(idx, x):
        return F.one_hot(idx, 5).to(x.dtype) * x

    idx, x = torch.tensor([0, 3, 4, 1]), torch.randn(4, 5)
    torch.testing.assert_close(_compile(f)(idx, x), f(idx, x))


@pytest.mark.parametrize("causal", [False, True])
def test_sdpa_forward_backward(causal):
    # F.scaled_dot_product_attention reaches AOTAutograd as the fused CPU flash op and its
    # backward; both ran through the per-op fallback (strict: an error).
    def f(q, k, v):
        return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 5, 8) for _ in range(3))
    _check_fwd_bwd(f, q, k, v)


def test_sdpa_fully_masked_row_is_zero_not_nan():
    # A boolean mask that hides every key from a query row (padding): the fused kernel gives
    # that row 0 (and 0 gradients); coil's decomposition gave NaN (exp(-inf - -inf)). Seen on
    # the model dashboard's masked-attention models.
    def f(q, k, v, m):
        return F.scaled_dot_product_attention(q, k, v, attn_mask=m)

    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 6, 8) for _ in range(3))
    m = torch.rand(2, 1, 6, 6) > 0.4
    m[0, 0, 2] = False
    m[1, 0, 5] = False
    _check_fwd_bwd(f, q, k, v, m)


def test_safe_softmax_is_decomposed_not_run_eagerly():
    # aten._safe_softmax (SDPA's math path with a mask) had no lowering: the per-op fallback ran
    # it (HF BERT and T5 on CUDA, 0.60x Inductor on the dashboard). Fully masked rows give 0.
    coil.reset_report()

    def f(x):
        return torch.ops.aten._safe_softmax(x, -1) * 2

    x = torch.randn(4, 7)
    x[1] = float("-inf")
    got = _compile(f)(x)
    torch.testing.assert_close(got, f(x))
    assert not coil.report().fallback_ops, coil.report()


@pytest.mark.parametrize("mode", ["sum", "mean"])
def test_embedding_bag_forward_backward(mode):
    # _embedding_bag and _embedding_bag_backward had neither a lowering nor a decomposition.
    torch.manual_seed(0)
    bag = nn.EmbeddingBag(12, 4, mode=mode)
    ref = copy.deepcopy(bag)
    idx = torch.tensor([1, 2, 3, 4, 5, 0, 7, 3])
    offsets = torch.tensor([0, 2, 2, 5])  # an empty bag too
    g = torch.randn(4, 4)
    out = _compile(bag)(idx, offsets)
    out.backward(g)
    want = ref(idx, offsets)
    want.backward(g)
    torch.testing.assert_close(out, want)
    torch.testing.assert_close(bag.weight.grad, ref.weight.grad)


def test_compiled_adamw_step_foreach():
    # A compiled optimizer step traces to functional _foreach_* ops (no lowering); the
    # per-tensor decomposition also has to pass addcmul/addcdiv's scalar as `value=`.
    torch.manual_seed(0)
    params = [torch.randn(8, 4), torch.randn(4)]
    grads = [torch.randn_like(p) for p in params]

    def make():
        ps = [p.clone().requires_grad_(True) for p in params]
        for p, g in zip(ps, grads):
            p.grad = g.clone()
        return ps, torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.05, foreach=True)

    ps, opt = make()
    ref_ps, ref_opt = make()
    step = _compile(opt.step)
    for _ in range(2):
        step()
        ref_opt.step()
    for p, q in zip(ps, ref_ps):
        torch.testing.assert_close(p, q)
        for key in ("exp_avg", "exp_avg_sq"):
            torch.testing.assert_close(opt.state[p][key], ref_opt.state[q][key])


def test_gathered_bias_inside_softmax_is_not_hoisted():
    # T5's relative position bias: scores + embedding(bucket) feeding a softmax. The emitter
    # hoisted the load of the bias (indexed by the gathered bucket, a symbol bound inside the
    # reduction loop) above the loop that defines the symbol: g++ rejected the kernel.
    def f(x, table, bucket):
        bias = F.embedding(bucket, table).permute(2, 0, 1)[None]
        return (x + bias).softmax(-1)

    torch.manual_seed(0)
    x, table = torch.randn(2, 4, 6, 6), torch.randn(8, 4)
    bucket = torch.randint(0, 8, (6, 6))
    torch.testing.assert_close(_compile(f)(x, table, bucket), f(x, table, bucket))


def test_saved_select_keeps_its_strides_for_the_backward():
    # BERT's pooler reads x[:, 0] (strides [t*d, 1]); the forward saves it for the backward,
    # which AOTAutograd compiled for those strides, but coil returned it dense: the backward
    # rejected its input and ran eagerly (strict: an error).
    lin = nn.Linear(8, 8)

    def f(x):
        return torch.tanh(lin(torch.tanh(x)[:, 0]))

    _check_fwd_bwd(f, torch.randn(2, 5, 8))


def test_topk_routing_forward_backward():
    # Mixture-of-experts routing: topk had no lowering (strict: an error); decomposed into k
    # argmax/gather rounds. Its backward scatters the gradient to the chosen positions.
    def f(logits):
        p = logits.softmax(-1)
        top_p, top_i = p.topk(2, dim=-1)
        gates = torch.zeros_like(p).scatter(1, top_i, top_p / top_p.sum(-1, keepdim=True))
        return gates * logits

    torch.manual_seed(0)
    _check_fwd_bwd(f, torch.randn(16, 5))


def test_topk_values_and_indices_match_eager():
    torch.manual_seed(0)
    x = torch.randn(6, 9)
    for dim, largest in [(-1, True), (0, False)]:
        got = _compile(lambda t: torch.topk(t, 3, dim=dim, largest=largest))(x)
        want = torch.topk(x, 3, dim=dim, largest=largest)
        torch.testing.assert_close(got[0], want[0])
        torch.testing.assert_close(got[1], want[1])
