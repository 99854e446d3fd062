"""Where a dashboard model's coil step spends its time: coil.profile_report() of one model.

    python3 bench/dashboard_profile.py NAME [--mode infer|train] [--runs 5] [--top 15]

Builds the model as bench/dashboard.py does (size "cpu", or "gpu" with --device cuda),
compiles it with coil, warms it up, then profiles --runs steps. Run it on an idle machine: on
a shared 2-core CPU every figure moves with whatever else runs.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dashboard  # noqa: E402
import dashboard_models  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("name")
    p.add_argument("--mode", choices=["infer", "train"], default="infer")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--runs", type=int, default=5)
    p.add_argument("--top", type=int, default=15)
    a = p.parse_args()
    import coil

    built = dashboard_models.get(a.name).build(a.device, "gpu" if a.device == "cuda" else "cpu")
    model = built.model.eval() if a.mode == "infer" else built.model.train()
    dashboard._no_dropout(model)  # as the dashboard runs it
    compiled = torch.compile(model, backend="coil")

    def step():
        if a.mode == "infer":
            with torch.no_grad():
                return compiled(*built.inputs)
        model.zero_grad(set_to_none=True)
        dashboard_models.loss_of(compiled(*built.inputs)).backward()

    step()
    step()
    coil.set_profiling(True)
    for _ in range(a.runs):
        step()
    print(coil.profile_report(top=a.top))


if __name__ == "__main__":
    main()
