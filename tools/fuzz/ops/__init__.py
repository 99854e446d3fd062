"""The op families and their weights. To add an op: add a template to a family's table (or a
new family function fn(g, x) -> value name or None, registered in FAMILIES); the generator
keeps a candidate only when eager runs it and its checks hold (docs/fuzzing.md)."""

from __future__ import annotations

from . import index, pointwise, reduce, shape

# (weight, family, kinds of x it applies to)
FAMILIES = [
    (14, pointwise.unary, ("float", "int", "bool")),
    (14, pointwise.binary, ("float", "int", "bool")),
    (6, pointwise.compare, ("float", "int")),
    (5, pointwise.where, ("float", "int", "bool")),
    (6, pointwise.cast, ("float", "int", "bool")),
    (3, pointwise.ternary, ("float",)),
    (5, shape.reshape, ("float", "int", "bool")),
    (5, shape.permute, ("float", "int", "bool")),
    (5, shape.slicing, ("float", "int", "bool")),
    (3, shape.expand, ("float", "int", "bool")),
    (3, shape.squeeze, ("float", "int", "bool")),
    (4, shape.cat, ("float", "int", "bool")),
    (2, shape.layout_ops, ("float", "int", "bool")),
    (12, reduce.reduction, ("float", "int", "bool")),
    (3, reduce.softmax, ("float",)),
    (2, reduce.norm, ("float",)),
    (5, index.matmul, ("float",)),
    (5, index.indexing, ("float", "int", "bool")),
]


def pick_family(g, x):
    kind = g.kind(x)
    fams = [(w, f) for w, f, kinds in FAMILIES if kind in kinds]
    return g.rng.choices([f for _, f in fams], weights=[w for w, _ in fams])[0]
