"""The coil model set: small, self-contained PyTorch models with random weights.

Every builder returns ``(model, example_inputs)``; ``size="test"`` (default) gives shapes small
enough for unit tests on a 2-core CPU, ``size="bench"`` gives shapes for the benchmark harness.
Training builders (``*_train``) return a module whose forward returns a scalar loss, so a
training step is ``model(*inputs).backward()``. Nothing is downloaded.
"""

from __future__ import annotations

import math
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

__all__ = [
    "MODELS",
    "attention_block",
    "transformer_block",
    "gpt2",
    "resnet18_train",
    "resnet18_eval",
    "mlp_sgd",
    "to_bf16",
    "sgd_train_step",
]


def _seeded(seed: int = 0) -> torch.Generator:
    torch.manual_seed(seed)
    return torch.Generator().manual_seed(seed)


# ---------------------------------------------------------------------------------------------
# (a) the torch.compile walkthrough attention block


class AttentionBlock(nn.Module):
    """q, k, v projections (bias-free), q @ k^T, softmax written as exp / sum, @ v."""

    def __init__(self, dim: int):
        super().__init__()
        self.q = nn.Linear(dim, dim, bias=False)
        self.k = nn.Linear(dim, dim, bias=False)
        self.v = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.q(x), self.k(x), self.v(x)
        s = q @ k.transpose(-2, -1)
        p = torch.exp(s)
        p = p / p.sum(dim=-1, keepdim=True)
        return p @ v


def attention_block(size: str = "test"):
    _seeded(0)
    b, t, d = (2, 8, 16) if size == "test" else (8, 256, 256)
    model = AttentionBlock(d)
    # Scaled down so exp() stays finite without the max-subtraction of a real softmax.
    x = torch.randn(b, t, d) * 0.1
    return model, (x,)


# ---------------------------------------------------------------------------------------------
# (b) a transformer block


