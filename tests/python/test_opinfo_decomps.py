"""The decompositions added for the OpInfo sweep (decomp_opinfo.py, decomp_sort.py,
decomp_pool.py), each checked through its OpInfo entries in strict mode: coil compiles every
sample itself and the answers match eager (and the float64 reference) by bench/accuracy.py's
rule, run with the sweep's own code (tools/opinfo_sweep.py: run_variant)."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
pytest.importorskip("expecttest", reason="torch.testing._internal needs expecttest")

from test_opinfo import _describe, _sweep  # noqa: E402  (tests/python is on sys.path)

MAX_SAMPLES = 3

# (entry, variant): one or two entries per decomposition family.
CASES = [
    ("linalg.vector_norm", "f32"), ("nn.functional.normalize", "f32.grad"),
    ("dist", "f32"), ("renorm", "f32"), ("logaddexp", "f32"), ("xlogy", "f32"),
    ("logit", "f32.grad"), ("nan_to_num", "f32"), ("heaviside", "i64"), ("fmax", "f32"),
    ("fmin", "f32.grad"), ("frac", "bf16"), ("nn.functional.celu", "f32"),
    ("nn.functional.glu", "f32.grad"), ("nansum", "f32"), ("count_nonzero", "f32"),
    ("aminmax", "f32"), ("addmv", "f32"), ("addr", "f32"), ("cross", "f32"), ("roll", "f32"),
    ("diag_embed", "f32"), ("block_diag", "f32"), ("nn.functional.pixel_shuffle", "f32"),
    ("index_copy", "f32"), ("index_fill", "f32"), ("take", "f32"), ("eye", "f32"),
    ("linspace", "f32"), ("nn.functional.pad.reflect", "f32.grad"),
    ("nn.functional.pad.replicate", "f32"), ("unfold_copy", "f32"),
    ("nn.functional.cross_entropy", "f32"), ("sgn", "f32.grad"),
    # decomp_pool.py (decomp_sort.py: test_opinfo_regressions.py; the sort entries' first
    # sample is a row of 8000, too long for the pairwise decomposition)
    ("nn.functional.avg_pool3d", "f32.grad"), ("nn.functional.avg_pool2d", "f32"),
]


@pytest.fixture(scope="module")
def ops():
    from torch.testing._internal.common_methods_invocations import op_db

    sweep = _sweep()
    return sweep, {sweep.entry_name(o): o for o in op_db}


@pytest.mark.parametrize("entry,variant", CASES, ids=[f"{e}-{v}" for e, v in CASES])
def test_decomposed_entry_strict(ops, entry, variant):
    sweep, by_name = ops
    torch.set_num_threads(1)
    rec = sweep.run_variant(by_name[entry], variant, strict=True, max_samples=MAX_SAMPLES)
    assert rec["status"] == "pass", _describe(rec)
