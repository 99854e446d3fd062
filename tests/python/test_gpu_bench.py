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


def _run_harness(tmp_path, *args, expect_rc: int = 0) -> list[dict[str, str]]:
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
    assert proc.returncode == expect_rc, (proc.stderr[-3000:], text)
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


def test_harness_goes_on_after_a_compiler_failure(tmp_path, real_coil):
    # An unknown coil option makes coil's backend raise on every case: each coil row must carry
    # the root cause, the other rows and later cases must still be measured, and the exit
    # status must say that something failed.
    rows = _run_harness(tmp_path, "--device", "cpu", "--tiny", "--cases", "silu_mul,softmax",
                        "--compilers", "eager,coil", "--repeat", "2",
                        "--coil-options", "no_such_option=1", expect_rc=1)
    assert [(r["case"], r["compiler"]) for r in rows] == [
        ("silu_mul", "eager"), ("silu_mul", "coil"), ("softmax", "eager"), ("softmax", "coil")]
    for r in rows:
        if r["compiler"] == "eager":
            assert float(r["ms"]) > 0, r
        else:
            assert r["ms"] == "-" and "unknown coil option" in r["notes"], r


@pytest.mark.gpu
def test_harness_gpu_quick(tmp_path, real_coil):
    cases = ["silu_mul", "softmax"]
    rows = _run_harness(tmp_path, "--quick", "--cases", ",".join(cases))
    _check_rows(rows, cases, list(bench.COMPILERS))


def _params(model) -> int:
    return sum(p.numel() for p in model.parameters())


def test_full_size_models_are_the_reference_architectures():
    # Built on the meta device (no memory, no init time). torchvision's resnet50 has 25,557,032
    # parameters; GPT-2 small has 124,439,808 with its LM head tied to the token embedding, and
    # bench/models.py's GPT2 keeps the head separate (+50257 x 768).
    import torch

    with torch.device("meta"):
        resnet, (x,) = CASES["resnet50_infer"].build("full")
        gpt2, (idx,) = CASES["gpt2_infer"].build("full")
        quick, _ = CASES["gpt2_train"].build("quick")
    assert _params(resnet) == 25_557_032
    assert tuple(x.shape) == (64, 3, 224, 224) and x.dtype == torch.bfloat16
    assert _params(gpt2) == 124_439_808 + 50257 * 768
    assert tuple(idx.shape) == (8, 512)
    assert len(gpt2.blocks) == 12 and len(quick.blocks) == 2
