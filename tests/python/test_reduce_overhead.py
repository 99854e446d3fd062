"""mode="reduce-overhead" (python/coil/reduce_overhead.py): the options a mode stands for and
which inputs and outputs AOTAutograd's metadata marks (on the CPU); on a GPU, captured CUDA
graphs checked against eager over many calls with changing inputs, for inference and training
(forward and backward, one pool), with dropout, two forwards before one backward, gradients kept
by the optimizer, input mutation, BatchNorm's running statistics and changing sizes."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
from coil import backend  # noqa: E402
from coil.options import build_options  # noqa: E402
from coil.reduce_overhead import PooledReplayer, static_inputs_of, user_outputs_of  # noqa: E402


def test_modes_stand_for_options():
    assert backend.mode_options(None) == {}
    assert backend.mode_options("default") == {}
    assert backend.mode_options("reduce-overhead") == {"reduce_overhead": True}
    autotune = {"cuda_gemm_templates": True, "cuda_gemm_measure": True, "cuda_conv_measure": True,
                "extern_provider": "measured"}
    assert backend.mode_options("max-autotune") == {"reduce_overhead": True, **autotune}
    assert backend.mode_options("max-autotune-no-cudagraphs") == {"cuda_graphs": False,
                                                                   **autotune}
    with pytest.raises(ValueError, match="unknown torch.compile mode 'fast'"):
        backend.mode_options("fast")
    assert build_options({}).reduce_overhead is False
    o = build_options({"reduce_overhead": "1", "cuda_graph_max_captures": "3"})
    assert o.reduce_overhead and o.cuda_graph_max_captures == 3


def test_max_autotune_on_the_cpu_measures_products_and_convolutions():
    """On the CPU the max-autotune modes time coil's library kernel against ATen's for each
    product and convolution on its first run (extern_provider="measured"), then keep the
    faster; answers match eager on every call, forward and backward."""
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Flatten(),
                          nn.Linear(8 * 6 * 6, 5))
    ref = copy.deepcopy(model)
    f = torch.compile(model, backend="coil", mode="max-autotune-no-cudagraphs")
    for _ in range(3):
        x = torch.randn(4, 3, 6, 6)
        out, expect = f(x), ref(x)
        torch.testing.assert_close(out, expect, atol=1e-4, rtol=1e-4)
        out.square().sum().backward()
        expect.square().sum().backward()
    for p, q in zip(model.parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-3, rtol=1e-3)
    texts = [fn.compiled.describe() for fn in list(backend._graph_fns)]
    assert any("(measured)" in t for t in texts), texts
    assert sum(t.count("  measured: ") for t in texts) >= 2, texts


def test_static_inputs_and_user_outputs_from_aot_metadata():
    """In the forward compiler AOTAutograd says which inputs are parameters and how many
    outputs the caller sees; the backward's static inputs are all but the tangents."""
    from torch._dynamo.backends.common import aot_autograd

    seen = {}

    def fw(gm, ex):
        seen["fw_static"] = static_inputs_of(gm, "forward")
        seen["fw_user"] = user_outputs_of("forward")
        seen["fw_shapes"] = [tuple(t.shape) for t in ex]
        return gm

    def bw(gm, ex):
        seen["bw_static"] = static_inputs_of(gm, "backward")
        seen["bw_inputs"] = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
        return gm

    torch._dynamo.reset()
    model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 4))
    f = torch.compile(model, backend=aot_autograd(fw_compiler=fw, bw_compiler=bw))
    x = torch.randn(3, 8)
    f(x).sum().backward()
    assert seen["fw_user"] == 1  # the model's output; the rest is saved for the backward
    # The four parameters; x (3 x 8) is not static.
    x_pos = seen["fw_shapes"].index((3, 8))
    assert seen["fw_static"] == frozenset(range(5)) - {x_pos}
    tangents = {i for i, n in enumerate(seen["bw_inputs"]) if "tangents" in n}
    assert tangents and seen["bw_static"] == frozenset(range(len(seen["bw_inputs"]))) - tangents


