"""Validity checks that keep fuzz programs well conditioned.

A program is valid when every op runs eagerly and every check holds on eager's values. Two
kinds of checks:

* output checks (every op): floating results finite and at most MAX_FLOAT in magnitude,
  integer results at most MAX_INT (no overflow, no ill-conditioned growth);
* margin checks (ops whose result jumps when their input moves a little: comparisons,
  floor/round, float -> int casts, argmax): the inputs must stay far enough from the jump that
  coil's rounding differences cannot move them across it. They are only attached when an input
  is *inexact* (produced by floating arithmetic); values made of inputs through exact ops
  (views, casts up, max, where, ...) compare identically in any correct implementation.

Checks are data (tuples of expressions over value names), so a minimized program is
re-validated with the same rules.
"""

from __future__ import annotations

import torch

MAX_FLOAT = 1e3
MAX_INT = 2**24
# Relative margin per dtype of the inexact operand.
MARGIN = {torch.float32: 1e-3, torch.float64: 1e-3, torch.bfloat16: 4e-2, torch.float16: 2e-2}


def _margin(*ts) -> float:
    return max((MARGIN.get(t.dtype, 0.0) for t in ts if isinstance(t, torch.Tensor)), default=0.0)


def _d(t):
    return t.double() if isinstance(t, torch.Tensor) else torch.tensor(float(t), dtype=torch.float64)


def output_ok(t) -> bool:
    if not isinstance(t, torch.Tensor):
        return True
    if t.is_floating_point():
        return bool(torch.isfinite(t).all()) and (t.numel() == 0 or float(t.abs().max()) <= MAX_FLOAT)
    if t.dtype == torch.bool or t.numel() == 0:
        return True
    return int(t.abs().max()) <= MAX_INT


def gap_ok(a, b) -> bool:
    """a and b (broadcast) are far apart: a comparison of them is robust."""
    m = _margin(a, b)
    a, b = _d(a), _d(b)
    return bool(((a - b).abs() >= m * (1 + a.abs() + b.abs())).all())


def frac_ok(x, offset: float = 0.0) -> bool:
    """x + offset is far from an integer: floor / ceil / trunc / round / casts are robust."""
    m = _margin(x)
    x = _d(x)
    y = x + offset
    dist = (y - torch.round(y)).abs()
    return bool((dist >= m * (1 + x.abs())).all())


def top2_ok(x, dim) -> bool:
    """The largest and smallest values along dim are unique by a margin (argmax/argmin/max)."""
    m = _margin(x)
    x = _d(x)
    if dim is None:
        x, dim = x.reshape(-1), 0
    if x.dim() == 0 or x.shape[dim] < 2:
        return True
    for s in (x, -x):
        top = torch.topk(s, 2, dim=dim).values
        hi, second = top.select(dim, 0), top.select(dim, 1)
        if not bool(((hi - second) >= m * (1 + hi.abs())).all()):
            return False
    return True


CHECKS = {"gap": gap_ok, "frac": frac_ok, "top2": top2_ok}


def run_check(check, env: dict) -> bool:
    """check = (kind, expr, *params): expr is evaluated in env (values and torch)."""
    kind, *args = check
    vals = [eval(a, env) if isinstance(a, str) else a for a in args]  # noqa: S307
    return CHECKS[kind](*vals)
