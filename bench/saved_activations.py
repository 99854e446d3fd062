"""What a training step's forward saves for the backward, per partition, without a GPU.

    python bench/saved_activations.py tv_mobilenet_v2 hf_t5 [--partitions coil,mincut,default]
    python bench/saved_activations.py hf_gpt2 --amp    # the train_bf16 step

A training step's peak memory is mostly the activations the forward saves. This traces a
dashboard model's step (bench/dashboard_models.py, built at the GPU batch size, on the CPU)
through AOTAutograd three ways and sums the bytes of the forward's non-input outputs:
- coil: coil's decompositions and partition (python/coil/partition.py), with the pointwise
  recompute that runs on the GPU (recompute_pointwise) forced on;
- mincut: Inductor's decompositions and its min-cut partition, what Inductor saves;
- default: coil's decompositions and AOTAutograd's default partition, with no pass.
It prints the total and the largest kinds of saved values. The figures are saved bytes, not a
GPU peak (the dashboard's `peak MB` column measures that), but they say which partition saves
what, in seconds to minutes on a laptop.
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import functools
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402
from torch._dynamo.backends.common import aot_autograd  # noqa: E402
from torch._functorch.partitioners import (default_partition,  # noqa: E402
                                           min_cut_rematerialization_partition)
import torch._inductor.lowering  # noqa: E402,F401  (min-cut reads its fallback set; not imported otherwise)

from coil import coil_decompositions  # noqa: E402
from coil import partition as coil_partition  # noqa: E402
import dashboard  # noqa: E402
import dashboard_models  # noqa: E402

MIB = 1 << 20


def _kind(node) -> str:
    if node.op != "call_function":
        return node.op
    return getattr(node.target, "__name__", str(node.target))


def saved_by(model, inputs, partition_fn, decompositions,
             amp: bool = False) -> tuple[int, dict[str, int]]:
    """Bytes of the forward's saved (non-input) outputs, and the same by the op producing them."""
    seen: dict = {}

    def forward_compiler(gm, example_inputs):
        outputs = gm.graph.find_nodes(op="output")[0].args[0]
        kinds: dict[str, int] = {}
        for o in outputs:
            v = o.meta.get("val") if hasattr(o, "meta") else None
            if isinstance(v, torch.Tensor) and o.op != "placeholder":
                kinds[_kind(o)] = kinds.get(_kind(o), 0) + v.numel() * v.element_size()
        seen["kinds"] = kinds
        return gm

    torch._dynamo.reset()
    m = copy.deepcopy(model)
    f = torch.compile(m, backend=aot_autograd(
        fw_compiler=forward_compiler, bw_compiler=lambda gm, ex: gm,
        partition_fn=partition_fn, decompositions=decompositions))
    # --amp: the forward and loss under bfloat16 autocast, as the dashboard's train_bf16.
    with (torch.autocast("cpu", dtype=torch.bfloat16) if amp else contextlib.nullcontext()):
        loss = dashboard_models.loss_of(f(*inputs))
    loss.backward()
    kinds = seen.get("kinds", {})
    return sum(kinds.values()), kinds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+")
    ap.add_argument("--partitions", default="coil,mincut,default")
    ap.add_argument("--amp", action="store_true", help="bfloat16 autocast (train_bf16)")
    a = ap.parse_args()

    coil_partition._on_cuda = lambda joint: True  # partition as the GPU path does
    from torch._inductor.decomposition import select_decomp_table

    ways = {
        "coil": (functools.partial(coil_partition._default_partition_taking_values_again,
                                   recompute_pointwise=True), coil_decompositions()),
        "mincut": (functools.partial(min_cut_rematerialization_partition, compiler="inductor"),
                   select_decomp_table()),
        "default": (default_partition, coil_decompositions()),
    }
    for name in a.models:
        built = dashboard_models.get(name).build("cpu", "gpu")
        model = built.model
        dashboard._no_dropout(model)
        for way in a.partitions.split(","):
            total, kinds = saved_by(model, tuple(built.inputs), *ways[way], amp=a.amp)
            top = sorted(kinds.items(), key=lambda kv: -kv[1])[:6]
            print(f"{name} {way}: saved {total / MIB:.0f} MiB; "
                  + ", ".join(f"{k} {b / MIB:.0f}" for k, b in top), flush=True)


if __name__ == "__main__":
    main()
