"""Input mutations kept in the graph (option input_mutations_in_graph, on by default):
AOTAutograd leaves copy_(input, value) at the end of a forward or inference graph and coil
stores the value into the input itself (src/lower/mutation.cpp; the scheduler's rules in
src/sched/fusion.cpp). Each case runs a module whose forward mutates buffers and compares the
outputs, the gradients and the mutated buffers with eager over several calls, on the CPU and
(marked gpu) on CUDA, in strict mode, so nothing runs eagerly behind the test's back."""

from __future__ import annotations

import copy

import pytest
import torch

coil = pytest.importorskip("coil")
pytest.importorskip("coil._coil")

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]


class ConvBN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.bn2 = torch.nn.BatchNorm1d(8)

    def forward(self, x):
        y = torch.relu(self.bn(self.conv(x)))
        return self.bn2(y.mean((2, 3))).sum(1) + y.mean((1, 2, 3))


class Counter(torch.nn.Module):
    """Buffers mutated in ways BatchNorm does not: read again after the mutation, read at
    other elements than the one written (flip), and written from a broadcast value."""

    def __init__(self):
        super().__init__()
        self.register_buffer("acc", torch.arange(6.0))
        self.register_buffer("steps", torch.zeros((), dtype=torch.int64))
        self.register_buffer("rows", torch.ones(4, 6))
        self.lin = torch.nn.Linear(6, 6)

    def forward(self, x):
        old = self.acc.sum()
        self.acc.copy_(self.acc.flip(0) * 0.5 + x.detach().mean(0))
        self.steps.add_(1)
        self.rows.mul_(self.acc)  # broadcast over the rows, reads the new acc
        return self.lin(x) * self.acc + old + self.rows.sum(0)


def _buffers(m):
    return {k: v.detach().clone() for k, v in m.named_buffers()}


@pytest.fixture(autouse=True)
def _no_tf32():
    # Full float32 on the GPU: TF32 convolutions differ from eager's by more than the
    # tolerances below (cuDNN picks other algorithms).
    old = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = old


def _check(model_fn, shape, device, train=True, grad=True):
    torch.manual_seed(0)
    ref = model_fn().to(device).train(train)
    mod = copy.deepcopy(ref)
    opts = {"strict": True}
    compiled = torch.compile(mod, backend="coil", options=opts)
    coil.reset_report()
    for step in range(3):
        x = torch.randn(*shape, device=device)
        with torch.set_grad_enabled(grad):
            want = ref(x)
            got = compiled(x)
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        rb, mb = _buffers(ref), _buffers(mod)
        for k in rb:
            torch.testing.assert_close(mb[k], rb[k], rtol=1e-5, atol=1e-5,
                                       msg=lambda m: f"buffer {k} after call {step}: {m}")
        if grad:
            want.sum().backward()
            got.sum().backward()
            for (n, p), q in zip(ref.named_parameters(), mod.parameters()):
                torch.testing.assert_close(q.grad, p.grad, rtol=1e-3, atol=1e-3,
                                           msg=lambda m: f"grad of {n}: {m}")
    r = coil.report()
    assert r.graphs_compiled >= 1 and not r.graphs_fallen_back, str(r)


@pytest.mark.parametrize("device", DEVICES)
def test_batch_norm_training_updates_running_stats_in_place(device):
    _check(ConvBN, (4, 3, 10, 10), device)


@pytest.mark.parametrize("device", DEVICES)
def test_batch_norm_in_train_mode_under_no_grad(device):
    # An inference graph (no backward) that still mutates the running statistics.
    _check(ConvBN, (4, 3, 10, 10), device, grad=False)


@pytest.mark.parametrize("device", DEVICES)
def test_buffers_read_after_and_around_their_mutation(device):
    _check(Counter, (5, 6), device)


def test_the_graph_writes_the_inputs_own_storage(tmp_path):
    # The debug dump's schedule shows the running statistics written by the statistics
    # kernel (no copy of them among the outputs), and the forward graph has no extra outputs.
    torch.manual_seed(0)
    mod = ConvBN()
    opts = {"strict": True, "debug": True, "debug_dir": str(tmp_path)}
    compiled = torch.compile(mod, backend="coil", options=opts)
    compiled(torch.randn(2, 3, 6, 6)).sum().backward()
    fw = next(p for p in tmp_path.iterdir() if "forward" in p.name)
    graph = (fw / "01_graph.txt").read_text()
    assert graph.count("aten.copy_.default(") == 6  # 2 x (mean, var, counter)
    schedule = (fw / "03_schedule.txt").read_text()
    assert schedule.count("(input mutation)") == 6, schedule


