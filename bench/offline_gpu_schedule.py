"""The GPU schedule of a dashboard model, without a GPU: traffic, kernel count and peak.

    python3 bench/offline_gpu_schedule.py hf_gpt2 --mode train_bf16
    python3 bench/offline_gpu_schedule.py hf_distilbert --mode train --keep /tmp/distil

The model is built at its GPU size on the CPU (dashboard_models' `build("cpu", "gpu")`, dropout
off as in the dashboard) and run once under torch.compile(backend="coil") with the debug dump on
and the partition's GPU rules forced, so the forward and backward graphs are the ones a GPU run
would compile, except attention: the CPU traces scaled_dot_product_attention as its math or
flash-for-CPU composition, where the GPU calls a fused kernel (bf16 models whose masks fold).
Each dumped graph's tensor types are then given `@cuda` and `coil-opt --emit=fusion` schedules
it with the CUDA backend's policy. Printed per graph: kernels, the bytes the kernels read and
write (each schedule's `kernels' traffic`), the peak of intermediates held at once (allocs and
frees of the schedule), and the fusion refusals by reason. Compare two commits' schedules with
it before and after a scheduling change (docs/benchmarks.md: "Looking at GPU kernels without a
GPU"); `--emit cuda` writes each graph's kernels, and `--compile` also builds them with NVRTC.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT / "bench"), str(ROOT / "python")]

# A tensor type of the graph text: dtype, sizes, optional strides and storage offset.
_TYPE = re.compile(r"((?:f32|f16|bf16|f64|i64|i32|i16|i8|u8|b8|bool)\[[^\]]*\](?:\{[^}]*\})?"
                   r"(?:\+\d+)?)")


def on_cuda(graph_text: str) -> str:
    """The graph text with every tensor type (and device argument) on the GPU."""
    return _TYPE.sub(r"\1@cuda", graph_text).replace("device(cpu)", "device(cuda)")


def trace(name: str, mode: str, dump: Path) -> None:
    """Runs the model's step once at its GPU size on the CPU with the debug dump in `dump`."""
    import torch

    import dashboard
    import dashboard_models
    from coil import partition

    partition._on_cuda = lambda joint: True  # the partition's GPU rules, as on a GPU
    torch.manual_seed(0)
    built = dashboard_models.get(name).build("cpu", "gpu")
    model, inputs = built.model, tuple(built.inputs)
    dashboard._no_dropout(model)
    opts = {"debug": True, "debug_dir": str(dump)}
    if mode == "infer":
        model = model.eval().to(torch.bfloat16)
        with torch.no_grad():
            torch.compile(model, backend="coil", options=opts)(*inputs)
        return
    amp = ((lambda: torch.autocast("cpu", dtype=torch.bfloat16)) if mode == "train_bf16"
           else contextlib.nullcontext)
    fn = torch.compile(model, backend="coil", options=opts)
    with amp():
        loss = dashboard_models.loss_of(fn(*inputs))
    loss.backward()


def peak_bytes(schedule: str) -> int:
    """The most bytes of intermediate storage a schedule's text holds at once."""
    live: dict[str, int] = {}
    cur = peak = 0
    for line in schedule.splitlines():
        if m := re.match(r"alloc (storage\d+): (\d+) bytes", line):
            live[m.group(1)] = int(m.group(2))
            cur += int(m.group(2))
            peak = max(peak, cur)
        elif (m := re.match(r"free (storage\d+)", line)) and m.group(1) in live:
            cur -= live.pop(m.group(1))
    return peak


def summarize(fusion: str) -> dict:
    traffic = re.search(r"kernels' traffic: reads ~?(\d+), writes ~?(\d+)", fusion)
    refusals = collections.Counter(
        re.sub(r"buf\d+|kernel\d+|step \d+", "#", m.group(1))
        for m in re.finditer(r"^not fused \S+ into \S+ ?(.*)$", fusion, re.M))
    return {"kernels": len(re.findall(r"^\w*kernel\d+ over ", fusion, re.M)),
            "reads": int(traffic.group(1)) if traffic else 0,
            "writes": int(traffic.group(2)) if traffic else 0,
            "peak": peak_bytes(fusion), "refusals": refusals}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("model")
    ap.add_argument("--mode", default="train", choices=["infer", "train", "train_bf16"])
    ap.add_argument("--keep", help="folder for the dump and the CUDA graphs (default: a temp)")
    ap.add_argument("--coil-opt", default=None, help="the coil-opt binary (default: the build's)")
    ap.add_argument("--emit", choices=["fusion", "cuda"], default="fusion")
    ap.add_argument("--compile", action="store_true", help="with --emit cuda: NVRTC-compile")
    ap.add_argument("--refusals", type=int, default=6, help="most frequent refusals to print")
    a = ap.parse_args()
    tool = a.coil_opt or next(iter(sorted(ROOT.glob("build/*/coil-opt"))), None)
    if tool is None:
        sys.exit("coil-opt not found: build coil first (scripts/setup.sh) or pass --coil-opt")
    out = Path(a.keep or tempfile.mkdtemp(prefix="coil_offline_"))
    dump = out / "dump"
    trace(a.model, a.mode, dump)
    graphs = sorted(dump.glob("*/01_graph.txt"))
    if not graphs:
        sys.exit(f"no graph was dumped in {dump}")
    for g in graphs:
        name = g.parent.name
        cuda = out / f"{name}.cuda.txt"
        cuda.write_text(on_cuda(g.read_text()))
        cmd = [str(tool), str(cuda), "--emit=fusion"]
        fusion = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
        (out / f"{name}.fusion.txt").write_text(fusion)
        s = summarize(fusion)
        print(f"{name}: {s['kernels']} kernels, reads {s['reads'] / 1e9:.3f} GB, writes "
              f"{s['writes'] / 1e9:.3f} GB, intermediates' peak {s['peak'] / 1e9:.3f} GB")
        for why, n in s["refusals"].most_common(a.refusals):
            print(f"    {n:4d} x not fused {why}")
        if a.emit == "cuda":
            cmd = [str(tool), str(cuda), "--emit=cuda"] + (["--compile"] if a.compile else [])
            r = subprocess.run(cmd, capture_output=True, text=True)
            (out / f"{name}.cu").write_text(r.stdout)
            if a.compile:
                print("    " + (r.stdout.strip().splitlines() or [r.stderr.strip()])[-1])
    print(f"files in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
