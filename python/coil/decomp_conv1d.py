"""CPU 1-d convolutions as 2-d ones over a height of 1, which coil computes itself.

coil's CPU convolutions (src/lower/conv_native.cpp: 1x1 products, depthwise loops, small dense
ones as a product over gathered windows) are written for 4-d tensors; a 1-d convolution went to
ATen through the host callback, forward and backward, at a fixed cost of tens of microseconds a
call on top of oneDNN's. Viewing [N, C, L] as [N, C, 1, L] and the [O, C/g, K] weight as
[O, C/g, 1, K] (stride, padding and dilation 1, 0 and 1 along the new dim) gives the same
numbers; convolution_backward is viewed alike, so the backward is lowered the same way. Whisper's encoder (two conv1d over 80 and 128 channels, batch 2 x 128 frames) trained
in 4.6-4.8 ms a step against 5.3-7.5 through ATen on the 2-core CPU (docs/decisions.md).

GPU graphs keep their 1-d convolutions: cuDNN takes them as they are.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten


def _first(v, default: int) -> int:
    return v[0] if len(v) else default


def convolution(x, weight, bias, stride, padding, dilation, transposed, output_padding, groups):
    if (x.dim() != 3 or weight.dim() != 3 or transposed or x.device.type != "cpu"
            or not x.is_floating_point()):
        return NotImplemented
    y = aten.convolution.default(
        aten.unsqueeze.default(x, 2), aten.unsqueeze.default(weight, 2), bias,
        [1, _first(stride, 1)], [0, _first(padding, 0)], [1, _first(dilation, 1)], False,
        [0, _first(output_padding, 0)], groups)
    return aten.squeeze.dim(y, 2)


def convolution_backward(grad, x, weight, bias_sizes, stride, padding, dilation, transposed,
                         output_padding, groups, output_mask):
    # AOTAutograd differentiates the op before the decomposition above applies (autograd runs
    # above the tracer), so the backward of a 1-d convolution arrives 1-d too.
    if (x.dim() != 3 or weight.dim() != 3 or transposed or x.device.type != "cpu"
            or not x.is_floating_point()):
        return NotImplemented
    gi, gw, gb = aten.convolution_backward.default(
        aten.unsqueeze.default(grad, 2), aten.unsqueeze.default(x, 2),
        aten.unsqueeze.default(weight, 2), bias_sizes, [1, _first(stride, 1)],
        [0, _first(padding, 0)], [1, _first(dilation, 1)], False, [0, _first(output_padding, 0)],
        groups, output_mask)
    return (aten.squeeze.dim(gi, 2) if gi is not None else None,
            aten.squeeze.dim(gw, 2) if gw is not None else None, gb)


def conv1d_decompositions() -> dict:
    return {aten.convolution.default: convolution,
            aten.convolution_backward.default: convolution_backward}
