"""Gradient accuracy of a deep residual conv-BatchNorm net's training step, against float64.

    python3 bench/bn_depth_accuracy.py [--blocks 12] [--backend coil|inductor] [key=0|1 ...]

Prints, over the parameter gradients, the median and max ratio of the backend's error (RMSE vs
the float64 model) to eager float32's, and how many exceed the dashboard's factor 2. Options
after the flags are coil options (cpu_native_convolutions=0 channels_last=0).

History (2026-11-27, 2 cores). With the default weights (seed 0, 16 discarded layers, 12
blocks) coil's ratio was ~1850: gradient RMSE 3e-4, against 2e-7 for eager and 3e-7 for
Inductor (ratio ~5). The cause: one ReLU input of block 9, 5e-6 in float64, changed sign in
coil's forward pass, because coil's BatchNorm statistics summed in one float accumulator. Float
sums now accumulate in blocks, in double across blocks (docs/decisions.md, "Float sums
accumulate in blocks"), and the ratio is ~0.87. tests/python/test_reduction_accuracy.py keeps
this network as a test.
"""

from __future__ import annotations

import argparse
import copy
import statistics

import torch
import torch.nn as nn


class Residual(nn.Module):
    def __init__(self, blocks: int, c: int = 16):
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c), nn.ReLU(),
                          nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c))
            for _ in range(blocks))

    def forward(self, x):
        for b in self.blocks:
            x = torch.relu(x + b(x))
        return x


def _grads(model, x, fn=None):
    model.zero_grad(set_to_none=True)
    (fn if fn is not None else model)(x).square().mean().backward()
    return [p.grad.detach().clone() for p in model.parameters()]


def _rmse(a, b) -> float:
    return float(((a.double() - b.double()) ** 2).mean().sqrt())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--blocks", type=int, default=12)
    p.add_argument("--backend", default="coil")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--discard", type=int, default=16,
                   help="conv-BN layers drawn (and dropped) before the model's weights")
    p.add_argument("options", nargs="*")
    a = p.parse_args()
    options = {k: v == "1" for k, v in (o.split("=") for o in a.options)}
    if a.backend == "coil":
        import coil  # noqa: F401
    torch.manual_seed(a.seed)
    for _ in range(a.discard):  # moves the generator: the weights below depend on it
        nn.Conv2d(16, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
    model = Residual(a.blocks).train()
    x = torch.randn(2, 16, 32, 32)
    ref = _grads(copy.deepcopy(model).double(), x.double())
    eager = _grads(copy.deepcopy(model), x)
    m = copy.deepcopy(model)
    kw = {"options": options} if a.backend == "coil" else {}
    got = _grads(m, x, torch.compile(m, backend=a.backend, **kw))
    ratios = [_rmse(g, r) / max(_rmse(e, r), 1e-30) for g, e, r in zip(got, eager, ref)]
    print(f"{a.backend} {options or ''}: error / eager's error: median {statistics.median(ratios):.3g},"
          f" max {max(ratios):.3g}; above 2: {sum(r > 2 for r in ratios)} of {len(ratios)};"
          f" first gradient RMSE {_rmse(got[0], ref[0]):.3g} (eager {_rmse(eager[0], ref[0]):.3g})")


if __name__ == "__main__":
    main()
