"""Regression tests of bugs the differential fuzzer found (tools/fuzz_graphs.py,
docs/fuzzing.md): each is the minimized program of a fuzz seed, compiled with coil in strict
mode (so a fallback fails the test too) and compared with eager by the accuracy rule."""

from __future__ import annotations

import pytest
import torch

from accuracy import compare


def check(fn, *inputs, dynamic=False, grad=False):
    """fn compiled by coil (strict, whole graph) matches eager, outputs and gradients."""
    torch._dynamo.reset()
    if grad:
        inputs = [t.detach().requires_grad_(t.is_floating_point()) for t in inputs]
    expected = fn(*inputs)
    cf = torch.compile(fn, backend="coil", fullgraph=True, dynamic=dynamic,
                       options={"strict": True})
    actual = cf(*inputs)
    v = compare(actual, expected)
    assert v, v.detail
    if grad:
        leaves = [t for t in inputs if t.requires_grad]
        cot = [torch.randn_like(o) for o in expected]
        ge = torch.autograd.grad(expected, leaves, cot)
        ga = torch.autograd.grad(actual, leaves, cot)
        v = compare(list(ga), list(ge))
        assert v, "gradients: " + v.detail
    torch._dynamo.reset()


def test_sgn_from_abs_backward(real_coil):
    # Seed 0: abs's backward is grad * sgn(x); aten.sgn had no lowering (strict mode refused).
    check(lambda x: (torch.abs(x) * 2,), torch.randn(5, 3), grad=True)
    check(lambda x: (torch.sgn(x),), torch.randn(4, 6))


@pytest.mark.parametrize("dims", [(0,), (1,), (0, 2), (-1,)])
def test_flip(real_coil, dims):
    # Seed 25: flip decomposes to prims.rev, which had no lowering.
    x = torch.randn(3, 4, 5)
    check(lambda x: (torch.flip(x, dims), torch.flip(x, dims) * 2 + 1), x)
    check(lambda x: (torch.flip(x.transpose(0, 2), dims),), x)


def test_index_add(real_coil):
    # Seed 3: index_add had neither a lowering nor a decomposition.
    x, src, src1 = torch.randn(5, 4), torch.randn(3, 4), torch.randn(5, 2)
    idx, idx1 = torch.tensor([4, 0, 4]), torch.tensor([3, 1])
    check(lambda x, i, s, i1, s1: (x.index_add(0, i, s), (x * 2).index_add(1, i1, s1)),
          x, idx, src, idx1, src1)


def test_diagonal(real_coil):
    # Seed 18: diagonal (a view) had no lowering.
    x = torch.randn(3, 4, 5)
    check(lambda x: (torch.diagonal(x, 0, 0, 1), torch.diagonal(x * 2, 1, 2, 0),
                     torch.diagonal(x.transpose(0, 1), -1, 1, 2)), x)


@pytest.mark.parametrize("fn", [
    lambda x: (torch.var(x, None, correction=1), torch.std(x, (1, 2), correction=0)),
    lambda x: (torch.var(x, 1), torch.std(x), torch.var(x, -1, keepdim=True, unbiased=False)),
    lambda x: (torch.std(x.sum(), None, correction=0), torch.var(x, (0, 2), correction=2)),
])
def test_var_std(real_coil, fn):
    # Seed 13: var / std decomposed to prims.var, which had no lowering.
    check(fn, torch.randn(4, 5, 6))
    check(fn, torch.randn(4, 5, 6), grad=True)


def test_load_through_data_dependent_index_is_not_hoisted(real_coil):
    # Seed 50: the emitter hoisted a load indexed by a data-dependent index (x[..., idx]) out
    # of the loop that computes the index; g++ then failed on an undeclared variable.
    x = torch.randn(1, 1, 12, 16).permute(2, 1, 0, 3)  # [12, 1, 1, 16], strides (16, 192, 192, 1)
    idx = torch.randint(-16, 16, (7,))
    check(lambda x, i: (x[:, :, :, i].to(torch.int64),), x, idx)
    check(lambda x, i: (x[:, :, :, i] * 2,), x, idx[::2])


