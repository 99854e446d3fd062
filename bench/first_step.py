"""Seconds to a dashboard model's first step in this process: run it twice, in two processes,
to see what a re-run of a training script pays once every cache on disk is filled.

    python bench/first_step.py tv_mobilenet_v3_small --mode train --compiler coil
    python bench/first_step.py hf_gpt2 --mode train --compiler inductor

The dashboard's "warm compile" column recompiles in the process that compiled first (after
torch._dynamo.reset(), PyTorch's in-memory caches still warm); this is the other warm case, a
new process with the disk caches (coil's kernels, Inductor's FX graph and AOTAutograd caches)
filled by an earlier run. The model is built at the CPU dashboard's size on the CPU.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

t_start = time.perf_counter()
HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "python")]

import dashboard_models  # noqa: E402
from dashboard import Variant  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--mode", choices=("infer", "train", "train_bf16"), default="train")
    ap.add_argument("--compiler", choices=("coil", "inductor"), default="coil")
    a = ap.parse_args()
    built = dashboard_models.get(a.model).build("cpu", "cpu")
    v = Variant(a.compiler, built.model, built.inputs, a.mode, dashboard_models.loss_of)
    t0 = time.perf_counter()
    v.step()
    t1 = time.perf_counter()
    v.step()
    t2 = time.perf_counter()
    print(f"{a.model} {a.mode} {a.compiler}: first step {t1 - t0:.2f} s, second "
          f"{(t2 - t1) * 1e3:.1f} ms, process start to first step {t1 - t_start:.2f} s")


if __name__ == "__main__":
    main()
