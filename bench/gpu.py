"""GPU benchmark: eager, Inductor and coil side by side on issue 3's cases (bench/gpu_models.py).

    python bench/gpu.py                                  # every case, full sizes, on cuda
    python bench/gpu.py --quick --cases silu_mul,gpt2_infer
    python bench/gpu.py --write bench/results/gpu.md     # also write the markdown report
    python bench/gpu.py --device cpu --tiny              # the harness itself, on a CPU

All three compilers run in this one process, one after the other, each on its own copy of the
model (copied from one CPU master, so all start from the same weights) and on the same inputs.
Per case and compiler it reports:

- time: median of CUDA-event timings of single calls after warm-up (host clock on a CPU);
  inputs that fit in L2 are rotated among enough copies that each call reads them from DRAM;
- speedup over eager, and the ratio Inductor time / this time (> 1: faster than Inductor);
- GB/s for the memory-bound cases: inputs, parameters and outputs each counted once;
- cold compile: the first call's wall time minus the median call. Inductor compiles with
  force_disable_caches and a fresh cache dir (Inductor's and Triton's); coil with a fresh, empty
  cache_dir and NVRTC's own cache (~/.nv/ComputeCache) disabled. One throw-away compile per
  compiler before the first case pays the one-time imports and worker start-up, so no case
  carries them (they are printed separately);
- peak memory: torch.cuda.max_memory_allocated over one steady-state call, reset before it
  (weights, optimizer state, rotated inputs included, the same for every compiler); on a CPU the
  growth of the resident set over that call;
- accuracy against eager with bench/accuracy.py's rule (a float64 reference is computed only
  when the plain tolerance check fails); training steps compare the loss and every gradient;
- for coil, what coil.report() says: graphs compiled, graphs that ran eagerly (with reasons)
  and ops that went through the per-op fallback. A coil time that is really eager's says so.

A training step is: zero grads, loss = compiled_model(*inputs), loss.backward() (the backward
graph is compiled too, by AOTAutograd), then an eager torch.optim.SGD step (lr 1e-3, outside the
compiled region, identical for all three). A compiler that fails on a case gets its row with a
one-line error and the harness goes on (a crash of the CUDA context itself cannot be contained).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import datetime
import gc
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable

HERE = os.path.dirname(os.path.abspath(__file__))
# NVRTC 13, coil's compiler, keeps what it compiled under ~/.nv/ComputeCache (CUDA_CACHE_PATH),
# keyed by source and shared by every process of the machine: a cold compile must not read what
# an earlier run (a test suite) left there. Set before anything loads NVRTC.
os.environ.setdefault("CUDA_CACHE_DISABLE", "1")
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import torch  # noqa: E402

from accuracy import compare, to_fp64  # noqa: E402
from gpu_models import CASES, Case  # noqa: E402
from harness import cpu_name, fmt, markdown_table, reset_peak_rss, rss_kib  # noqa: E402

COMPILERS = ("eager", "inductor", "coil")
# Not run by default: PyTorch's front end alone (Dynamo + AOTAutograd, the graphs run by ATen),
# whose cold compile is the floor both compilers' figures include.
OPTIONAL_COMPILERS = ("aot_eager",)
# Targets of issue 3, shown next to the figures.
TARGET_GBPS = 2700.0
TARGET_COMPILE_RATIO = 0.10


@dataclasses.dataclass
class Result:
    compiler: str
    ms: float | None = None
    cold_s: float | None = None
    peak_mib: float | None = None
    gbps: float | None = None
    accuracy: str | None = None
    error: str | None = None
    # coil only: (graphs compiled, graphs run eagerly, per-op fallback count, detail lines)
    coil: tuple[int, int, int, list[str]] | None = None


def one_line(e: BaseException) -> str:
    """The error's first line; for a wrapper (Dynamo's BackendCompilerFailed) its root cause's."""
    inner = e
    for _ in range(10):
        nxt = getattr(inner, "inner_exception", None) or inner.__cause__
        if nxt is None:
            break
        inner = nxt
    msg = str(inner).strip().splitlines()
    text = f"{type(inner).__name__}: {msg[0][:200] if msg else ''}".rstrip(": ")
    text = text.replace("|", "/")  # a table cell
    return text if inner is e else f"{text} (in {type(e).__name__})"


# ---------------------------------------------------------------------------------------------
# Device: timing, peak memory, synchronization


