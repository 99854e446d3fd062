"""Input tensors of a fuzz program, rebuilt from a small spec so that a program (and its
reproducer) never stores tensor data. The reproducer prints this function's source."""

from __future__ import annotations

import torch

DTYPES = {
    "f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64,
    "i64": torch.int64, "i32": torch.int32, "b8": torch.bool,
}


def make_input(shape, dtype, dist="normal", layout="contig", seed=0):
    """One input. dist: "normal", "pos" (in [0.5, 2)), "int:LO:HI" (integers in [LO, HI)),
    "bool". layout: "contig"; "perm:P" (a permutation of a contiguous tensor, P like "102");
    "step:D" (every other element along dim D); "expand:DIMS" (DIMS, like "02", are broadcast
    from size 1); "offset" (a view starting one element into a larger buffer)."""
    dt = DTYPES[dtype] if isinstance(dtype, str) else dtype
    shape = list(shape)
    g = torch.Generator().manual_seed(seed)
    base_shape, post = list(shape), (lambda t: t)
    if layout.startswith("perm:"):
        perm = [int(c) for c in layout[5:]]
        inv = [perm.index(i) for i in range(len(perm))]
        base_shape = [shape[p] for p in perm]
        post = lambda t: t.permute(inv)  # noqa: E731
    elif layout.startswith("step:"):
        d = int(layout[5:])
        base_shape[d] = 2 * shape[d]
        post = lambda t: t.narrow(d, 0, 2 * shape[d])[(slice(None),) * d + (slice(None, None, 2),)]  # noqa: E731
    elif layout.startswith("expand:"):
        dims = [int(c) for c in layout[7:]]
        for d in dims:
            base_shape[d] = 1
        post = lambda t: t.expand(shape)  # noqa: E731
    elif layout == "offset":
        n = 1
        for s in shape:
            n *= s
        post = lambda t: t.reshape(-1)[1:n + 1].view(shape)  # noqa: E731
        base_shape = [n + 1]
    if dist == "normal":
        base = torch.randn(base_shape, generator=g, dtype=torch.float64)
    elif dist == "pos":
        base = torch.rand(base_shape, generator=g, dtype=torch.float64) * 1.5 + 0.5
    elif dist.startswith("int:"):
        lo, hi = (int(v) for v in dist[4:].split(":"))
        base = torch.randint(lo, hi, base_shape, generator=g, dtype=torch.int64)
    elif dist == "bool":
        base = torch.rand(base_shape, generator=g) < 0.5
    else:
        raise ValueError(f"unknown dist {dist!r}")
    return post(base.to(dt))