class MultiHeadAttention(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool = False):
        super().__init__()
        assert dim % heads == 0
        self.heads = heads
        self.qkv = nn.Linear(dim, 3 * dim)
        self.proj = nn.Linear(dim, dim)
        self.causal = causal

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.qkv(x).split(d, dim=-1)
        q = q.view(b, t, h, d // h).transpose(1, 2)
        k = k.view(b, t, h, d // h).transpose(1, 2)
        v = v.view(b, t, h, d // h).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(d // h))
        if self.causal:
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            att = att.masked_fill(~mask, float("-inf"))
        att = torch.softmax(att, dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        return self.proj(y)


class TransformerBlock(nn.Module):
    def __init__(self, dim: int, heads: int, causal: bool = False):
        super().__init__()
        self.ln1 = nn.LayerNorm(dim)
        self.attn = MultiHeadAttention(dim, heads, causal)
        self.ln2 = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, 4 * dim)
        self.out = nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        x = x + self.out(F.gelu(self.fc(self.ln2(x))))
        return x


def transformer_block(size: str = "test"):
    _seeded(0)
    b, t, d, h = (2, 8, 16, 2) if size == "test" else (8, 256, 256, 8)
    model = TransformerBlock(d, h)
    return model, (torch.randn(b, t, d),)


# ---------------------------------------------------------------------------------------------
# (c) a 2-layer GPT-2-style language model with loss


class GPT2(nn.Module):
    def __init__(self, vocab: int, ctx: int, dim: int, heads: int, layers: int = 2):
        super().__init__()
        self.tok = nn.Embedding(vocab, dim)
        self.pos = nn.Embedding(ctx, dim)
        self.blocks = nn.ModuleList(TransformerBlock(dim, heads, causal=True) for _ in range(layers))
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        b, t = idx.shape
        pos = torch.arange(t, device=idx.device)
        x = self.tok(idx) + self.pos(pos)
        for blk in self.blocks:
            x = blk(x)
        logits = self.head(self.ln_f(x))
        # Next-token cross-entropy: position i predicts token i + 1.
        return F.cross_entropy(
            logits[:, :-1].reshape(-1, logits.size(-1)), idx[:, 1:].reshape(-1)
        )


def gpt2(size: str = "test"):
    _seeded(0)
    if size == "test":
        vocab, ctx, dim, heads, b, t = 64, 16, 32, 2, 2, 8
    else:
        vocab, ctx, dim, heads, b, t = 4096, 256, 256, 8, 8, 128
    model = GPT2(vocab, ctx, dim, heads, layers=2)
    idx = torch.randint(0, vocab, (b, t))
    return model, (idx,)


# ---------------------------------------------------------------------------------------------
# (d) ResNet-18-style CNN


class BasicBlock(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(cin, cout, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(cout)
        self.conv2 = nn.Conv2d(cout, cout, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(cout)
        self.down = None
        if stride != 1 or cin != cout:
            self.down = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.bn1(self.conv1(x)))
        y = self.bn2(self.conv2(y))
        s = x if self.down is None else self.down(x)
        return F.relu(y + s)


class ResNet18(nn.Module):
    def __init__(self, width: int = 64, num_classes: int = 1000, blocks=(2, 2, 2, 2)):
        super().__init__()
        self.stem = nn.Sequential(
            nn.Conv2d(3, width, 7, 2, 3, bias=False),
            nn.BatchNorm2d(width),
            nn.ReLU(),
            nn.MaxPool2d(3, 2, 1),
        )
        layers = []
        cin = width
        for i, n in enumerate(blocks):
            cout = width * 2**i
            for j in range(n):
                layers.append(BasicBlock(cin, cout, 2 if (j == 0 and i > 0) else 1))
                cin = cout
        self.layers = nn.Sequential(*layers)
        self.pool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(cin, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.layers(self.stem(x))
        return self.fc(torch.flatten(self.pool(x), 1))


class ClassifierLoss(nn.Module):
    """Wraps a classifier: forward(x, y) returns the cross-entropy loss."""

    def __init__(self, net: nn.Module):
        super().__init__()
        self.net = net

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.net(x), y)


def _resnet(size: str):
    _seeded(0)
    if size == "test":
        # Two stages of one block: stem, max pool, an identity and a downsampling residual.
        net = ResNet18(width=4, num_classes=10, blocks=(1, 1))
        x = torch.randn(2, 3, 16, 16)
        classes = 10
    else:
        net = ResNet18(width=64, num_classes=1000)
        x = torch.randn(8, 3, 224, 224)
        classes = 1000
    return net, x, classes


def resnet18_train(size: str = "test"):
    """Training mode (BatchNorm uses batch statistics and updates running stats); returns loss."""
    net, x, classes = _resnet(size)
    model = ClassifierLoss(net).train()
    y = torch.randint(0, classes, (x.shape[0],))
    return model, (x, y)


def resnet18_eval(size: str = "test"):
    """Eval mode: BatchNorm uses running stats; returns logits."""
    net, x, _ = _resnet(size)
    # Non-trivial running stats so eval BN is not an identity.
    with torch.no_grad():
        for m in net.modules():
            if isinstance(m, nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    return net.eval(), (x,)


# ---------------------------------------------------------------------------------------------
# (e) an MLP trained with SGD


class MLPLoss(nn.Module):
    def __init__(self, din: int, hidden: int, dout: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(din, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
            nn.Linear(hidden, dout),
        )

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        return F.mse_loss(self.net(x), target)


def mlp_sgd(size: str = "test"):
    """An MLP regression model; train it with ``sgd_train_step``."""
    _seeded(0)
    b, din, hid, dout = (8, 16, 32, 4) if size == "test" else (256, 512, 1024, 64)
    model = MLPLoss(din, hid, dout)
    return model, (torch.randn(b, din), torch.randn(b, dout))


def sgd_train_step(model: nn.Module, fn: Callable, inputs, lr: float = 0.1, steps: int = 1):
    """Runs `steps` SGD steps of `fn(*inputs).backward()` on model's parameters; returns losses."""
    opt = torch.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        opt.zero_grad(set_to_none=True)
        loss = fn(*inputs)
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    return losses


# ---------------------------------------------------------------------------------------------


def to_bf16(model: nn.Module, inputs):
    """bf16 variant of a (model, inputs) pair: floating params, buffers and inputs cast to bf16."""
    model = model.to(torch.bfloat16)
    inputs = tuple(i.to(torch.bfloat16) if i.is_floating_point() else i for i in inputs)
    return model, inputs


# name -> (builder, trains): trains means forward returns a scalar loss to backprop.
MODELS: dict[str, tuple[Callable, bool]] = {
    "attention_block": (attention_block, False),
    "transformer_block": (transformer_block, False),
    "gpt2": (gpt2, True),
    "resnet18_train": (resnet18_train, True),
    "resnet18_eval": (resnet18_eval, False),
    "mlp_sgd": (mlp_sgd, True),
}