class Device:
    def __init__(self, name: str):
        self.device = torch.device(name)
        self.cuda = self.device.type == "cuda"
        if self.cuda and not torch.cuda.is_available():
            raise SystemExit("bench/gpu.py: no CUDA device here (use --device cpu --tiny to test "
                             "the harness on a CPU)")

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def l2_bytes(self) -> int:
        if not self.cuda:
            return 0
        return int(getattr(torch.cuda.get_device_properties(self.device), "L2_cache_size", 0))

    def times(self, calls: list[Callable[[], Any]]) -> list[float]:
        """Seconds per call. CUDA: an event pair around each call, read after one final sync."""
        if not self.cuda:
            out = []
            for c in calls:
                t0 = time.perf_counter()
                c()
                out.append(time.perf_counter() - t0)
            return out
        starts = [torch.cuda.Event(enable_timing=True) for _ in calls]
        ends = [torch.cuda.Event(enable_timing=True) for _ in calls]
        for c, s, e in zip(calls, starts, ends):
            s.record()
            c()
            e.record()
        torch.cuda.synchronize(self.device)
        return [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)]

    def allocated(self) -> int:
        return torch.cuda.memory_allocated(self.device) if self.cuda else 0

    def peak_mib(self, call: Callable[[], Any], base: int = 0) -> float:
        """CUDA: the allocator's peak over call() above `base` bytes; CPU: resident-set growth."""
        self.sync()
        if self.cuda:
            torch.cuda.reset_peak_memory_stats(self.device)
            call()
            self.sync()
            return (torch.cuda.max_memory_allocated(self.device) - base) / 2**20
        before = rss_kib("VmRSS")
        reset_peak_rss()
        call()
        return max(0, rss_kib("VmHWM") - before) / 1024.0

    def release(self) -> None:
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()


def rotation_count(input_bytes: int, l2_bytes: int, cap: int = 8) -> int:
    """How many copies of the inputs to cycle through so that a call never finds its inputs in L2:
    the other copies touched since its last use must fill L2. 1 when the inputs do not fit."""
    if l2_bytes <= 0 or input_bytes <= 0 or input_bytes >= l2_bytes:
        return 1
    return min(cap, math.ceil(l2_bytes / input_bytes) + 1)


def _to(x: Any, device: torch.device) -> Any:
    return x.to(device) if isinstance(x, torch.Tensor) else x


def _clone(x: Any) -> Any:
    return x.clone() if isinstance(x, torch.Tensor) else x


def _nbytes(xs) -> int:
    return sum(t.numel() * t.element_size() for t in xs if isinstance(t, torch.Tensor))


@contextlib.contextmanager
def tf32(on: bool):
    old = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32)
    torch.set_float32_matmul_precision("high" if on else "highest")
    torch.backends.cudnn.allow_tf32 = on
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old[0])
        torch.backends.cudnn.allow_tf32 = old[1]


# ---------------------------------------------------------------------------------------------
# Compilers


@contextlib.contextmanager
def cold_caches(compiler: str):
    """Inductor: its in-memory caches cleared, a fresh TORCHINDUCTOR_CACHE_DIR and TRITON_CACHE_DIR
    (deleted afterwards), and force_disable_caches. coil gets its fresh cache_dir as an option."""
    if compiler != "inductor":
        yield
        return
    import torch._inductor.config as iconfig
    import torch._inductor.utils as iutils

    fresh = getattr(iutils, "fresh_cache", None) or iutils.fresh_inductor_cache
    with fresh(), iconfig.patch(force_disable_caches=True):
        yield


def compile_model(compiler: str, model: torch.nn.Module, coil_options: dict, cache_root: str):
    if compiler == "eager":
        return model
    torch._dynamo.reset()
    if compiler == "inductor":
        return torch.compile(model)
    if compiler == "aot_eager":
        return torch.compile(model, backend="aot_eager")
    import coil

    coil.reset_report()
    opts = dict(coil_options)
    opts.setdefault("cache_dir", tempfile.mkdtemp(prefix="coil-", dir=cache_root))
    return torch.compile(model, backend="coil", options=opts)


