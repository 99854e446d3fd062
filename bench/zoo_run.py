"""Runs the model zoo (bench/zoo.py) through coil and checks it against eager.

    python3 bench/zoo_run.py [--models a,b] [--dtypes f32,bf16] [--strict] [--write FILE]

Per model and dtype: forward outputs, then backward (gradients of the floating inputs and of
every parameter), each compared with eager by the benchmark runner's accuracy rule
(bench/accuracy.py: float64 reference from a float64 deep copy of the model). A case is

  pass        no fallback to eager, forward and backward accepted
  wrong       a result rejected by the accuracy rule
  fell back   results accepted, but a graph or an op ran eagerly (the reason is listed)
  error       compiling or running raised (in --strict mode a fallback is an error)

"compile s" is the wall time of the first compiled call (forward + backward, every graph
compiled; the kernel cache is off unless --cache): what a user waits for on the first step.
"eager s" is one warm eager forward + backward, for scale. A pass has no fallback, so it is
the same under --strict.
"""

from __future__ import annotations

import argparse
import copy
import sys
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import accuracy  # noqa: E402
import zoo  # noqa: E402

DTYPES = {"f32": torch.float32, "bf16": torch.bfloat16}


@dataclass
class CaseResult:
    model: str
    dtype: str
    status: str = "pass"  # pass / wrong / fell back / error
    forward: str = "-"  # pass / wrong / error / -
    backward: str = "-"
    detail: str = ""  # why it is not a pass
    fallbacks: list[str] = field(default_factory=list)
    compile_s: float = 0.0
    eager_s: float = 0.0


def _cast(x: Any, dtype: torch.dtype) -> Any:
    if isinstance(x, torch.Tensor):
        return x.to(dtype) if x.is_floating_point() else x
    if isinstance(x, (list, tuple)):
        return type(x)(_cast(v, dtype) for v in x)
    return x


def _flat_tensors(x: Any) -> list[torch.Tensor]:
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for v in x for t in _flat_tensors(v)]
    return []


