"""Convolutions on the GPU through cuDNN called from C++ (src/backend/cuda/cudnn.cpp).

Each case compiles a graph holding one aten.convolution (or convolution_backward), checks the
program runs it on the library (no host round trip through ATen) and compares the result with
eager PyTorch: 1-d and 2-d, strides, padding, dilation, groups, contiguous and channels-last
layouts, float32 (TF32 off on both sides), bfloat16 and float16. A convolution with a bias (or
asked for the bias gradient) stays on the host and must still be right.
"""

from __future__ import annotations

import pytest
import torch

C = pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")

pytestmark = pytest.mark.gpu

_DT = {torch.float32: "f32", torch.bfloat16: "bf16", torch.float16: "f16"}
TOL = {
    torch.float32: dict(rtol=1e-4, atol=1e-4),
    torch.bfloat16: dict(rtol=3e-2, atol=3e-2),
    torch.float16: dict(rtol=5e-3, atol=5e-3),
}

# name: (input sizes, weight sizes, stride, padding, dilation, groups, channels_last)
CASES = {
    "3x3_channels_last": ((8, 32, 20, 20), (64, 32, 3, 3), 1, 1, 1, 1, True),
    "1x1_stride2": ((4, 64, 14, 14), (32, 64, 1, 1), 2, 0, 1, 1, False),
    "stem_7x7_three_channels": ((4, 3, 32, 32), (16, 3, 7, 7), 2, 3, 1, 1, True),
    "grouped_dilated": ((2, 16, 17, 15), (24, 4, 3, 3), 1, 2, 2, 4, False),
    "conv1d": ((4, 8, 50), (16, 8, 5), 1, 2, 1, 1, False),
}


def _need_gpu():
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")
    import coil.cuda as cc

    why = cc.unavailable_reason(C, cc.compile_options())
    if why:
        pytest.skip(why)
    return cc


def _ty(t: torch.Tensor) -> str:
    sizes = ", ".join(map(str, t.shape))
    strides = ", ".join(map(str, t.stride()))
    return f"{_DT[t.dtype]}[{sizes}]{{{strides}}}@cuda"


def _lists(nd, stride, padding, dilation):
    def rep(v):
        return "[" + ", ".join([str(v)] * nd) + "]"

    return f"{rep(stride)}, {rep(padding)}, {rep(dilation)}, false, {rep(0)}"


def _make(case, dtype):
    xs, ws, stride, padding, dilation, groups, cl = CASES[case]
    g = torch.Generator(device="cuda").manual_seed(0)
    fan_in = ws[1] * int(torch.tensor(ws[2:]).prod())
    x = torch.randn(xs, generator=g, device="cuda").to(dtype)
    w = (torch.randn(ws, generator=g, device="cuda") / fan_in**0.5).to(dtype)
    if cl and x.dim() == 4:
        x = x.contiguous(memory_format=torch.channels_last)
        w = w.contiguous(memory_format=torch.channels_last)
    return x, w, stride, padding, dilation, groups


def _reference_conv(x, w, stride, padding, dilation, groups, bias=None):
    nd = x.dim() - 2
    with torch.backends.cudnn.flags(allow_tf32=False):
        return torch.ops.aten.convolution.default(x, w, bias, [stride] * nd, [padding] * nd,
                                                  [dilation] * nd, False, [0] * nd, groups)