def coil_summary() -> tuple[int, int, int, list[str]]:
    import coil

    rep = coil.report()
    detail = [f"eager {name}: {reason}" for name, reason in rep.graphs_fallen_back]
    detail += [f"per-op fallback {op} in {n} graph(s)" for op, n in rep.fallback_ops.most_common()]
    return (rep.graphs_compiled, len(rep.graphs_fallen_back), sum(rep.fallback_ops.values()),
            detail)


def coil_ran(summary) -> str:
    """The table cell saying whether coil's time is coil's own."""
    if summary is None:
        return "-"
    compiled, eager, op_fallbacks, _ = summary
    if eager and not compiled:
        return f"EAGER: all {eager} graph(s) fell back"
    if compiled == 0:
        return "no graph reached coil"
    cell = f"{compiled} graph(s) by coil"
    if eager:
        cell += f", {eager} EAGER"
    if op_fallbacks:
        cell += f", {op_fallbacks} per-op fallback(s)"
    return cell


# ---------------------------------------------------------------------------------------------
# One case, one compiler


def make_step(case: Case, model: torch.nn.Module, target: Callable):
    """step(inputs, capture) runs one call; with capture it returns what accuracy compares."""
    if not case.trains:

        def step(inputs, capture=False):
            with torch.no_grad():
                out = target(*inputs)
            return [out] if capture else None

        return step
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=1e-3)

    def train_step(inputs, capture=False):
        opt.zero_grad(set_to_none=True)
        loss = target(*inputs)
        loss.backward()
        got = None
        if capture:
            got = [loss.detach().clone()] + [
                None if p.grad is None else p.grad.detach().clone() for p in params]
        opt.step()
        return got

    return train_step


def _cpu(xs: list) -> list:
    return [x.detach().cpu() if isinstance(x, torch.Tensor) else x for x in xs]


class Reference:
    """Eager's captured results and, built on demand, the float64 ones (shared by compilers)."""

    def __init__(self, case: Case, master: torch.nn.Module, inputs: tuple, dev: Device):
        self.case, self.master, self.inputs, self.dev = case, master, inputs, dev
        self.eager: list | None = None
        self._fp64: list | None = None

    def fp64(self) -> list:
        if self._fp64 is None:
            model = copy.deepcopy(self.master).double().to(self.dev.device)
            inputs = to_fp64(tuple(_to(x, self.dev.device) for x in self.inputs))
            self._fp64 = _cpu(make_step(self.case, model, model)(inputs, capture=True))
            del model
            self.dev.release()
        return self._fp64

    def check(self, got: list) -> str:
        v = compare(got, self.eager)
        if not v:
            v = compare(got, self.eager, self.fp64())
        return "ok" if v else f"FAIL {v.detail}"


def run_compiler(case: Case, compiler: str, master, input_sets, ref: Reference, dev: Device,
                 args, cache_root: str) -> Result:
    res = Result(compiler)
    model = target = step = None
    # What is live before this compiler starts (the shared inputs, anything an earlier compiler
    # left behind) is not this compiler's memory.
    dev.release()
    base = dev.allocated()
    try:
        with cold_caches(compiler):
            model = copy.deepcopy(master).to(dev.device)
            target = compile_model(compiler, model, args.coil_options, cache_root)
            step = make_step(case, model, target)
            dev.sync()
            t0 = time.perf_counter()
            got = step(input_sets[0], capture=True)
            dev.sync()
            first_s = time.perf_counter() - t0
            got = _cpu(got)
            for _ in range(args.warmup):
                step(input_sets[0])
            n = len(input_sets)
            calls = [lambda i=i: step(input_sets[i % n]) for i in range(args.repeat)]
            run_s = statistics.median(dev.times(calls))
        res.ms = run_s * 1e3
        if compiler != "eager":
            res.cold_s = max(0.0, first_s - run_s)
        res.peak_mib = dev.peak_mib(lambda: step(input_sets[0]), base)
        if case.memory_bound:
            moved = (_nbytes(input_sets[0]) + _nbytes(master.parameters()) +
                     _nbytes(master.buffers()) + _nbytes(got))
            res.gbps = moved / run_s / 1e9
        if compiler == "eager":
            ref.eager = got
            res.accuracy = "reference"
        elif ref.eager is not None:
            res.accuracy = ref.check(got)
    except Exception as e:  # a compiler failure is a result, not the end of the run
        res.error = one_line(e)
    finally:
        if compiler == "coil":
            try:
                res.coil = coil_summary()
            except Exception as e:
                res.coil = (0, 0, 0, [f"coil.report() failed: {one_line(e)}"])
        del model, target, step
        torch._dynamo.reset()
        dev.release()
    return res