def test_view_of_strided_input_keeps_pytorch_strides(real_coil):
    # Seed 209: the forward graph returned a view of a strided input (saved for backward) as a
    # contiguous copy; the backward graph, compiled for PyTorch's strides, refused it.
    x = torch.randn(24)[::2]
    check(lambda x: (torch.var_mean(x.reshape(1, 12), (0, 1), correction=0, keepdim=True)[0],),
          x, grad=True)
    y = torch.randn(4, 6, 5).permute(2, 0, 1)[:, ::2]  # [5, 2, 6] non-contiguous
    check(lambda y: (y.reshape(5, 12) * 2, y.reshape(5, 2, 3, 2).sum(2), y.view(5, 2, 6, 1)), y)
    check(lambda y: (y.reshape(10, 6).exp(), y.unsqueeze(0).reshape(1, 5, 2, 6)), y, grad=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_comparison_rounds_the_scalar(real_coil, dtype):
    # Seed 492: x >= -0.0708 with x == f16(-0.0708): PyTorch compares in f16 (True), coil
    # compared with the unrounded scalar in f32 (False).
    x = torch.tensor([-0.0708, -1.34, 0.1, 0.3, 2.7], dtype=dtype)
    check(lambda x: (torch.ge(x, -0.0708), x < 0.1, x == 0.3, x > 2.7, x <= torch.tensor(0.1)),
          x)



def test_cat_of_a_tensor_with_itself_split_loop(real_coil):
    # Seed 1320: cat([v, v]) of a 12-element v, its loop split [24] -> [12, 2] to align with v's
    # kernel (fusion then refused). g++ 12.2 -O3 unrolled the 2-trip inner loop, vectorized the
    # outer one, and its masked loads read zeros: out[12:16] came back 0. coil now emits
    # `#pragma GCC unroll 1` on the loops of kernels with masked loads. The same miscompile hit
    # a pad of a [6, 6, 8] input under other flags: pads of several shapes are checked too.
    def f(x0, x1):
        v0 = x0 - x1
        return (torch.cat([v0, v0], -2),)

    def g(x):
        return (torch.nn.functional.pad(x, (2, 1, 2, 0), value=1),
                torch.nn.functional.pad(x * 2, (0, 3, 1, 1)))

    opts = {"strict": True, "inline_pointwise": False}
    for n in (6, 12, 24, 40):
        torch._dynamo.reset()
        x0, x1 = torch.randn(1, n, 1), torch.randn(1, n, 1)
        cf = torch.compile(f, backend="coil", fullgraph=True, options=opts)
        torch.testing.assert_close(cf(x0, x1)[0], f(x0, x1)[0], rtol=0, atol=0)
    for shape in ((6, 6, 8), (3, 8, 4), (5, 2, 16), (8, 1)):
        torch._dynamo.reset()
        x = torch.randn(shape)
        cg = torch.compile(g, backend="coil", fullgraph=True, options=opts)
        for a, e in zip(cg(x), g(x)):
            torch.testing.assert_close(a, e, rtol=0, atol=0)
    torch._dynamo.reset()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_float_to_int_to_float_is_positive_zero(real_coil, dtype):
    # Seed 2835: copysign(m, x.to(int32)) with x in (-1, 0): the int is 0, so +0 and a positive
    # result. g++ (-fno-trapping-math) folded float(int(x)) into trunc(x) = -0: the sign came
    # out negative. Also seen by 1/x (inf vs -inf), and through a widening int cast too.
    x = torch.tensor([-0.5, -0.99, 0.3, -1.5, 2.7, -0.0, 0.0, -3.0], dtype=dtype)
    i32, i64 = torch.int32, torch.int64
    check(lambda x: (torch.copysign(torch.full_like(x, 2.0), x.to(i32)),
                     1 / x.to(i64).to(x.dtype),
                     torch.copysign(torch.ones_like(x), x.to(i32).to(i64).to(x.dtype)),
                     torch.copysign(torch.ones_like(x), x.to(torch.int8).to(x.dtype))), x)


@pytest.mark.parametrize("grad", [False, True])
def test_expanded_output_is_restrided_without_overlapping_copy(real_coil, grad):
    # Seed 3010: a graph returning an expand (strides 0): coil returns it dense, and the
    # restride to the FX strides (added for seed 209) copied into an overlapping tensor, which
    # PyTorch refuses; the error escaped even in non-strict mode.
    def f(x):
        v = torch.sigmoid(x).expand((3, 6))
        return (v.expand((2, 3, 6)), v * 2, torch.exp(x)[None, :, None].expand(4, 6, 5))

    for dtype in (torch.float32, torch.bfloat16):
        check(f, torch.randn(6, dtype=dtype), grad=grad)
    torch._dynamo.reset()
    out = torch.compile(f, backend="coil", fullgraph=True, options={"strict": True})(
        torch.randn(6))
    assert [o.stride() for o in out] == [e.stride() for e in f(torch.randn(6))]
    torch._dynamo.reset()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_index_add_accumulates_in_float32(real_coil, dtype):
    # Seed 419: index_add decomposed to index_put(accumulate=True), which rounds bf16 after
    # every add; eager's index_add (alpha 1, 2-d and up) sums in float32 and rounds once. With
    # many equal indices the roundings add up (10x eager's error against float64 in the seed).
    # coil now always sums in float32: with alpha != 1 eager itself rounds every add, so that
    # case is judged by the accuracy rule against float64 (coil's error <= 3x eager's).
    g = torch.Generator().manual_seed(0)
    x = torch.randn(3, 17, 1, generator=g).to(dtype)
    src = torch.randn(3, 17, 64, generator=g).to(dtype)
    idx = torch.zeros(64, dtype=torch.int64)
    check(lambda x, i, s: ((x.index_add(2, i, s).abs() + 0.5) ** -1.5,), x, idx, src, grad=True)

    def f(x, i, s):
        return (x.index_add(2, i, s), (x * 2).index_add(2, i, s, alpha=0.5),
                x.view(-1).index_add(0, i[:17], s[0, :, 0], alpha=2))

    torch._dynamo.reset()
    cf = torch.compile(f, backend="coil", fullgraph=True, options={"strict": True})
    fp64 = f(x.double(), idx, src.double())
    v = compare(cf(x, idx, src), f(x, idx, src), fp64)
    assert v, v.detail
    torch._dynamo.reset()

def test_saved_activation_with_other_strides_than_traced(real_coil):
    # Seeds 1948, 2026: relu of a permuted input, kept unfused (inline_pointwise off): coil's
    # forward returns the saved relu output dense, while AOTAutograd compiled the backward for
    # eager's permuted strides. The backward's run-time check raised InputMismatchError and the
    # graph ran eagerly for good; now such inputs are copied into the traced strides
    # (graph_call.py: relayout_inputs) and coil runs the backward.
    import coil

    def f(x):
        return (torch.relu(x.permute(0, 2, 1, 3)).transpose(2, -4),)

    torch._dynamo.reset()
    coil.reset_report()
    x = torch.randn(17, 12, 2, 3, requires_grad=True)
    xc = x.detach().clone().requires_grad_(True)
    cf = torch.compile(f, backend="coil", fullgraph=True,
                       options={"strict": True, "inline_pointwise": False})
    for _ in range(2):
        outs, ref = cf(xc), f(x)
        cots = [torch.randn(o.shape) for o in ref]
        (ga,) = torch.autograd.grad(outs, [xc], cots)
        (ge,) = torch.autograd.grad(ref, [x], cots)
        torch.testing.assert_close(ga, ge)
    assert not coil.report().graphs_fallen_back
    torch._dynamo.reset()

def test_dynamic_backward_carrier_is_a_real_tensor(real_coil):
    # Seed 23 (reduced): a dynamic backward graph whose symbol no input dim carries gets a
    # carrier input; it was made while AOTAutograd's FakeTensorMode was active, so the first
    # backward call failed on the fake tensor's data pointer, and so did the eager fallback:
    # the user's program died.
    def f(x):
        return (torch.nn.functional.pad(x, (2, 1, 2, 0), value=1),)

    check(f, torch.randn(6, 6, 8), dynamic=True, grad=True)


def test_dynamic_view_output_of_expanded_input_gradient(real_coil):
    # Seed 23: a dynamic graph returning a view of an input. AOTAutograd regenerates such an
    # output from the input; with symbolic sizes it cannot replay its recorded views and used
    # as_strided on coil's (base-less) output, whose backward on an expanded (self-overlapping)
    # input averages the gradient over the aliased elements. coil now rebuilds view outputs
    # by running the FX view ops on the input (graph_call.py: _replay_view).
    def f(x):
        return (torch.nn.functional.pad(x, (2, 1, 2, 0), value=1), x.reshape((6, 6, -1)))

    check(f, torch.randn(1, 6, 8).expand(6, 6, 8), dynamic=True, grad=True)
    check(f, torch.randn(1, 6, 8).expand(6, 6, 8), dynamic=False, grad=True)


@pytest.mark.parametrize("dynamic", [True, False])
def test_view_outputs_of_inputs_gradient(real_coil, dynamic):
    # The same through chains of views of a self-overlapping and an offset input; with
    # dynamic=True one graph serves every size. (AOTAutograd replays views whose arguments are
    # not symbolic itself; the reshapes to symbolic sizes are the ones that went wrong.)
    def f(x, y):
        return (x.reshape(x.shape[0], -1)[1:], x.permute(2, 0, 1)[1:],
                x.unsqueeze(0).expand(2, -1, -1, -1), y.view(-1)[2:], y[:, 1:3] * 2,
                y.t()[::2])

    torch._dynamo.reset()
    cf = torch.compile(f, backend="coil", fullgraph=True, dynamic=dynamic,
                       options={"strict": True})
    for n in (6, 9, 13):
        # Detached: leaves without a _base, as the seed's inputs were.
        x = torch.randn(1, n, 5).expand(4, n, 5).detach().requires_grad_(True)
        y = torch.randn(n * 4 + 1)[1:].view(n, 4).detach().requires_grad_(True)
        expected, actual = f(x, y), cf(x, y)
        v = compare(actual, expected)
        assert v, v.detail
        cot = [torch.randn_like(o) for o in expected]
        v = compare(list(torch.autograd.grad(actual, [x, y], cot)),
                    list(torch.autograd.grad(expected, [x, y], cot)))
        assert v, f"n={n} gradients: {v.detail}"
    torch._dynamo.reset()


@pytest.mark.parametrize("strict", [True, False])
def test_dynamic_index_matmul_flip(real_coil, strict):
    # Seed 973 (dynamic): `ExportError: unsupported call target mul` escaped in non-strict
    # mode before the dynamic front end folded Python arithmetic on SymInts. The program: an
    # expanded input, indexing by an int tensor, a matmul with a [1, 1] operand, a flip.
    def f(x1, x2, x3, x4):
        v2 = torch.reciprocal(torch.acosh(x1.abs() + 1.1))
        return (torch.nn.functional.hardtanh(v2, -0.5, 0.5), torch.atan2(v2, x2.abs() + 0.5),
                torch.matmul(x1[:, x3], x4), x4[..., None], torch.flip(x4, (0, 1)))

    g = torch.Generator().manual_seed(973)
    x1 = torch.randn(1, 17, 3, 1, generator=g).expand(3, 17, 3, 1)
    x2 = torch.randint(0, 5, (1, 1, 1, 1), generator=g)
    x3 = torch.randint(-17, 17, (4, 16), generator=g).t()
    x4 = torch.randn(1, 1, generator=g)
    torch._dynamo.reset()
    cf = torch.compile(f, backend="coil", fullgraph=True, dynamic=True,
                       options={"strict": strict})
    v = compare(cf(x1, x2, x3, x4), f(x1, x2, x3, x4))
    assert v, v.detail
    torch._dynamo.reset()


def test_unsupported_call_target_falls_back_with_reason(real_coil):
    # An FX call the exporter cannot express (here Python's operator.mul on tensors, which
    # AOTAutograd never emits but a hand-made graph can) runs that graph eagerly and reports
    # the reason in non-strict mode, and raises it in strict mode; it never escapes otherwise.
    import operator

    import coil
    from coil.backend import compile_aten_graph
    from coil.options import build_options
    from torch._subclasses.fake_tensor import FakeTensorMode

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    y = graph.call_function(operator.mul, (x, x))
    graph.output((y,))
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(torch.randn(3, 4))
        x.meta["val"], y.meta["val"] = fake, fake * fake
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    t = torch.randn(3, 4)
    coil.reset_report()
    fn = compile_aten_graph(gm, [t], build_options({"strict": False}))
    (out,) = fn([t])
    torch.testing.assert_close(out, t * t)
    reasons = [r for _, r in coil.report().graphs_fallen_back]
    assert any("unsupported call target mul" in r for r in reasons), reasons
    with pytest.raises(Exception, match="unsupported call target mul"):
        compile_aten_graph(gm, [t], build_options({"strict": True}))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_explicit_low_precision_conversion_rounds_when_fused(real_coil, dtype):
    # Seed 5107: `x.to(f16) == x` was True everywhere: the conversion, fused into its float32
    # consumer, was never rounded. Exact comparison: the booleans must equal eager's.
    torch._dynamo.reset()
    x = torch.randn(64, 33)
    fn = lambda a: (a.to(dtype) == a, a.to(dtype).float() * 3 - a)  # noqa: E731
    got = torch.compile(fn, backend="coil", fullgraph=True, options={"strict": True})(x)
    want = fn(x)
    assert not want[0].all()  # the test means something: most values do not survive rounding
    assert torch.equal(got[0], want[0])
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=0)
    torch._dynamo.reset()


