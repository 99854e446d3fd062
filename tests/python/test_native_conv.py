"""CPU convolutions coil computes itself (src/lower/conv_native.cpp): 1x1 convolutions become
matrix products on the input's memory, depthwise convolutions generated loops and small dense
ones a product over their gathered windows, so no
convolution goes back into Python; results match eager in both layouts, for inference and
for a training step (whose convolution_backward is lowered the same way)."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
import coil  # noqa: E402, F401

# (in, out, kernel, stride, padding, dilation, groups, bias, image size)
CASES = [
    (16, 24, 1, 1, 0, 1, 1, True, 8),     # pointwise
    (16, 24, 1, 2, 0, 1, 1, False, 9),    # strided pointwise (a downsampling shortcut)
    (16, 8, 1, 1, 0, 1, 1, True, 1),      # squeeze-excitation over one pixel
    (16, 16, 3, 1, 1, 1, 16, False, 8),   # depthwise 3x3
    (16, 16, 3, 2, 1, 1, 16, True, 9),    # depthwise, strided
    (16, 16, 5, 1, 2, 1, 16, True, 7),    # depthwise 5x5 (EfficientNet)
    (8, 8, 7, 1, 3, 1, 8, True, 10),      # depthwise 7x7 (ConvNeXt)
    (8, 16, 3, 1, 2, 2, 8, False, 9),     # depthwise, dilated, two outputs per channel
    (8, 12, 3, 1, 1, 1, 1, False, 8),     # small dense 3x3 (a product over gathered windows)
    (8, 12, 3, 2, 1, 1, 1, True, 9),      # small dense, strided
    (3, 8, 7, 2, 3, 1, 1, False, 16),     # a stem
    (6, 4, 3, 1, 2, 2, 1, True, 7),       # small dense, dilated
    (64, 96, 3, 1, 1, 1, 1, False, 3),    # few pixels, many channels: windows channel-major
]


def _schedules(tmp_path) -> str:
    return "\n".join(p.read_text() for p in tmp_path.glob("*/03_schedule.txt"))


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c)))
def test_inference_matches_eager_without_an_extern_convolution(tmp_path, case, channels_last):
    cin, cout, k, s, p, d, g, bias, hw = case
    torch.manual_seed(0)
    conv = nn.Conv2d(cin, cout, k, stride=s, padding=p, dilation=d, groups=g, bias=bias).eval()
    bn = nn.BatchNorm2d(cout).eval()
    with torch.no_grad():
        bn.running_mean.normal_()
        bn.running_var.uniform_(0.5, 2.0)

    def f(x):
        return F.silu(bn(conv(x)))

    x = torch.randn(2, cin, hw, hw)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    torch._dynamo.reset()
    compiled = torch.compile(f, backend="coil",
                             options={"strict": True, "debug_dir": str(tmp_path)})
    with torch.no_grad():
        got, want = compiled(x), f(x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert got.stride() == want.stride()
    assert "extern convolution" not in _schedules(tmp_path)


@pytest.mark.parametrize("case", [CASES[0], CASES[1], CASES[3], CASES[4], CASES[7], CASES[8],
                                  CASES[9], CASES[11], CASES[12]],
                         ids=lambda c: "x".join(map(str, c)))
def test_training_step_matches_eager(tmp_path, case):
    cin, cout, k, s, p, d, g, bias, hw = case
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(cin, cout, k, stride=s, padding=p, dilation=d, groups=g,
                                    bias=bias), nn.BatchNorm2d(cout), nn.ReLU())
    x = torch.randn(2, cin, hw, hw)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="coil",
                             options={"strict": True, "debug_dir": str(tmp_path)})
    compiled(x).square().mean().backward()
    # Neither the convolution nor its backward went back to ATen.
    assert "extern convolution" not in _schedules(tmp_path)
    grads = [q.grad for q in model.parameters()]
    for q in model.parameters():
        q.grad = None
    model(x).square().mean().backward()
    for got, q in zip(grads, model.parameters()):
        torch.testing.assert_close(got, q.grad, rtol=1e-4, atol=1e-5)


def test_option_off_keeps_the_extern(tmp_path):
    conv = nn.Conv2d(8, 8, 3, padding=1, groups=8).eval()
    x = torch.randn(1, 8, 6, 6)
    torch._dynamo.reset()
    compiled = torch.compile(conv, backend="coil",
                             options={"cpu_native_convolutions": False,
                                      "debug_dir": str(tmp_path)})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), conv(x))
    assert "extern convolution" in _schedules(tmp_path)


def test_large_dense_convolution_stays_an_extern(tmp_path):
    # 2 * 2048 pixels * 576 * 64 = 151 MFLOP: above kMaxGatheredConvFlops, oneDNN's direct
    # convolution is faster than the gathered product.
    conv = nn.Conv2d(64, 64, 3, padding=1, bias=False).eval()
    x = torch.randn(2, 64, 32, 32)
    torch._dynamo.reset()
    compiled = torch.compile(conv, backend="coil", options={"debug_dir": str(tmp_path)})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), conv(x), rtol=1e-4, atol=1e-4)
    assert "extern convolution" in _schedules(tmp_path)


def test_weight_bound_dense_convolution_is_a_product(tmp_path):
    # 2 * 18 pixels * 4608 * 512 = 85 MFLOP, but only 18 output pixels: the product streams the
    # weight once, where oneDNN also reorders it on every call.
    conv = nn.Conv2d(512, 512, 3, padding=1, bias=False).eval()
    x = torch.randn(2, 512, 3, 3).to(memory_format=torch.channels_last)
    torch._dynamo.reset()
    compiled = torch.compile(conv, backend="coil", options={"debug_dir": str(tmp_path)})
    with torch.no_grad():
        torch.testing.assert_close(compiled(x), conv(x), rtol=1e-4, atol=1e-4)
    assert "extern convolution" not in _schedules(tmp_path)


# (in, out, kernel, stride, padding, dilation, groups, bias, length): 1-d convolutions
# (decomp_conv1d.py views them as 2-d over a height of 1).
CASES_1D = [
    (80, 128, 3, 1, 1, 1, 1, True, 128),   # Whisper's first encoder convolution
    (128, 128, 3, 2, 1, 1, 1, True, 128),  # and its strided second
    (16, 16, 5, 1, 2, 1, 16, False, 33),   # depthwise (a ConvNet for audio, Conformer)
    (8, 4, 1, 1, 0, 1, 1, False, 7),       # pointwise
    (6, 4, 3, 1, 2, 2, 1, True, 19),       # dilated (a temporal ConvNet)
]


@pytest.mark.parametrize("case", CASES_1D, ids=lambda c: "x".join(map(str, c)))
def test_conv1d_training_step_matches_eager_without_an_extern_convolution(tmp_path, case):
    cin, cout, k, s, p, d, g, bias, length = case
    torch.manual_seed(0)
    conv = nn.Conv1d(cin, cout, k, stride=s, padding=p, dilation=d, groups=g, bias=bias)

    def f(x):
        return F.gelu(conv(x))

    x = torch.randn(2, cin, length)
    torch._dynamo.reset()
    compiled = torch.compile(f, backend="coil",
                             options={"strict": True, "debug_dir": str(tmp_path)})
    got = compiled(x)
    got.square().mean().backward()
    assert "extern convolution" not in _schedules(tmp_path)
    grads = [q.grad for q in conv.parameters()]
    for q in conv.parameters():
        q.grad = None
    want = f(x)
    want.square().mean().backward()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    assert got.shape == want.shape and got.stride() == want.stride()
    for a, q in zip(grads, conv.parameters()):
        torch.testing.assert_close(a, q.grad, rtol=1e-4, atol=1e-5)


def test_grouped_and_transposed_conv1d_still_match_eager():
    # Neither is computed by coil (grouped dense: no native lowering; transposed: not
    # decomposed): the 2-d view goes to ATen, the transposed convolution stays 1-d.
    torch.manual_seed(0)
    grouped = nn.Conv1d(8, 12, 3, padding=1, groups=2)
    up = nn.ConvTranspose1d(12, 4, 4, stride=2, padding=1)

    def f(x):
        return up(torch.relu(grouped(x)))

    x = torch.randn(2, 8, 21, requires_grad=True)
    torch._dynamo.reset()
    compiled = torch.compile(f, backend="coil")
    got = compiled(x)
    (gx,) = torch.autograd.grad(got.sum(), x)
    want = f(x)
    (wx,) = torch.autograd.grad(want.sum(), x)
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(gx, wx, rtol=1e-4, atol=1e-5)