def run_case(case: Case, size: str, dev: Device, args, cache_root: str) -> dict[str, Result]:
    results = {}
    t0 = time.perf_counter()
    with tf32(case.tf32):
        master, inputs = case.build(size)
        inputs = tuple(_to(x, dev.device) for x in inputs)
        k = rotation_count(_nbytes(inputs), dev.l2_bytes())
        input_sets = [inputs] + [tuple(_clone(x) for x in inputs) for _ in range(k - 1)]
        ref = Reference(case, master, inputs, dev)
        for comp in args.compilers:
            r = run_compiler(case, comp, master, input_sets, ref, dev, args, cache_root)
            results[comp] = r
            status = r.error or f"{r.ms:.3f} ms"
            if comp == "coil":
                status += f"  [{coil_ran(r.coil)}]"
            print(f"  {case.name:15s} {comp:9s} {status}", file=sys.stderr, flush=True)
        del input_sets, inputs, ref, master
        dev.release()
    print(f"  {case.name:15s} took {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    return results


def warm_up_compilers(dev: Device, args, cache_root: str) -> dict[str, str]:
    """One throw-away compile per compiler: imports, worker pools, host/device compiler start-up."""

    def f(x):
        return torch.sin(x) * 2 + 1

    out = {}
    x = torch.randn(1000, device=dev.device)
    for comp in args.compilers:
        if comp == "eager":
            continue
        try:
            with cold_caches(comp):
                torch._dynamo.reset()
                t0 = time.perf_counter()
                if comp in ("inductor", "aot_eager"):
                    fn = torch.compile(f, backend=comp)
                else:
                    import coil  # noqa: F401  (registers the "coil" backend without the entry point)

                    fn = torch.compile(f, backend="coil", options={
                        **args.coil_options, "cache_dir": tempfile.mkdtemp(dir=cache_root)})
                fn(x)
                dev.sync()
                out[comp] = f"{time.perf_counter() - t0:.2f} s"
        except Exception as e:
            out[comp] = f"failed: {one_line(e)}"
        torch._dynamo.reset()
    return out


# ---------------------------------------------------------------------------------------------
# Report


def _git_commit() -> str:
    try:
        rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, text=True,
                             capture_output=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               text=True, capture_output=True, timeout=10).stdout.strip()
        return (rev + (" (modified)" if dirty else "")) or "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _driver_version() -> str:
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                             text=True, capture_output=True, timeout=20).stdout.strip()
        return out.splitlines()[0] if out else "unknown"
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def _version(module: str) -> str:
    try:
        return __import__(module).__version__
    except Exception:
        return "not installed"


def copy_bandwidth(dev: Device) -> float | None:
    """GB/s of a 1 GiB device-to-device copy (read + write), the practical ceiling."""
    if not dev.cuda:
        return None
    src = torch.empty(1 << 28, device=dev.device)
    dst = torch.empty_like(src)
    for _ in range(3):
        dst.copy_(src)
    t = statistics.median(dev.times([lambda: dst.copy_(src) for _ in range(20)]))
    del src, dst
    dev.release()
    return 2 * (1 << 30) / t / 1e9


def environment(dev: Device) -> list[str]:
    lines = []
    if dev.cuda:
        p = torch.cuda.get_device_properties(dev.device)
        l2 = getattr(p, "L2_cache_size", 0) / 2**20
        lines.append(f"GPU: {p.name}, {p.total_memory / 2**30:.0f} GiB, "
                     f"{p.multi_processor_count} SMs, L2 {l2:.0f} MiB; driver "
                     f"{_driver_version()}, CUDA {torch.version.cuda}")
    else:
        lines.append(f"Device: CPU ({cpu_name()}, {os.cpu_count()} cores)")
    lines.append(f"torch {torch.__version__}, triton {_version('triton')}, Python "
                 f"{platform.python_version()}, coil {_git_commit()}, host {cpu_name()} "
                 f"({os.cpu_count()} cores)")
    return lines


def _ratio(a, b):
    return a / b if a is not None and b else None