def test_bf16_batch_norm_training_normalizes_with_its_saved_statistics(real_coil):
    # Found with seed 5107's fix: once conversions round, PyTorch's batch norm decomposition
    # (normalizing with float32 statistics, saving them rounded to bf16) left ResNet's bf16
    # backward 10x eager's error. Eager's CPU kernel normalizes with the rounded statistics;
    # coil's decomposition (decomp_batch_norm.py) does too. A mean far from 0 (bf16 ulp 0.125
    # at 20) makes the difference visible; with the reference decomposition 2 of these 8
    # inputs missed the accuracy rule (loss 0.6 from float64 against eager's 0.05).
    import torch.nn.functional as F

    def fn(x, w, b, cot):
        rm, rv = torch.zeros(8, dtype=x.dtype), torch.ones(8, dtype=x.dtype)
        return (F.batch_norm(x, rm, rv, w, b, training=True) * cot).sum()

    torch._dynamo.reset()
    cf = torch.compile(fn, backend="coil", fullgraph=True, options={"strict": True})
    for seed in range(8):
        g = torch.Generator().manual_seed(seed)
        x = torch.randn(2, 8, 2, 2, generator=g) * 0.5 + 20
        w, b = torch.randn(8, generator=g), torch.randn(8, generator=g)
        cot = torch.randn(2, 8, 2, 2, generator=g)
        runs = []
        for f, dt in ((cf, torch.bfloat16), (fn, torch.bfloat16), (fn, torch.float64)):
            args = [t.to(dt).requires_grad_() for t in (x, w, b)]
            y = f(*args, cot.to(dt))
            runs.append([y, *torch.autograd.grad(y, args)])
        v = compare(*runs)
        assert v, f"seed {seed}: {v.detail}"
    torch._dynamo.reset()


