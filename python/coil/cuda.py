"""The Python side of coil's CUDA backend (docs/cuda-backend.md).

C++ does the work (src/backend/cuda, src/runtime/cuda_steps.cpp); this module only gives it
what lives in PyTorch's world: where the NVRTC library of the installed CUDA wheels is, whether
fp32 matmuls may use TF32 (torch's flag), the current stream and an allocator backed by
PyTorch's caching allocator for every run.
"""

from __future__ import annotations

import functools
import glob
import os
import sys
from typing import Any, Callable

import torch


def graph_on_cuda(example_inputs) -> bool:
    return any(isinstance(x, torch.Tensor) and x.device.type == "cuda" for x in example_inputs)


class DeviceMismatch(RuntimeError):
    """A graph whose tensors live on several CUDA devices (it runs eagerly, with this reason)."""


def graph_device_index(gm, example_inputs) -> int:
    """The one CUDA device a graph runs on: the index its CUDA inputs and the devices its nodes
    name (factory calls' device=) share. CPU tensors among them are left to the export (0-d
    scalars are read on the host). DeviceMismatch where two indices meet."""
    seen: dict[int, str] = {}

    def note(dev, where: str) -> None:
        if isinstance(dev, torch.device) and dev.type == "cuda":
            seen.setdefault(dev.index if dev.index is not None else torch.cuda.current_device(),
                            where)

    for i, x in enumerate(example_inputs):
        if isinstance(x, torch.Tensor):
            note(x.device, f"input {i}")
    for node in gm.graph.nodes:
        for a in list(node.args) + list(node.kwargs.values()):
            note(a, f"node {node.name}")
        val = node.meta.get("val")
        if isinstance(val, torch.Tensor):
            note(val.device, f"node {node.name}")
    if len(seen) > 1:
        raise DeviceMismatch("tensors on several CUDA devices (" + ", ".join(
            f"cuda:{i} at {w}" for i, w in sorted(seen.items())) + ")")
    return next(iter(seen), 0)


@functools.lru_cache(maxsize=1)
def nvrtc_path() -> str:
    """libnvrtc from the nvidia-cuda-nvrtc wheel PyTorch depends on ("" = let C++ try sonames)."""
    for base in sys.path:
        for pattern in ("nvidia/cu13/lib/libnvrtc.so*", "nvidia/cuda_nvrtc/lib/libnvrtc.so*",
                        "nvidia/cu12/lib/libnvrtc.so*"):
            for path in sorted(glob.glob(os.path.join(base, pattern))):
                if "builtins" not in os.path.basename(path) and "alt" not in path:
                    return path
    return ""


def allow_tf32() -> bool:
    """Whether PyTorch lets float32 matmuls use TF32, whichever of its switches said so
    (set_float32_matmul_precision, the fp32_precision API of torch >= 2.9, allow_tf32)."""
    if torch.get_float32_matmul_precision() in ("high", "medium"):
        return True
    if getattr(torch.backends.cuda.matmul, "fp32_precision", None) == "tf32":
        return True
    return bool(torch.backends.cuda.matmul.allow_tf32)


def compile_options() -> dict[str, Any]:
    """CompileOptions fields that a CUDA graph takes from PyTorch's state at compile time."""
    return {"cuda_nvrtc_path": nvrtc_path(), "cuda_allow_tf32": allow_tf32(),
            "cuda_conv_allow_tf32": bool(torch.backends.cudnn.allow_tf32)}


def _allocate(nbytes: int) -> torch.Tensor:
    # On the current device: the glue makes the graph's device current around each call.
    return torch.empty(max(int(nbytes), 1), dtype=torch.uint8, device="cuda")


def run_kwargs() -> dict[str, Any]:
    """Per call: PyTorch's current stream and its caching allocator (of the current device,
    which the caller made the graph's)."""
    return {"stream": torch.cuda.current_stream().cuda_stream, "alloc": _allocate}


def unavailable_reason(C, options: dict[str, Any]) -> str:
    """'' when this process can compile CUDA graphs, else a one-line reason."""
    if not hasattr(C, "cuda_unavailable_reason"):
        return "this coil build has no CUDA backend"
    return C.cuda_unavailable_reason(options)
