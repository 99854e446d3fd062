"""Per-tensor accuracy of a dashboard model's training step: coil against eager, both against
float64 (the rule of bench/accuracy.py, one line per tensor over the factor).

    python3 bench/grad_accuracy.py NAME [coil option=0|1 ...]

Prints the loss and the first parameters, then every gradient whose RMSE against the float64
model is more than 2x eager's (+1e-5), in parameter order, and a count. In a network, the
parameter deepest in the model (the last one printed) is the first the backward reaches, so it
is where an error enters. Known pattern: a BatchNorm whose bias gradient is bad while its weight
gradient is fine comes from a ReLU after it that flipped at an element where the BatchNorm
output is near zero (docs/decisions.md, "Float sums accumulate in blocks").
"""

from __future__ import annotations

import copy
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import dashboard  # noqa: E402
import dashboard_models  # noqa: E402


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a.detach().double() - b.double()) ** 2).mean().sqrt())


def main() -> None:
    name = sys.argv[1]
    options = {k: v == "1" for k, v in (o.split("=") for o in sys.argv[2:])}
    import coil  # noqa: F401

    torch.manual_seed(0)
    built = dashboard_models.get(name).build("cpu", "cpu")
    model, inputs = built.model, tuple(built.inputs)
    dashboard._no_dropout(model)

    def grads(m, inp, fn=None):
        m.zero_grad(set_to_none=True)
        loss = dashboard_models.loss_of((fn if fn is not None else m)(*inp))
        loss.backward()
        return [loss.detach()] + [p.grad for p in m.parameters()]

    ref = grads(copy.deepcopy(model).double(), dashboard._cast_inputs(inputs, torch.float64))
    eager = grads(copy.deepcopy(model), inputs)
    m = copy.deepcopy(model)
    kw = {"options": options} if options else {}
    got = grads(m, inputs, torch.compile(m, backend="coil", **kw))
    names = ["loss"] + [n for n, _ in model.named_parameters()]
    bad = 0
    for i, (n, g, e, r) in enumerate(zip(names, got, eager, ref)):
        if g is None or e is None:
            continue
        re_, rg = _rmse(e, r), _rmse(g, r)
        over = rg > 2 * re_ + 1e-5
        bad += over
        if i < 4 or over:
            print(f"out[{i}] {n:50s} eager {re_:.3g} coil {rg:.3g} ratio {rg / max(re_, 1e-30):.3g}")
    print(f"{bad} of {len(names)} tensors over the rule")


if __name__ == "__main__":
    main()
