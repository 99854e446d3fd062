"""bench/offline_gpu_schedule.py: a graph's GPU schedule read without a GPU.

The pure parts (types moved to @cuda, a schedule's peak, the summary of a fusion log) against
hand-made text, and one graph of this machine's lowering scheduled for CUDA through coil-opt.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

import offline_gpu_schedule as og

ROOT = Path(__file__).resolve().parents[2]


def test_types_move_to_the_gpu():
    text = ("graph(%0: f32[8, 16]{16, 1}+4, %1: i64[8]):\n"
            "  %2: bf16[8, 16] = aten.zeros.default([8, 16], device(cpu))\n")
    got = og.on_cuda(text)
    assert "f32[8, 16]{16, 1}+4@cuda" in got and "i64[8]@cuda" in got
    assert "bf16[8, 16]@cuda" in got and "device(cuda)" in got and "device(cpu)" not in got


def test_peak_counts_storage_held_at_once():
    schedule = ("alloc storage0: 100 bytes\nalloc storage1: 50 bytes\nfree storage0\n"
                "alloc storage2: 70 bytes\nfree storage1\nalloc storage3: 200 bytes\n")
    assert og.peak_bytes(schedule) == 270  # storage2 (70) + storage3 (200)


def test_summary_of_a_fusion_log():
    log = ("buf1 starts kernel0 over [8]\n"
           "not fused buf2 into kernel0: outer ranges [8] vs [16]\n"
           "not fused buf3 into kernel0: outer ranges [8] vs [16]\n"
           "kernel0 over [8]:\n  traffic: reads 64, writes 32 bytes\n"
           "kernel1 over [16]:\nkernels' traffic: reads 128, writes 96 bytes\n")
    s = og.summarize(log)
    assert (s["kernels"], s["reads"], s["writes"]) == (2, 128, 96)
    assert s["refusals"].most_common(1)[0] == ("outer ranges [8] vs [16]", 2)


def test_a_graph_scheduled_for_cuda(tmp_path):
    tools = sorted(ROOT.glob("build/*/coil-opt"))
    if not tools:
        pytest.skip("coil-opt is not built")
    graph = tmp_path / "g.txt"
    graph.write_text(og.on_cuda(
        "graph(%0: f32[64, 1024]):\n"
        "  %1: f32[64, 1024] = aten._softmax.default(%0, -1, false)\n"
        "  %2: f32[64, 1024] = aten.mul.Tensor(%1, %1)\n"
        "  return (%2)\n"))
    out = subprocess.run([str(tools[0]), str(graph), "--emit=fusion"], capture_output=True,
                         text=True, check=True).stdout
    s = og.summarize(out)
    assert s["kernels"] == 1, out  # softmax and its reader: one row kernel
    assert s["reads"] >= 64 * 1024 * 4 and s["writes"] >= 64 * 1024 * 4, out
