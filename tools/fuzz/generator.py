"""The seeded program generator.

generate(seed) builds a Program op by op. Every candidate op is a Python expression over
existing values; it is run eagerly at once (on the program's real inputs), and kept only if it
runs, passes its margin checks (checks.py) and its result stays small and in range. So the
generator never needs a shape rule of its own to be right: PyTorch decides what is valid, and
the op families (ops_*.py) only aim at valid candidates most of the time.
"""

from __future__ import annotations

import math
import random

import torch

from . import checks
from .inputs import DTYPES
from .program import InputSpec, Program, Stmt, namespace

SIZES = [1, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 16, 17, 32]
MAX_NUMEL = 4096
FLOAT = ("f32", "bf16", "f16")
NAME_OF = {torch.float32: "F32", torch.bfloat16: "BF16", torch.float16: "F16",
           torch.int64: "I64", torch.int32: "I32", torch.bool: "B8"}
CODE_OF = {v: k for k, v in DTYPES.items()}
# coil options a program is compiled with (besides strict): the default pipeline most of the
# time, sometimes forced parallel loops or no fusion / inlining.
OPTION_VARIANTS = [{}] * 6 + [{"parallel_threshold": 0, "num_threads": 2}, {"fuse": False},
                              {"inline_pointwise": False}, {"max_inline_reads": 1}]


class Gen:
    """Generator state: the values so far (name -> eager tensor), their exactness, and the
    program being built."""

    def __init__(self, seed: int, n_ops: int | None = None):
        self.seed = seed
        self.rng = random.Random(seed)
        r = self.rng
        self.main = r.choices(FLOAT, weights=[6, 2, 2])[0]
        self.mixed = r.random() < 0.25  # other dtypes among new inputs
        self.n_ops = n_ops if n_ops is not None else r.randint(3, 12)
        self.inputs: list[InputSpec] = []
        self.stmts: list[Stmt] = []
        self.env = namespace()
        self.exact: dict[str, bool] = {}
        self.order: list[str] = []  # value names in creation order
        self.next_seed = seed * 1000

    # -- values ---------------------------------------------------------------------------------
    def t(self, name: str) -> torch.Tensor:
        return self.env[name]

    def kind(self, name: str) -> str:
        t = self.t(name)
        return "float" if t.is_floating_point() else "bool" if t.dtype == torch.bool else "int"

    def random_shape(self, ndim: int | None = None) -> tuple:
        r = self.rng
        if ndim is None:
            ndim = r.choices([0, 1, 2, 3, 4], weights=[1, 3, 6, 6, 4])[0]
        while True:
            shape = tuple(r.choice(SIZES) for _ in range(ndim))
            if math.prod(shape) <= MAX_NUMEL // 2:
                return shape

    def pick_dtype(self, kind: str = "float") -> str:
        r = self.rng
        if kind == "float":
            return r.choice(FLOAT) if self.mixed and r.random() < 0.3 else self.main
        if kind == "int":
            return r.choice(["i64", "i64", "i32"])
        return "b8"

    def new_input(self, shape, dtype: str | None = None, dist: str | None = None,
                  layout: str | None = None) -> str:
        r = self.rng
        shape = tuple(shape)
        dtype = dtype or self.pick_dtype()
        if dist is None:
            dist = ("normal" if dtype in FLOAT else "bool" if dtype == "b8" else
                    r.choice(["int:-8:8", "int:0:5", "int:-100:100"]))
        if layout is None:
            opts = ["contig"] * 5
            if len(shape) >= 2:
                perm = list(range(len(shape)))
                r.shuffle(perm)
                opts += ["perm:" + "".join(map(str, perm))] * 2
            if len(shape) >= 1:
                opts += [f"step:{r.randrange(len(shape))}", "offset"]
                ones = [d for d in range(len(shape)) if shape[d] > 1]
                if ones:
                    opts.append("expand:" + str(r.choice(ones)))
            layout = r.choice(opts)
        name = f"x{len(self.inputs)}"
        self.next_seed += 1
        spec = InputSpec(name, shape, dtype, dist, layout, self.next_seed)
        self.inputs.append(spec)
        self.env[name] = spec.make()
        self.exact[name] = True
        self.order.append(name)
        return name

    def values(self, kind: str | None = None) -> list[str]:
        return [v for v in self.order if kind is None or self.kind(v) == kind]

    def pick_value(self, kind: str | None = None) -> str | None:
        vs = self.values(kind)
        if not vs:
            return None
        # Prefer recent values: programs become chains with some fan-in.
        w = [1.0 + 3.0 * (i / max(1, len(vs) - 1)) for i in range(len(vs))]
        return self.rng.choices(vs, weights=w)[0]

    def is_exact(self, *names) -> bool:
        return all(self.exact.get(n, True) for n in names if isinstance(n, str) and n in self.env)

    # -- statements -----------------------------------------------------------------------------
    def emit(self, expr: str, operands=(), exact_op: bool = False, checks_=()) -> str | None:
        """Tries expr; on success it becomes a statement. exact_op: the op is exact (views,
        max, casts, ...) so the result is exact when its operands are."""
        name = f"v{len(self.stmts)}"
        try:
            for c in checks_:
                if not checks.run_check(c, self.env):
                    return None
            out = eval(expr, self.env)  # noqa: S307
        except Exception:  # noqa: BLE001  (PyTorch says the candidate is invalid)
            return None
        if not isinstance(out, torch.Tensor) or out.numel() > MAX_NUMEL:
            return None
        if out.numel() == 0 and self.rng.random() < 0.9:  # keep empty tensors rare
            return None
        if out.dtype not in NAME_OF or not checks.output_ok(out):
            return None
        self.env[name] = out
        self.exact[name] = exact_op and self.is_exact(*operands)
        self.order.append(name)
        self.stmts.append(Stmt(name, expr, tuple(checks_), self.exact[name]))
        return name

    # -- partners -------------------------------------------------------------------------------
    def scalar(self, kind: str) -> str:
        r = self.rng
        if kind == "float":
            return r.choice(["0.5", "2.0", "-1.5", "3", "0.25", "-2", "1e-3"])
        if kind == "bool":
            return r.choice(["True", "False"])
        return r.choice(["2", "-3", "1", "7"])

    def broadcast_shape(self, shape: tuple) -> tuple:
        """A shape that broadcasts with `shape` (dims set to 1, leading dims dropped or added,
        size-1 dims grown)."""
        r = self.rng
        out = []
        for s in shape:
            x = r.random()
            out.append(1 if x < 0.25 else (r.choice([2, 3, 4]) if s == 1 and x < 0.5 else s))
        if out and r.random() < 0.2:
            out = out[r.randrange(len(out) + 1):]
        elif r.random() < 0.1 and len(out) < 5:
            out = [r.choice([2, 3])] + out
        return tuple(out)

    def partner(self, x: str, kind: str | None = None, scalar_ok: bool = True) -> str:
        """A second operand for a broadcasting op on x: a scalar, an existing value whose
        shape broadcasts, or a new input."""
        r = self.rng
        kind = kind or self.kind(x)
        if scalar_ok and r.random() < 0.15:
            return self.scalar(kind)
        shape = tuple(self.t(x).shape)
        if r.random() < 0.4:
            cands = []
            for v in self.values(kind):
                if v == x and r.random() < 0.7:
                    continue
                try:
                    b = torch.broadcast_shapes(shape, tuple(self.t(v).shape))
                except RuntimeError:
                    continue
                if math.prod(b) <= MAX_NUMEL:
                    cands.append(v)
            if cands:
                return r.choice(cands)
        return self.new_input(self.broadcast_shape(shape), self.pick_dtype(kind))

    def dtype_code(self, t: torch.Tensor) -> str:
        return CODE_OF[t.dtype]