@pytest.mark.parametrize("dynamic", [True, False])
def test_reshape_of_strided_input_to_literal_sizes(real_coil, dynamic):
    # Seed 3143 (dynamic): `x.reshape(4, 153)` of a strided input of sizes (4, s0, s1) (every
    # other row of a larger tensor) holds under Dynamo's guard s0*s1 == 153, which does not
    # reach coil. The graph said view(x, [4, 153]) with an output of sizes [4, s0*s1]: the
    # view meta could neither match 153 with s0*s1 nor find the view's strides, and graph
    # verification refused it. The exporter now writes the output's symbolic sizes
    # (fx_export.py: _reshape_sizes).
    def f(x, i, s):
        v = x.reshape((4, 153))
        return (torch.amax(v, (0, 1)), torch.log_softmax(v.index_add(1, i, s), 1))

    torch._dynamo.reset()
    cf = torch.compile(f, backend="coil", fullgraph=True, dynamic=dynamic,
                       options={"strict": True})
    i, s = torch.tensor([3, 150, 3, 0]), torch.randn(4, 4)
    for rows, cols in ((17, 9), (9, 17)):  # both satisfy the guard: one dynamic graph
        x = torch.randn(8, rows, cols)[::2]
        v = compare(cf(x, i, s), f(x, i, s))
        assert v, f"{(rows, cols)}: {v.detail}"
    torch._dynamo.reset()


