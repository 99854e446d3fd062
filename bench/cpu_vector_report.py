"""Which simd loops of a dashboard model's CPU kernels g++ left scalar, by kernel time.

    python bench/cpu_vector_report.py timm_levit_128s --mode train [--min-ms 0.01]
    python bench/cpu_vector_report.py --dump DIR [--min-ms 0]     # an existing run's folder

Runs `bench/dashboard_profile.py NAME` under COIL_DEBUG=1 in a scratch folder (every kernel's
time, not only the slowest), then compiles each graph's 05_kernels.cpp again with the command
in its 06_compiler.log plus g++'s vectorizer report, and lists every `#pragma omp simd` loop
that no "loop vectorized" line falls inside, with its kernel's time per run. coil's emitter
writes simd loops where each lane's work is independent, so a scalar one is a missed speed-up
(a select g++ cannot vectorize, a helper call, a gather); tiled transposes and loops of a few
elements are expected in the list. --dump reads a folder such a run left (kept with --keep).
"""

from __future__ import annotations

import argparse
import glob
import os
import re
import shlex
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
KERNEL_TIME = re.compile(r"\s+([\d.]+) ms\s+[\d.]+%\s+kernel (\w+)")
# A loop g++ vectorized, or replaced by library calls (a zero fill becomes memset).
VECTORIZED = re.compile(
    r".*05_kernels\.cpp:(\d+):\d+: optimized: "
    r"(loop vectorized|Loop \d+ distributed: split to 0 loops)")


def kernel_times(prof_text: str) -> dict[str, float]:
    """Kernel name -> ms per run, from coil.profile_report()'s lines."""
    times = {}
    for line in prof_text.splitlines():
        m = KERNEL_TIME.match(line)
        if m:
            times[m.group(2)] = float(m.group(1))
    return times


def loop_end(lines: list[str], start: int) -> int:
    """The line (0-based) closing the loop whose header is at or after `start`."""
    depth, opened = 0, False
    for j in range(start, len(lines)):
        depth += lines[j].count("{") - lines[j].count("}")
        opened = opened or "{" in lines[j]
        if opened and depth <= 0:
            return j
    return len(lines) - 1


def scalar_loops(source: str, compile_cmd: str) -> list[tuple[str, int, str]]:
    """(kernel, line, loop header) of each simd loop of `source` that g++ did not vectorize."""
    # The logged command, compiling our copy of the source to nothing, with the report.
    args, skip = [], False
    for a in shlex.split(compile_cmd):
        if skip or a in ("-shared", "-fPIC") or a.endswith(".cpp"):
            skip = False
            continue
        if a == "-o":
            skip = True
            continue
        args.append(a)
    with tempfile.NamedTemporaryFile("w", suffix="05_kernels.cpp", delete=False) as f:
        f.write(source)
        path = f.name
    try:
        report = subprocess.run(
            args + ["-c", path, "-o", os.devnull, "-fopt-info-vec-optimized",
                    "-fopt-info-loop-optimized"],
            capture_output=True, text=True)
    finally:
        os.unlink(path)
    vectorized = {int(m.group(1)) for m in map(VECTORIZED.match, report.stderr.splitlines()) if m}
    lines = source.splitlines()
    found, kernel = [], "?"
    for i, line in enumerate(lines):
        m = re.search(r"COIL_ENTRY\((\w+)\)", line)
        if m:
            kernel = m.group(1)
        if line.strip().startswith("#pragma omp") and " simd" in line:
            end = loop_end(lines, i + 1)
            if not any(i + 1 <= v - 1 <= end for v in vectorized):
                found.append((kernel, i + 2, lines[i + 1].strip()))
    return found


def report(folder: str, min_ms: float) -> list[tuple[float, str, int, str]]:
    prof = os.path.join(folder, "prof.txt")
    times = kernel_times(open(prof).read()) if os.path.exists(prof) else {}
    rows = []
    for graph in sorted(glob.glob(os.path.join(folder, "coil_debug", "*", "05_kernels.cpp"))):
        log = os.path.join(os.path.dirname(graph), "06_compiler.log")
        cmd = next((l[2:] for l in open(log) if l.startswith("$ ")), None)
        if cmd is None:
            continue
        for kernel, line, header in scalar_loops(open(graph).read(), cmd):
            ms = times.get(kernel, 0.0)
            if ms >= min_ms:
                rows.append((ms, f"{os.path.basename(os.path.dirname(graph))}:{kernel}", line,
                             header))
    return sorted(rows, reverse=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?")
    ap.add_argument("--mode", choices=("infer", "train"), default="infer")
    ap.add_argument("--dump", help="a folder with coil_debug/ and prof.txt from an earlier run")
    ap.add_argument("--keep", action="store_true", help="keep the scratch folder")
    ap.add_argument("--min-ms", type=float, default=0.01)
    a = ap.parse_args()
    folder = a.dump
    if folder is None:
        if not a.model:
            ap.error("a model name or --dump")
        folder = tempfile.mkdtemp(prefix="coil_vec_")
        env = dict(os.environ, COIL_DEBUG="1")
        prof = subprocess.run([sys.executable, os.path.join(HERE, "dashboard_profile.py"), a.model,
                               "--mode", a.mode, "--top", "100000"],
                              cwd=folder, env=env, capture_output=True, text=True)
        open(os.path.join(folder, "prof.txt"), "w").write(prof.stdout)
        if prof.returncode != 0:
            sys.exit(prof.stderr[-2000:])
    rows = report(folder, a.min_ms)
    print(f"{len(rows)} simd loop(s) left scalar in kernels of >= {a.min_ms} ms ({folder})")
    for ms, where, line, header in rows:
        print(f"{ms:8.3f} ms  {where:40s} line {line}: {header[:70]}")
    if a.dump is None and not a.keep:
        subprocess.run(["rm", "-rf", folder])


if __name__ == "__main__":
    main()
