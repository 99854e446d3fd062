"""The PyTorch side of the example plugin: the op `torch.ops.coil_example.scaled_softsign` (its
eager kernel and fake function, so that eager runs and TorchDynamo traces it), and `load(path)`,
which loads the C++ plugin that gives coil the op's meta function and lowering (and the pass
coil_example_identity_arith and the backend coil_example_portable). Without the plugin, coil
runs the op through its per-op fallback.
"""

from __future__ import annotations

import torch

import coil


@torch.library.custom_op("coil_example::scaled_softsign", mutates_args=())
def scaled_softsign(x: torch.Tensor, scale: float) -> torch.Tensor:
    return scale * x / (1 + x.abs())


@scaled_softsign.register_fake
def _(x, scale):
    return torch.empty_like(x, dtype=x.dtype if x.is_floating_point() else torch.float32)


def load(path: str) -> coil.LoadedPlugin:
    """Loads the built plugin library (libcoil_example_plugin.so); a second call is a no-op."""
    return coil.load_plugin(path)