def _compile(cc, text):
    g = C.compile(text, {"cache_dir": "", **cc.compile_options(), "cuda_conv_allow_tf32": False},
                  None)
    return g


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("case", sorted(CASES))
def test_convolution_forward_on_cudnn(case, dtype):
    cc = _need_gpu()
    x, w, stride, padding, dilation, groups = _make(case, dtype)
    want = _reference_conv(x, w, stride, padding, dilation, groups)
    nd = x.dim() - 2
    text = (f"graph(%0: {_ty(x)}, %1: {_ty(w)}):\n"
            f"  %2: {_ty(want)} = aten.convolution.default(%0, %1, None, "
            f"{_lists(nd, stride, padding, dilation)}, {groups})\n"
            f"  return (%2)\n")
    g = _compile(cc, text)
    assert "extern convolution aten.convolution.default (library)" in g.describe(), g.describe()
    (got,) = g.run([x, w], **cc.run_kwargs())
    assert got.stride() == want.stride()
    torch.testing.assert_close(got, want, **TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", sorted(CASES))
def test_convolution_backward_on_cudnn(case, dtype):
    cc = _need_gpu()
    x, w, stride, padding, dilation, groups = _make(case, dtype)
    y = _reference_conv(x, w, stride, padding, dilation, groups)
    dy = torch.randn(y.shape, device="cuda").to(dtype).contiguous(
        memory_format=torch.channels_last if y.is_contiguous(
            memory_format=torch.channels_last) and y.dim() == 4 else torch.contiguous_format)
    nd = x.dim() - 2
    with torch.backends.cudnn.flags(allow_tf32=False):
        dx, dw, _ = torch.ops.aten.convolution_backward.default(
            dy, x, w, [0], [stride] * nd, [padding] * nd, [dilation] * nd, False, [0] * nd,
            groups, [True, True, False])
    text = (f"graph(%0: {_ty(dy)}, %1: {_ty(x)}, %2: {_ty(w)}):\n"
            f"  %3: {_ty(dx)}, %4: {_ty(dw)} = aten.convolution_backward.default(%0, %1, %2, [0], "
            f"{_lists(nd, stride, padding, dilation)}, {groups}, [true, true, false])\n"
            f"  return (%3, %4)\n")
    g = _compile(cc, text)
    assert "aten.convolution_backward.default (library)" in g.describe(), g.describe()
    got_dx, got_dw = g.run([dy, x, w], **cc.run_kwargs())
    if dtype == torch.float32:
        torch.testing.assert_close(got_dx, dx, **TOL[dtype])
        torch.testing.assert_close(got_dw, dw, rtol=1e-3, atol=1e-3)
        return
    # bfloat16: the weight gradient sums thousands of products and two engines round it
    # differently; each gradient must be as close to the float32 result as eager's is.
    with torch.backends.cudnn.flags(allow_tf32=False):
        dx32, dw32, _ = torch.ops.aten.convolution_backward.default(
            dy.float(), x.float(), w.float(), [0], [stride] * nd, [padding] * nd,
            [dilation] * nd, False, [0] * nd, groups, [True, True, False])
    for name, got, eager, exact in (("dx", got_dx, dx, dx32), ("dw", got_dw, dw, dw32)):
        err = (got.float() - exact).abs().max().item()
        eager_err = (eager.float() - exact).abs().max().item()
        scale = exact.abs().max().item()
        assert err <= 2 * eager_err + 1e-2 * scale, (name, err, eager_err, scale)


@pytest.mark.parametrize("channels_last", [False, True])
def test_small_cnn_training_step_matches_eager(channels_last):
    """Through torch.compile: convolutions with a bias (host: ATen) and without one (cuDNN from
    C++), forward and backward, against eager with TF32 off on both sides."""
    _need_gpu()
    import coil

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, stride=2, padding=1, bias=False), torch.nn.BatchNorm2d(32),
        torch.nn.ReLU(), torch.nn.Conv2d(32, 8, 1, bias=False)).cuda()
    x = torch.randn(4, 3, 16, 16, device="cuda")
    if channels_last:
        model = model.to(memory_format=torch.channels_last)
        x = x.contiguous(memory_format=torch.channels_last)
    ref = [p.detach().clone().requires_grad_() for p in model.parameters()]
    with torch.backends.cudnn.flags(allow_tf32=False):
        torch._dynamo.reset()
        coil.reset_report()
        compiled = torch.compile(model, backend="coil", options={"strict": True})
        out = compiled(x)
        out.square().sum().backward()
        rep = coil.report()
        assert rep.graphs_compiled >= 2 and not rep.graphs_fallen_back, str(rep)
        got = [p.grad.clone() for p in model.parameters()]
        for p in model.parameters():
            p.grad = None
        model.train()
        want_out = torch.func.functional_call(
            model, dict(zip([n for n, _ in model.named_parameters()], ref)), (x,))
        want_out.square().sum().backward()
    torch.testing.assert_close(out, want_out, rtol=1e-4, atol=1e-4)
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r.grad, rtol=1e-3, atol=1e-3)