def _replayers():
    return [fn.replayer for fn in list(backend._graph_fns)
            if isinstance(fn.replayer, PooledReplayer)]


def _states():
    return [(r.name, r.disabled, r.replays, r.num_captures, dict(r.events))
            for r in _replayers()]


def _fresh():
    torch._dynamo.reset()
    backend._graph_fns.clear()


def _mlp(p=0.0):
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(64, 128), nn.GELU(), nn.Dropout(p), nn.Linear(128, 32),
                         nn.LayerNorm(32)).cuda()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_inference_replays_match_eager_and_outputs_stay_valid(dtype):
    _fresh()
    model = _mlp().to(dtype).eval()
    compiled = torch.compile(model, backend="coil", mode="reduce-overhead")
    tol = dict(rtol=1e-4, atol=1e-4) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    fixed = torch.randn(8, 64, device="cuda", dtype=dtype)
    kept = []
    with torch.no_grad():
        for step in range(10):
            if step % 3 == 2:
                x = torch.randn(8, 64, device="cuda", dtype=dtype)  # another address
            else:
                fixed.normal_()  # same address, new values
                x = fixed
            got = compiled(x)
            want = model(x)
            torch.testing.assert_close(got, want, **tol)
            kept.append((got, want))
    for got, want in kept:  # returned outputs are copies: later replays did not touch them
        torch.testing.assert_close(got, want, **tol)
    (r,) = _replayers()
    assert not r.disabled and r.num_captures == 1 and r.replays >= 8, _states()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_output_copies_off_hands_out_the_pools_memory_and_marks_it_stale():
    # Option cuda_graph_output_copies off: Inductor's contract. The outputs are the pool's
    # memory (one address from replay to replay, no copy), right until the next replay, after
    # which reading one raises instead of giving the newer call's numbers.
    _fresh()
    model = _mlp().eval()
    compiled = torch.compile(model, backend="coil", options={
        "reduce_overhead": True, "cuda_graph_output_copies": False})
    ptrs = []
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(8, 64, device="cuda")
            got = compiled(x)
            torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-4)
            ptrs.append(got.data_ptr())
        old = got
        compiled(torch.randn(8, 64, device="cuda"))
        with pytest.raises(RuntimeError, match="cuda_graph_output_copies"):
            old.clone()
    assert ptrs[-1] == ptrs[-2] == ptrs[-3], ptrs  # replays: the pool's own output
    (r,) = _replayers()
    assert r.replays >= 3 and not any(k.startswith("busy") for k in r.events), _states()

    # Every output of a replay is marked, not only the first (they share one storage object,
    # but the mark is per tensor).
    _fresh()
    both = torch.compile(lambda x: (model(x), model(x).relu() * 2), backend="coil", options={
        "reduce_overhead": True, "cuda_graph_output_copies": False})
    with torch.no_grad():
        for _ in range(4):
            x = torch.randn(8, 64, device="cuda")
            a, b = both(x)
            torch.testing.assert_close(b, model(x).relu() * 2, rtol=1e-4, atol=1e-4)
        both(torch.randn(8, 64, device="cuda"))
        for old in (a, b):
            with pytest.raises(RuntimeError, match="cuda_graph_output_copies"):
                old.clone()


def _train_pair(model, opt_kwargs=None):
    eager = model
    mine = copy.deepcopy(model)
    compiled = torch.compile(mine, backend="coil", mode="reduce-overhead")
    opt_e = torch.optim.SGD(eager.parameters(), lr=0.05, **(opt_kwargs or {}))
    opt_c = torch.optim.SGD(mine.parameters(), lr=0.05, **(opt_kwargs or {}))
    return eager, mine, compiled, opt_e, opt_c


