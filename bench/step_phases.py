"""Where a dashboard model's training step goes, phase by phase, under eager, Inductor and coil.

    python3 bench/step_phases.py NAME [REPS]

Builds the model as bench/dashboard.py does (CPU size, dropout off), then times each phase of
the step (zero_grad, forward, loss, backward, optimizer step) with the three compilers
interleaved round by round, and prints the medians. The forward and backward phases include
Dynamo, AOTAutograd and the autograd engine as well as the compiled graphs; compare them with
`bench/dashboard_profile.py NAME --mode train` (coil's graphs alone) to see what lies outside.
One model per process: transformers' models re-guard Dynamo when several are built in one.
"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dashboard  # noqa: E402
import dashboard_models  # noqa: E402

PHASES = ["zero", "fwd", "loss", "bwd", "opt", "total"]


def phases(v) -> list[float]:
    t0 = time.perf_counter()
    v.opt.zero_grad(set_to_none=True)
    t1 = time.perf_counter()
    out = v.fn(*v.inputs)
    t2 = time.perf_counter()
    loss = v.loss_of(out)
    t3 = time.perf_counter()
    loss.backward()
    t4 = time.perf_counter()
    v.opt.step()
    t5 = time.perf_counter()
    return [t1 - t0, t2 - t1, t3 - t2, t4 - t3, t5 - t4, t5 - t0]


def main() -> None:
    name = sys.argv[1]
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 60
    torch.manual_seed(0)
    built = dashboard_models.get(name).build("cpu", "cpu")
    model = built.model
    dashboard._no_dropout(model)
    variants = {n: dashboard.Variant(n, model, tuple(built.inputs), "train",
                                     dashboard_models.loss_of)
                for n in ["eager", "inductor", "coil"]}
    for v in variants.values():
        for _ in range(3):
            phases(v)
    times: dict[str, list[list[float]]] = {n: [] for n in variants}
    for _ in range(reps):
        for n, v in variants.items():
            times[n].append(phases(v))
    for n, rows in times.items():
        cols = list(zip(*rows))
        print(f"{name:20s} {n:9s}",
              " ".join(f"{p}={statistics.median(c) * 1e3:6.2f}" for p, c in zip(PHASES, cols)))


if __name__ == "__main__":
    main()