# Depthwise convolutions (groups = channels) as generated loops on the GPU, forward and
# backward (src/lower/conv_native.cpp; option cuda_native_depthwise, off by default since
# cuDNN's engine choice is measured: docs/decisions.md). name: (input, weight, stride, padding, cl)
DEPTHWISE = {
    "3x3_channels_last": ((4, 32, 14, 14), (32, 1, 3, 3), 1, 1, True),
    "3x3_stride2_nchw": ((2, 24, 15, 15), (24, 1, 3, 3), 2, 1, False),
    "5x5_multiplier2_channels_last": ((2, 16, 12, 12), (32, 1, 5, 5), 1, 2, True),
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("case", sorted(DEPTHWISE))
def test_depthwise_convolution_is_generated(case, dtype):
    cc = _need_gpu()
    xs, ws, stride, padding, cl = DEPTHWISE[case]
    torch.manual_seed(0)
    x = torch.randn(xs, device="cuda").to(dtype)
    if cl:
        x = x.contiguous(memory_format=torch.channels_last)
    w = torch.randn(ws, device="cuda").to(dtype)
    groups = xs[1]
    with torch.backends.cudnn.flags(allow_tf32=False):
        want = _reference_conv(x, w, stride, padding, 1, groups)
        dy = torch.randn(want.shape, device="cuda").to(dtype).contiguous(
            memory_format=torch.channels_last if cl else torch.contiguous_format)
        dx, dw, _ = torch.ops.aten.convolution_backward.default(
            dy, x, w, [0], [stride] * 2, [padding] * 2, [1] * 2, False, [0] * 2, groups,
            [True, True, False])
    text = (f"graph(%0: {_ty(x)}, %1: {_ty(w)}, %2: {_ty(dy)}):\n"
            f"  %3: {_ty(want)} = aten.convolution.default(%0, %1, None, "
            f"{_lists(2, stride, padding, 1)}, {groups})\n"
            f"  %4: {_ty(dx)}, %5: {_ty(dw)} = aten.convolution_backward.default(%2, %0, %1, "
            f"[0], {_lists(2, stride, padding, 1)}, {groups}, [true, true, false])\n"
            f"  return (%3, %4, %5)\n")
    g = C.compile(text, {"cache_dir": "", **cc.compile_options(), "cuda_conv_allow_tf32": False,
                         "cuda_native_depthwise": True}, None)
    assert "convolution" not in g.describe(), g.describe()
    got, got_dx, got_dw = g.run([x, w, dy], **cc.run_kwargs())
    tol = TOL[dtype] if dtype == torch.float32 else dict(rtol=5e-2, atol=5e-2)
    torch.testing.assert_close(got, want, **tol)
    torch.testing.assert_close(got_dx, dx, **tol)
    # The weight gradient sums N*H*W products: compared relative to its scale.
    scale = dw.float().abs().max().item()
    assert (got_dw.float() - dw.float()).abs().max().item() <= 2e-2 * scale
    # With the option off (the default) they go to cuDNN.
    off = C.compile(text, {"cache_dir": "", **cc.compile_options(),
                           "cuda_conv_allow_tf32": False, "cuda_native_depthwise": False}, None)
    assert "extern convolution aten.convolution.default" in off.describe(), off.describe()
    got, got_dx, got_dw = off.run([x, w, dy], **cc.run_kwargs())
    torch.testing.assert_close(got, want, **tol)
    torch.testing.assert_close(got_dx, dx, **tol)
    assert (got_dw.float() - dw.float()).abs().max().item() <= 2e-2 * scale


def _choices_since(n):
    return C.cudnn_engine_choices()[n:]


@pytest.mark.parametrize("measure", [True, False])
def test_cudnn_engines_measured_on_first_call(measure):
    """cuda_conv_measure times the heuristics' first engines once per problem and keeps the
    fastest; the weight's size-1 dim gets the input's layout (a depthwise [C, 1, 3, 3] weight of
    NCHW strides next to an NHWC input)."""
    cc = _need_gpu()
    torch.manual_seed(0)
    # A channel count no other test uses: this problem is new to the process's plan cache.
    x = torch.randn(4, 40, 28, 28, device="cuda").to(torch.bfloat16).contiguous(
        memory_format=torch.channels_last)
    w = torch.randn(40, 1, 3, 3, device="cuda").to(torch.bfloat16)  # NCHW strides (9, 9, 3, 1)
    want = _reference_conv(x, w, 1, 1, 1, 40)
    text = (f"graph(%0: {_ty(x)}, %1: {_ty(w)}):\n"
            f"  %2: {_ty(want)} = aten.convolution.default(%0, %1, None, "
            f"{_lists(2, 1, 1, 1)}, 40)\n"
            f"  return (%2)\n")
    opts = {"cache_dir": "", **cc.compile_options(), "cuda_native_depthwise": False,
            "cuda_conv_measure": measure}
    g = C.compile(text, opts, None)
    assert "extern convolution aten.convolution.default (library)" in g.describe(), g.describe()
    before = len(C.cudnn_engine_choices())
    for _ in range(3):  # measured on the first call only
        (got,) = g.run([x, w], **cc.run_kwargs())
        torch.testing.assert_close(got, want, **TOL[torch.bfloat16])
    new = [c for c in _choices_since(before) if "x[4, 40, 28, 28]" in c["problem"]]
    if not measure:
        assert new == []
        return
    assert len(new) == 1, new
    c = new[0]
    assert "w[40, 1, 3, 3]s[9, 1, 3, 1]" in c["problem"], c["problem"]
    if len(c["engines"]) == 1:  # nothing to time
        assert c["ms"] == [] and c["chosen"] == 0, c
        return
    assert len(c["engines"]) == len(c["ms"]), c
    ran = [(ms, i) for i, ms in enumerate(c["ms"]) if ms >= 0]
    assert ran and c["chosen"] == min(ran)[1], c


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_bias_is_added_by_coil_and_the_convolution_stays_on_cudnn(dtype):
    """cuDNN through coil takes no bias: the lowering adds it pointwise after the convolution
    and reduces grad_output for its gradient, so neither goes to the host."""
    cc = _need_gpu()
    x, w, stride, padding, dilation, groups = _make("3x3_channels_last", dtype)
    b = torch.randn(w.shape[0], device="cuda").to(dtype)
    want = _reference_conv(x, w, stride, padding, dilation, groups, bias=b)
    dy = torch.randn(want.shape, device="cuda").to(dtype).contiguous(
        memory_format=torch.channels_last)
    with torch.backends.cudnn.flags(allow_tf32=False):
        dx, dw, db = torch.ops.aten.convolution_backward.default(
            dy, x, w, [b.shape[0]], [stride] * 2, [padding] * 2, [dilation] * 2, False, [0] * 2,
            groups, [True, True, True])
    lists = _lists(2, stride, padding, dilation)
    text = (f"graph(%0: {_ty(x)}, %1: {_ty(w)}, %2: {_ty(b)}, %3: {_ty(dy)}):\n"
            f"  %4: {_ty(want)} = aten.convolution.default(%0, %1, %2, {lists}, {groups})\n"
            f"  %5: {_ty(dx)}, %6: {_ty(dw)}, %7: {_ty(db)} = aten.convolution_backward.default("
            f"%3, %0, %1, [{b.shape[0]}], {lists}, {groups}, [true, true, true])\n"
            f"  return (%4, %5, %6, %7)\n")
    g = _compile(cc, text)
    d = g.describe()
    assert "aten.convolution.default (library)" in d, d
    assert "aten.convolution_backward.default (library)" in d, d
    got, got_dx, got_dw, got_db = g.run([x, w, b, dy], **cc.run_kwargs())
    tol = TOL[dtype] if dtype == torch.float32 else dict(rtol=5e-2, atol=5e-2)
    torch.testing.assert_close(got, want, **tol)
    torch.testing.assert_close(got_dx, dx, **tol)
    for got_t, t in ((got_dw, dw), (got_db, db)):  # sums of many products: relative to scale
        scale = t.float().abs().max().item()
        assert (got_t.float() - t.float()).abs().max().item() <= 2e-2 * scale