def _assert_same_params(a, b, tol):
    for (n, p), q in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(q, p, **tol, msg=lambda m, n=n: f"{n}: {m}")


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("set_to_none", [True, False])
def test_training_steps_match_eager(set_to_none):
    """Forward and backward both replay, in one pool, over steps with new batches; gradients
    the optimizer keeps between steps (zero_grad(set_to_none=False)) do not get overwritten."""
    _fresh()
    eager, mine, compiled, opt_e, opt_c = _train_pair(_mlp(), dict(momentum=0.9))
    tol = dict(rtol=2e-4, atol=2e-4)
    for step in range(8):
        x = torch.randn(16, 64, device="cuda")
        t = torch.randn(16, 32, device="cuda")
        for model, fn, opt in ((eager, eager, opt_e), (mine, compiled, opt_c)):
            opt.zero_grad(set_to_none=set_to_none)
            loss = F.mse_loss(fn(x), t)
            loss.backward()
            opt.step()
            if model is eager:
                want = loss.detach()
            else:
                torch.testing.assert_close(loss.detach(), want, **tol)
        _assert_same_params(eager, mine, tol)
    rs = _replayers()
    assert len(rs) == 2 and all(not r.disabled and r.replays >= 4 for r in rs), _states()
    assert rs[0].pool is rs[1].pool
    # Steady: one capture each where the optimizer drops the gradients between steps; where it
    # keeps the first step's (stolen from the backward's pool), one more each.
    assert all(r.num_captures <= (1 if set_to_none else 2) for r in rs), _states()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_two_forwards_before_one_backward():
    """The first forward's saved activations are still needed when the second replays: it
    gets a capture of its own instead of overwriting them."""
    _fresh()
    eager, mine, compiled, opt_e, opt_c = _train_pair(_mlp())
    tol = dict(rtol=2e-4, atol=2e-4)
    for step in range(6):
        a = torch.randn(16, 64, device="cuda")
        b = torch.randn(16, 64, device="cuda")
        grads = []
        for model, fn in ((eager, eager), (mine, compiled)):
            model.zero_grad(set_to_none=True)
            loss = fn(a).square().mean() + 2 * fn(b).abs().mean()
            loss.backward()
            grads.append([p.grad.clone() for p in model.parameters()])
        for g, h in zip(*grads):
            torch.testing.assert_close(h, g, **tol)
    (fw, bw) = _replayers()
    assert fw.num_captures >= 2 and fw.replays >= 4, _states()