@pytest.mark.parametrize("dynamic", [True, False])
def test_reshape_of_expanded_input_and_cat_backward(real_coil, dynamic):
    # Seed 4523 (dynamic): the same with an expanded input reshaped to (2, 3, 3, 24) (sizes
    # s0*s1 where the program says 24). Once it compiled, the backward of the cat along a
    # symbolic dim slices its gradient at `s2 + 3`: the slice lowering took only integer
    # bounds (lower/view.cpp: clamp_bound_arg takes symbolic ones).
    def f(x2, x3, x4, x5):
        v3 = x2.expand((2, -1, -1, -1, -1)).reshape((2, 3, 3, 24)).unsqueeze(-1)
        return (v3 * x4, torch.erf(torch.cat([x2 + x3, x5], 1)))

    def views(x2):  # the integer outputs (no gradient)
        v3 = x2.expand((2, -1, -1, -1, -1)).reshape((2, 3, 3, 24)).unsqueeze(-1)
        return (v3.squeeze(0), v3 * 2)

    g = torch.Generator().manual_seed(4523)
    x2 = torch.randint(-100, 100, (3, 3, 2, 12), generator=g)
    x3 = torch.randint(-100, 100, (2, 12), generator=g)
    x4 = torch.randn((), generator=g)
    x5 = torch.randn(3, 5, 4, 12, generator=g)[:, :, ::2]
    check(f, x2, x3, x4, x5, dynamic=dynamic, grad=True)
    check(views, x2, dynamic=dynamic)


