"""The GPU benchmark cases of bench/gpu.py: kernels and models at the sizes of issue 3.

Every case builder takes a size ("full": the issue's sizes, "quick": smaller models for smoke
runs on a GPU, "tiny": a few thousand elements, for the CPU test of the harness) and returns
``(model, inputs)`` on the CPU in the case's dtype; the harness moves them to the device. Random
weights, nothing downloaded. Models reuse bench/models.py classes where they exist.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

from models import GPT2, AttentionBlock, ClassifierLoss, _seeded


# ---------------------------------------------------------------------------------------------
# Memory-bound kernels


class SiluMul(nn.Module):
    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.silu(x) * y + 1


class ScaledSoftmax(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * 0.125, dim=-1)


def silu_mul(size: str):
    _seeded(0)
    n = {"tiny": 1 << 16}.get(size, 64 << 20)
    return SiluMul(), (torch.randn(n), torch.randn(n))


def softmax(size: str):
    _seeded(0)
    r, c = (64, 256) if size == "tiny" else (8192, 8192)
    return ScaledSoftmax(), (torch.randn(r, c),)


def layernorm(size: str):
    _seeded(0)
    r, c = (64, 256) if size == "tiny" else (16384, 4096)
    ln = nn.LayerNorm(c)
    with torch.no_grad():  # non-trivial affine parameters
        ln.weight.uniform_(0.5, 1.5)
        ln.bias.uniform_(-0.5, 0.5)
    return ln, (torch.randn(r, c),)


# ---------------------------------------------------------------------------------------------
# Blocks


def attention(size: str):
    _seeded(0)
    b, t, d = (2, 16, 32) if size == "tiny" else (8, 1024, 1024)
    # Scaled down so exp() stays finite: AttentionBlock's softmax has no max-subtraction.
    return AttentionBlock(d), (torch.randn(b, t, d) * 0.1,)


class MLPBlock(nn.Module):
    """x + Linear(GELU(Linear(LayerNorm(x)))), hidden 4 x dim: a transformer's MLP half."""

    def __init__(self, dim: int):
        super().__init__()
        self.ln = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.out(F.gelu(self.fc(self.ln(x))))


def mlp_block(size: str):
    _seeded(0)
    b, t, d = (2, 16, 32) if size == "tiny" else (8, 1024, 2048)
    return MLPBlock(d).to(torch.bfloat16), (torch.randn(b, t, d, dtype=torch.bfloat16),)


# ---------------------------------------------------------------------------------------------
# GPT-2 small


class GPT2Logits(GPT2):
    """bench/models.py's GPT2 returning the logits instead of the loss (inference)."""

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        return self.head(self.ln_f(x))


def _gpt2_config(size: str):
    """(vocab, ctx, dim, heads, layers, batch, seq): GPT-2 small is 50257/1024/768/12/12."""
    if size == "tiny":
        return 128, 32, 32, 2, 1, 2, 16
    return 50257, 1024, 768, 12, 2 if size == "quick" else 12, 8, 512


def _gpt2(cls, size: str):
    _seeded(0)
    vocab, ctx, dim, heads, layers, b, t = _gpt2_config(size)
    model = cls(vocab, ctx, dim, heads, layers=layers)
    return model, (torch.randint(0, vocab, (b, t)),)


def gpt2_infer(size: str):
    model, inputs = _gpt2(GPT2Logits, size)
    return model.to(torch.bfloat16).eval(), inputs


def gpt2_train(size: str):
    """forward returns the next-token cross-entropy loss (bench/models.py GPT2), fp32."""
    return _gpt2(GPT2, size)


# ---------------------------------------------------------------------------------------------
# ResNet-50-style CNN


class Bottleneck(nn.Module):
    """1x1 reduce, 3x3 (stride here, as torchvision's v1.5), 1x1 expand x4, projection shortcut."""

    def __init__(self, cin: int, width: int, stride: int):
        super().__init__()
        cout = 4 * width
        self.conv1 = nn.Conv2d(cin, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(nn.Conv2d(cin, cout, 1, stride, bias=False),
                                      nn.BatchNorm2d(cout))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = F.relu(self.bn2(self.conv2(y)))
        y = self.bn3(self.conv3(y))
        return F.relu(y + (x if self.down is None else self.down(x)))


class ResNet50(nn.Module):
    def __init__(self, width: int = 64, num_classes: int = 1000, blocks=(3, 4, 6, 3)):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, width, 7, 2, 3, bias=False), nn.BatchNorm2d(width),
                                  nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        layers, cin = [], width
        for i, n in enumerate(blocks):
            w = width * 2**i
            for j in range(n):
                layers.append(Bottleneck(cin, w, 2 if (j == 0 and i > 0) else 1))
                cin = 4 * w
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


def _resnet50(size: str):
    _seeded(0)
    if size == "tiny":
        # 64x64 and batch 4 leave the last stage 2x2 (16 values per BatchNorm channel): smaller
        # inputs make training-mode BatchNorm ill-conditioned and its gradients noise.
        net = ResNet50(width=4, num_classes=10, blocks=(1, 1, 1, 1))
        return net, torch.randn(4, 3, 64, 64), 10
    blocks = (1, 1, 1, 1) if size == "quick" else (3, 4, 6, 3)
    return ResNet50(blocks=blocks), torch.randn(64, 3, 224, 224), 1000


def resnet50_infer(size: str):
    net, x, _ = _resnet50(size)
    with torch.no_grad():  # non-trivial running stats, so eval BatchNorm is not an identity
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return net.eval().to(torch.bfloat16), (x.to(torch.bfloat16),)


def resnet50_train(size: str):
    """Training mode (batch statistics), forward returns the cross-entropy loss, fp32."""
    net, x, classes = _resnet50(size)
    return ClassifierLoss(net).train(), (x, torch.randint(0, classes, (x.shape[0],)))


# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    build: Callable[[str], tuple]
    title: str
    # A training step: zero grads, loss = model(*inputs), backward, SGD step.
    trains: bool = False
    # Report achieved GB/s (inputs, parameters and outputs each moved once).
    memory_bound: bool = False
    # TF32 matmuls/convolutions allowed (the fp32 training steps, as the anchors measured them).
    tf32: bool = False


CASES: dict[str, Case] = {c.name: c for c in [
    Case("silu_mul", silu_mul, "silu(x)*y+1, 64M fp32", memory_bound=True),
    Case("softmax", softmax, "softmax(x*0.125), 8192x8192 fp32", memory_bound=True),
    Case("layernorm", layernorm, "LayerNorm(4096), 16384 rows fp32", memory_bound=True),
    Case("attention", attention, "attention block, 8x1024x1024 fp32"),
    Case("mlp_block", mlp_block, "LN+Linear+GELU+Linear+residual, 8x1024x2048 bf16"),
    Case("gpt2_infer", gpt2_infer, "GPT-2 small logits, 8x512 bf16"),
    Case("gpt2_train", gpt2_train, "GPT-2 small training step, 8x512 fp32/tf32", trains=True,
         tf32=True),
    Case("resnet50_infer", resnet50_infer, "ResNet-50 inference, batch 64 bf16"),
    Case("resnet50_train", resnet50_train, "ResNet-50 training step, batch 64 fp32/tf32",
         trains=True, tf32=True),
]}
