"""Training-mode batch norm on CPU in bf16/f16, normalized like the eager CPU kernel.

Eager's CPU kernel (all of input, weight, bias, running stats in bf16 or f16) stores the batch
mean and inverse std in the input's dtype and normalizes with those rounded statistics; its
backward reads the same rounded ones. PyTorch's reference decomposition
(torch._decomp: native_batch_norm_helper) saves the rounded statistics too, but normalizes with
the unrounded float32 ones, so its forward and backward disagree by a rounding of mean and
invstd. With 8 values a channel (ResNet's last stage at batch 2) the backward's projection no
longer cancels and the weight gradients came out 10x eager's error against float64. coil ran
that graph with the conversion to bf16 fused and (wrongly) unrounded, which hid it; rounding
explicit conversions as eager does (fuzz seed 5107) exposed it. So the forward here normalizes
with exactly the statistics it saves.

Everything else (float32, mixed dtypes such as bf16 input with float32 weight, where eager
keeps float32 statistics, CUDA, eval mode) goes to PyTorch's reference decompositions.
"""

from __future__ import annotations

import torch
from torch._decomp import get_decompositions

aten = torch.ops.aten
_LOW = (torch.bfloat16, torch.float16)


def _eager_cpu_low_precision(x, *params) -> bool:
    if x.device.type != "cpu" or x.dtype not in _LOW:
        return False
    return all(p is None or p.dtype == x.dtype for p in params)


def _train(x, weight, bias, running_mean, running_var, momentum, eps):
    """(output, save_mean, save_invstd, new_running_mean, new_running_var) of training mode;
    dtypes as the reference decomposition's (running stats come back in float32)."""
    red = [0] + list(range(2, x.dim()))
    xf = aten._to_copy.default(x, dtype=torch.float32)
    var, mean = aten.var_mean.correction(xf, red, correction=0, keepdim=True)
    rstd = aten.rsqrt.default(aten.add.Tensor(var, eps))
    # The statistics saved for the backward, rounded to the input's dtype ...
    save_mean = aten._to_copy.default(mean, dtype=x.dtype)
    save_rstd = aten._to_copy.default(rstd, dtype=x.dtype)
    # ... are the ones the output is normalized with.
    out = aten.mul.Tensor(
        aten.sub.Tensor(xf, aten._to_copy.default(save_mean, dtype=torch.float32)),
        aten._to_copy.default(save_rstd, dtype=torch.float32))
    shape = [1, -1] + [1] * (x.dim() - 2)
    if weight is not None:
        out = aten.mul.Tensor(out, aten.view.default(weight, shape))
    if bias is not None:
        out = aten.add.Tensor(out, aten.view.default(bias, shape))
    out = aten._to_copy.default(out, dtype=x.dtype)
    new_mean = new_var = None
    if running_mean is not None:
        new_mean = aten.add.Tensor(aten.mul.Tensor(aten.squeeze.dims(mean, red), momentum),
                                   aten.mul.Tensor(running_mean, 1 - momentum))
    if running_var is not None:
        n = x.numel() / x.shape[1]
        unbiased = aten.mul.Tensor(aten.squeeze.dims(var, red), n / (n - 1))
        new_var = aten.add.Tensor(aten.mul.Tensor(unbiased, momentum),
                                  aten.mul.Tensor(running_var, 1 - momentum))
    return (out, aten.squeeze.dims(save_mean, red), aten.squeeze.dims(save_rstd, red),
            new_mean, new_var)


def _reserve(x):
    # Batch norm's reserve space: empty on CPU (cuDNN's only).
    return aten.empty.memory_format([0], dtype=torch.uint8, device=x.device)


def batch_norm_decompositions() -> dict:
    ref = get_decompositions([
        aten._native_batch_norm_legit_functional.default,
        aten._native_batch_norm_legit.default,
        aten.native_batch_norm.default,
        aten._batch_norm_with_update.default,
        aten._batch_norm_with_update_functional.default,
    ])

    def legit_functional(x, w, b, rm, rv, training, momentum, eps):
        if not (training and _eager_cpu_low_precision(x, w, b, rm, rv)):
            return ref[aten._native_batch_norm_legit_functional.default](
                x, w, b, rm, rv, training, momentum, eps)
        return _train(x, w, b, rm, rv, momentum, eps)

    def legit(x, w, b, rm, rv, training, momentum, eps):
        if not (training and _eager_cpu_low_precision(x, w, b, rm, rv)):
            return ref[aten._native_batch_norm_legit.default](
                x, w, b, rm, rv, training, momentum, eps)
        out, sm, sr, nm, nv = _train(x, w, b, rm, rv, momentum, eps)
        rm.copy_(nm)
        rv.copy_(nv)
        return out, sm, sr

    def native(x, w, b, rm, rv, training, momentum, eps):
        if not (training and _eager_cpu_low_precision(x, w, b, rm, rv)):
            return ref[aten.native_batch_norm.default](x, w, b, rm, rv, training, momentum, eps)
        out, sm, sr, nm, nv = _train(x, w, b, rm, rv, momentum, eps)
        if rm is not None:
            rm.copy_(nm)
        if rv is not None:
            rv.copy_(nv)
        return out, sm, sr

    def with_update(x, w, b, rm, rv, momentum, eps):
        if not _eager_cpu_low_precision(x, w, b, rm, rv):
            return ref[aten._batch_norm_with_update.default](x, w, b, rm, rv, momentum, eps)
        out, sm, sr, nm, nv = _train(x, w, b, rm, rv, momentum, eps)
        rm.copy_(nm)
        rv.copy_(nv)
        return out, sm, sr, _reserve(x)

    def with_update_functional(x, w, b, rm, rv, momentum, eps):
        if not _eager_cpu_low_precision(x, w, b, rm, rv):
            return ref[aten._batch_norm_with_update_functional.default](
                x, w, b, rm, rv, momentum, eps)
        out, sm, sr, nm, nv = _train(x, w, b, rm, rv, momentum, eps)
        return out, sm, sr, _reserve(x), nm, nv

    return {
        aten._native_batch_norm_legit_functional.default: legit_functional,
        aten._native_batch_norm_legit.default: legit,
        aten.native_batch_norm.default: native,
        aten._batch_norm_with_update.default: with_update,
        aten._batch_norm_with_update_functional.default: with_update_functional,
    }
