"""The model zoo: small models with real structure, random weights, nothing downloaded.

Each entry of ZOO is a `ZooModel`: a builder returning ``(model, inputs)`` and what to check.
``kind`` says what the forward returns: "loss" (a scalar to backprop), "tensor" (backprop a fixed
random gradient) or "optimizer" (the model is an `OptimizerStep`: compiled `opt.step()`,
compared parameter by parameter). Sizes are small enough that one model compiles and runs
forward and backward in seconds on 2 CPU cores; the structure is the real one (depthwise
convolutions, GroupNorm, rotary embeddings, top-k routing, ...).

The models of bench/models.py (GPT-2, the ResNet-18-style CNN, the transformer and attention
blocks, the MLP) are reused by import.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

import models as base

__all__ = ["ZOO", "ZooModel", "OptimizerStep"]


def _seed(seed: int = 0) -> None:
    torch.manual_seed(seed)


# ---------------------------------------------------------------------------------------------
# MobileNetV3-style: inverted residuals, depthwise convolution, hardswish, squeeze-excite.


class SqueezeExcite(nn.Module):
    def __init__(self, c: int, r: int = 4):
        super().__init__()
        self.reduce = nn.Conv2d(c, c // r, 1)
        self.expand = nn.Conv2d(c // r, c, 1)

    def forward(self, x):
        s = F.adaptive_avg_pool2d(x, 1)
        s = F.hardsigmoid(self.expand(F.relu(self.reduce(s))))
        return x * s


class InvertedResidual(nn.Module):
    def __init__(self, cin: int, cout: int, expand: int, stride: int, se: bool):
        super().__init__()
        hid = cin * expand
        self.expand = nn.Sequential(nn.Conv2d(cin, hid, 1, bias=False), nn.BatchNorm2d(hid),
                                    nn.Hardswish())
        # groups == channels: the depthwise convolution.
        self.dw = nn.Sequential(nn.Conv2d(hid, hid, 3, stride, 1, groups=hid, bias=False),
                                nn.BatchNorm2d(hid), nn.Hardswish())
        self.se = SqueezeExcite(hid) if se else nn.Identity()
        self.project = nn.Sequential(nn.Conv2d(hid, cout, 1, bias=False), nn.BatchNorm2d(cout))
        self.residual = stride == 1 and cin == cout

    def forward(self, x):
        y = self.project(self.se(self.dw(self.expand(x))))
        return x + y if self.residual else y


class MobileNet(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, 2, 1, bias=False), nn.BatchNorm2d(8),
                                  nn.Hardswish())
        self.blocks = nn.Sequential(
            InvertedResidual(8, 8, 2, 1, se=True),
            InvertedResidual(8, 16, 3, 2, se=False),
            InvertedResidual(16, 16, 3, 1, se=True),
        )
        self.head = nn.Sequential(nn.Conv2d(16, 32, 1), nn.Hardswish())
        self.fc = nn.Linear(32, classes)

    def forward(self, x):
        x = self.head(self.blocks(self.stem(x)))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def mobilenet():
    _seed(0)
    model = base.ClassifierLoss(MobileNet(10)).train()
    return model, (torch.randn(2, 3, 16, 16), torch.randint(0, 10, (2,)))


# ---------------------------------------------------------------------------------------------
# UNet-style block (a diffusion model's): GroupNorm, SiLU, down- and upsampling, skip concat.


class GNResBlock(nn.Module):
    def __init__(self, cin: int, cout: int, groups: int = 4):
        super().__init__()
        self.n1 = nn.GroupNorm(groups, cin)
        self.c1 = nn.Conv2d(cin, cout, 3, 1, 1)
        self.n2 = nn.GroupNorm(groups, cout)
        self.c2 = nn.Conv2d(cout, cout, 3, 1, 1)
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x):
        h = self.c1(F.silu(self.n1(x)))
        h = self.c2(F.silu(self.n2(h)))
        return self.skip(x) + h


class UNetBlock(nn.Module):
    def __init__(self, c: int = 4, w: int = 8):
        super().__init__()
        self.inp = nn.Conv2d(c, w, 3, 1, 1)
        self.down_res = GNResBlock(w, w)
        self.down = nn.Conv2d(w, 2 * w, 3, 2, 1)
        self.mid = GNResBlock(2 * w, 2 * w)
        self.up = nn.Conv2d(2 * w, w, 3, 1, 1)
        self.up_res = GNResBlock(2 * w, w)
        self.out_norm = nn.GroupNorm(4, w)
        self.out = nn.Conv2d(w, c, 3, 1, 1)

    def forward(self, x):
        h0 = self.down_res(self.inp(x))
        h = self.mid(self.down(h0))
        h = self.up(F.interpolate(h, scale_factor=2.0, mode="nearest"))
        h = self.up_res(torch.cat([h, h0], dim=1))
        return self.out(F.silu(self.out_norm(h)))


def unet_block():
    _seed(0)
    return UNetBlock(), (torch.randn(2, 4, 16, 16),)


# ---------------------------------------------------------------------------------------------
# BERT-style encoder: token type embeddings, post-LayerNorm, padding attention mask, pooler.


class BertLayer(nn.Module):
    def __init__(self, d: int, h: int):
        super().__init__()
        self.h = h
        self.q, self.k, self.v = nn.Linear(d, d), nn.Linear(d, d), nn.Linear(d, d)
        self.o = nn.Linear(d, d)
        self.ln1 = nn.LayerNorm(d, eps=1e-12)
        self.ff1 = nn.Linear(d, 4 * d)
        self.ff2 = nn.Linear(4 * d, d)
        self.ln2 = nn.LayerNorm(d, eps=1e-12)

    def forward(self, x, ext_mask):
        b, t, d = x.shape
        split = lambda y: y.view(b, t, self.h, d // self.h).permute(0, 2, 1, 3)
        q, k, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
        s = torch.matmul(q, k.transpose(-1, -2)) / math.sqrt(d // self.h) + ext_mask
        ctx = torch.matmul(s.softmax(-1), v).permute(0, 2, 1, 3).reshape(b, t, d)
        x = self.ln1(x + self.o(ctx))
        return self.ln2(x + self.ff2(F.gelu(self.ff1(x))))


class Bert(nn.Module):
    def __init__(self, vocab=64, ctx=16, d=32, h=4, layers=2, classes=3):
        super().__init__()
        self.word = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(ctx, d)
        self.token_type = nn.Embedding(2, d)
        self.ln = nn.LayerNorm(d, eps=1e-12)
        self.layers = nn.ModuleList(BertLayer(d, h) for _ in range(layers))
        self.pool = nn.Linear(d, d)
        self.cls = nn.Linear(d, classes)

    def forward(self, ids, types, mask, labels):
        t = ids.shape[1]
        x = self.ln(self.word(ids) + self.pos(torch.arange(t, device=ids.device)) + self.token_type(types))
        # Padded keys get the dtype's lowest value added before the softmax (as HF does).
        ext = (1.0 - mask[:, None, None, :].to(x.dtype)) * torch.finfo(x.dtype).min
        for layer in self.layers:
            x = layer(x, ext)
        pooled = torch.tanh(self.pool(x[:, 0]))
        return F.cross_entropy(self.cls(pooled), labels)


def bert():
    _seed(0)
    model = Bert()
    ids = torch.randint(0, 64, (2, 8))
    types = torch.cat([torch.zeros(2, 4, dtype=torch.long), torch.ones(2, 4, dtype=torch.long)], 1)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0  # the second sequence is padded
    return model, (ids, types, mask, torch.tensor([0, 2]))


# ---------------------------------------------------------------------------------------------
# Llama-style blocks: RMSNorm, rotary embeddings, grouped-query causal attention, SwiGLU.


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(1.0 + 0.1 * torch.randn(d))
        self.eps = eps

    def forward(self, x):
        # Statistics in at least float32, as Llama does (float64 stays float64).
        xf = x.to(torch.promote_types(x.dtype, torch.float32))
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return self.weight * xf.to(x.dtype)


def rotate_half(x):
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class LlamaAttention(nn.Module):
    def __init__(self, d: int, heads: int, kv_heads: int):
        super().__init__()
        self.h, self.kvh, self.hd = heads, kv_heads, d // heads
        self.q = nn.Linear(d, heads * self.hd, bias=False)
        self.k = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.v = nn.Linear(d, kv_heads * self.hd, bias=False)
        self.o = nn.Linear(heads * self.hd, d, bias=False)

    def forward(self, x, cos, sin):
        b, t, _ = x.shape
        q = self.q(x).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.k(x).view(b, t, self.kvh, self.hd).transpose(1, 2)
        v = self.v(x).view(b, t, self.kvh, self.hd).transpose(1, 2)
        q = q * cos + rotate_half(q) * sin
        k = k * cos + rotate_half(k) * sin
        rep = self.h // self.kvh  # grouped-query attention: each kv head serves `rep` q heads
        k = k[:, :, None].expand(b, self.kvh, rep, t, self.hd).reshape(b, self.h, t, self.hd)
        v = v[:, :, None].expand(b, self.kvh, rep, t, self.hd).reshape(b, self.h, t, self.hd)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(y.transpose(1, 2).reshape(b, t, self.h * self.hd))


class LlamaBlock(nn.Module):
    def __init__(self, d: int, heads: int, kv_heads: int, hidden: int):
        super().__init__()
        self.n1 = RMSNorm(d)
        self.attn = LlamaAttention(d, heads, kv_heads)
        self.n2 = RMSNorm(d)
        self.gate = nn.Linear(d, hidden, bias=False)
        self.up = nn.Linear(d, hidden, bias=False)
        self.down = nn.Linear(hidden, d, bias=False)

    def forward(self, x, cos, sin):
        x = x + self.attn(self.n1(x), cos, sin)
        h = self.n2(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Llama(nn.Module):
    def __init__(self, d=32, heads=4, kv_heads=2, hidden=64, layers=2, theta=10000.0):
        super().__init__()
        self.blocks = nn.ModuleList(LlamaBlock(d, heads, kv_heads, hidden) for _ in range(layers))
        self.norm = RMSNorm(d)
        hd = d // heads
        self.register_buffer("inv_freq", 1.0 / theta ** (torch.arange(0, hd, 2).float() / hd),
                             persistent=False)

    def forward(self, x):
        t = x.shape[1]
        pos = torch.arange(t, device=x.device, dtype=self.inv_freq.dtype)
        freqs = torch.outer(pos, self.inv_freq)
        emb = torch.cat((freqs, freqs), dim=-1)
        cos, sin = emb.cos().to(x.dtype), emb.sin().to(x.dtype)
        for blk in self.blocks:
            x = blk(x, cos, sin)
        return self.norm(x)


def llama():
    _seed(0)
    return Llama(), (torch.randn(2, 8, 32),)


# ---------------------------------------------------------------------------------------------
# ViT-style: patch embedding by a strided convolution, class token, learned positions.


class ViT(nn.Module):
    def __init__(self, img=16, patch=4, d=32, heads=4, layers=2, classes=10):
        super().__init__()
        n = (img // patch) ** 2
        self.patch = nn.Conv2d(3, d, patch, patch)
        self.cls_token = nn.Parameter(0.02 * torch.randn(1, 1, d))
        self.pos = nn.Parameter(0.02 * torch.randn(1, n + 1, d))
        self.blocks = nn.Sequential(*(base.TransformerBlock(d, heads) for _ in range(layers)))
        self.ln = nn.LayerNorm(d)
        self.head = nn.Linear(d, classes)

    def forward(self, img):
        x = self.patch(img).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos
        x = self.ln(self.blocks(x))
        return self.head(x[:, 0])


def vit():
    _seed(0)
    return base.ClassifierLoss(ViT()), (torch.randn(2, 3, 16, 16), torch.randint(0, 10, (2,)))


# ---------------------------------------------------------------------------------------------
# Mixture of experts: softmax router, top-k routing with renormalized gates, a load-balancing
# loss. Experts run densely over all tokens and the top-k gates select (no data-dependent
# shapes, so the whole layer is one graph).


class MoE(nn.Module):
    def __init__(self, d=16, hidden=32, experts=4, k=2):
        super().__init__()
        self.k, self.e = k, experts
        self.router = nn.Linear(d, experts, bias=False)
        self.w1 = nn.Parameter(torch.randn(experts, d, hidden) / math.sqrt(d))
        self.w2 = nn.Parameter(torch.randn(experts, hidden, d) / math.sqrt(hidden))
        self.ln = nn.LayerNorm(d)

    def forward(self, x):
        b, t, d = x.shape
        flat = self.ln(x).reshape(b * t, d)
        probs = self.router(flat).softmax(-1)
        top_p, top_i = probs.topk(self.k, dim=-1)
        top_p = top_p / top_p.sum(-1, keepdim=True)
        gates = torch.zeros_like(probs).scatter(1, top_i, top_p)  # [tokens, experts]
        h = F.gelu(torch.einsum("nd,edh->enh", flat, self.w1))
        y = torch.einsum("enh,ehd->end", h, self.w2)
        out = torch.einsum("ne,end->nd", gates, y).reshape(b, t, d)
        # Switch-Transformer balance loss: fraction routed to each expert x mean router prob.
        frac = F.one_hot(top_i[:, 0], self.e).to(probs.dtype).mean(0)
        aux = self.e * (frac * probs.mean(0)).sum()
        return x + out, aux


def moe():
    _seed(0)
    return MoE(), (torch.randn(2, 8, 16),)


# ---------------------------------------------------------------------------------------------
# A conv1d audio classifier (no recurrence): strided and dilated 1-d convolutions, BatchNorm1d.


class AudioNet(nn.Module):
    def __init__(self, classes=5):
        super().__init__()
        self.net = nn.Sequential(
            nn.Conv1d(1, 8, 9, 2, 4, bias=False), nn.BatchNorm1d(8), nn.ReLU(),
            nn.Conv1d(8, 16, 5, 2, 2, bias=False), nn.BatchNorm1d(16), nn.ReLU(),
            nn.Conv1d(16, 16, 3, 1, 2, dilation=2), nn.ReLU(),
            nn.MaxPool1d(2),
            nn.AdaptiveAvgPool1d(1), nn.Flatten(), nn.Linear(16, classes),
        )

    def forward(self, wav):
        return self.net(wav)


def audio_conv1d():
    _seed(0)
    return base.ClassifierLoss(AudioNet()), (torch.randn(2, 1, 128), torch.randint(0, 5, (2,)))


# ---------------------------------------------------------------------------------------------
# DLRM-style recommender: bottom MLP, EmbeddingBag tables (sum pooling with offsets), pairwise
# dot-product interaction, top MLP, binary cross-entropy with logits.


class DLRM(nn.Module):
    def __init__(self, dense=4, d=8, tables=(20, 30, 10)):
        super().__init__()
        self.bottom = nn.Sequential(nn.Linear(dense, 16), nn.ReLU(), nn.Linear(16, d), nn.ReLU())
        self.emb = nn.ModuleList(nn.EmbeddingBag(n, d, mode="sum") for n in tables)
        f = len(tables) + 1
        li, lj = torch.tril_indices(f, f, offset=-1)
        self.register_buffer("li", li, persistent=False)
        self.register_buffer("lj", lj, persistent=False)
        self.top = nn.Sequential(nn.Linear(d + f * (f - 1) // 2, 16), nn.ReLU(), nn.Linear(16, 1))

    def forward(self, dense, idx, offsets, labels):
        x = self.bottom(dense)
        feats = [x] + [e(idx[i], offsets[i]) for i, e in enumerate(self.emb)]
        t = torch.stack(feats, dim=1)  # [batch, features, d]
        z = torch.bmm(t, t.transpose(1, 2))[:, self.li, self.lj]
        logit = self.top(torch.cat([x, z], dim=1)).squeeze(1)
        return F.binary_cross_entropy_with_logits(logit, labels)


def dlrm():
    _seed(0)
    model = DLRM()
    b = 4
    idx = torch.stack([torch.randint(0, n, (10,)) for n in (10, 10, 10)])  # 10 lookups per table
    offsets = torch.tensor([[0, 2, 5, 7]] * 3)  # bags of 2, 3, 2, 3 lookups
    return model, (torch.randn(b, 4), idx, offsets, torch.tensor([0.0, 1.0, 1.0, 0.0]))


# ---------------------------------------------------------------------------------------------
# T5-style encoder (v1.1): bucketed relative position bias (integer math, log buckets), RMS
# LayerNorm, unscaled attention, gated-GELU feed-forward. With the original ReLU feed-forward the
# bfloat16 backward check failed on one hidden unit whose pre-activation was 0.0017 for one
# token: coil's rounding (fewer bf16 roundings inside fused kernels) flipped its ReLU mask, a
# discontinuity the float64-reference rule cannot absorb (docs/model-zoo.md).


def relative_bucket(rel: torch.Tensor, buckets: int = 8, max_distance: int = 16) -> torch.Tensor:
    buckets //= 2  # bidirectional: half the buckets for each sign
    out = (rel > 0).to(torch.long) * buckets
    n = rel.abs()
    exact = buckets // 2
    large = exact + (torch.log(n.float() / exact) / math.log(max_distance / exact)
                     * (buckets - exact)).to(torch.long)
    large = torch.minimum(large, torch.full_like(large, buckets - 1))
    return out + torch.where(n < exact, n, large)


class T5Layer(nn.Module):
    def __init__(self, d, h, ff):
        super().__init__()
        self.h = h
        self.n1 = RMSNorm(d)
        self.qkv = nn.Linear(d, 3 * d, bias=False)
        self.o = nn.Linear(d, d, bias=False)
        self.n2 = RMSNorm(d)
        self.wi = nn.Linear(d, ff, bias=False)
        self.wg = nn.Linear(d, ff, bias=False)
        self.wo = nn.Linear(ff, d, bias=False)

    def forward(self, x, bias):
        b, t, d = x.shape
        q, k, v = self.qkv(self.n1(x)).view(b, t, 3, self.h, d // self.h).permute(2, 0, 3, 1, 4)
        s = q @ k.transpose(-1, -2) + bias  # T5 does not scale by 1/sqrt(d)
        y = (s.softmax(-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.o(y)
        h = self.n2(x)
        # T5 v1.1's gated-GELU feed-forward (see T5Encoder on why not the original ReLU).
        return x + self.wo(F.gelu(self.wg(h), approximate="tanh") * self.wi(h))


class T5Encoder(nn.Module):
    def __init__(self, vocab=64, d=32, h=4, ff=64, layers=2, buckets=8):
        super().__init__()
        self.emb = nn.Embedding(vocab, d)
        self.rel = nn.Embedding(buckets, h)
        self.buckets = buckets
        self.layers = nn.ModuleList(T5Layer(d, h, ff) for _ in range(layers))
        self.norm = RMSNorm(d)

    def forward(self, ids):
        t = ids.shape[1]
        pos = torch.arange(t, device=ids.device)
        bucket = relative_bucket(pos[None, :] - pos[:, None], self.buckets)
        bias = self.rel(bucket).permute(2, 0, 1)[None]  # [1, heads, t, t], shared by all layers
        x = self.emb(ids)
        for layer in self.layers:
            x = layer(x, bias)
        return self.norm(x)


def t5_encoder():
    _seed(0)
    return T5Encoder(), (torch.randint(0, 64, (2, 12)),)


# ---------------------------------------------------------------------------------------------
# AdamW: the optimizer step compiled (Dynamo traces the foreach implementation).


class OptimizerStep:
    """Parameters of a small MLP with fixed gradients and an AdamW over them; `step()` is what
    gets compiled. Copies (float64 for the reference) are made with `clone(dtype)`."""

    def __init__(self, params: list[torch.Tensor], grads: list[torch.Tensor]):
        self.params = [p.detach().clone().requires_grad_(True) for p in params]
        for p, g in zip(self.params, grads):
            p.grad = g.detach().clone()
        self.opt = torch.optim.AdamW(self.params, lr=1e-2, betas=(0.9, 0.99), weight_decay=0.05,
                                     foreach=True)

    def clone(self, dtype: torch.dtype | None = None) -> "OptimizerStep":
        cast = (lambda t: t.to(dtype)) if dtype is not None else (lambda t: t)
        return OptimizerStep([cast(p) for p in self.params], [cast(p.grad) for p in self.params])

    def step(self):
        self.opt.step()

    def state(self) -> list[torch.Tensor]:
        out = []
        for p in self.params:
            s = self.opt.state[p]
            out += [s["exp_avg"], s["exp_avg_sq"]]
        return out


def adamw_step():
    _seed(0)
    mlp = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
    params = list(mlp.parameters())
    return OptimizerStep(params, [torch.randn_like(p) for p in params]), ()


# ---------------------------------------------------------------------------------------------
# Registry


@dataclass(frozen=True)
class ZooModel:
    name: str
    build: Callable[[], tuple]
    # "loss": forward returns a scalar (or a tuple whose elements are summed for backward);
    # "tensor": backward of a fixed random output gradient; "optimizer": an OptimizerStep.
    kind: str
    about: str


def _base(builder):
    return lambda: builder("test")


ZOO: dict[str, ZooModel] = {m.name: m for m in [
    ZooModel("resnet", _base(base.resnet18_train), "loss",
             "ResNet-18-style, 2 stages, BatchNorm training mode (bench/models.py)"),
    ZooModel("resnet_eval", _base(base.resnet18_eval), "tensor",
             "the same in eval mode (BatchNorm running stats)"),
    ZooModel("mobilenet", mobilenet, "loss",
             "MobileNetV3-style: depthwise conv, hardswish, squeeze-excite (hardsigmoid)"),
    ZooModel("unet_block", unet_block, "tensor",
             "UNet-style: GroupNorm, SiLU, strided conv down, nearest upsample, skip concat"),
    ZooModel("audio_conv1d", audio_conv1d, "loss",
             "conv1d audio net: strided/dilated Conv1d, BatchNorm1d, MaxPool1d"),
    ZooModel("mlp", _base(base.mlp_sgd), "loss", "3-layer MLP, MSE loss (bench/models.py)"),
    ZooModel("attention_block", _base(base.attention_block), "tensor",
             "q/k/v projections, exp/sum softmax (bench/models.py)"),
    ZooModel("transformer_block", _base(base.transformer_block), "tensor",
             "pre-LN block: multi-head attention, GELU MLP (bench/models.py)"),
    ZooModel("gpt2", _base(base.gpt2), "loss",
             "2-layer GPT-2, causal mask, tied-free head, cross-entropy (bench/models.py)"),
    ZooModel("bert", bert, "loss",
             "BERT-style encoder: padding attention mask, post-LN, tanh pooler"),
    ZooModel("llama", llama, "tensor",
             "Llama-style: RMSNorm, rotary embeddings, GQA causal SDPA, SwiGLU"),
    ZooModel("vit", vit, "loss", "ViT-style: conv patch embedding, class token, learned positions"),
    ZooModel("t5_encoder", t5_encoder, "tensor",
             "T5 v1.1-style: bucketed relative position bias, RMS norm, gated-GELU FF"),
    ZooModel("moe", moe, "tensor",
             "mixture of experts: top-2 routing with renormalized gates, balance loss"),
    ZooModel("dlrm", dlrm, "loss",
             "DLRM-style: EmbeddingBag sum pooling, dot interaction, BCE with logits"),
    ZooModel("adamw", adamw_step, "optimizer", "compiled AdamW step (foreach) over an MLP"),
]}
