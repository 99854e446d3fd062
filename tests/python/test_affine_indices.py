"""Indices computed from the loop positions alone (an arange, start + i * step, the positions a
transformer adds its position embedding at) are lowered as index expressions, not as
data-dependent (indirect) loads: the load stays affine, so the kernel vectorizes (Whisper's
GELU + position-embedding kernel ran scalar at 21 ns an element before). Checked against eager,
on the loop IR (no indirect binding left) and on the generated C++ (a simd loop)."""

from __future__ import annotations

import pytest
import torch
from torch.fx.experimental.proxy_tensor import make_fx

coil = pytest.importorskip("coil")
pytest.importorskip("coil._coil")

from coil.backend import compile_aten_graph  # noqa: E402
from coil.options import build_options  # noqa: E402


def _positions_added(x, table):
    pos = torch.arange(2, x.shape[1] + 2)  # offset positions, as OPT's learned embedding
    return torch.nn.functional.gelu(x) + torch.nn.functional.embedding(pos, table)


def _data_dependent(x, table, ids):
    return torch.nn.functional.gelu(x) + torch.nn.functional.embedding(ids, table)


def _compile(fn, *args):
    gm = make_fx(fn)(*args)
    c = compile_aten_graph(gm, list(args), build_options({"strict": True}), "inference")
    return c, c.compiled.artifacts


def test_arange_positions_are_affine_and_vectorize():
    torch.manual_seed(0)
    x, table = torch.randn(3, 64, 48), torch.randn(80, 48)
    fn, art = _compile(_positions_added, x, table)
    torch.testing.assert_close(fn([x, table])[0], _positions_added(x, table))
    assert "indirect" not in art["loop_program"], art["loop_program"]
    assert "#pragma omp simd" in art["source"]


def test_indices_read_from_memory_stay_indirect():
    """The rule must not touch real gathers: ids loaded from a tensor keep their binding."""
    torch.manual_seed(0)
    x, table = torch.randn(3, 64, 48), torch.randn(80, 48)
    ids = torch.randint(0, 80, (64,))
    fn, art = _compile(_data_dependent, x, table, ids)
    torch.testing.assert_close(fn([x, table, ids])[0], _data_dependent(x, table, ids))
    assert "indirect" in art["loop_program"]
