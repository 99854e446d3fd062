"""Static vs dynamic compilation (docs/dynamic-shapes.md), per model, beside Inductor's
dynamic mode: cold compile time (first call: Dynamo + AOTAutograd + coil/Inductor, with an empty
kernel cache), coil's own part of it (export + C++ pipeline + g++, summed over the graphs), and
run time at three sizes. Inference (torch.no_grad).

  coil static    torch.compile(backend="coil", dynamic=False): one compile per size
  coil dynamic   torch.compile(backend="coil", dynamic=True): one compile for all sizes
  inductor dyn   torch.compile(dynamic=True) (Inductor, fresh cache)

Each (model, mode) runs in its own process (fresh caches, Dynamo warmed up on a toy function
first so that one-time import costs are not counted). Run:

  PYTHONPATH=python python bench/dynamic.py [--models transformer_block,gpt2,resnet18_eval]
      [--out bench/results/dynamic.md]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

# model -> three input sizes (batch, seq) or (batch, image side)
SIZES = {
    "transformer_block": [(2, 64), (5, 127), (8, 256)],
    "gpt2": [(2, 32), (3, 77), (8, 128)],
    "resnet18_eval": [(2, 32), (5, 32), (16, 32)],
}
MODES = ["coil_static", "coil_dynamic", "inductor_dynamic"]


def _inputs(name, size, torch):
    b, t = size
    g = torch.Generator().manual_seed(0)
    if name == "transformer_block":
        return (torch.randn(b, t, 256, generator=g),)
    if name == "gpt2":
        return (torch.randint(0, 4096, (b, t), generator=g),)
    return (torch.randn(b, 3, t, t, generator=g),)


def _model(name):
    import models as zoo

    builder, _ = zoo.MODELS[name]
    # resnet18 at bench size is minutes per call on 2 cores: its test width, 32x32 images.
    model, _ = builder("test" if name == "resnet18_eval" else "bench")
    return model.eval()


def _time_runs(fn, inputs, torch, n=10):
    with torch.no_grad():
        for _ in range(2):
            fn(*inputs)
        ts = []
        for _ in range(n):
            t0 = time.perf_counter()
            fn(*inputs)
            ts.append(time.perf_counter() - t0)
    return statistics.median(ts) * 1e3


def one(name: str, mode: str) -> dict:
    """Runs in a child process; returns compile seconds and run ms per size."""
    import torch

    sys.path.insert(0, str(ROOT / "bench"))
    import coil

    import coil.backend as cb

    # coil's own compile time: every compile_aten_graph call (export, C++ pipeline, g++).
    coil_seconds = [0.0]
    inner = cb.compile_aten_graph

    def timed(*a, **k):
        t0 = time.perf_counter()
        try:
            return inner(*a, **k)
        finally:
            coil_seconds[0] += time.perf_counter() - t0

    cb.compile_aten_graph = timed
    cache = tempfile.mkdtemp(prefix="coil-bench-")
    opts = {"cache_dir": cache}
    # Warm Dynamo/AOTAutograd up on a toy function (import and first-use costs).
    warm = torch.compile(lambda x: x * 2 + 1, backend="coil" if mode.startswith("coil") else
                         "inductor", options=opts if mode.startswith("coil") else None)
    warm(torch.randn(4))
    torch._dynamo.reset()
    coil.reset_report()
    coil_seconds[0] = 0.0
    model = _model(name)
    sizes = SIZES[name]
    out = {"model": name, "mode": mode, "compile_s": [], "coil_s": [], "run_ms": [],
           "graphs": 0}
    eager = [_time_runs(model, _inputs(name, s, torch), torch) for s in sizes]
    out["eager_ms"] = eager

    def first_call(fn, inputs):
        t0 = time.perf_counter()
        with torch.no_grad():
            fn(*inputs)
        return time.perf_counter() - t0

    if mode == "coil_static":
        for s in sizes:
            torch._dynamo.reset()
            opts = {"cache_dir": tempfile.mkdtemp(prefix="coil-bench-")}
            fn = torch.compile(model, backend="coil", dynamic=False, options=opts)
            x = _inputs(name, s, torch)
            coil_seconds[0] = 0.0
            out["compile_s"].append(first_call(fn, x))
            out["coil_s"].append(coil_seconds[0])
            out["run_ms"].append(_time_runs(fn, x, torch))
    else:
        if mode == "coil_dynamic":
            fn = torch.compile(model, backend="coil", dynamic=True, options=opts)
        else:
            fn = torch.compile(model, dynamic=True)
        out["compile_s"].append(first_call(fn, _inputs(name, sizes[0], torch)))
        out["coil_s"].append(coil_seconds[0])
        for s in sizes:
            out["run_ms"].append(_time_runs(fn, _inputs(name, s, torch), torch))
    r = coil.report()
    out["graphs"] = r.graphs_compiled
    out["fallen_back"] = [reason for _, reason in r.graphs_fallen_back]
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default=",".join(SIZES))
    ap.add_argument("--out", default="")
    ap.add_argument("--one", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print("RESULT " + json.dumps(one(*args.one)))
        return
    rows = []
    for name in args.models.split(","):
        for mode in MODES:
            env = dict(os.environ)
            env["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp(prefix="inductor-bench-")
            env["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
            p = subprocess.run([sys.executable, __file__, "--one", name, mode], env=env,
                               capture_output=True, text=True)
            line = [x for x in p.stdout.splitlines() if x.startswith("RESULT ")]
            if not line:
                print(f"{name} {mode}: failed\n{p.stderr[-2000:]}", file=sys.stderr)
                continue
            r = json.loads(line[0][7:])
            rows.append(r)
            print(json.dumps(r), flush=True)
    text = render(rows)
    print(text)
    if args.out:
        Path(args.out).write_text(text)


def render(rows) -> str:
    lines = []
    for name in dict.fromkeys(r["model"] for r in rows):
        sizes = SIZES[name]
        lines.append(f"### {name}\n")
        head = "| mode | first call s | coil part s | " + \
            " | ".join(f"run ms {s}" for s in sizes) + " | coil graphs |"
        lines += [head, "|" + "---|" * (4 + len(sizes))]
        eager = None
        for r in rows:
            if r["model"] != name:
                continue
            eager = r["eager_ms"]
            comp = " + ".join(f"{c:.1f}" for c in r["compile_s"])
            if len(r["compile_s"]) > 1:
                comp += f" = {sum(r['compile_s']):.1f}"
            coil_s = " + ".join(f"{c:.2f}" for c in r["coil_s"]) if r["mode"].startswith(
                "coil") else "-"
            runs = " | ".join(f"{m:.2f}" for m in r["run_ms"])
            graphs = r["graphs"] if r["mode"].startswith("coil") else "-"
            fb = f" ({len(r['fallen_back'])} eager)" if r["fallen_back"] else ""
            lines.append(f"| {r['mode']} | {comp} | {coil_s} | {runs} | {graphs}{fb} |")
        if eager:
            lines.append("| eager | - | - | " + " | ".join(f"{m:.2f}" for m in eager) + " | - |")
        lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