def _float_inputs(inputs) -> list[int]:
    return [i for i, t in enumerate(inputs) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def _run_module(model, inputs, grad_seed: int = 1):
    """Forward and backward of one copy; returns (outputs, input grads + param grads)."""
    inputs = [t.detach().clone().requires_grad_(i in _float_inputs(inputs))
              if isinstance(t, torch.Tensor) else t for i, t in enumerate(inputs)]
    outs = model(*inputs)
    flat = [t for t in _flat_tensors(outs) if t.requires_grad]
    gen = torch.Generator().manual_seed(grad_seed)
    # Scalars (losses) get gradient 1; other outputs a fixed random gradient (in float64, cast
    # to the output's dtype, so every dtype sees the same values up to rounding).
    grads = [torch.ones_like(t) if t.dim() == 0 else
             torch.randn(t.shape, generator=gen, dtype=torch.float64).to(t.dtype) for t in flat]
    torch.autograd.backward(flat, grads)
    # Named, so that a failure says which gradient or buffer is off (a compiled module's names
    # carry the _orig_mod. prefix).
    plain = lambda name: name.removeprefix("_orig_mod.")
    grads_out = {f"input{i}": inputs[i].grad for i in _float_inputs(inputs)}
    grads_out.update({plain(name): p.grad for name, p in model.named_parameters()})
    buffers = {plain(name): b for name, b in model.named_buffers()}
    return {"output": outs, "buffers": buffers}, grads_out


def _run_optimizer(opt: zoo.OptimizerStep, step, steps: int = 2):
    for _ in range(steps):
        step()
    return _optimizer_results(opt)


def _optimizer_results(opt: zoo.OptimizerStep):
    return [p.detach() for p in opt.params], opt.state()


def _options(strict: bool, cache: bool) -> dict:
    opts: dict[str, Any] = {"strict": strict}
    if not cache:
        opts["cache_dir"] = ""
    return opts


def run_case(name: str, dtype: torch.dtype, strict: bool = True, cache: bool = True) -> CaseResult:
    """One zoo model in one dtype through coil, checked against eager and a float64 run."""
    import coil

    spec = zoo.ZOO[name]
    res = CaseResult(name, {v: k for k, v in DTYPES.items()}[dtype])
    model, inputs = spec.build()
    torch._dynamo.reset()
    coil.reset_report()
    try:
        if spec.kind == "optimizer":
            eager = model.clone(dtype)
            ref64 = model.clone(torch.float64)
            mine = model.clone(dtype)
            t0 = time.perf_counter()
            exp_fwd, exp_bwd = _run_optimizer(eager, eager.step)
            res.eager_s = time.perf_counter() - t0
            f64_fwd, f64_bwd = _run_optimizer(ref64, ref64.step)
            step = torch.compile(mine.step, backend="coil", options=_options(strict, cache))
            t0 = time.perf_counter()
            step()  # the first call compiles
            res.compile_s = time.perf_counter() - t0
            step()
            got_fwd, got_bwd = _optimizer_results(mine)
        else:
            model = model.to(dtype) if dtype != torch.float32 else model
            inputs = _cast(inputs, dtype)
            eager, ref64, mine = copy.deepcopy(model), copy.deepcopy(model).double(), model
            _run_module(copy.deepcopy(model), inputs)  # warm-up: eager s is a warm call
            t0 = time.perf_counter()
            exp_fwd, exp_bwd = _run_module(eager, inputs)
            res.eager_s = time.perf_counter() - t0
            f64_fwd, f64_bwd = _run_module(ref64, accuracy.to_fp64(list(inputs)))
            compiled = torch.compile(mine, backend="coil", options=_options(strict, cache))
            t0 = time.perf_counter()
            got_fwd, got_bwd = _run_module(compiled, inputs)
            res.compile_s = time.perf_counter() - t0
    except Exception as e:  # a compiler failure is a result, not a crash of the runner
        res.status, res.forward = "error", "error"
        res.detail = _short(e)
        res.fallbacks = _fallbacks()
        return res
    fwd = accuracy.compare(got_fwd, exp_fwd, f64_fwd)
    bwd = accuracy.compare(got_bwd, exp_bwd, f64_bwd)
    res.forward = "pass" if fwd else "wrong"
    res.backward = "pass" if bwd else "wrong"
    res.fallbacks = _fallbacks()
    if not fwd or not bwd:
        res.status = "wrong"
        res.detail = "; ".join(f"{w}: {v.detail}" for w, v in (("fwd", fwd), ("bwd", bwd)) if not v)
    elif res.fallbacks:
        res.status = "fell back"
        res.detail = "; ".join(res.fallbacks)
    return res


def _short(e: BaseException) -> str:
    lines = [ln for ln in str(e).strip().splitlines() if ln.strip()]
    # Dynamo wraps backend errors; the first line of the original is what matters.
    msg = lines[0] if lines else ""
    return f"{type(e).__name__}: {msg}"[:300]


def _fallbacks() -> list[str]:
    import coil

    rep = coil.report()
    out = [f"graph {g}: {r}" for g, r in rep.graphs_fallen_back]
    out += [f"op {op}" for op in sorted(rep.fallback_ops)]
    return out


# ---------------------------------------------------------------------------------------------


def _table(results: list[CaseResult]) -> str:
    lines = ["| model | dtype | status | forward | backward | compile s | eager s | detail |",
             "|---|---|---|---|---|---:|---:|---|"]
    for r in results:
        detail = r.detail.replace("|", "\\|")
        lines.append(f"| {r.model} | {r.dtype} | {r.status} | {r.forward} | {r.backward} | "
                     f"{r.compile_s:.2f} | {r.eager_s:.3f} | {detail} |")
    return "\n".join(lines)


def _summary(results: list[CaseResult]) -> str:
    by: dict[str, int] = {}
    for r in results:
        by[r.status] = by.get(r.status, 0) + 1
    return ", ".join(f"{n} {s}" for s, n in sorted(by.items()))


def _findings() -> str:
    """The bug and finding sections of docs/model-zoo.md, so the results file carries them."""
    doc = Path(__file__).resolve().parents[1] / "docs" / "model-zoo.md"
    if not doc.exists():
        return ""
    text = doc.read_text()
    start = text.find("## Bugs found and fixed")
    if start < 0:
        return ""
    return "\n(From docs/model-zoo.md.)\n\n" + text[start:].replace("## ", "### ")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(zoo.ZOO), help="comma-separated zoo names")
    ap.add_argument("--dtypes", default="f32,bf16")
    ap.add_argument("--strict", action="store_true", help="a fallback to eager is an error")
    ap.add_argument("--cache", action="store_true", help="use coil's kernel cache")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--write", help="write the markdown table here")
    args = ap.parse_args(argv)
    torch.set_num_threads(args.threads)
    results = []
    for name in args.models.split(","):
        for dt in args.dtypes.split(","):
            try:
                r = run_case(name, DTYPES[dt], strict=args.strict, cache=args.cache)
            except Exception:  # a bug of the runner itself: show it, keep going
                traceback.print_exc()
                r = CaseResult(name, dt, "error", detail="runner failed")
            print(f"{r.model:18} {r.dtype:5} {r.status:9} fwd={r.forward:5} bwd={r.backward:5} "
                  f"compile {r.compile_s:6.2f}s  {r.detail}", flush=True)
            results.append(r)
    table = _table(results)
    print(f"\n{_summary(results)}")
    if args.write:
        mode = "strict (fallback = error)" if args.strict else "fallbacks allowed"
        text = (f"# Model zoo: coil vs eager\n\nGenerated by `python3 bench/zoo_run.py "
                f"{' '.join(argv if argv is not None else sys.argv[1:])}` ({mode}, "
                f"torch {torch.__version__}, {args.threads} threads).\n\n"
                f"Summary: {_summary(results)}.\n\n{table}\n{_findings()}")
        Path(args.write).write_text(text)
    return 0 if all(r.status == "pass" for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
