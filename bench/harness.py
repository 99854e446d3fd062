"""Pieces shared by the benchmark harnesses (bench/run.py on CPU, bench/gpu.py on GPU).

Number formatting, markdown tables, host-side median timing, CPU peak-memory probes and a
one-line description of the host. Device-specific timing (CUDA events) lives in bench/gpu.py.
"""

from __future__ import annotations

import os
import platform
import statistics
import time
from typing import Callable, Sequence


def fmt(v, spec: str = "{:.2f}") -> str:
    """A number for a table cell; None (not measured) prints as '-'."""
    return "-" if v is None else spec.format(v)


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * len(header)) + "|"]
    lines += ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
    return "\n".join(lines)


def median_host_time(step: Callable[[], object], repeat: int) -> float:
    """Median wall time of `repeat` calls of step(), seconds (host clock: CPU work only)."""
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


# Peak resident memory of this process. /proc/self/clear_refs "5" resets VmHWM to the current
# RSS, so VmHWM after some calls minus VmRSS before them is what those calls added at peak.


def rss_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def reset_peak_rss() -> None:
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def cpu_name() -> str:
    name = platform.processor()
    try:
        with open("/proc/cpuinfo") as f:
            name = next(l.split(":", 1)[1].strip() for l in f if l.startswith("model name"))
    except (OSError, StopIteration):
        pass
    return name


def machine() -> str:
    import torch

    return (f"{cpu_name()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
            f"torch {torch.__version__}, {platform.platform()}")
