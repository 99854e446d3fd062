"""log_softmax_rewrite.py: float32 log_softmax / cross_entropy in training graphs become
x - logsumexp(x), so the backward saves the logits instead of the log-probabilities."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from coil.log_softmax_rewrite import rewrite_log_softmax


def _rewrites(fn, *inputs) -> int:
    """How many calls the rewrite changes in the Dynamo graph of fn (run uncompiled after)."""
    counts = []

    def backend(gm, example_inputs):
        counts.append(rewrite_log_softmax(gm))
        return gm.forward

    torch._dynamo.reset()
    torch.compile(fn, backend=backend)(*inputs)
    return sum(counts)


def _x(dtype=torch.float32):
    return torch.randn(6, 11, dtype=dtype, requires_grad=True)


TARGET = torch.tensor([0, 3, 10, 2, 2, 7])

CASES = {
    "cross_entropy": (lambda x: F.cross_entropy(x, TARGET), 1),
    "cross_entropy_sum_ignore": (lambda x: F.cross_entropy(x, TARGET, ignore_index=2,
                                                           reduction="sum"), 1),
    "F.log_softmax": (lambda x: F.log_softmax(x, dim=-1).sum(), 1),
    "torch.log_softmax": (lambda x: torch.log_softmax(x, 1).mean(), 1),
    "method": (lambda x: x.log_softmax(0).exp().sum(), 1),
    "label_smoothing": (lambda x: F.cross_entropy(x, TARGET, label_smoothing=0.1), 0),
    "dtype_argument": (lambda x: F.log_softmax(x, -1, dtype=torch.float64).sum(), 0),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_which_calls_are_rewritten(case):
    fn, expected = CASES[case]
    assert _rewrites(fn, _x()) == expected


def test_reduced_precision_is_left_alone():
    assert _rewrites(lambda x: F.cross_entropy(x, TARGET), _x(torch.bfloat16)) == 0


@pytest.mark.parametrize("case", sorted(CASES))
def test_rewritten_graph_gives_eager_values_and_gradients(case):
    fn = CASES[case][0]

    def backend(gm, example_inputs):
        rewrite_log_softmax(gm)
        return gm.forward

    x = _x()
    torch._dynamo.reset()
    got = torch.compile(fn, backend=backend)(x)
    (got_grad,) = torch.autograd.grad(got, x)
    want = fn(x)
    (want_grad,) = torch.autograd.grad(want, x)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(got_grad, want_grad)


def test_coil_training_saves_the_logits_not_the_log_probabilities():
    """Through coil: the [N, C] tensor the forward saves for the backward is the logits."""
    pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
    w = torch.randn(16, 50, requires_grad=True)
    h = torch.randn(40, 16)
    target = torch.randint(0, 50, (40,))

    def loss(h, w):
        return F.cross_entropy(h @ w, target)

    saved = []
    for rewrite in (True, False):
        torch._dynamo.reset()
        compiled = torch.compile(loss, backend="coil",
                                 options={"strict": True, "log_softmax_via_logsumexp": rewrite})
        big = []

        def pack(t):
            if tuple(t.shape) == (40, 50):
                big.append(t.detach().clone())
            return t

        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            out = compiled(h, w)
        (grad,) = torch.autograd.grad(out, w)
        torch.testing.assert_close(out, loss(h, w))
        torch.testing.assert_close(grad, torch.autograd.grad(loss(h, w), w)[0])
        saved.append(big)
    logits = (h @ w).detach()
    assert saved[0] and all(torch.allclose(t, logits, atol=1e-5) for t in saved[0]), saved[0]
    # Without the rewrite the forward saves the log-probabilities.
    log_probs = logits.log_softmax(1)
    assert any(torch.allclose(t, log_probs, atol=1e-5) for t in saved[1])