def rows_for(case: Case, res: dict[str, Result]) -> list[list[str]]:
    eager, ind = res.get("eager"), res.get("inductor")
    e_ms = eager.ms if eager else None
    i_ms = ind.ms if ind else None
    i_cold = ind.cold_s if ind else None
    rows = []
    for comp, r in res.items():
        ms = fmt(r.ms, "{:.3f}")
        if comp == "coil" and r.coil and r.coil[1] and r.ms is not None:
            ms += " (EAGER)" if r.coil[0] == 0 else " (partly eager)"
        notes = r.error or (coil_ran(r.coil) if comp == "coil" else "")
        rows.append([
            case.name, comp, ms, fmt(_ratio(e_ms, r.ms)), fmt(_ratio(i_ms, r.ms)),
            fmt(r.gbps, "{:.0f}") if case.memory_bound else "",
            fmt(r.cold_s), fmt(_ratio(r.cold_s, i_cold), "{:.3f}") if comp != "eager" else "-",
            fmt(r.peak_mib, "{:.0f}"), r.accuracy or "-", notes,
        ])
    return rows


HEADER = ["case", "compiler", "ms", "speedup vs eager", "Inductor ms / ms", "GB/s",
          "cold compile s", "compile vs Inductor", "peak MiB", "accuracy", "notes"]


def summary_rows(cases: list[Case], results: dict[str, dict[str, Result]], cuda: bool,
                 size: str = "full"):
    rows = []
    for case in cases:
        res = results.get(case.name, {})
        i, c = res.get("inductor"), res.get("coil")
        if not (i and c):
            continue
        speed = _ratio(i.ms, c.ms)
        comp = _ratio(c.cold_s, i.cold_s)
        met = []
        if speed is not None:
            met.append(f"speed {'met' if speed >= 1.0 else 'MISSED'}")
        if comp is not None:
            met.append(f"compile {'met' if comp <= TARGET_COMPILE_RATIO else 'MISSED'}")
        if case.memory_bound and cuda and c.gbps is not None:
            met.append(f"GB/s {'met' if c.gbps >= TARGET_GBPS else 'MISSED'}")
        title = case.title if size == "full" else f"{case.title} (at {size} sizes)"
        rows.append([case.name, title, fmt(speed), fmt(comp, "{:.3f}"),
                     fmt(c.gbps, "{:.0f}") if case.memory_bound else "", coil_ran(c.coil),
                     ", ".join(met)])
    return rows


def report(args, env_lines, bw, warm, cases, results, dev, command) -> str:
    done = [c for c in cases if c.name in results]
    rows = [row for c in done for row in rows_for(c, results[c.name])]
    out = ["# coil GPU benchmark" if dev.cuda else "# coil GPU benchmark (run on a CPU)", ""]
    out += [f"{line}  " for line in env_lines]
    if args.note:
        out.append(f"Note: {args.note}  ")
    if bw is not None:
        out.append(f"Device-to-device copy of 1 GiB: {bw:.0f} GB/s  ")
    out.append("Process warm-up compile (not in any case's figure): "
               + (", ".join(f"{k} {v}" for k, v in warm.items()) or "none") + "  ")
    now = datetime.datetime.now(datetime.timezone.utc)
    out.append(f"Sizes: {args.size}; median of {args.repeat} timed calls after {args.warmup} "
               f"warm-up calls; {now:%Y-%m-%d %H:%M} UTC  ")
    out.append(f"Command: `{command}`")
    out += ["", markdown_table(HEADER, rows), ""]
    summ = summary_rows(done, results, dev.cuda, args.size)
    if summ:
        out += ["Against the targets (coil vs Inductor: speed ratio > 1 is faster; compile ratio "
                f"<= {TARGET_COMPILE_RATIO}; memory-bound GB/s >= {TARGET_GBPS:.0f} on the GPU):",
                "",
                markdown_table(["case", "what", "coil speed / Inductor", "coil compile / Inductor",
                                "coil GB/s", "coil ran", "targets"], summ), ""]
    details = []
    for c in done:
        for comp, r in results[c.name].items():
            if r.error:
                details.append(f"- {c.name} / {comp}: {r.error}")
            if comp == "coil" and r.coil:
                for line in r.coil[3]:
                    details.append(f"- {c.name} / coil: {line}")
    if details:
        out += ["Errors, eager fallbacks and per-op fallbacks:", ""] + details + [""]
    out += ["Columns: ms is the median time of one call (a training step: forward, backward and "
            "an eager SGD step); speedup vs eager = eager ms / ms; Inductor ms / ms > 1 means "
            "faster than Inductor; GB/s counts inputs, parameters and outputs once; cold compile "
            "is the first call minus a steady call, with empty caches; peak MiB is "
            + ("torch.cuda.max_memory_allocated over one call less what was allocated before "
               "the compiler started (weights, gradients and the call included; the shared "
               "inputs not)"
               if dev.cuda else "the resident-set growth over one call")
            + "; accuracy is bench/accuracy.py's rule against eager.", ""]
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------


