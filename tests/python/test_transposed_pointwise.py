"""Pointwise kernels that read an operand transposed, against eager.

The CPU emitter runs such kernels in 16 x 16 tiles over the operand's and the store's
unit-stride dims, copying the operand's tile first so that the simd loop reads it
contiguously (backend/cpu/emit_cpp.cpp: emit_tiled_pointwise); loads strided along the simd
loop otherwise take a run-time stride. Shapes below cover partial edge tiles, tiles smaller
than one block, symbolic sizes, bool and bfloat16 stores and an input mutated in the graph.
"""

from __future__ import annotations

import pytest
import torch

import coil  # noqa: F401

SHAPES = [(37, 53), (16, 16), (17, 300), (5, 128, 64), (2, 64, 33, 20)]


def _check(fn, *args, dynamic=False):
    torch._dynamo.reset()
    want = fn(*[a.clone() for a in args])
    got = torch.compile(fn, backend="coil", dynamic=dynamic)(*[a.clone() for a in args])
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def _erf_times(a, b):
    return torch.erf(a.transpose(0, -1)) * b + 1


def _select(a, b):
    t = a.transpose(0, -1)
    return torch.where(t > 0, b, torch.exp(t))


@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_transposed_operand_matches_eager(shape):
    torch.manual_seed(0)
    x = torch.randn(*shape)
    y = torch.randn(*x.transpose(0, -1).shape)
    _check(_erf_times, x, y)
    _check(_select, x, y)
    _check(lambda a: torch.exp(a.transpose(0, -1)).contiguous(), x)
    _check(lambda a: a.transpose(0, -1).to(torch.bfloat16), x)
    _check(lambda a: (a > 0).transpose(0, -1).contiguous(), x)
    # Two operands read transposed at the same positions (a tile each), one contiguous.
    _check(lambda a, c: torch.where(c.transpose(0, -1) > 0, torch.exp(a.transpose(0, -1)),
                                    0).contiguous(), x, torch.randn(*shape))


@pytest.mark.parametrize("shape", [(37, 53), (5, 128, 64)], ids=lambda s: "x".join(map(str, s)))
def test_transposed_operand_with_symbolic_sizes(shape):
    torch.manual_seed(1)
    x = torch.randn(*shape)
    y = torch.randn(*x.transpose(0, -1).shape)
    _check(_erf_times, x, y, dynamic=True)


def test_operand_mutated_then_read_transposed():
    def fn(a):
        a.mul_(2)
        return a.t() + 1

    _check(fn, torch.randn(40, 70))
