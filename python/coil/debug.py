"""Debug dumps: with debug on (COIL_DEBUG=1 or options {"debug": True}) every compiled graph
gets a folder under the debug dir:

  00_fx_graph.py       the ATen FX graph's Python code (gm.code)
  00_passes.txt        what the Python graph passes changed (layout.py), one line each
  01_graph.txt         coil graph text handed to C++
  02_loop_program.txt  loop IR after lowering           (written by C++, runtime/compile.cpp,
  03_schedule.txt      kernels after fusion, memory plan  also when compilation fails, with
  04_fusion_log.txt    fusion decisions                   compile_error.txt)
  05_kernels.cpp       generated source
  06_compiler.log      host compiler command and output
  timings.json         stage -> seconds (plus the Python-side export time)
  fallbacks.txt        ops run eagerly; or why the whole graph fell back
  warnings.txt         faults coil survived (unsafe or unwritable cache, evicted entries)

plus, per process, report_pid<PID>.html: every graph's timings, fallbacks, kernels and fusion
groups on one page (html_report.py), rewritten as graphs are added.

Dumping is best-effort: an unwritable debug dir logs one warning and compilation goes on.

Whatever the debug switch, GraphDump also hands each graph's texts to the torch._logging
artifacts that are enabled (torch_logs.py: TORCH_LOGS="+coil,coil_kernels") and keeps a small
record of the graph for coil.write_html_report(): it is where every graph's outcome passes.
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

from . import html_report, torch_logs

log = logging.getLogger("coil")
_counter = itertools.count()
# Roots whose failed writes were reported (once per process each).
_failed_roots: set[str] = set()
_failed_lock = threading.Lock()


def _report_failure(root: str, e: OSError) -> None:
    with _failed_lock:
        first = root not in _failed_roots
        _failed_roots.add(root)
    if first:
        log.warning("coil: debug dump to %s failed (%s: %s); compiling without it",
                    root, type(e).__name__, e)


class GraphDump:
    """Writes one graph's folder; the file writes are no-ops when disabled. Best-effort: a
    folder that cannot be made or written logs one warning per root and per process, and the
    dump turns itself off (compilation goes on: a debug aid must never stop the program).
    artifacts() and graph_fallback() also feed the torch._logging artifacts and the HTML
    report's record, enabled or not (cheap: a few numbers, and texts only for enabled logs)."""

    def __init__(self, enabled: bool, root: str, name: str):
        self.dir: Path | None = None
        self.root = root
        self.name = name
        self.fx_ops: int | None = None
        if enabled:
            d = Path(root) / f"{next(_counter):03d}_{name}_pid{os.getpid()}"
            try:
                d.mkdir(parents=True, exist_ok=True)
                self.dir = d
            except OSError as e:
                _report_failure(root, e)

    def _guarded(self, write) -> None:
        if self.dir is None:
            return
        try:
            write()
        except OSError as e:
            _report_failure(self.root, e)
            self.dir = None

    def write(self, filename: str, text: str) -> None:
        if self.dir is not None:
            path = self.dir / filename
            self._guarded(lambda: path.write_text(text))

    def fx_graph(self, gm) -> None:
        self.fx_ops = sum(1 for n in gm.graph.nodes if n.op == "call_function")
        if self.dir is not None:
            self.write("00_fx_graph.py", gm.code)

    def note(self, line: str) -> None:
        if self.dir is not None:
            path = self.dir / "00_passes.txt"

            def append():
                with open(path, "a") as f:
                    f.write(line + "\n")

            self._guarded(append)

    def graph_text(self, text: str) -> None:
        self.write("01_graph.txt", text)

    def artifacts(self, art: dict[str, Any], python_timings: dict[str, float]) -> None:
        timings = dict(python_timings)
        for stage, secs in art.get("timings", []) or []:
            timings[str(stage)] = float(secs)
        num_ops = html_report.count_ops(str(art.get("input_graph") or ""))
        self._observe(lambda: html_report.record_compiled(
            self.name, art, timings, self.fx_ops, self._dir_str(), num_ops))
        self._observe(lambda: torch_logs.graph_compiled(
            self.name, art, html_report.compile_seconds(timings), num_ops))
        if self.dir is None:
            return
        timings["num_kernels"] = art.get("num_kernels", 0)
        timings["cache_hit"] = bool(art.get("cache_hit", False))
        self.write("timings.json", json.dumps(timings, indent=2) + "\n")
        ops = list(art.get("fallback_ops", []) or [])
        self.write("fallbacks.txt", "".join(f"{op}\n" for op in ops))
        warnings = list(art.get("warnings", []) or [])
        if warnings:
            self.write("warnings.txt", "".join(f"{w}\n" for w in warnings))
        self._report()

    def graph_fallback(self, reason: str) -> None:
        self._observe(lambda: html_report.record_fallback(
            self.name, reason, self.fx_ops, self._dir_str()))
        self._observe(lambda: torch_logs.graph_fell_back(self.name, reason))
        self.write("fallbacks.txt", f"whole graph ran eagerly: {reason}\n")
        self._report()

    def _dir_str(self) -> str | None:
        return str(self.dir) if self.dir is not None else None

    def _observe(self, fn) -> None:
        # Logging and the report's record are debug aids too: a fault there (a handler that
        # raises, a torch whose logging changed) is logged, never raised into compilation.
        try:
            fn()
        except Exception as e:
            log.debug("coil: %s: debug record failed (%s: %s)", self.name, type(e).__name__, e)

    def _report(self) -> None:
        """The process's HTML report in the debug dir, rewritten with this graph."""
        if self.dir is not None:
            root = self.root
            self._observe(lambda: html_report.after_dump(root, lambda e: _report_failure(root, e)))