def _parse_options(text: str) -> dict[str, Any]:
    opts: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in text.split(","))):
        key, _, value = item.partition("=")
        opts[key.strip()] = value.strip()
    return opts


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--quick", action="store_true",
                    help="fewer repeats, smaller models (GPT-2 2 layers, ResNet 1-1-1-1)")
    ap.add_argument("--tiny", action="store_true", help="tiny sizes (to test the harness on a CPU)")
    ap.add_argument("--cases", default="", help=f"comma-separated subset of {','.join(CASES)}")
    ap.add_argument("--compilers", default=",".join(COMPILERS),
                    help="comma-separated subset of eager,inductor,coil (eager is the reference), "
                         "and aot_eager (the front end alone: the floor of a cold compile)")
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--repeat", type=int, help="timed calls (default 30, --quick 10, --tiny 5)")
    ap.add_argument("--warmup", type=int, help="untimed calls before timing (default 5)")
    ap.add_argument("--coil-options", default="", type=_parse_options,
                    help="torch.compile options for coil, e.g. strict=1")
    ap.add_argument("--write", help="write the markdown report here (rewritten after each case)")
    ap.add_argument("--note", default="",
                    help="a line for the report header (e.g. the commit, where git is absent)")
    args = ap.parse_args(argv)
    args.size = "tiny" if args.tiny else "quick" if args.quick else "full"
    args.repeat = args.repeat or (5 if args.tiny else 10 if args.quick else 30)
    if args.warmup is None:
        args.warmup = 1 if args.tiny else 2 if args.quick else 5
    names = [s.strip() for s in args.cases.split(",") if s.strip()] or list(CASES)
    unknown = [n for n in names if n not in CASES]
    if unknown:
        ap.error(f"unknown case(s) {unknown}; known: {','.join(CASES)}")
    args.cases = names
    args.compilers = [s.strip() for s in args.compilers.split(",") if s.strip()]
    known = COMPILERS + OPTIONAL_COMPILERS
    bad = [c for c in args.compilers if c not in known]
    if bad:
        ap.error(f"unknown compiler(s) {bad}; known: {','.join(known)}")
    # Eager first: it is the reference for accuracy and speedups.
    args.compilers = [c for c in known if c in args.compilers]
    return args


def _command(argv: list[str]) -> str:
    # The written report records how it was made, without the (machine-specific) output path.
    kept, skip = [], False
    for a in argv:
        if skip:
            skip = False
        elif a == "--write":
            skip = True
        elif not a.startswith("--write="):
            kept.append(a)
    return " ".join(["python bench/gpu.py"] + kept)


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    dev = Device(args.device)
    if args.tiny and not dev.cuda:
        # A harness test on a (shared) CPU: one intra-op thread keeps eager's OpenMP from
        # stalling when other processes hold the cores; the figures mean nothing here anyway.
        torch.set_num_threads(1)
    cases = [CASES[n] for n in args.cases]
    env_lines = environment(dev)
    for line in env_lines:
        print(line, file=sys.stderr, flush=True)
    cache_root = tempfile.mkdtemp(prefix="coil-gpubench-")
    results: dict[str, dict[str, Result]] = {}
    try:
        bw = copy_bandwidth(dev)
        warm = warm_up_compilers(dev, args, cache_root)
        text = ""
        for case in cases:
            results[case.name] = run_case(case, args.size, dev, args, cache_root)
            text = report(args, env_lines, bw, warm, cases, results, dev, _command(argv))
            if args.write:
                os.makedirs(os.path.dirname(os.path.abspath(args.write)), exist_ok=True)
                with open(args.write, "w") as f:
                    f.write(text)
        print(text)
    finally:
        shutil.rmtree(cache_root, ignore_errors=True)
    failed = any(r.error or (r.accuracy or "").startswith("FAIL")
                 for res in results.values() for r in res.values())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