def check_dropout_steps(compiled, lin: nn.Linear, p: float, steps: int) -> None:
    """`compiled` is dropout(lin(x), p): over `steps` calls with one input, each draws a fresh
    mask, and the backward (the bias gradient) uses the forward's."""
    x = torch.randn(32, 64, device="cuda")
    masks = []
    for _ in range(steps):
        lin.zero_grad(set_to_none=True)
        y = compiled(x)
        y.sum().backward()
        with torch.no_grad():
            base = lin(x)
            kept = y != 0
            # Kept elements are scaled by 1/(1-p); the bias gradient counts each kept element.
            torch.testing.assert_close(y[kept], base[kept] / (1 - p), rtol=1e-4, atol=1e-4)
            torch.testing.assert_close(lin.bias.grad, kept.float().sum(0) / (1 - p))
        masks.append(kept)
        assert 0.4 < kept.float().mean().item() < 0.6
    for a, b in zip(masks, masks[1:]):
        assert not torch.equal(a, b)  # fresh numbers in every call, replays included


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_dropout_draws_fresh_masks_in_replays_and_backward_uses_the_same_mask():
    _fresh()
    torch.manual_seed(0)
    lin = nn.Linear(64, 256).cuda()
    p = 0.5

    def f(x):
        return F.dropout(lin(x), p, training=True)

    compiled = torch.compile(f, backend="coil", mode="reduce-overhead")
    check_dropout_steps(compiled, lin, p, 8)
    rs = _replayers()
    assert rs and all(not r.disabled and r.replays >= 4 for r in rs), _states()
    assert any(r.random for r in rs)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_input_mutation_and_batch_norm_statistics():
    _fresh()

    def f(x, acc):
        acc.add_(x)  # mutates an input that is not a parameter: copied back after each replay
        return torch.relu(acc) * 2

    compiled = torch.compile(f, backend="coil", mode="reduce-overhead")
    acc_e = torch.zeros(8, 32, device="cuda")
    acc_c = acc_e.clone()
    for _ in range(6):
        x = torch.randn(8, 32, device="cuda")
        torch.testing.assert_close(compiled(x, acc_c), f(x, acc_e))
        torch.testing.assert_close(acc_c, acc_e)

    _fresh()
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                        nn.Conv2d(8, 4, 3)).cuda()
    eager, mine, compiled, opt_e, opt_c = _train_pair(net)
    tol = dict(rtol=1e-3, atol=1e-3)
    for _ in range(6):
        x = torch.randn(4, 3, 16, 16, device="cuda")
        for fn, opt in ((eager, opt_e), (compiled, opt_c)):
            opt.zero_grad(set_to_none=True)
            fn(x).square().mean().backward()
            opt.step()
        _assert_same_params(eager, mine, tol)
        torch.testing.assert_close(mine[1].running_mean, eager[1].running_mean, **tol)
        torch.testing.assert_close(mine[1].running_var, eager[1].running_var, **tol)
    assert all(r.replays >= 2 for r in _replayers()), _states()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_a_parameter_moved_to_new_memory_gets_its_own_capture():
    """Parameters are read where they are, matched by address only: a parameter whose data
    moved (`p.data = ...`) must not replay a capture that reads the old memory."""
    _fresh()
    model = _mlp()
    twin = copy.deepcopy(model)
    compiled = torch.compile(model, backend="coil", mode="reduce-overhead")
    x = torch.randn(16, 64, device="cuda")
    with torch.no_grad():
        for step in range(8):
            if step == 4:  # new values at a new address, under the same Parameter
                fresh = torch.randn_like(model[0].weight)
                model[0].weight.data = fresh.clone()
                twin[0].weight.data = fresh.clone()
            torch.testing.assert_close(compiled(x), twin(x), rtol=1e-4, atol=1e-4)
    rs = _replayers()  # one graph (or two, should Dynamo recompile for the new data)
    # Each address: one ordinary call, then a capture replayed.
    assert sum(r.num_captures for r in rs) == 2, _states()
    assert sum(r.events["first call of a key"] for r in rs) == 2, _states()
    assert sum(r.replays for r in rs) == 6, _states()


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("copies", [True, False])
def test_an_output_without_elements(copies):
    """An output with no elements has no memory (address 0): it stays out of the one storage
    a replay's outputs share, which it would stretch down to address 0."""
    _fresh()

    def f(x):
        return x.sin() * 2, x[:, :0].exp()

    compiled = torch.compile(f, backend="coil", options={
        "reduce_overhead": True, "cuda_graph_output_copies": copies})
    with torch.no_grad():
        for _ in range(5):
            x = torch.randn(8, 64, device="cuda")
            for got, want in zip(compiled(x), f(x)):
                assert got.shape == want.shape
                torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_one_capture_per_size_up_to_the_cap():
    _fresh()

    def f(x, w):
        return torch.softmax(x @ w, dim=-1) * x.shape[0]

    w = torch.randn(32, 16, device="cuda")
    compiled = torch.compile(f, backend="coil", mode="reduce-overhead", dynamic=True)
    sizes = [4, 8, 4, 8, 12, 4, 12, 8, 20, 20, 28, 28, 36, 36, 4, 8]
    for n in sizes:
        x = torch.randn(n, 32, device="cuda")
        torch.testing.assert_close(compiled(x, w), f(x, w), rtol=1e-4, atol=1e-4)
    rs = _replayers()
    assert rs and rs[0].replays >= 4
    assert rs[0].num_captures <= build_options({}).cuda_graph_max_captures

    _fresh()
    compiled = torch.compile(f, backend="coil", dynamic=True,
                             options={"reduce_overhead": True, "cuda_graph_max_captures": 2})
    for n in sizes:  # past two captures the other sizes run ordinarily, still right
        x = torch.randn(n, 32, device="cuda")
        torch.testing.assert_close(compiled(x, w), f(x, w), rtol=1e-4, atol=1e-4)
    (r,) = _replayers()
    assert r.num_captures == 2


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune",
                                  "max-autotune-no-cudagraphs"])
