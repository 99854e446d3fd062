"""Benchmark harness: eager vs Inductor vs coil, side by side, on the model set of bench/models.py.

Each (model, compiler) runs in its own subprocess, so cold compile times start from a fresh
process and an empty cache, and peak memory is not polluted by the other compilers. Per model it
prints: run time (median after warm-up), speedup over eager, coil's ratio to Inductor, cold and
warm compile time of each compiler, peak memory of the steady-state runs, and accuracy against
eager (max abs error of outputs and, for training models, of the gradients).

    python bench/run.py                       # all models, print the table
    python bench/run.py --models gpt2 mlp_sgd --repeat 20
    python bench/run.py --write bench/results/cpu.md   # also write the results table
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
from harness import fmt, machine, median_host_time, reset_peak_rss, rss_kib  # noqa: E402

COMPILERS = ("eager", "inductor", "coil")


# --------------------------------------------------------------------------------------------
# child process: one model, one compiler


def _make_step(model, inputs, trains: bool):
    import torch

    if trains:

        def step():
            for p in model.parameters():
                p.grad = None
            loss = model(*inputs)
            loss.backward()
            return loss

    else:

        def step():
            with torch.no_grad():
                return model(*inputs)

    return step


def _result_tensors(model, out, trains: bool):
    import torch

    outs = [out] if isinstance(out, torch.Tensor) else list(out)
    if trains:
        outs += [p.grad for p in model.parameters() if p.grad is not None]
    return [o.detach().float() for o in outs]


def run_one(name: str, compiler: str, size: str, dtype: str, repeat: int) -> dict:
    sys.path.insert(0, HERE)
    import torch
    import models as zoo

    builder, trains = zoo.MODELS[name]
    model, inputs = builder(size)
    if dtype == "bf16":
        model, inputs = zoo.to_bf16(model, inputs)
    reference_model = copy.deepcopy(model)
    ref_out = _make_step(reference_model, inputs, trains)()
    reference = _result_tensors(reference_model, ref_out, trains)

    result = {"model": name, "compiler": compiler, "dtype": dtype}
    if compiler == "eager":
        target = model
    else:
        cache = tempfile.mkdtemp(prefix=f"coil-bench-{compiler}-")
        if compiler == "inductor":
            os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
            target = torch.compile(model)
        else:
            os.environ["COIL_CACHE_DIR"] = cache
            import coil  # noqa: F401  (the entry point also finds it; importing reports errors early)

            target = torch.compile(model, backend="coil")

    step = _make_step(target, inputs, trains)
    t0 = time.perf_counter()
    out = step()
    first_call = time.perf_counter() - t0
    got = _result_tensors(target, out, trains)
    for _ in range(2):
        step()
    rss_before = rss_kib("VmRSS")
    reset_peak_rss()
    run_s = median_host_time(step, repeat)
    result["peak_mib"] = max(0, rss_kib("VmHWM") - rss_before) / 1024.0
    result["run_ms"] = run_s * 1e3
    if compiler != "eager":
        result["cold_compile_s"] = max(0.0, first_call - run_s)
        # Warm start: a fresh Dynamo state, the same on-disk caches.
        torch._dynamo.reset()
        target = torch.compile(model) if compiler == "inductor" else torch.compile(model, backend="coil")
        step = _make_step(target, inputs, trains)
        t0 = time.perf_counter()
        step()
        result["warm_compile_s"] = max(0.0, time.perf_counter() - t0 - run_s)
    if compiler == "coil":
        import coil

        rep = coil.report() if hasattr(coil, "report") else {}
        result["coil_report"] = rep if isinstance(rep, dict) else str(rep)
    errs = [
        (a - b).abs().max().item() if a.numel() else 0.0 for a, b in zip(got, reference)
    ]
    result["max_abs_err"] = max(errs) if errs else 0.0
    result["outputs_compared"] = len(errs)
    return result


# --------------------------------------------------------------------------------------------
# parent: run every child, print the table


def _child(name: str, compiler: str, args) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--one", name, compiler, "--size", args.size,
           "--dtype", args.dtype, "--repeat", str(args.repeat)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "python"), env.get("PYTHONPATH", "")])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=args.timeout)
    for line in reversed(proc.stdout.splitlines()):
        if line.startswith("{"):
            return json.loads(line)
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"model": name, "compiler": compiler, "error": tail[0][:160]}


def table(rows: dict, names: list[str]) -> str:
    head = ("| model | eager ms | Inductor ms | coil ms | Inductor speedup | coil speedup | "
            "coil/Inductor | Inductor cold s | coil cold s | Inductor warm s | coil warm s | RSS growth MiB, steady state, eager/ind/coil | "
            "max err ind / coil |")
    lines = [head, "|" + "|".join(["---"] * (head.count("|") - 1)) + "|"]
    for n in names:
        e, i, c = (rows.get((n, k), {}) for k in COMPILERS)
        em, im, cm = e.get("run_ms"), i.get("run_ms"), c.get("run_ms")
        sp_i = em / im if em and im else None
        sp_c = em / cm if em and cm else None
        ratio = im / cm if im and cm else None
        err = c.get("error") or i.get("error")
        peaks = "/".join(fmt(x.get("peak_mib"), "{:.0f}") for x in (e, i, c))
        errs = f"{fmt(i.get('max_abs_err'), '{:.1e}')} / {fmt(c.get('max_abs_err'), '{:.1e}')}"
        lines.append(
            f"| {n} | {fmt(em)} | {fmt(im)} | {fmt(cm)} | {fmt(sp_i)}x | {fmt(sp_c)}x | "
            f"{fmt(ratio)} | {fmt(i.get('cold_compile_s'))} | {fmt(c.get('cold_compile_s'))} | "
            f"{fmt(i.get('warm_compile_s'), '{:.3f}')} | {fmt(c.get('warm_compile_s'), '{:.3f}')} | {peaks} | {errs} |"
            + (f" error: {err}" if err else "")
        )
    return "\n".join(lines)


def main() -> None:
    sys.path.insert(0, HERE)
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--one", nargs=2, metavar=("MODEL", "COMPILER"), help=argparse.SUPPRESS)
    ap.add_argument("--models", nargs="*")
    ap.add_argument("--compilers", nargs="*", default=list(COMPILERS))
    ap.add_argument("--size", default="bench", choices=["test", "bench"])
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16"])
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--timeout", type=int, default=900)
    ap.add_argument("--write", help="write the markdown table to this file")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(run_one(args.one[0], args.one[1], args.size, args.dtype, args.repeat)))
        return

    import models as zoo

    names = args.models or list(zoo.MODELS)
    rows = {}
    for n in names:
        for comp in args.compilers:
            r = _child(n, comp, args)
            rows[(n, comp)] = r
            status = r.get("error") or f"{r.get('run_ms', 0):.2f} ms"
            print(f"  {n:18s} {comp:9s} {status}", file=sys.stderr, flush=True)
    text = table(rows, names)
    header = f"Machine: {machine()}\nSize: {args.size}, dtype: {args.dtype}, median of {args.repeat} runs\n"
    print(header)
    print(text)
    reports = {n: rows.get((n, "coil"), {}).get("coil_report") for n in names}
    if any(reports.values()):
        print("\ncoil fallbacks per model:")
        for n, rep in reports.items():
            print(f"  {n}: {rep}")
    if args.write:
        os.makedirs(os.path.dirname(os.path.abspath(args.write)), exist_ok=True)
        with open(args.write, "w") as f:
            f.write(f"# coil CPU benchmark\n\n{header}\nCommand: `python bench/run.py --write {args.write}`\n\n{text}\n")


if __name__ == "__main__":
    main()
