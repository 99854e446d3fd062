"""The GPU benchmark harness (bench/gpu.py): run end to end at tiny sizes on the CPU, and at quick
sizes on a GPU where there is one. Checks the report has every column, that coil's rows hold
real measurements, that coil compiled every graph itself (not an eager fallback) and that its
results pass the accuracy rule against eager."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import gpu as bench
from gpu_models import CASES

ROOT = Path(__file__).resolve().parents[2]


def _run_harness(tmp_path, *args) -> list[dict[str, str]]:
    out = tmp_path / "gpu.md"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "python"), env.get("PYTHONPATH", "")])
    # A private coil cache root is not needed: the harness gives each compile a fresh one.
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "gpu.py"), *args, "--write",
                           str(out)], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert out.exists(), proc.stderr[-3000:]
    text = out.read_text()
    lines = [l for l in text.splitlines() if l.startswith("| ")]
    header = [c.strip() for c in lines[0].strip("|").split("|")]
    assert header == bench.HEADER, header
    rows = []
    for line in lines[1:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == len(header) and cells[1] in bench.COMPILERS:
            rows.append(dict(zip(header, cells)))
    assert proc.returncode == 0, (proc.stderr[-3000:], text)
    return rows


def _check_rows(rows, cases, compilers):
    assert [(r["case"], r["compiler"]) for r in rows] == [(c, k) for c in cases for k in compilers]
    for r in rows:
        assert float(r["ms"]) > 0, r
        assert float(r["speedup vs eager"]) > 0, r
        assert float(r["peak MiB"]) >= 0, r
        if CASES[r["case"]].memory_bound:
            assert float(r["GB/s"]) > 0, r
        if r["compiler"] == "eager":
            assert r["accuracy"] == "reference", r
            continue
        assert float(r["cold compile s"]) > 0, r
        assert r["accuracy"] == "ok", r
    for r in rows:
        if r["compiler"] == "coil":
            # coil's own numbers: every graph compiled by coil, none run eagerly.
            assert "by coil" in r["notes"] and "EAGER" not in r["notes"], r
            assert "EAGER" not in r["ms"] and "eager" not in r["ms"], r


def test_rotation_count():
    mib = 1 << 20
    # The attention block's 32 MiB input on an H100 (50 MiB L2): 3 copies, so that the two
    # others (64 MiB) flush it between its uses.
    assert bench.rotation_count(32 * mib, 50 * mib) == 3
    assert bench.rotation_count(256 * mib, 50 * mib) == 1  # does not fit: no copies
    assert bench.rotation_count(32 * 1024, 50 * mib) == 8  # capped
    assert bench.rotation_count(32 * mib, 0) == 1  # CPU


def test_coil_cell_says_eager():
    assert bench.coil_ran((0, 2, 0, [])).startswith("EAGER")
    assert "EAGER" in bench.coil_ran((1, 1, 0, []))
    assert bench.coil_ran((2, 0, 0, [])) == "2 graph(s) by coil"
    assert "3 per-op" in bench.coil_ran((2, 0, 3, []))


def test_harness_cpu_tiny(tmp_path, real_coil):
    cases = ["silu_mul", "attention"]
    rows = _run_harness(tmp_path, "--device", "cpu", "--tiny", "--cases", ",".join(cases),
                        "--compilers", "eager,coil", "--repeat", "3")
    _check_rows(rows, cases, ["eager", "coil"])


@pytest.mark.gpu
def test_harness_gpu_quick(tmp_path, real_coil):
    cases = ["silu_mul", "softmax"]
    rows = _run_harness(tmp_path, "--quick", "--cases", ",".join(cases))
    _check_rows(rows, cases, list(bench.COMPILERS))
