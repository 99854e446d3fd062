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
                        options={"debug": True, "debug_dir": str(tmp_path), **options})(x)
    torch.testing.assert_close(out, softmax_plus(x))
    return sorted(tmp_path.iterdir())


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
    assert "COIL_KERNEL void kernel0" in (d / "05_kernels.cpp").read_text()


def test_dump_of_failed_host_compile(tmp_path):
    with pytest.warns(RuntimeWarning, match="runs eagerly"):
        (d,) = _dump_dirs(tmp_path, {"cache_dir": "", "cxx": "false"})
    names = {p.name for p in d.iterdir()}
    assert {"02_loop_program.txt", "05_kernels.cpp", "compile_error.txt"} <= names
    assert "host C++ compilation failed" in (d / "compile_error.txt").read_text()
    assert "whole graph ran eagerly" in (d / "fallbacks.txt").read_text()
