"""Dynamo's size symbols at the Python boundary (docs/dynamic-shapes.md).

A graph compiled with symbolic sizes names symbols (s0, s1, ...) in its metas and arguments.
The C++ runtime binds a symbol from the first graph input whose size or stride *is* that symbol
(`Program::run`). Everything else is done here, once per call, from the FX runtime args:

  * `SymBinder.env(args)`: every symbol's value, read from the placeholder that defines it (a
    tensor dim that is exactly the symbol, or a SymInt placeholder that is exactly it);
  * carriers: a symbol that no tensor input carries as a plain dim (typically a backward graph
    that receives `s0` as a SymInt and only `s0*s1`-sized tensors) is passed to coil as an
    extra input `u8[s0]{0}` (a zero-stride view of one byte, nothing is allocated), so that the
    runtime binds it like any other size;
  * SymInt values the graph returns or an eagerly-run node needs are evaluated from the env;
  * a SymFloat an op takes as a scalar (BatchNorm's unbiased-variance factor n / (n - 1)) is
    re-evaluated per call from the FX nodes that compute it and passed as an f64[] input.

The checks: every symbol must be known to be >= 2 by Dynamo's ShapeEnv (Dynamo specializes
sizes 0 and 1 and guards that the others are >= 2; coil's parser gives input symbols the range
[2, inf) and simplifies with it), else the export fails with a reason and the graph runs
eagerly. At run time the C++ runtime checks each bound symbol against that range and every
compound size against its expression (InputMismatchError with the input and dim).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Sequence

import torch

__all__ = ["SymBinder", "SymValue", "symbol_lower_bound", "symbol_multiple", "symbol_range"]

_EVAL_GLOBALS = {"__builtins__": {}, "min": min, "max": max}


class SymValue:
    """A symbolic integer compiled for evaluation: coil's sym syntax (`s0*4`, `a//b`, `a % b`,
    `min(a, b)`) is also Python syntax with the same meaning on the non-negative values sizes
    take, so the text compiles to Python bytecode once."""

    __slots__ = ("text", "code")

    def __init__(self, text: str):
        self.text = text
        self.code = compile(text, "<coil sym>", "eval")

    def __call__(self, env: dict[str, int]) -> int:
        return int(eval(self.code, _EVAL_GLOBALS, env))

    def __repr__(self) -> str:
        return f"SymValue({self.text!r})"


def symbol_lower_bound(sym, node) -> int | None:
    """The lower bound the ShapeEnv knows for `sym` (None without a ShapeEnv)."""
    return symbol_range(sym, node)[0]


def symbol_range(sym, node) -> tuple[int | None, int | None]:
    """(lower, upper) bounds the ShapeEnv knows for `sym`; None where unknown or unbounded
    (sympy's oo / torch's int_oo). Dynamo guards what it recorded there (a `t >= 3` it relied
    on, a mark_dynamic(max=...)), so coil may assume it."""
    env = getattr(node, "shape_env", None)
    r = env.var_to_range.get(sym) if env is not None else None
    if r is None:
        return None, None

    def bound(v):
        # sympy.Integer or int; torch's int_oo / sympy's oo are not (int(int_oo) raises).
        if isinstance(v, int) or getattr(v, "is_Integer", False):
            return int(v)
        return None

    return bound(r.lower), bound(r.upper)


def symbol_multiple(sym, node) -> int:
    """The number `sym` is known to be a multiple of (1 if none): Dynamo's ShapeEnv records
    `Mod(s0, 3)` as zero once a graph relied on it (group_norm viewing [s0] channels as
    [3, s0 // 3]) and guards it. Without it coil could not prove 3 * (s0 // 3) == s0."""
    env = getattr(node, "shape_env", None)
    m = 1
    for e in getattr(env, "divisible", ()) or ():
        args = getattr(e, "args", ())
        if len(args) == 2 and args[0] == sym and getattr(args[1], "is_Integer", False):
            k = int(args[1])
            if k > 1:
                m = m * k // math.gcd(m, k)
    return m


@dataclasses.dataclass
class SymBinder:
    # symbol name -> ("size", pos, dim) | ("stride", pos, dim) | ("int", pos): where its value
    # is in the FX runtime args.
    sources: dict[str, tuple]
    # Symbols passed to coil as carrier inputs (after the tensor inputs and constants), in order.
    carriers: list[str]
    # symbol name -> the ShapeEnv's example value (hint), for reports and the debug dump.
    hints: dict[str, int]
    # SymFloat values ops take as scalars (env -> float), passed as f64[] inputs after the
    # carriers.
    scalars: list = dataclasses.field(default_factory=list)
    # symbol name -> (lower, upper or None): the ShapeEnv's value range, passed to coil as the
    # `symbol_ranges` compile option (coil simplifies with it and checks it per call).
    ranges: dict[str, tuple[int, int | None]] = dataclasses.field(default_factory=dict)
    # symbol name -> a number it is a multiple of (symbol_multiple; only those above 1).
    multiples: dict[str, int] = dataclasses.field(default_factory=dict)
    # Where the graph runs: carriers and scalars are made there (a graph's inputs share a
    # device; the CUDA kernels cannot read a host scalar).
    device: torch.device = dataclasses.field(default_factory=lambda: torch.device("cpu"))

    def __post_init__(self):
        # Backward graphs are compiled while AOTAutograd's FakeTensorMode is active; a tensor
        # made then would be fake, and the first backward call would fail on its data pointer.
        from torch._subclasses.fake_tensor import unset_fake_temporarily

        with unset_fake_temporarily():
            self._byte = torch.zeros(1, dtype=torch.uint8)
        self._byte_on = {}

    def _byte_on_device(self) -> torch.Tensor:
        if self.device.type == "cpu":
            return self._byte
        if self.device not in self._byte_on:
            self._byte_on[self.device] = torch.zeros(1, dtype=torch.uint8, device=self.device)
        return self._byte_on[self.device]

    def env(self, args: Sequence[Any]) -> dict[str, int]:
        out = {}
        for name, src in self.sources.items():
            a = args[src[1]]
            if src[0] == "size":
                out[name] = int(a.shape[src[2]])
            elif src[0] == "stride":
                out[name] = int(a.stride(src[2]))
            else:
                out[name] = int(a)
        return out

    def carrier_tensors(self, env: dict[str, int]) -> list[torch.Tensor]:
        byte = self._byte_on_device()
        out = [byte.expand(env[name]) for name in self.carriers]
        if self.scalars:
            # One host-to-device copy for all of them, then views.
            values = torch.tensor([float(f(env)) for f in self.scalars], dtype=torch.float64)
            if self.device.type != "cpu":
                values = values.to(self.device, non_blocking=True)
            out.extend(values[i] for i in range(len(self.scalars)))
        return out

    def ranges_text(self) -> str:
        """The `symbol_ranges` compile option: "s0:3:64;s1:2:;s2:2::3" (no upper bound after
        s1; s2 a multiple of 3)."""
        def entry(name, lo, hi):
            m = self.multiples.get(name, 1)
            return f"{name}:{lo}:{'' if hi is None else hi}" + (f":{m}" if m > 1 else "")

        return ";".join(entry(name, lo, hi)
                        for name, (lo, hi) in sorted(self.ranges.items(),
                                                     key=lambda kv: _sym_key(kv[0])))

    def describe(self) -> str:
        parts = []
        for name, src in sorted(self.sources.items(), key=lambda kv: _sym_key(kv[0])):
            where = f"arg{src[1]}" + (f".{src[0]}[{src[2]}]" if src[0] != "int" else "")
            parts.append(f"{name} = {where} (hint {self.hints.get(name)})")
        return "; ".join(parts) + (f"; carriers {self.carriers}" if self.carriers else "")


def _sym_key(name: str):
    digits = name.lstrip("abcdefghijklmnopqrstuvwxyz_")
    return (name[: len(name) - len(digits)], int(digits) if digits.isdigit() else 0)
