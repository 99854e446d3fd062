"""The training partition (python/coil/partition.py): views the backward reads of values it
gets anyway are taken again in the backward, not saved by the forward. Checked against eager
(loss and every gradient over several steps) and on the forward's outputs: with the pass, no
forward output is a view of an input (each such output cost a tensor across the runtime
boundary and a replayed view per call); without it, a linear layer's transposed weight is."""

from __future__ import annotations

import copy

import pytest
import torch

coil = pytest.importorskip("coil")
pytest.importorskip("coil._coil")

from coil import backend  # noqa: E402


class _Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = torch.nn.LayerNorm(16)
        self.up = torch.nn.Linear(16, 32)
        self.down = torch.nn.Linear(32, 16, bias=False)
        self.mix = torch.nn.Parameter(torch.randn(4, 16) * 0.1)

    def forward(self, x):
        h = self.down(torch.nn.functional.gelu(self.up(self.norm(x))))
        # A view of an intermediate that the backward also reads directly (h), and a
        # transposed view of a parameter read by a batched product.
        y = (h + x).view(2, 4, 16)
        return (y @ self.mix.t()).sum(-1) + y.transpose(1, 2).mean(1)


def _forward_fns():
    return [f for f in list(backend._graph_fns) if f.name.startswith("forward")]


def _train(model, fn, x, steps=3):
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    losses, grads = [], []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = fn(x).square().mean()
        loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.clone() for p in model.parameters()])
        opt.step()
    return losses, grads


def _assert_same_training(got, want, tol=None):
    """Losses and every gradient of every step as eager's (float32 tolerances unless `tol`)."""
    for a, b in zip(got[0], want[0]):
        torch.testing.assert_close(a, b, **(tol or dict(rtol=1e-5, atol=1e-5)))
    for ga, gb in zip(got[1], want[1]):
        for a, b in zip(ga, gb):
            torch.testing.assert_close(a, b, **(tol or dict(rtol=1e-4, atol=1e-5)))


@pytest.mark.parametrize("views_in_backward", [True, False])
def test_training_matches_eager_and_saves_no_views_of_inputs(views_in_backward):
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager_model = _Block()
    model = copy.deepcopy(eager_model)
    x = torch.randn(8, 16)
    before = set(map(id, _forward_fns()))
    compiled = torch.compile(model, backend="coil",
                             options={"strict": True, "views_in_backward": views_in_backward})
    got = _train(model, compiled, x)
    want = _train(eager_model, eager_model, x)
    _assert_same_training(got, want)
    fns = [f for f in _forward_fns() if id(f) not in before]
    assert len(fns) == 1
    kinds = [k for k, _ in fns[0].exported.output_spec]
    if views_in_backward:
        assert "view" not in kinds, kinds
        assert kinds.count("input") >= 3, "the parameters are saved as they are"
    else:
        assert "view" in kinds, "the pass is what removes the saved views"


def test_pointwise_values_taken_again_match_eager_and_are_not_saved(monkeypatch):
    """recompute_pointwise (on for CUDA graphs; forced here on the CPU): the GELU's and the
    LayerNorm's outputs are computed again in the backward from their saved inputs (and
    statistics), so the forward returns fewer values, and every gradient still matches."""
    from coil import partition

    counts = {}
    for on in (False, True):
        torch._dynamo.reset()
        monkeypatch.setattr(partition, "_on_cuda", lambda joint: on)
        torch.manual_seed(0)
        eager_model = _Block()
        model = copy.deepcopy(eager_model)
        x = torch.randn(8, 16)
        before = set(map(id, _forward_fns()))
        compiled = torch.compile(model, backend="coil", options={"strict": True})
        got = _train(model, compiled, x)
        want = _train(eager_model, eager_model, x)
        _assert_same_training(got, want)
        (fn,) = [f for f in _forward_fns() if id(f) not in before]
        counts[on] = [k for k, _ in fn.exported.output_spec].count("tensor")
    assert counts[True] < counts[False], counts