def test_scalar_overload_with_a_symbolic_float_keeps_the_tensor_dtype(real_coil):
    # Seed 5634: var's backward under dynamic=True multiplies by 1 / (n - 1), a SymFloat that
    # reaches coil as an f64[] input in mul.Scalar's `other` slot. It promoted as a 0-d f64
    # tensor (result f64, PyTorch's meta says f32) and strict mode refused the graph.
    check(lambda x: (torch.var(x, 0, correction=1),), torch.randn(17), dynamic=True, grad=True)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.int64])
def test_pow_scalar_base_promotes_with_the_exponent_tensor(real_coil, dtype):
    # pow.Scalar(Scalar self, Tensor exponent): the scalar slot is the base (position 0), not
    # position 1 as in mul.Scalar; fuzz seeds 6500:7300 caught the exponent promoted as a
    # number (f16 ** -> f32).
    e = torch.arange(1, 7).to(dtype).reshape(2, 3)
    check(lambda t: (torch.pow(2.5, t), torch.pow(2, t)), e)
    check(lambda t: (torch.pow(1.5, t),), torch.randn(5, 4).to(dtype) if dtype.is_floating_point
          else e, dynamic=True)


@pytest.mark.parametrize("dynamic", [False, True])
def test_variance_of_equal_values_is_exactly_zero(real_coil, dynamic):
    # Seeds 5204 and 6528: GroupNorm over an expanded input has groups of 64 equal floats. Their
    # mean came out one ulp off, the variance ~1e-15 where eager's Welford update gives exactly
    # 0, and a logical_or on the result flipped booleans. The variance is now computed on data
    # shifted by each row's first element (src/lower/reduction.cpp: var_and_mean).
    scale = torch.tensor([1.0, 3.3, -7.1])[:, None, None]
    x = torch.full((3, 1, 1), 0.1).expand(3, 8, 8).contiguous() * scale

    def fn(t):
        v, m = torch.var_mean(t, dim=(1, 2), correction=0)
        return v, m, v != 0, torch.std(t, dim=-1) > 0

    check(fn, x, dynamic=dynamic)
    v, m, nz, pos = torch.compile(fn, backend="coil", dynamic=dynamic,
                                  options={"strict": True})(x)
    assert torch.equal(v, torch.zeros(3)) and not nz.any() and not pos.any()
    assert torch.equal(m, x[:, 0, 0])
    # GroupNorm, as in the seed: equal values within each group, a boolean of the output
    # (static: with a symbolic channel count, channels / groups is the open case of seed 6552).
    if not dynamic:
        g = torch.randn(2, 4, 1, 1).expand(2, 4, 4, 4)
        check(lambda t: (torch.nn.functional.group_norm(t, 2) != 0,), g)


