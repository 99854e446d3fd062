"""Two sets of coil options on one dashboard model, on the CPU, in one process, steps interleaved.

    python bench/cpu_options_ab.py timm_efficientnet_b0 --mode train \
        --a recompute_cheap_values=1 --b recompute_cheap_values=0 [--rounds 7 --steps 3]

Both variants compile the same weights and inputs (bench/dashboard_models.py at its "cpu" size,
float32, dropout off); their steps (a training step is forward, loss, backward and SGD) are
timed round by round, alternately, so a noisy machine slows both alike. It prints each
variant's first two steps (compilation included), the fastest and the median round, and the
ratio of the medians (> 1: a is faster). The GPU's counterpart is bench/dashboard_kernels.py
(--variants coil,coil_b).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)


import coil  # noqa: E402,F401  (registers the backend where the entry point is not installed)
import dashboard  # noqa: E402
import dashboard_models  # noqa: E402
from dashboard_kernels import make_step, parse_options  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--mode", choices=("infer", "train"), default="train")
    ap.add_argument("--a", default="", help="k=v,... coil options of variant a")
    ap.add_argument("--b", default="", help="k=v,... coil options of variant b")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=3, help="steps a round")
    a = ap.parse_args()

    built = dashboard_models.get(a.model).build("cpu", "cpu")
    model = built.model
    dashboard._no_dropout(model)
    if a.mode == "infer":
        model.eval()
    inputs = tuple(built.inputs)
    steps = {v: make_step(model, inputs, a.mode, "coil", None, parse_options(getattr(a, v)))
             for v in ("a", "b")}
    for v, s in steps.items():
        t = time.perf_counter()
        s()
        s()
        print(f"{v}: first two steps {time.perf_counter() - t:.1f} s", flush=True)
    rounds: dict[str, list[float]] = {v: [] for v in steps}
    for _ in range(a.rounds):
        for v, s in steps.items():
            t = time.perf_counter()
            for _ in range(a.steps):
                s()
            rounds[v].append((time.perf_counter() - t) / a.steps * 1e3)
    med = {}
    for v, xs in rounds.items():
        xs = sorted(xs)
        med[v] = xs[len(xs) // 2]
        print(f"{a.model} {a.mode} {v} ({getattr(a, v) or 'defaults'}): "
              f"min {xs[0]:.2f} ms, median {med[v]:.2f} ms")
    print(f"{a.model} {a.mode}: b / a (medians) {med['b'] / med['a']:.3f} (> 1: a is faster)")


if __name__ == "__main__":
    main()
