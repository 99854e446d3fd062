"""Where a GPU case's time goes, per compiler: host wall time per call against the GPU kernel
time inside it, and the kernels that take the most (torch.profiler, CUPTI).

    python bench/gpu_profile.py --quick --cases gpt2_infer,attention [--compilers coil,inductor]

A call whose wall time is far above its summed kernel time is host-bound (launch overhead,
allocation, Python); one whose kernel time is high runs slow kernels. Prints a short text report.
"""

from __future__ import annotations

import argparse
import collections
import os
import re
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

from gpu import Device, _parse_options, compile_model, make_step, tf32  # noqa: E402
from gpu_models import CASES  # noqa: E402


def _origins(prof, pattern: str, calls: int, top: int) -> None:
    """The CPU op chains (innermost first, with the launching op's input shapes) that launched
    the kernels whose name contains `pattern`, by GPU time."""
    chains = collections.Counter()
    counts = collections.Counter()

    def note(op, name: str, us: float) -> None:
        if pattern not in name:
            return
        names, p = [], op
        while p is not None and len(names) < 5:
            names.append(p.name)
            p = p.cpu_parent
        key = f"{' <- '.join(names) or '?'}  {getattr(op, 'input_shapes', '')}"[:300]
        chains[key] += us
        counts[key] += 1

    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            # Newer profilers: a kernel is an event of its own under the launching op.
            if getattr(ev, "cpu_parent", None) is not None:
                note(ev.cpu_parent, ev.name, ev.device_time)
            continue
        for k in getattr(ev, "kernels", []) or []:
            note(ev, k.name, k.duration)
    print(f"  kernels matching {pattern!r}, by launching op chain:")
    for key, us in chains.most_common(top):
        print(f"  {us / calls:9.1f} us  x{counts[key] / calls:5.1f}  {key}")


_KINDS = (  # (kind, name fragments), first match wins
    ("optimizer", ("multi_tensor_apply", "foreach")),
    ("layout", ("nchwToNhwc", "nhwcToNchw", "transpose_readWrite")),
    # cuDNN runs 1x1 convolutions as GEMMs and cuBLASLt uses CUTLASS: one kind for both
    ("conv/gemm", ("conv", "dgrad", "wgrad", "fprop", "gemm", "xmma", "cudnn", "cutlass", "sm90_",
                   "sm80_", "cublas", "nvjet")),
    ("attention", ("flash", "fmha", "attention")),
    ("copy", ("copy", "Memcpy", "Memset", "Fill")),
)


def kernel_kind(name: str) -> str:
    """A kernel's kind for the per-kind sums: a compiler's generated kernel, cuDNN's layout
    transposes, a library's convolution/product or attention, copies and fills, the
    optimizer's multi-tensor kernels (bench/dashboard_kernels.py uses it too)."""
    if re.match(r"triton_|(fw_|bw_)?kernel\d", name):  # Inductor's and coil's own kernels
        return "generated"
    for kind, fragments in _KINDS:
        if any(f in name for f in fragments):
            return kind
    return "other"


def profile_one(case, compiler: str, size: str, calls: int, top: int, host: bool,
                origins: str = "", coil_options: dict | None = None, steps: bool = False) -> None:
    dev = Device("cuda")
    master, inputs = case.build(size)[:2]
    model = master.to(dev.device)
    inputs = tuple(x.to(dev.device) if isinstance(x, torch.Tensor) else x for x in inputs)
    with tf32(case.tf32):
        target = compile_model(compiler, model, coil_options or {}, tempfile.mkdtemp(prefix="coilprof-"))
        step = make_step(case, model, target)
        for _ in range(3):
            step(inputs)
        dev.sync()
        t0 = time.perf_counter()
        for _ in range(calls):
            step(inputs)
        host_issue = (time.perf_counter() - t0) / calls
        dev.sync()
        wall = (time.perf_counter() - t0) / calls
        if steps and compiler == "coil":  # host time per runtime step of coil's graphs
            import coil

            coil.set_profiling(True)
            for _ in range(calls):
                step(inputs)
            dev.sync()
            coil.set_profiling(False)
            print(f"\n--- {case.name} / coil: host time per runtime step\n" + coil.profile_report(top))
        acts = [torch.profiler.ProfilerActivity.CPU, torch.profiler.ProfilerActivity.CUDA]
        with torch.profiler.profile(activities=acts, record_shapes=bool(origins)) as prof:
            for _ in range(calls):
                step(inputs)
            dev.sync()
    kernels = collections.Counter()
    counts = collections.Counter()
    for ev in prof.events():
        if ev.device_type == torch.autograd.DeviceType.CUDA:
            kernels[ev.name] += ev.device_time
            counts[ev.name] += 1
    gpu_us = sum(kernels.values()) / calls
    n = sum(counts.values()) / calls
    print(f"\n=== {case.name} / {compiler}: wall {wall * 1e3:.3f} ms per call (host issue "
          f"{host_issue * 1e3:.3f} ms), GPU kernel time {gpu_us / 1e3:.3f} ms in {n:.0f} "
          f"kernels per call")
    by_kind = collections.Counter()
    n_kind = collections.Counter()
    for name, us in kernels.items():
        by_kind[kernel_kind(name)] += us
        n_kind[kernel_kind(name)] += counts[name]
    print("  by kind: " + ", ".join(f"{k} {us / calls / 1e3:.3f} ms (x{n_kind[k] / calls:.0f})"
                                    for k, us in by_kind.most_common()))
    for name, us in kernels.most_common(top):
        print(f"  {us / calls:9.1f} us  x{counts[name] / calls:5.1f}  {name[:110]}")
    if origins:
        _origins(prof, origins, calls, top)
    if host:  # where the host's time goes (Python and the C++ run call as one entry)
        import cProfile
        import io
        import pstats

        prof_host = cProfile.Profile()
        with tf32(case.tf32):  # as compiled: another flag would make Dynamo recompile
            prof_host.enable()
            for _ in range(calls):
                step(inputs)
            prof_host.disable()
        dev.sync()
        buf = io.StringIO()
        pstats.Stats(prof_host, stream=buf).sort_stats("tottime").print_stats(top)
        lines = [ln for ln in buf.getvalue().splitlines() if ln.strip()]
        print("\n".join(lines[3:]))
    del model, target, step
    torch._dynamo.reset()
    dev.release()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="gpt2_infer")
    ap.add_argument("--compilers", default="inductor,coil")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--calls", type=int, default=5)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--host", action="store_true", help="also cProfile the host side")
    ap.add_argument("--origins", default="", metavar="PATTERN",
                    help="which CPU ops launched the kernels whose name contains PATTERN")
    ap.add_argument("--steps", action="store_true",
                    help="coil's host time per runtime step (launches, host ops, allocations)")
    ap.add_argument("--coil-options", default="", type=_parse_options,
                    help="torch.compile options for coil, e.g. cuda_autotune=0")
    args = ap.parse_args()
    size = "quick" if args.quick else "full"
    for name in args.cases.split(","):
        for compiler in args.compilers.split(","):
            try:
                profile_one(CASES[name], compiler, size, args.calls, args.top, args.host,
                            args.origins, args.coil_options, args.steps)
            except Exception as e:  # one failing case must not hide the others
                print(f"\n=== {name} / {compiler}: FAILED {type(e).__name__}: {e}"[:400])


if __name__ == "__main__":
    main()