def test_modes_end_to_end(mode):
    _fresh()
    eager, mine, compiled, opt_e, opt_c = _train_pair(_mlp())
    compiled = torch.compile(mine, backend="coil", mode=mode)
    for _ in range(4):
        x = torch.randn(16, 64, device="cuda")
        for fn, opt in ((eager, opt_e), (compiled, opt_c)):
            opt.zero_grad(set_to_none=True)
            fn(x).square().mean().backward()
            opt.step()
        _assert_same_params(eager, mine, dict(rtol=2e-4, atol=2e-4))
    with torch.no_grad():
        x = torch.randn(16, 64, device="cuda")
        for _ in range(3):
            torch.testing.assert_close(compiled(x), eager(x), rtol=2e-4, atol=2e-4)
    pooled = bool(_replayers())
    assert pooled == (mode in ("reduce-overhead", "max-autotune"))


def test_replay_events_name_each_live_replayer():
    # What bench/dashboard_kernels.py prints after its timed steps: per graph, what its calls
    # did. A replayer that is gone (its graph freed) is no longer listed.
    import gc

    from coil.reduce_overhead import CapturePool, PooledReplayer, replay_events

    r = PooledReplayer("events_test_graph", lambda inputs, rng=0: [], CapturePool(), "inference",
                       frozenset(), None, (), False, 4)
    r.events["replay"] += 3
    r.events["busy: a saved value"] += 1
    assert ("events_test_graph", {"replay": 3, "busy: a saved value": 1}) in replay_events()
    del r
    gc.collect()
    assert all(name != "events_test_graph" for name, _ in replay_events())


def test_span_metadata_rebuilds_each_tensor_on_one_storage():
    """span_metas (the per-replay outputs of one capture, on one storage object): each
    tensor's metadata, read over a storage from the span's first address, gives back the same
    elements; offsets count in the tensor's own element size. (The CUDA constructor is not on
    a CPU; `set_` reads the same fields.)"""
    from coil.graph_memory import span_metas

    base = torch.arange(4096, dtype=torch.uint8)
    f32 = base[512:1536].view(torch.float32).view(16, 16)  # 1024 bytes from byte 512
    bf16 = base[2048:2560].view(torch.bfloat16).view(8, 32).t()  # transposed view
    i64 = base[3072:3584].view(torch.int64)[4:]  # an offset inside its own storage
    tensors = {"a": f32, "b": bf16, "c": i64}
    blocks = {"a": (512, 1024), "b": (2048, 512), "c": (3072, 512)}  # pool blocks: start, bytes
    # Each stands for a pool block of its own: a storage per tensor over the shared buffer.
    parts = {}
    for k, t in tensors.items():
        start = base.data_ptr() + blocks[k][0]
        s = torch._C._construct_storage_from_data_pointer(start, t.device, blocks[k][1])
        offset = (t.data_ptr() - start) // t.element_size()
        parts[k] = torch.empty(0, dtype=t.dtype).set_(s, offset, t.shape, t.stride())
    lo, nbytes, metas = span_metas(parts)
    assert lo == base.data_ptr() + 512 and nbytes == 3584 - 512
    span = torch._C._construct_storage_from_data_pointer(lo, base.device, nbytes)
    for k, t in tensors.items():
        m = metas[k]
        got = torch.empty(0, dtype=m["dtype"]).set_(span, m["storage_offset"], m["size"],
                                                    m["stride"])
        assert got.data_ptr() == t.data_ptr() and got.stride() == t.stride(), k
        as_bytes = [x.contiguous().view(torch.uint8) for x in (got, t)]  # NaNs compare as bits
        assert torch.equal(*as_bytes), k