def test_batch_norm_outputs_taken_again_through_saved_statistics(monkeypatch):
    """A BatchNorm's output is computed from its input and its keepdim mean and inverse std;
    the backward reads the squeezed statistics, so the keepdim ones come back as views of
    those, and the normalized (and ReLU6-clamped, in place as torchvision writes it) values
    are computed again instead of saved. Forced as on the GPU (recompute_pointwise): training
    matches eager, and the forward saves fewer activations than without the pass."""
    from coil import partition

    def block():
        return torch.nn.Sequential(
            torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.BatchNorm2d(8),
            torch.nn.ReLU6(inplace=True), torch.nn.Conv2d(8, 8, 3, padding=1, groups=8),
            torch.nn.BatchNorm2d(8), torch.nn.ReLU6(inplace=True), torch.nn.Conv2d(8, 4, 1))

    saved = {}
    for on in (False, True):
        torch._dynamo.reset()
        monkeypatch.setattr(partition, "_on_cuda", lambda joint: on)
        torch.manual_seed(0)
        eager_model = block()
        model = copy.deepcopy(eager_model)
        x = torch.randn(2, 3, 8, 8)
        before = set(map(id, _forward_fns()))
        compiled = torch.compile(model, backend="coil", options={"strict": True})
        got = _train(model, compiled, x)
        want = _train(eager_model, eager_model, x)
        _assert_same_training(got, want)
        for a, b in zip(model.buffers(), eager_model.buffers()):
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
        (fn,) = [f for f in _forward_fns() if id(f) not in before]
        saved[on] = [k for k, _ in fn.exported.output_spec].count("tensor")
    # Without the pass each layer saves its convolution's output, BatchNorm's output and the
    # clamped copy; with it, the convolutions' outputs (and the statistics) only.
    assert saved[True] <= saved[False] - 4, saved


class _Attention(torch.nn.Module):
    """T5's attention core: the probabilities are read by the softmax's gradient (as they
    are) and by the batched product's (expanded and viewed to [B*H, T, T])."""

    def __init__(self):
        super().__init__()
        self.qkv = torch.nn.Linear(32, 96)
        self.bias = torch.nn.Parameter(torch.randn(1, 4, 16, 16) * 0.1)

    def forward(self, x):
        b, t, _ = x.shape
        q, k, v = (y.view(b, t, 4, 8).transpose(1, 2) for y in self.qkv(x).chunk(3, -1))
        w = torch.softmax(q @ k.transpose(3, 2) + self.bias, dim=-1)
        return (w @ v).transpose(1, 2).reshape(b, t, 32)


