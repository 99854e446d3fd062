"""Interleaved A/B of coil's static and dynamic compiles of one model, in one process: per size,
15 rounds of (eager, static, dynamic) calls, medians and the dynamic/static ratio. On the 2-core
dev box the separate processes of bench/dynamic.py vary by 10-20% from run to run (the load of
other work moves between them); interleaving puts the same noise on both compiles. Inference.

  PYTHONPATH=python python bench/dynamic_ab.py gpt2 2,32 3,77 8,128
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import coil  # noqa: E402,F401  (registers the backend in a development tree)
import models  # noqa: E402


def _inputs(name, b, t):
    g = torch.Generator().manual_seed(0)
    if name == "transformer_block":
        return torch.randn(b, t, 256, generator=g)
    if name == "gpt2":
        return torch.randint(0, 4096, (b, t), generator=g)
    return torch.randn(b, 3, t, t, generator=g)


def main():
    name = sys.argv[1]
    sizes = [tuple(int(v) for v in s.split(",")) for s in sys.argv[2:]]
    model, _ = models.MODELS[name][0]("test" if name == "resnet18_eval" else "bench")
    model = model.eval()
    with torch.no_grad():
        dyn = torch.compile(model, backend="coil", dynamic=True)
        dyn(_inputs(name, *sizes[0]))
        for s in sizes:
            static = torch.compile(model, backend="coil", dynamic=False)
            x = _inputs(name, *s)
            static(x)
            dyn(x)
            times = {"eager": [], "static": [], "dynamic": []}
            for _ in range(15):
                for key, fn in (("eager", model), ("static", static), ("dynamic", dyn)):
                    t0 = time.perf_counter()
                    fn(x)
                    times[key].append(time.perf_counter() - t0)
            med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
            print(f"{name} {s}: " + " ".join(f"{k} {v:.2f} ms" for k, v in med.items()) +
                  f"  dynamic/static {med['dynamic'] / med['static']:.2f}", flush=True)


if __name__ == "__main__":
    main()