@pytest.mark.parametrize("by_storage", [True, False])
def test_kept_outputs_move_out_of_the_pool_only_while_held(by_storage, monkeypatch):
    """KeptOutputs (outputs the caller sees, handed out as the pool's memory): before a
    replay overwrites the pool, a storage still held moves to new memory with its bytes, so
    the outputs keep their values; a dropped one costs nothing. Outputs sharing a pool block
    share one storage, and still do after the move; a static input's memory is not the
    pool's. Swapping the storage's memory (PyTorch >= 2.12) also moves the views the caller
    took; swapping the outputs' contents (older PyTorch) cannot, so a storage with a view on it
    is not movable, and when its capture goes the pool's memory stays until the view is
    dropped. (On the CPU: the same storage calls as on a GPU.)"""
    import gc
    import weakref

    from coil import graph_memory
    from coil.graph_memory import KeptOutputs

    if by_storage and not graph_memory._swap_storage:
        pytest.skip("this PyTorch cannot swap a storage's memory")
    monkeypatch.setattr(graph_memory, "_swap_storage", by_storage)
    pool_a, pool_b = torch.arange(16.0), torch.arange(100.0, 108.0)  # two pool blocks
    param = torch.ones(4)
    outputs = [pool_a[:8].view(2, 4), pool_a[4:12], pool_b, param, torch.empty(0)]
    kept = KeptOutputs(outputs, {0, 1, 2, 3, 4}, static_inputs=[param])
    assert sorted(len(metas) for _, _, metas in kept.blocks) == [1, 2]
    outs = kept.hand_out()
    assert sorted(outs) == [0, 1, 2]  # the parameter and the empty output are cloned
    assert outs[0].untyped_storage()._cdata == outs[1].untyped_storage()._cdata
    for j in outs:
        assert outs[j].data_ptr() == outputs[j].data_ptr()
        assert torch.equal(outs[j], outputs[j])
    want = {j: t.clone() for j, t in outs.items()}
    held = dict(outs)
    del outs
    assert kept.movable()
    assert kept.move_out() == 2  # both blocks are held
    pool_a.fill_(-1.0)  # the next replay overwrites the pool
    pool_b.fill_(-1.0)
    for j, t in held.items():
        assert torch.equal(t, want[j]) and t.data_ptr() != outputs[j].data_ptr(), j
    held[1][0] = 42.0  # the two outputs of block a still share their (new) memory
    assert held[0][1, 0] == 42.0
    del held
    outs = kept.hand_out()  # the next replay's outputs are the pool's memory again
    assert outs[2].data_ptr() == pool_b.data_ptr() and torch.equal(outs[2], pool_b)
    del outs
    assert kept.move_out() == 0  # dropped before the next replay: nothing to move

    row = kept.hand_out()[0][1]  # a view of a kept output, held alone
    want_row = row.clone()
    assert kept.movable() == by_storage
    memory = [torch.arange(16.0)]
    memory_ref = weakref.ref(memory[0])
    kept.retire(memory)  # the capture goes
    del memory
    gc.collect()
    if by_storage:  # the view moved with its storage; the pool's memory may go
        assert memory_ref() is None and row.data_ptr() != pool_a[4:].data_ptr()
    else:  # the view is on the pool's memory, kept while the view is held
        assert memory_ref() is not None and row.data_ptr() == pool_a[4:].data_ptr()
        pool_a[4:8].copy_(want_row)
    assert torch.equal(row, want_row)
    del row
    graph_memory.keep_until_dropped([], None)  # prunes what nothing holds any more
    gc.collect()
    assert memory_ref() is None


