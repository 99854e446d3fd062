"""COIL_DEBUG dumps with the real compiler: every stage's text for a compiled graph, and for a
graph whose host compilation fails, the stages that ran plus the error (the program still runs
eagerly)."""

import pytest
import torch

C = pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")


def softmax_plus(x):
    return torch.softmax(x, -1) + 1


def _dump_dirs(tmp_path, options):
    torch._dynamo.reset()
    x = torch.randn(8, 32)
    out = torch.compile(softmax_plus, backend="coil",
                        options={"debug": True, "debug_dir": str(tmp_path / "dump"),
                                 **options})(x)
    torch.testing.assert_close(out, softmax_plus(x))
    return sorted(p for p in (tmp_path / "dump").iterdir() if p.is_dir())  # not the HTML report


def test_dump_has_every_stage(tmp_path):
    (d,) = _dump_dirs(tmp_path, {"cache_dir": ""})
    names = {p.name for p in d.iterdir()}
    assert {"00_fx_graph.py", "01_graph.txt", "02_loop_program.txt", "03_schedule.txt",
            "04_fusion_log.txt", "05_kernels.cpp", "06_compiler.log", "timings.json",
            "fallbacks.txt"} <= names
    assert "compile_error.txt" not in names
    assert "reduce max" in (d / "02_loop_program.txt").read_text()
    assert "kernel0" in (d / "03_schedule.txt").read_text()
    assert "fused" in (d / "04_fusion_log.txt").read_text()
    assert "COIL_KERNEL void COIL_ENTRY(kernel0)" in (d / "05_kernels.cpp").read_text()


def test_dump_of_failed_host_compile(tmp_path):
    # A compiler that answers --version (the cache key and the kernels' symbols need it) and
    # fails every compile.
    cxx = tmp_path / "failing-cxx"
    cxx.write_text("#!/bin/sh\n[ \"$1\" = --version ] && exec g++ --version\n"
                   "echo 'failing-cxx: no' >&2\nexit 1\n")
    cxx.chmod(0o755)
    with pytest.warns(RuntimeWarning, match="runs eagerly"):
        (d,) = _dump_dirs(tmp_path, {"cache_dir": "", "cxx": str(cxx)})
    names = {p.name for p in d.iterdir()}
    assert {"02_loop_program.txt", "05_kernels.cpp", "compile_error.txt"} <= names
    assert "host C++ compilation failed" in (d / "compile_error.txt").read_text()
    assert "whole graph ran eagerly" in (d / "fallbacks.txt").read_text()


def test_profile_report_sums_host_time_per_step_kind():
    # coil.set_profiling times every runtime step; the report gives each graph's host time per
    # kind of step (allocations included) and the slowest kernel and extern steps.
    import coil

    torch._dynamo.reset()
    cf = torch.compile(lambda x, w: torch.softmax(x @ w, -1) + 1, backend="coil",
                       options={"strict": True})
    x, w = torch.randn(16, 32), torch.randn(32, 8)
    cf(x, w)
    coil.set_profiling(True)
    try:
        for _ in range(3):
            cf(x, w)
    finally:
        coil.set_profiling(False)
    report = coil.profile_report(5)
    head = next(line for line in report.splitlines() if "run(s)" in line)
    assert "3 run(s)" in head, report
    assert " alloc " in head and " kernel " in head and " extern " in head, report
    steps = [line for line in report.splitlines() if line.startswith("  ")]
    assert steps and all(("kernel" in s or "extern" in s) for s in steps), report