def test_off_restores_the_copy_back_by_the_wrapper(tmp_path):
    torch.manual_seed(0)
    ref = ConvBN()
    mod = copy.deepcopy(ref)
    opts = {"strict": True, "input_mutations_in_graph": False, "debug": True,
            "debug_dir": str(tmp_path)}
    compiled = torch.compile(mod, backend="coil", options=opts)
    x = torch.randn(2, 3, 6, 6)
    torch.testing.assert_close(compiled(x), ref(x), rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(mod.bn.running_var, ref.bn.running_var)
    fw = next(p for p in tmp_path.iterdir() if "forward" in p.name)
    assert "aten.copy_.default(" not in (fw / "01_graph.txt").read_text()


# Functions that mutate their own arguments (inference graphs: AOTAutograd keeps every data
# mutation of an input that needs no grad). Each is compared with eager: outputs and the
# arguments after the call.
def _add_(x, y):
    x.add_(y)
    return x * 2


def _mutate_a_slice(x, y):
    x[1:3].mul_(y[0])  # a view of the input: AOTAutograd copies the whole new base back
    return x.sum(0)


def _cast_and_broadcast(x, y):
    y.copy_(x[0].to(torch.float64))  # float64 argument from a float32 row
    return y + 1


def _read_after_write(x, y):
    x.clamp_(-0.5, 0.5)
    x.mul_(3)
    return torch.softmax(x, -1) + y


def _swap(x, y):
    t = x.clone()
    x.copy_(y.flip(1))
    y.copy_(t.t().contiguous()[:4, :4] if x.shape[0] == x.shape[1] else t)
    return x - y


def _return_the_argument(x, y):
    x.mul_(y.sigmoid())
    return x, x[0]  # the mutated input itself and a view of it, as in eager


MUTATING = {f.__name__: f for f in (_add_, _mutate_a_slice, _cast_and_broadcast, _read_after_write,
                                    _swap, _return_the_argument)}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("name", sorted(MUTATING))
def test_functions_that_mutate_their_arguments(name, device):
    f = MUTATING[name]
    shapes = {"_cast_and_broadcast": ((4, 6), (6,))}.get(name, ((4, 4), (4, 4)))
    dtypes = {"_cast_and_broadcast": (torch.float32, torch.float64)}.get(
        name, (torch.float32, torch.float32))
    compiled = torch.compile(f, backend="coil", options={"strict": True})
    coil.reset_report()
    for seed in range(3):
        torch.manual_seed(seed)
        args = [torch.randn(s, dtype=d, device=device) for s, d in zip(shapes, dtypes)]
        ref_args = [a.clone() for a in args]
        want = f(*ref_args)
        got = compiled(*args)
        torch.testing.assert_close(got, want)
        if name == "_return_the_argument":
            assert got[0] is args[0] or got[0].data_ptr() == args[0].data_ptr()
            assert got[1].data_ptr() == args[0].data_ptr()
        for k, (a, r) in enumerate(zip(args, ref_args)):
            torch.testing.assert_close(a, r, msg=lambda m: f"argument {k} after call {seed}: {m}")
    r = coil.report()
    assert r.graphs_compiled >= 1 and not r.graphs_fallen_back, str(r)


LAYOUTS = {
    "slice": lambda dev: torch.randn(4, 8, device=dev)[:, 1:4],  # not dense: rows 8 apart
    "transposed": lambda dev: torch.randn(3, 4, device=dev).t(),
    "channels_last": lambda dev: torch.randn(2, 3, 4, 5, device=dev).to(
        memory_format=torch.channels_last),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("layout", sorted(LAYOUTS))
def test_mutated_inputs_of_other_layouts(layout, device):
    # The store goes through the input's own strides; a slice of a wider tensor has gaps, which
    # must stay untouched.
    def f(x, y):
        x.add_(y)
        return x * 2

    compiled = torch.compile(f, backend="coil", options={"strict": True})
    for seed in range(2):
        torch.manual_seed(seed)
        x = LAYOUTS[layout](device)
        base = x if x._base is None else x._base
        y = torch.randn(x.shape, device=device)
        ref_base = base.clone()
        ref = ref_base.as_strided(x.shape, x.stride(), x.storage_offset())
        want = f(ref, y)
        torch.testing.assert_close(compiled(x, y), want)
        torch.testing.assert_close(base, ref_base)  # the slice's gaps included