def test_kept_training_outputs_move_with_their_autograd_data(monkeypatch):
    """A training forward's output (its grad_fn is the compiled backward) moved out of the pool
    without storage swaps (PyTorch before 2.12) takes the copy as its .data: it keeps its
    grad_fn, and a later op that saved it for its own backward reads the copy."""
    from coil import graph_memory
    from coil.graph_memory import KeptOutputs

    if not graph_memory._swap_tensors:
        pytest.skip("this PyTorch cannot count a storage's holders")
    monkeypatch.setattr(graph_memory, "_swap_storage", False)
    pool = torch.arange(8.0)
    kept = KeptOutputs([pool], {0}, static_inputs=[])

    class Forward(torch.autograd.Function):  # stands for the compiled forward
        @staticmethod
        def forward(ctx, w):
            return kept.hand_out()[0]

        @staticmethod
        def backward(ctx, g):
            return g.sum()

    w = torch.tensor(1.0, requires_grad=True)
    v = torch.full((8,), 2.0, requires_grad=True)
    out = Forward.apply(w)
    assert out.data_ptr() == pool.data_ptr() and out.grad_fn is not None
    y = out * v  # saves `out` for v's gradient
    version = out._version
    assert kept.movable() and kept.move_out() == 1
    pool.fill_(-1.0)  # the next replay overwrites the pool
    assert out.data_ptr() != pool.data_ptr() and out._version == version
    assert type(out.grad_fn).__name__ == "ForwardBackward"
    y.sum().backward()
    torch.testing.assert_close(v.grad, torch.arange(8.0))
    torch.testing.assert_close(w.grad, torch.tensor(16.0))


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_outputs_held_past_the_next_call_move_out_of_the_pool():
    """Returned outputs are the pool's memory: one still held when the next replay would
    overwrite it moves out first, one dropped in time costs nothing, a view taken of one moves
    with it (PyTorch >= 2.12) or keeps the replay from overwriting it (a new capture), and one
    held after the compiled model is gone keeps its values."""
    import gc

    from coil import graph_memory

    _fresh()
    model = _mlp().eval()
    compiled = torch.compile(model, backend="coil", mode="reduce-overhead")
    moved = "outputs moved out of the pool"
    xs = [torch.randn(8, 64, device="cuda") for _ in range(10)]
    tol = dict(rtol=1e-4, atol=1e-4)
    with torch.no_grad():
        want = [model(x) for x in xs]
        for x in xs[:3]:
            compiled(x)  # an ordinary call, the capture, a replay: each dropped at once
        (r,) = _replayers()
        assert r.replays >= 2 and r.events[moved] == 0, _states()
        held = compiled(xs[3])
        nxt = compiled(xs[4])  # overwrites the pool: `held` moves out first
        assert r.events[moved] == 1, _states()
        torch.testing.assert_close(held, want[3], **tol)
        torch.testing.assert_close(nxt, want[4], **tol)
        view = nxt[2:5, 1:]
        del held, nxt
        got = compiled(xs[5])  # only a view of the last output is held
        torch.testing.assert_close(view, want[4][2:5, 1:], **tol)
        torch.testing.assert_close(got, want[5], **tol)
        if graph_memory._swap_storage:
            assert r.events[moved] == 2 and r.num_captures == 1, _states()
        else:
            assert r.events[moved] == 1 and r.num_captures == 2, _states()
        del view, got
        count = r.events[moved]
        for x, w in zip(xs[6:9], want[6:9]):
            torch.testing.assert_close(compiled(x), w, **tol)
        assert r.events[moved] == count, _states()  # nothing held: nothing moved
        last = compiled(xs[9])
    del r, compiled
    _fresh()
    gc.collect()
    junk = [torch.full((1 << 20,), float("nan"), device="cuda") for _ in range(16)]
    torch.testing.assert_close(last, want[9], **tol)
    del junk

