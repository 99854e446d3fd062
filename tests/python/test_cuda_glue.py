"""The Python side of the CUDA backend that needs no GPU: options taken from PyTorch's state."""

from __future__ import annotations

import torch

import coil.cuda as cc


def test_tf32_follows_torch_matmul_precision():
    old = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("highest")
        assert cc.compile_options()["cuda_allow_tf32"] is False
        torch.set_float32_matmul_precision("high")
        assert cc.compile_options()["cuda_allow_tf32"] is True
    finally:
        torch.set_float32_matmul_precision(old)


def test_graph_on_cuda_looks_at_tensor_devices():
    assert not cc.graph_on_cuda([torch.zeros(2), 3, None])
