"""One program through torch.compile(backend="coil"), compared with eager.

Classification (Result.status):
  pass        coil compiled every graph (strict mode) and matched eager
  gap         strict mode refused it (an op or case coil cannot lower: a coverage gap); the
              non-strict run (with its fallbacks) matched eager
  wrong       some output or gradient differs from eager beyond the accuracy rule
              (bench/accuracy.py: compare with a float64 reference)
  coil_error  coil raised something other than CompileError/ExportError (an internal error,
              a crash of a pass), or an error escaped to the user in non-strict mode
  invalid     the program fails without coil too (aot_eager): a generator problem
Each compiled function is called twice (fresh inputs the second time) to catch state kept
between runs.
"""

from __future__ import annotations

import dataclasses
import re
import time

import torch

from accuracy import compare, to_fp64

from .program import Program

GAP_ERRORS = ("CompileError", "ExportError")


@dataclasses.dataclass
class Result:
    seed: int
    status: str
    detail: str = ""
    gaps: list = dataclasses.field(default_factory=list)
    fallback_ops: list = dataclasses.field(default_factory=list)
    seconds: float = 0.0

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def _cotangent(o: torch.Tensor, i: int, dtype=None) -> torch.Tensor:
    g = torch.Generator().manual_seed(1000 + i)
    return torch.randn(o.shape, generator=g, dtype=torch.float64).to(dtype or o.dtype)


def call(fn, prog: Program, fp64: bool = False) -> dict:
    """Outputs (and gradients in grad mode) of fn on the program's inputs."""
    ins = prog.make_inputs()
    if fp64:
        ins = to_fp64(ins)
    if prog.grad:
        ins = [t.detach().requires_grad_(t.is_floating_point()) for t in ins]
    outs = list(fn(*ins))
    res = {"out": [o.detach() for o in outs]}
    if prog.grad:
        diff = [(i, o) for i, o in enumerate(outs) if o.requires_grad]
        leaves = [t for t in ins if t.requires_grad]
        if diff and leaves:
            gs = torch.autograd.grad([o for _, o in diff], leaves,
                                     [_cotangent(o, i) for i, o in diff], allow_unused=True)
            res["grad"] = [None if x is None else x.detach() for x in gs]
    return res


def reference(prog: Program) -> tuple[dict, dict]:
    eager = call(prog.function(), prog)
    old = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        fp64 = call(prog.function(fp64=True), prog, fp64=True)
    finally:
        torch.set_default_dtype(old)
    return eager, fp64


def _chain(e: BaseException):
    seen = set()
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        yield e
        e = getattr(e, "inner_exception", None) or e.__cause__ or e.__context__


def one_line(e: BaseException) -> str:
    root = list(_chain(e))[-1]
    names = [type(x).__name__ for x in _chain(e)]
    cls = next((n for n in names if n in GAP_ERRORS + ("InternalError",)), type(root).__name__)
    msg = next((str(x) for x in _chain(e) if type(x).__name__ == cls), str(root))
    msg = msg.strip().splitlines()[0] if msg.strip() else ""
    return f"{cls}: {msg}"[:300]


def compiled(prog: Program, backend: str = "coil", strict: bool = True, cache_dir: str | None = None):
    import coil

    torch._dynamo.reset()
    coil.reset_report()
    kw = {}
    if backend == "coil":
        opts = dict(prog.options, strict=strict)
        if cache_dir is not None:
            opts["cache_dir"] = cache_dir
        kw["options"] = opts
    return torch.compile(prog.function(), backend=backend, fullgraph=True, dynamic=prog.dynamic, **kw)


def _check(prog, fn, eager, fp64) -> str | None:
    for attempt in range(2):
        got = call(fn, prog)
        v = compare(got, eager, fp64)
        if not v:
            return f"call {attempt + 1}: {v.detail}"
    return None


def run_program(prog: Program, cache_dir: str | None = None) -> Result:
    import coil

    t0 = time.perf_counter()
    res = Result(prog.seed, "pass")
    try:
        eager, fp64 = reference(prog)
    except Exception as e:  # noqa: BLE001
        res.status, res.detail = "invalid", f"eager: {type(e).__name__}: {e}"[:300]
        return res
    try:
        bad = _check(prog, compiled(prog, strict=True, cache_dir=cache_dir), eager, fp64)
        if bad:
            res.status, res.detail = "wrong", bad
    except Exception as e:  # noqa: BLE001
        msg = one_line(e)
        if _is_gap(msg):
            res.gaps.append(msg)
            res.status = "gap"
        else:
            res.status, res.detail = "coil_error", msg
            if _fails_without_coil(prog):
                res.status = "invalid"
        if res.status == "gap" or res.status == "coil_error":
            _non_strict(prog, res, eager, fp64, cache_dir)
    res.seconds = time.perf_counter() - t0
    torch._dynamo.reset()
    return res


def _non_strict(prog, res: Result, eager, fp64, cache_dir) -> None:
    """The user's view: fallbacks allowed, nothing may escape, results must match."""
    import coil

    try:
        bad = _check(prog, compiled(prog, strict=False, cache_dir=cache_dir), eager, fp64)
    except Exception as e:  # noqa: BLE001
        res.status, res.detail = "coil_error", "non-strict run raised " + one_line(e)
        return
    rep = coil.report()
    res.fallback_ops = sorted(rep.fallback_ops)
    internal = [r for _, r in rep.graphs_fallen_back if not _is_gap(r)]
    if bad:
        res.status, res.detail = "wrong", bad + " (non-strict run)"
    elif internal and res.status != "coil_error":
        res.status, res.detail = "coil_error", "fallback: " + internal[0][:300]


def _is_gap(msg: str) -> bool:
    """A refusal of something coil does not support. A verification failure is a CompileError
    too, but with static sizes it means coil's own metas disagree: a bug. With symbolic sizes
    it is a known gap: Dynamo's guards (s0 >= 5, s0*s1 == 10) do not reach coil, which then
    cannot prove PyTorch's specialized sizes (docs/fuzzing.md)."""
    if not msg.startswith(GAP_ERRORS) or "host C++ compilation failed" in msg:
        return False
    return "verification failed" not in msg or re.search(r"\bs\d+", msg) is not None


def _fails_without_coil(prog: Program) -> bool:
    try:
        call(compiled(prog, backend="aot_eager"), prog)
        return False
    except Exception:  # noqa: BLE001
        return True
