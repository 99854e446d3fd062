"""Where a cold coil compile's time goes: PyTorch's tracing (Dynamo, AOTAutograd) against coil's
own stages (export, lowering, scheduling, code generation, the C++/NVRTC compiler, loading),
summed over the graphs of one case, and the first call's launch tuning.

    python bench/compile_profile.py --quick --cases gpt2_infer,resnet50_infer   # on the GPU
    python bench/compile_profile.py --tiny --device cpu --cases gpt2_infer      # anywhere

Every case compiles once with an empty kernel cache and coil's debug dump on; the per-stage
seconds are read from each graph's timings.json (written by the glue, coil/debug.py). "first
call" is the whole cold call (tracing + compile + one run, synchronized); "steady call" is a
later one; "tracing and the rest" is what is left of the first call after coil's stages and the
steady call: Dynamo, AOTAutograd, guards and the launch tuning of the first run.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

from gpu import Device, make_step, tf32  # noqa: E402
from gpu_models import CASES  # noqa: E402

# Per-graph keys of timings.json that are not seconds of a stage.
_NOT_STAGES = {"num_kernels", "cache_hit"}


def profile_case(case, size: str, device: str) -> None:
    import coil

    dev = Device(device)
    master, inputs = case.build(size)[:2]
    model = master.to(dev.device)
    inputs = tuple(x.to(dev.device) if isinstance(x, torch.Tensor) else x for x in inputs)
    dump = tempfile.mkdtemp(prefix="coil-compile-profile-")
    opts = {"debug": True, "debug_dir": dump, "cache_dir": tempfile.mkdtemp(prefix="coil-cc-")}
    torch._dynamo.reset()
    with tf32(case.tf32):
        target = torch.compile(model, backend="coil", options=opts)
        step = make_step(case, model, target)
        t0 = time.perf_counter()
        step(inputs)
        dev.sync()
        first = time.perf_counter() - t0
        step(inputs)
        dev.sync()
        t0 = time.perf_counter()
        step(inputs)
        dev.sync()
        steady = time.perf_counter() - t0
    stages: collections.Counter = collections.Counter()
    graphs = kernels = 0
    for root, _, files in os.walk(dump):
        if "timings.json" not in files:
            continue
        graphs += 1
        with open(os.path.join(root, "timings.json")) as f:
            t = json.load(f)
        kernels += int(t.get("num_kernels", 0))
        for k, v in t.items():
            if k not in _NOT_STAGES:
                stages[k] += float(v)
    # python_compile_call wraps the C++ stages; report it as the C++ total, not beside them.
    cpp_total = stages.pop("python_compile_call", 0.0)
    coil_total = stages.get("python_export", 0.0) + cpp_total
    print(f"\n=== {case.name} ({size}, {device}): first call {first:.2f} s, steady call "
          f"{steady * 1e3:.2f} ms; {graphs} graph(s), {kernels} kernels")
    print(f"  {coil_total:8.3f} s  coil (export + C++ pipeline)")
    for k, v in stages.most_common():
        print(f"  {v:8.3f} s    {k}")
    print(f"  {first - coil_total - steady:8.3f} s  tracing and the rest (Dynamo, AOTAutograd, "
          f"guards, first-run launch tuning)")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", default="gpt2_infer")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--tiny", action="store_true")
    ap.add_argument("--device", default="cuda")
    args = ap.parse_args(argv)
    size = "tiny" if args.tiny else "quick" if args.quick else "full"
    for name in args.cases.split(","):
        profile_case(CASES[name.strip()], size, args.device)
    return 0


if __name__ == "__main__":
    sys.exit(main())
