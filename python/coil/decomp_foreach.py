"""The `_foreach_*` ops (what a compiled optimizer step traces to), decomposed per tensor.

torch.optim's foreach implementations (AdamW, Adam, SGD with momentum) call `_foreach_add_`,
`_foreach_addcdiv_`, ...; functionalization makes them the functional `_foreach_*` ops, which
coil has no lowering for. `_foreach_X.overload(lists..., scalars...)` is, element by element,
`aten.X(list[i]..., scalars...)`: a list argument (of tensors, or of scalars for the ScalarList
overloads) is indexed, any other argument is passed to every element. The per-tensor ops then
decompose or lower as usual, and the whole step becomes one coil graph (fused pointwise
kernels) instead of many eager calls.
"""

from __future__ import annotations

import torch

aten = torch.ops.aten

# _foreach_<name> -> the per-tensor op packet. Covers what torch.optim's foreach paths use.
_PER_TENSOR = {
    "add": aten.add, "sub": aten.sub, "mul": aten.mul, "div": aten.div,
    "addcmul": aten.addcmul, "addcdiv": aten.addcdiv, "lerp": aten.lerp,
    "pow": aten.pow, "neg": aten.neg, "reciprocal": aten.reciprocal, "sqrt": aten.sqrt,
    "abs": aten.abs, "exp": aten.exp, "log": aten.log, "sign": aten.sign,
    "clamp_min": aten.clamp_min, "clamp_max": aten.clamp_max,
}
# List overloads only: maximum / minimum have no Scalar overload per tensor.
_LIST_ONLY = {"maximum": aten.maximum, "minimum": aten.minimum}


def _is_list(a) -> bool:
    return isinstance(a, (list, tuple))


# The per-tensor ops whose trailing scalar is keyword-only (`addcmul(a, b, c, *, value)`).
_KEYWORD_SCALAR = {"addcmul": "value", "addcdiv": "value"}


def _per_tensor(packet, keyword: str | None = None):
    def decomp(*args, **kwargs):
        if keyword is not None and len(args) == 4:
            if isinstance(args[3], torch.Tensor):
                return NotImplemented  # the .Tensor overload: scalars in a tensor
            *args, kwargs[keyword] = args
        n = next(len(a) for a in args if _is_list(a))
        pick = lambda a, i: a[i] if _is_list(a) else a
        return [packet(*(pick(a, i) for a in args), **{k: pick(v, i) for k, v in kwargs.items()})
                for i in range(n)]

    return decomp


def foreach_decompositions() -> dict:
    table = {}
    for name, packet in _PER_TENSOR.items():
        foreach = getattr(aten, f"_foreach_{name}", None)
        if foreach is None:
            continue
        for ov in foreach.overloads():
            if ov != "out" and not ov.endswith("_out"):
                table[getattr(foreach, ov)] = _per_tensor(packet, _KEYWORD_SCALAR.get(name))
    for name, packet in _LIST_ONLY.items():
        foreach = getattr(aten, f"_foreach_{name}", None)
        if foreach is not None and "List" in foreach.overloads():
            table[foreach.List] = _per_tensor(packet)
    return table