@pytest.mark.parametrize("dynamic", [False, True])
def test_scalar_first_remainder_and_bitwise(real_coil, dynamic):
    # Seeds 6030, 6092, 7018, 7081: `scalar % tensor` is aten.remainder.Scalar_Tensor (the
    # scalar in slot 0), which had no lowering (strict mode refused; it ran eagerly).
    x = torch.randn(5, 7) * 4
    xi = torch.randint(-9, 9, (5, 7))
    check(lambda a: (torch.remainder(3.5, a), 7 % a), x, dynamic=dynamic)
    check(lambda a: (7 % a.clamp(min=1), torch.remainder(-5, a.clamp(min=1))), xi,
          dynamic=dynamic)
    check(lambda a: (torch.bitwise_and(6, a), torch.bitwise_or(3, a), torch.bitwise_xor(5, a)),
          xi, dynamic=dynamic)
    check(lambda a: (torch.remainder(2.5, a),), x.to(torch.bfloat16), dynamic=dynamic)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_scalar_operands_round_when_inlined(real_coil, dtype):
    # Seed 8081: flip(clamp(x, max=0.3)) > clamp(x, max=0.3) is False everywhere in eager (both
    # hold bf16(0.3)), but coil compared the stored, rounded copy with the clamp inlined in f32
    # at the unrounded 0.3. Scalars meet a bf16/f16 tensor rounded to its dtype: clamp's bounds,
    # masked_fill's value (a scalar_tensor), where's scalar operands.
    x = torch.tensor([0.5, 0.7, 0.9, 0.4], dtype=dtype)
    m = torch.ones(4, dtype=torch.bool)

    def same(v):  # a stored copy of v against v inlined: equal in eager
        return v.flip(0), v.flip(0) != v

    check(lambda x: same(x.clamp(max=0.3)), x)
    check(lambda x: same(x.clamp(min=torch.tensor(2.3))), x)  # an f32 0-d bound
    check(lambda x: same(torch.clamp_min(-x, -0.3)), x)
    check(lambda x, m: same(x.masked_fill(m, 0.3)), x, m)
    check(lambda x, m: same(torch.where(m, 0.3, x)), x, m)
    check(lambda x: same(torch.full_like(x, 0.3)), x)


def test_lerp_result_in_eager_layout_is_a_strided_copy(real_coil):
    # Seeds 8004, 8496, 8959, 9093, 9556: PyTorch's lerp decomposition ends with
    # prims.copy_strided (its result in eager's layout), which had no lowering: strict mode
    # refused the graph (it ran eagerly).
    x0 = torch.randn(24, 4)[::2]  # strided
    x1 = torch.randn(3, 4, 2, 4).permute(2, 1, 0, 3)  # another layout than the result's

    def fn(a, b):
        v = torch.nn.functional.gelu(a.expand(2, 12, 4)).view(2, 4, 3, 4)
        return v, torch.lerp(v, b, 0.3), torch.lerp(b, v, torch.full_like(b, 0.7))

    check(fn, x0, x1)


@pytest.mark.parametrize("shape,offset,dim1,dim2", [
    ((4, 6), 2, 0, 1), ((6, 4), -3, 0, 1), ((3, 5, 4), -1, 2, 0), ((2, 3, 4, 5), 1, 1, 3)])
def test_diagonal_scatter_and_diagonal_backward(real_coil, shape, offset, dim1, dim2):
    # Seeds 8169, 8599, 9274, 9287, 9807: diagonal's backward is diagonal_scatter, whose
    # reference decomposition (a strided clone written through a view) had no lowering: strict
    # mode refused the graph.
    x = torch.randn(shape)
    src = torch.randn(torch.diagonal(x, offset, dim1, dim2).shape)
    check(lambda x, s: (torch.diagonal_scatter(x, s, offset, dim1, dim2) * 2,), x, src)
    check(lambda x: (torch.diagonal(x * 3, offset, dim1, dim2).sin(),), x, grad=True)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_digamma(real_coil, device, dtype):
    # 16 of the 3000 seeds 7300:10300 ran digamma eagerly (no lowering). coil computes it as
    # PyTorch's CPU kernel does: reflection below 0, the recurrence up to 10, the asymptotic
    # series; poles (0, negative integers), infinities and NaN as eager gives them.
    x = torch.tensor([0.0, -0.0, -1.0, -2.5, -0.3, -1e-5, 1e-3, 0.5, 1.0, 3.7, 10.0, 10.5,
                      123.4, 1e18, float("inf"), float("-inf"), float("nan")], dtype=dtype)
    y = torch.randn(64, 33, dtype=dtype) * 5
    check(lambda x, y: (torch.digamma(x), torch.special.digamma(y * 2) + 1), x.to(device),
          y.to(device))



