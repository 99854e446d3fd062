"""A fuzz program: input specs, one statement per op, outputs.

The program is Python source over tensors, so it runs through Dynamo + AOTAutograd + coil
exactly like user code. Dtypes are written as names (F32, BF16, ...) bound per run: the float64
reference binds every floating name to torch.float64.
"""

from __future__ import annotations

import dataclasses
import inspect
import re
import textwrap

import torch
import torch.nn.functional as F

from . import checks
from .inputs import DTYPES, make_input

NAMES = {"F32": torch.float32, "BF16": torch.bfloat16, "F16": torch.float16,
         "I64": torch.int64, "I32": torch.int32, "B8": torch.bool}
FP64_NAMES = dict(NAMES, F32=torch.float64, BF16=torch.float64, F16=torch.float64)
_REF = re.compile(r"\b([vx]\d+)\b")


def namespace(fp64: bool = False) -> dict:
    ns = {"torch": torch, "F": F}
    ns.update(FP64_NAMES if fp64 else NAMES)
    return ns


@dataclasses.dataclass
class InputSpec:
    name: str
    shape: tuple
    dtype: str
    dist: str
    layout: str
    seed: int

    def make(self) -> torch.Tensor:
        return make_input(self.shape, self.dtype, self.dist, self.layout, self.seed)

    def code(self) -> str:
        return (f"make_input({tuple(self.shape)!r}, {self.dtype!r}, {self.dist!r}, "
                f"{self.layout!r}, {self.seed})")


@dataclasses.dataclass
class Stmt:
    out: str
    expr: str
    checks: tuple = ()  # ((kind, expr, *params), ...): see checks.py
    exact: bool = False

    def reads(self) -> set[str]:
        text = self.expr + " " + " ".join(str(c) for c in self.checks)
        return set(_REF.findall(text))


@dataclasses.dataclass
class Program:
    seed: int
    inputs: list[InputSpec]
    stmts: list[Stmt]
    outputs: list[str]
    grad: bool = False
    dynamic: bool = False
    options: dict = dataclasses.field(default_factory=dict)  # coil options (besides strict)

    # -- text ---------------------------------------------------------------------------------
    def source(self) -> str:
        lines = [f"def f({', '.join(i.name for i in self.inputs)}):"]
        lines += [f"    {s.out} = {s.expr}" for s in self.stmts]
        lines.append(f"    return ({', '.join(self.outputs)},)")
        return "\n".join(lines) + "\n"

    def function(self, fp64: bool = False):
        ns = namespace(fp64)
        exec(compile(self.source(), f"<fuzz program {self.seed}>", "exec"), ns)  # noqa: S102
        return ns["f"]

    def make_inputs(self) -> list[torch.Tensor]:
        return [i.make() for i in self.inputs]

    def reproducer(self, header: str = "") -> str:
        """A standalone script: eager vs coil on this program, with the accuracy rule inlined
        as a plain tolerance check (bench/accuracy.py gives the full rule)."""
        names = ", ".join(f"{k}={v}" for k, v in (("F32", "torch.float32"), ("BF16", "torch.bfloat16"),
                                                   ("F16", "torch.float16"), ("I64", "torch.int64"),
                                                   ("I32", "torch.int32"), ("B8", "torch.bool")))
        out = ['"""' + (header or f"coil fuzz reproducer, seed {self.seed}") + '"""',
               "import torch", "import torch.nn.functional as F", "import coil  # noqa: F401", "",
               "; ".join(n.split("=")[0] + " = " + n.split("=")[1] for n in names.split(", ")), "",
               "DTYPES = {" + ", ".join(f"{k!r}: torch.{str(v).split('.')[1]}" for k, v in DTYPES.items()) + "}",
               "", textwrap.dedent(inspect.getsource(make_input)), self.source(),
               f"inputs = [{', '.join(i.code() for i in self.inputs)}]"]
        if self.grad:
            out.append("inputs = [t.detach().requires_grad_(t.is_floating_point()) for t in inputs]")
        out += ["expected = f(*inputs)",
                f"actual = torch.compile(f, backend='coil', fullgraph=True, dynamic={self.dynamic}, "
                f"options={dict(self.options, strict=True)!r})(*inputs)",
                "for e, a in zip(expected, actual):",
                "    tol = 1e-4 if e.dtype == torch.float32 else 2e-2",
                "    ok = torch.equal(e, a) if not e.is_floating_point() else torch.allclose(a.float(), e.float(), rtol=tol, atol=tol)",
                "    print('ok' if ok else 'MISMATCH', tuple(e.shape), e.dtype, '' if ok else (e, a))"]
        return "\n".join(out) + "\n"

    # -- eager validity -------------------------------------------------------------------------
    def validate(self) -> str | None:
        """Runs the program eagerly statement by statement with the checks; None when valid,
        else why not."""
        env = namespace()
        for i in self.inputs:
            env[i.name] = i.make()
        for s in self.stmts:
            for c in s.checks:
                try:
                    if not checks.run_check(c, env):
                        return f"{s.out}: check {c[0]} fails"
                except Exception as e:  # noqa: BLE001
                    return f"{s.out}: check raised {e}"
            try:
                env[s.out] = eval(s.expr, env)  # noqa: S307
            except Exception as e:  # noqa: BLE001
                return f"{s.out}: {type(e).__name__}: {e}"
            if not checks.output_ok(env[s.out]):
                return f"{s.out}: output out of range"
        return None

    # -- editing ------------------------------------------------------------------------------
    def pruned(self) -> "Program":
        """Without statements and inputs that no output depends on."""
        need = set(self.outputs)
        keep = []
        for s in reversed(self.stmts):
            if s.out in need:
                keep.append(s)
                need |= s.reads()
        keep.reverse()
        inputs = [i for i in self.inputs if i.name in need]
        return dataclasses.replace(self, inputs=inputs, stmts=keep)
