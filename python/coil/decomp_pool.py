"""avg_pool3d (and its backward) as two avg_pool2d passes, which coil lowers; avg_pool2d with a
window too large for coil's unrolled lowering as an H and a W pass.

Average pooling is separable: a 3-d window's sum is the sum over depth of the (height, width)
window sums, and the divisor PyTorch uses is the product of per-dim counts (the window clipped
to the padded input with count_include_pad, to the input without), so pooling (H, W) with
avg_pool2d and then D with a (kd, 1) avg_pool2d divides by exactly that product. ceil_mode's
output sizes are per dim too. With divisor_override the first pass sums (override 1) and the
second divides by the override. The backward runs the two avg_pool2d_backward passes in reverse.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten

# src/lower/pool.cpp's kMaxUnrolledWindow: avg_pool2d windows with more taps are not lowered;
# they are pooled along H and then W instead (separable, as above).
MAX_TAPS = 25


def _pool2d(x, k, s, p, ceil_mode, count_include_pad, divisor_override):
    """avg_pool2d of a 4-d x, split into an H and a W pass when the window is too large."""
    if k[0] * k[1] <= MAX_TAPS:
        return aten.avg_pool2d.default(x, k, s, p, ceil_mode, count_include_pad,
                                       divisor_override)
    if k[0] > MAX_TAPS or k[1] > MAX_TAPS:
        return None
    y = aten.avg_pool2d.default(x, [k[0], 1], [s[0], 1], [p[0], 0], ceil_mode,
                                count_include_pad, 1 if divisor_override else None)
    return aten.avg_pool2d.default(y, [1, k[1]], [1, s[1]], [0, p[1]], ceil_mode,
                                   count_include_pad, divisor_override)


def avg_pool2d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    k = [kernel_size[0]] * 2 if len(kernel_size) == 1 else list(kernel_size)
    if k[0] * k[1] <= MAX_TAPS or x.dim() not in (3, 4) or not x.is_floating_point():
        return NotImplemented
    s = k if not stride else ([stride[0]] * 2 if len(stride) == 1 else list(stride))
    padding = [padding] if isinstance(padding, int) else padding
    p = [padding[0]] * 2 if len(padding) == 1 else list(padding)
    x4 = x if x.dim() == 4 else aten.unsqueeze.default(x, 0)
    y = _pool2d(x4, k, s, p, ceil_mode, count_include_pad, divisor_override)
    if y is None:
        return NotImplemented
    return y if x.dim() == 4 else aten.squeeze.dim(y, 0)


def _triple(v, default=None):
    if v is None or len(v) == 0:
        return default
    return [v[0]] * 3 if len(v) == 1 else list(v)


def _args(x, kernel_size, stride, padding):
    k = _triple(kernel_size)
    s = _triple(stride, k)
    p = _triple(padding, [0, 0, 0])
    nc = 1
    for n in x.shape[:-3]:
        nc *= n
    return k, s, p, list(x.shape[:-3]), nc


def avg_pool3d(x, kernel_size, stride=(), padding=0, ceil_mode=False, count_include_pad=True,
               divisor_override=None):
    if x.dim() not in (4, 5) or not x.is_floating_point():
        return NotImplemented
    padding = [padding] if isinstance(padding, int) else padding
    k, s, p, lead, nc = _args(x, kernel_size, stride, padding)
    D, H, W = x.shape[-3:]
    first = 1 if divisor_override else None
    y = _pool2d(aten.reshape.default(x, [nc, D, H, W]), k[1:], s[1:], p[1:], ceil_mode,
                count_include_pad, first)
    if y is None:
        return NotImplemented
    oh, ow = y.shape[-2:]
    y = aten.reshape.default(y, [nc, 1, D, oh * ow])
    y = aten.avg_pool2d.default(y, [k[0], 1], [s[0], 1], [p[0], 0], ceil_mode,
                                count_include_pad, divisor_override)
    od = y.shape[-2]
    return aten.reshape.default(y, lead + [od, oh, ow])


def avg_pool3d_backward(grad, x, kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override):
    if x.dim() not in (4, 5) or not x.is_floating_point():
        return NotImplemented
    k, s, p, lead, nc = _args(x, kernel_size, stride, padding)
    D, H, W = x.shape[-3:]
    od, oh, ow = grad.shape[-3:]
    first = 1 if divisor_override else None
    # The second pass's input only gives avg_pool2d_backward its shape.
    mid = aten.empty.memory_format([nc, 1, D, oh * ow], dtype=x.dtype, device=x.device)
    g = aten.avg_pool2d_backward.default(
        aten.reshape.default(grad, [nc, 1, od, oh * ow]), mid, [k[0], 1], [s[0], 1], [p[0], 0],
        ceil_mode, count_include_pad, divisor_override)
    g = aten.avg_pool2d_backward.default(
        aten.reshape.default(g, [nc, D, oh, ow]), aten.reshape.default(x, [nc, D, H, W]), k[1:],
        s[1:], p[1:], ceil_mode, count_include_pad, first)
    return aten.reshape.default(g, list(x.shape))


def pool_decompositions() -> dict:
    return {aten.avg_pool2d.default: avg_pool2d,
            aten.avg_pool3d.default: avg_pool3d,
            aten.avg_pool3d_backward.default: avg_pool3d_backward}
