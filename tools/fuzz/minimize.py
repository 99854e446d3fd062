"""Shrink a failing program while it still fails the same way.

Steps, repeated until nothing changes or the time budget is spent:
  1. keep one output (the others and everything only they need are dropped);
  2. bypass a statement (its users read one of its operands of the same shape and dtype);
  3. cut a statement (its value becomes a fresh input of the same shape and dtype);
  4. make non-contiguous inputs contiguous, turn off grad / dynamic / options.
Every candidate is re-validated eagerly (Program.validate) before it is compiled.
"""

from __future__ import annotations

import dataclasses
import re
import time

import torch

from .inputs import DTYPES
from .program import InputSpec, Program, namespace

CODE_OF = {v: k for k, v in DTYPES.items()}


def _rename(stmts, old: str, new: str):
    pat = re.compile(rf"\b{re.escape(old)}\b")
    out = []
    for s in stmts:
        checks = tuple(tuple(pat.sub(new, a) if isinstance(a, str) else a for a in c) for c in s.checks)
        out.append(dataclasses.replace(s, expr=pat.sub(new, s.expr), checks=checks))
    return out


def _values(prog: Program) -> dict:
    env = namespace()
    for i in prog.inputs:
        env[i.name] = i.make()
    for s in prog.stmts:
        env[s.out] = eval(s.expr, env)  # noqa: S307
    return env


def _candidates(prog: Program):
    if len(prog.outputs) > 1:
        for o in prog.outputs:
            yield dataclasses.replace(prog, outputs=[o]).pruned()
    try:
        env = _values(prog)
    except Exception:  # noqa: BLE001
        return
    for k in range(len(prog.stmts) - 1, -1, -1):
        s = prog.stmts[k]
        t = env[s.out]
        rest = prog.stmts[k + 1:]
        for op in sorted(s.reads()):
            u = env.get(op)
            if u is not None and u.shape == t.shape and u.dtype == t.dtype:
                outs = [op if o == s.out else o for o in prog.outputs]
                yield dataclasses.replace(prog, stmts=prog.stmts[:k] + _rename(rest, s.out, op),
                                          outputs=outs).pruned()
        if t.is_floating_point():
            dist = "normal"
        elif t.dtype != torch.bool:
            lo, hi = (int(t.min()), int(t.max()) + 1) if t.numel() else (0, 1)
            dist = f"int:{lo}:{hi}"
        else:
            dist = "bool"
        spec = InputSpec(s.out, tuple(t.shape), CODE_OF[t.dtype], dist, "contig", prog.seed * 7 + k)
        yield dataclasses.replace(prog, inputs=prog.inputs + [spec],
                                  stmts=prog.stmts[:k] + rest).pruned()
    for i, spec in enumerate(prog.inputs):
        if spec.layout != "contig":
            ins = list(prog.inputs)
            ins[i] = dataclasses.replace(spec, layout="contig")
            yield dataclasses.replace(prog, inputs=ins)
    if prog.grad:
        yield dataclasses.replace(prog, grad=False)
    if prog.dynamic:
        yield dataclasses.replace(prog, dynamic=False)
    if prog.options:
        yield dataclasses.replace(prog, options={})


def _size(p: Program) -> tuple:
    return (len(p.stmts), len(p.outputs), len(p.inputs), p.grad, p.dynamic, len(p.options),
            sum(i.layout != "contig" for i in p.inputs))


def minimize(prog: Program, still_fails, budget_s: float = 300.0, log=None) -> Program:
    """still_fails(program) -> bool. Returns the smallest failing program found."""
    t0 = time.monotonic()
    best = prog
    changed = True
    while changed and time.monotonic() - t0 < budget_s:
        changed = False
        for cand in _candidates(best):
            if time.monotonic() - t0 > budget_s:
                break
            if _size(cand) >= _size(best) or cand.validate() is not None:
                continue
            if still_fails(cand):
                best = cand
                changed = True
                if log:
                    log(f"  minimized to {len(best.stmts)} statement(s)")
                break
    return best
