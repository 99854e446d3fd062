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
    return torch.empty(max(int(nbytes), 1), dtype=torch.uint8, device="cuda")


def run_kwargs() -> dict[str, Any]:
    """Per call: PyTorch's current stream and its caching allocator."""
    return {"stream": torch.cuda.current_stream().cuda_stream, "alloc": _allocate}


def unavailable_reason(C, options: dict[str, Any]) -> str:
    """'' when this process can compile CUDA graphs, else a one-line reason."""
    if not hasattr(C, "cuda_unavailable_reason"):
        return "this coil build has no CUDA backend"
    return C.cuda_unavailable_reason(options)