@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
def test_polygamma_and_digamma_backward(real_coil, device, dtype):
    # digamma's backward is polygamma(1, x), which ran eagerly (per-op fallback). Orders 0 and
    # 1 are lowered as PyTorch computes them (trigamma: reflection below 1/2, six recurrence
    # steps, the asymptotic series), poles and infinities included.
    x = torch.tensor([-2.5, -0.3, -1e-5, 1e-3, 0.25, 0.5, 0.7, 1.0, 3.7, 10.0, 123.4, 1e6,
                      float("inf"), float("-inf"), float("nan"), 0.0, -1.0], dtype=dtype)
    check(lambda x: (torch.polygamma(1, x), torch.special.polygamma(0, x) * 2), x.to(device))
    y = (torch.rand(6, 7, dtype=dtype) * 4 + 0.1).to(device)
    check(lambda y: (torch.digamma(y).sin(),), y, grad=True)


def test_polygamma_of_higher_order_runs_eagerly_with_its_reason(real_coil):
    import coil

    x = torch.rand(9) + 0.5
    f = torch.compile(lambda x: torch.polygamma(2, x) + 1, backend="coil")
    torch.testing.assert_close(f(x), torch.polygamma(2, x) + 1)
    assert any(op.startswith("aten.polygamma.default") and "order 2 is not lowered" in op
               for op in coil.report().fallback_ops)
    torch._dynamo.reset()

def test_dynamic_views_through_a_divisible_size(real_coil):
    # Seeds 11803, 12029: group_norm views a dynamic channel dim s0 as [groups, s0 // groups]
    # and back. Dynamo's ShapeEnv knows s0 % groups == 0 and guards it; coil did not, so the
    # view back to [s0] (declared [3 * (s0 // 3)]) failed verification and strict mode refused
    # the graph. The divisibility now reaches coil with the symbol's range (`s0:2::3`).
    check(lambda x: (torch.nn.functional.group_norm(x, 3),), torch.randn(1, 9, 1),
          dynamic=True, grad=True)
    check(lambda x: (torch.nn.functional.group_norm(x.mean(-2), 3) * 2,),
          torch.randn(1, 16, 6), dynamic=True, grad=True)
    # A later call with another multiple reuses the graph; the sizes bind per call.
    torch._dynamo.reset()
    f = torch.compile(lambda x: torch.nn.functional.group_norm(x, 4).sum(-1), backend="coil",
                      fullgraph=True, dynamic=True, options={"strict": True})
    for c in (8, 12, 20):
        x = torch.randn(2, c, 5)
        torch.testing.assert_close(f(x), torch.nn.functional.group_norm(x, 4).sum(-1))
    torch._dynamo.reset()


def test_symbol_multiple_is_exported_and_checked(real_coil):
    # The export passes ShapeEnv's divisibility with the range; a size that is no multiple
    # reaching the compiled graph is refused with the reason, not read through a wrong view.
    import coil
    from coil.sym_bind import SymBinder

    b = SymBinder(sources={}, carriers=[], hints={}, ranges={"s0": (2, None), "s1": (3, 64)},
                  multiples={"s0": 3})
    assert b.ranges_text() == "s0:2::3;s1:3:64"
    g = coil._coil.compile("graph(%0: f32[s0]):\n  %1: f32[s0] = aten.mul.Tensor(%0, 2.0)\n"
                           "  return (%1)\n", {"symbol_ranges": "s0:2::3"})
    out = g.run([torch.ones(6)])[0]
    assert torch.equal(out, torch.full((6,), 2.0))
    with pytest.raises(coil._coil.InputMismatchError, match="not a multiple of 3"):
        g.run([torch.ones(7)])


def test_true_divide_and_empty_permuted(real_coil):
    # Seed 12029: true_divide (div's alias) reached coil without a lowering. Seed 11110:
    # empty_permuted (what empty_like of a permuted tensor decomposes to) had none either.
    check(lambda x, y: (torch.true_divide(x, y), torch.true_divide(x, 3)), torch.randn(4, 5),
          torch.rand(4, 5) + 0.5)
    check(lambda x: (torch.empty_permuted((2, 3, 4), (2, 0, 1)).fill_(1.5) * x,),
          torch.randn(2, 3, 4))
    check(lambda x: (torch.ops.aten.empty_permuted((2, 3, 4), (1, 2, 0)).stride(),
                     torch.zeros_like(x.permute(2, 0, 1)) + 1,), torch.randn(2, 3, 4))
