"""A bounded, deterministic slice of the OpInfo sweep (tools/opinfo_sweep.py) for CI.

A fixed list of core ATen OpInfo entries, each run through torch.compile(backend="coil") with
the sweep's own code (all samples in one compiled function, up to MAX_SAMPLES, compared with
eager and a float64 reference by bench/accuracy.py's rule):

  * COVERED entries run in strict mode and must pass: coil lowers every op itself and the
    numbers are right (a strict pass also answers for fallback mode: with nothing to fall back,
    both modes compile the same graphs);
  * NOT_COVERED entries run with fallbacks allowed and must not be wrong or error.

float32 forward for all, plus a few gradient, bfloat16 and integer/bool cases. The full sweep
(every entry, dtype and mode) is `python3 tools/opinfo_sweep.py --mode both` (docs/opinfo.md);
`test_full_sweep` runs it as a slow test (COIL_SLOW=1).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
pytest.importorskip("expecttest", reason="torch.testing._internal needs expecttest")

ROOT = Path(__file__).resolve().parents[2]
MAX_SAMPLES = 3

# (entry, variant) pairs that coil compiles entirely itself.
COVERED = [(name, "f32") for name in """
    abs acos add addmm amax amin any argmax argmin asin atan atan2 bmm cat ceil clamp clone
    constant_pad_nd cos cumsum diagonal div.no_rounding_mode div.floor_rounding eq exp expand
    flip floor fmod full gather ge index_select log log1p logical_and logical_not lt max.binary
    max.reduction_with_dim maximum mean minimum mm mul ne neg nn.functional.gelu
    nn.functional.relu permute pow prod reciprocal remainder repeat round rsqrt select sigmoid
    sign sin slice sqrt squeeze sub sum tanh trunc unsqueeze var view where
""".split()] + [
    ("add", "f32.grad"), ("mul", "f32.grad"), ("exp", "f32.grad"), ("sum", "f32.grad"),
    ("cat", "f32.grad"), ("mm", "f32.grad"), ("nn.functional.gelu", "f32.grad"),
    ("abs", "f32.grad"), ("add", "bf16"), ("exp", "bf16"), ("sum", "bf16"), ("mm", "bf16"),
    ("add", "i64"), ("sum", "i64"), ("cumsum", "i64"), ("eq", "b8"), ("where", "b8"),
    ("logical_and", "b8"),
    # Found falling back by the sweep, now lowered or decomposed.
    ("nn.functional.avg_pool2d", "f32"), ("nn.functional.avg_pool3d", "f32"),
    ("max.reduction_with_dim", "f32.grad"), ("gather", "f32.grad"), ("masked_scatter", "f32"),
    ("masked_scatter", "f32.grad"), ("topk", "f32"),
]

# Entries coil does not lower completely (yet): their answers must still be right.
NOT_COVERED = [(name, "f32") for name in "sort nonzero index_put".split()]


def _sweep():
    spec = importlib.util.spec_from_file_location("opinfo_sweep", ROOT / "tools" / "opinfo_sweep.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def ops():
    from torch.testing._internal.common_methods_invocations import op_db

    sweep = _sweep()
    return sweep, {sweep.entry_name(o): o for o in op_db}


def _describe(rec) -> str:
    bad = [s for s in rec["samples"] if s and s["status"] not in ("pass", "skip")]
    return f"{rec['status']}: {rec.get('reason', '')}; samples {bad[:3]}"


@pytest.mark.parametrize("entry,variant", COVERED, ids=[f"{e}-{v}" for e, v in COVERED])
def test_covered_strict(ops, entry, variant):
    sweep, by_name = ops
    op = by_name[entry]
    torch.set_num_threads(1)
    rec = sweep.run_variant(op, variant, strict=True, max_samples=MAX_SAMPLES)
    assert rec["status"] == "pass", _describe(rec)
    assert sweep.core_overloads(op), f"{entry} is not a core ATen entry; move it"


@pytest.mark.parametrize("entry,variant", NOT_COVERED, ids=[f"{e}-{v}" for e, v in NOT_COVERED])
def test_not_covered_is_right(ops, entry, variant):
    sweep, by_name = ops
    rec = sweep.run_variant(by_name[entry], variant, strict=False, max_samples=MAX_SAMPLES)
    assert rec["status"] in ("pass", "fallback", "skip"), _describe(rec)


def test_outcome_classification(ops):
    # The sweep must be able to say "wrong": a backend that returns wrong numbers is caught.
    sweep, by_name = ops
    import coil.backend as backend

    real = backend.CoilGraphFn.__call__

    def off_by_one(self, args):
        return [o + 1 if isinstance(o, torch.Tensor) and o.is_floating_point() else o
                for o in real(self, args)]

    backend.CoilGraphFn.__call__ = off_by_one
    try:
        rec = sweep.run_variant(by_name["sin"], "f32", strict=True, max_samples=2)
    finally:
        backend.CoilGraphFn.__call__ = real
    assert rec["status"] == "wrong", rec
    # And a missing lowering is a fallback in strict mode, not an error.
    rec = sweep.run_variant(by_name["sort"], "f32", strict=True, max_samples=1)
    assert rec["status"] == "fallback", rec


@pytest.mark.slow
def test_full_sweep(tmp_path):
    """The whole sweep, both modes: nothing may be wrong (about an hour on 2 cores)."""
    results = tmp_path / "results.jsonl"
    env = dict(os.environ, PYTHONPATH=str(ROOT / "python"))
    subprocess.run([sys.executable, str(ROOT / "tools" / "opinfo_sweep.py"), "--mode", "both",
                    "--jobs", "2", "--results", str(results),
                    "--write", str(tmp_path / "op_coverage.md")], check=True, env=env)
    wrong = [json.loads(l) for l in results.read_text().splitlines()
             if l.strip() and json.loads(l)["status"] == "wrong"]
    assert not wrong, [(r["op"], r["variant"], r["mode"], r.get("reason")) for r in wrong]


def test_topk_indices_checked_for_meaning(ops):
    # topk's indices among tied values are unspecified, so the sweep checks that coil's select
    # the returned values, are in range and do not repeat, instead of comparing them with
    # eager's; indices that select other values, or repeat one, are still wrong.
    sweep, by_name = ops
    op = by_name["topk"]
    x = torch.tensor([[3, 1, 3, 2], [5, 5, 5, 0]])
    sample = sweep._Sample(type("S", (), {"input": x, "args": (2, 1), "kwargs": {},
                                           "output_process_fn_grad": None})())
    eager = torch.topk(x, 2, 1)
    ties = (eager[0], torch.tensor([[2, 0], [2, 1]]))  # other tied positions: fine
    assert sweep._compare_sample(op, (eager, None, None, None), (ties, None), False,
                                 sample).status == "pass"
    other = (eager[0], torch.tensor([[0, 3], [0, 1]]))  # [0, 3] selects 3 and 2, not 3 and 3
    assert sweep._compare_sample(op, (eager, None, None, None), (other, None), False,
                                 sample).status == "wrong"
    repeat = (eager[0], torch.tensor([[0, 0], [1, 1]]))
    assert sweep._compare_sample(op, (eager, None, None, None), (repeat, None), False,
                                 sample).status == "wrong"