def generate(seed: int, n_ops: int | None = None, grad: bool | None = None,
             dynamic: bool | None = None) -> Program:
    from . import ops  # the op families

    g = Gen(seed, n_ops)
    r = g.rng
    for _ in range(r.choice([1, 1, 2, 3])):
        g.new_input(g.random_shape(), g.main)
    if r.random() < 0.15:
        g.new_input(g.random_shape(), g.pick_dtype("int"))
    attempts = 0
    while len(g.stmts) < g.n_ops and attempts < 40 * g.n_ops:
        attempts += 1
        x = g.pick_value()
        fam = ops.pick_family(g, x)
        if fam is not None:
            fam(g, x)
    outputs = choose_outputs(g)
    prog = Program(seed, g.inputs, g.stmts, outputs).pruned()
    prog.grad = (r.random() < 0.25) if grad is None else grad
    prog.dynamic = (r.random() < 0.15) if dynamic is None else dynamic
    prog.options = r.choice(OPTION_VARIANTS)
    if prog.grad and not _grad_ok(prog):
        prog.grad = False
    return prog


def choose_outputs(g: Gen) -> list[str]:
    r = g.rng
    made = [s.out for s in g.stmts]
    if not made:
        return [g.emit(f"{g.inputs[0].name} * 2", (), False) or g.inputs[0].name]
    used = set()
    for s in g.stmts:
        used |= s.reads()
    sinks = [v for v in made if v not in used]
    extra = [v for v in made if v in used and r.random() < 0.2]
    outs = sorted(set(sinks[-5:] + extra[:2]), key=made.index)
    return outs or [made[-1]]


def _grad_ok(prog: Program) -> bool:
    """Eager backward works and some float input gets a gradient."""
    try:
        ins = [t.detach().requires_grad_(t.is_floating_point()) for t in prog.make_inputs()]
        outs = [o for o in prog.function()(*ins) if o.requires_grad]
        leaves = [t for t in ins if t.requires_grad]
        if not outs or not leaves:
            return False
        gs = torch.autograd.grad(outs, leaves, [torch.ones_like(o) for o in outs],
                                 allow_unused=True)
        return any(x is not None for x in gs)
    except Exception:  # noqa: BLE001
        return False