def test_attention_probabilities_saved_once():
    """The two views of the probabilities are not both saved: the [B*H, T, T] one is taken
    again from the [B, H, T, T] one (and not each through the other, which would save both)."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager_model = _Attention()
    model = copy.deepcopy(eager_model)
    x = torch.randn(2, 16, 32)
    before = set(map(id, _forward_fns()))
    compiled = torch.compile(model, backend="coil", options={"strict": True})
    _assert_same_training(_train(model, compiled, x), _train(eager_model, eager_model, x))
    (fn,) = [f for f in _forward_fns() if id(f) not in before]
    outputs = fn.gm.graph.find_nodes(op="output")[0].args[0]
    sizes = [o.meta["val"].numel() for o in outputs if hasattr(o, "meta")
             and isinstance(o.meta.get("val"), torch.Tensor)]
    assert sizes.count(2 * 4 * 16 * 16) == 1, sizes


class _AutocastGelu(torch.nn.Module):
    """GPT-2's GELU as autocast leaves it: the products in bfloat16, the tanh chain in float32
    (autocast runs pow in float32), the result cast back for the next product."""

    def __init__(self):
        super().__init__()
        self.up = torch.nn.Linear(16, 64).to(torch.bfloat16)
        self.down = torch.nn.Linear(64, 16).to(torch.bfloat16)

    def forward(self, x):
        h = self.up(x)
        hf = h.float()
        t = torch.tanh(0.7978845608028654 * (h + 0.044715 * hf.pow(3.0)))
        return self.down(((0.5 * h) * (1.0 + t)).to(torch.bfloat16))


def _saved_bytes(fn) -> int:
    outputs = fn.gm.graph.find_nodes(op="output")[0].args[0]
    return sum(o.meta["val"].numel() * o.meta["val"].element_size() for o in outputs
               if isinstance(o, torch.fx.Node) and isinstance(o.meta.get("val"), torch.Tensor))


def test_smaller_source_saved_instead_of_float32_chain_values(monkeypatch):
    """The backward reads the float32 tanh, the float32 cast and the scaled bfloat16 input of
    the GELU; none can be computed again from what it has, but all come from the bfloat16
    product, which is smaller: that is saved instead (option save_smaller_sources, forced as
    on the GPU), and training matches eager."""
    from coil import partition

    saved = {}
    for rule in (False, True):
        torch._dynamo.reset()
        monkeypatch.setattr(partition, "_on_cuda", lambda joint: True)
        torch.manual_seed(0)
        eager_model = _AutocastGelu()
        model = copy.deepcopy(eager_model)
        x = torch.randn(32, 16, dtype=torch.bfloat16)
        before = set(map(id, _forward_fns()))
        compiled = torch.compile(model, backend="coil",
                                 options={"strict": True, "save_smaller_sources": rule})
        got = _train(model, compiled, x, steps=2)
        want = _train(eager_model, eager_model, x, steps=2)
        _assert_same_training(got, want, tol=dict(rtol=2e-2, atol=2e-2))
        (fn,) = [f for f in _forward_fns() if id(f) not in before]
        saved[rule] = _saved_bytes(fn)
    # Without the rule: float32 tanh and cast (2 x 8 KiB) and the bfloat16 scaled input;
    # with it: the bfloat16 product (4 KiB) in their place.
    assert saved[True] <= saved[False] - 2 * 32 * 64 * 4, saved


class _AutocastResidual(torch.nn.Module):
    """A float32 residual stream over bfloat16 branches (GPT-2 under autocast): each layer's
    LayerNorm backward reads its float32 input, which the branch outputs would compute again."""

    def __init__(self, layers=4):
        super().__init__()
        self.norms = torch.nn.ModuleList(torch.nn.LayerNorm(16) for _ in range(layers))
        self.ups = torch.nn.ModuleList(torch.nn.Linear(16, 32) for _ in range(layers))
        self.downs = torch.nn.ModuleList(torch.nn.Linear(32, 16) for _ in range(layers))

    def forward(self, x):
        h = x
        for norm, up, down in zip(self.norms, self.ups, self.downs):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                b = down(up(norm(h)))  # a layer's backward: four products
            h = h + b.float()
        return h


def _early_recomputations(gm) -> list[str]:
    """Values the backward computes again from saved ones alone (no tangent) whose computation
    reads another such value that the gradient's computation needs only more than
    partition.EARLY_PRODUCTS products after its own first use: that value is then built long
    before it is needed."""
    from coil import partition

    from_tangent, recomputed, region = set(), set(), {}
    products = 0
    for n in gm.graph.nodes:
        if n.op == "placeholder":
            if "tangent" in str(n.target):
                from_tangent.add(n)
            continue
        if n.op == "output":
            continue
        region[n] = products
        if any(a in from_tangent for a in n.all_input_nodes):
            from_tangent.add(n)
        elif n.op == "call_function":
            recomputed.add(n)
        name = str(n.target)
        products += "mm" in name or "convolution" in name or "scaled_dot_product" in name

    def needed(a, avoid) -> list[int]:
        """Regions of the gradient's nodes that read a, directly or through values computed
        again from it (not through `avoid`)."""
        out, stack, seen = [], [a], set()
        while stack:
            m = stack.pop()
            for u in m.users:
                if u in seen or u is avoid or u not in region:
                    continue
                seen.add(u)
                if u in from_tangent:
                    out.append(region[u])
                elif u in recomputed:
                    stack.append(u)
        return out

    early = []
    for n in recomputed:
        own = needed(n, None)
        for a in n.all_input_nodes:
            theirs = needed(a, n) if a in recomputed else []
            if own and theirs and min(theirs) - min(own) > partition.EARLY_PRODUCTS:
                early.append(f"{n} reads {a}")
    return early


def test_residual_stream_is_not_computed_again_layer_by_layer(monkeypatch):
    """Computing a residual stream's values again from its branches' outputs (save_smaller_
    sources and recompute_pointwise, forced as on the GPU) would build every layer's residual
    for the backward's first layer: all alive at once and one kernel reading every branch
    (GPT-2's bf16 backward: a kernel of 64 buffers). No recomputed value of the backward reads
    another that is first needed a product later; training matches eager."""
    from coil import partition

    monkeypatch.setattr(partition, "_on_cuda", lambda joint: True)
    torch._dynamo.reset()
    torch.manual_seed(0)
    eager_model = _AutocastResidual()
    model = copy.deepcopy(eager_model)
    x = torch.randn(32, 16)
    compiled = torch.compile(model, backend="coil", options={"strict": True})
    got = _train(model, compiled, x, steps=2)
    want = _train(eager_model, eager_model, x, steps=2)
    _assert_same_training(got, want, tol=dict(rtol=2e-2, atol=2e-2))
    backward_fns = [f for f in list(backend._graph_fns) if f.name.startswith("backward")]
    assert backward_fns
    assert _early_recomputations(backward_fns[-1].gm) == []
