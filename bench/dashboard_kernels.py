"""GPU kernel time of one dashboard model by kind of kernel, coil against Inductor in one run.

    python bench/dashboard_kernels.py tv_mobilenet_v2 --mode train --compile-mode reduce-overhead
    python bench/dashboard_kernels.py timm_convnext_tiny --variants inductor,coil,coil_b \
        --coil-b-options cuda_native_depthwise=0 --no-profile

Each variant is the dashboard's step (bench/dashboard.py: bf16 inference, an fp32 training
step with TF32 and SGD, or train_bf16: that step under bfloat16 autocast) under torch.compile.
Steps are timed interleaved (best of 5 rounds of 10), then, unless --no-profile, 5 steps of
each run under torch.profiler (CUPTI also sees the kernels
of replayed CUDA graphs), and the kernel time per step is split by kind (bench/gpu_profile.py:
kernel_kind: generated kernels, Triton's or coil's; a library's convolutions and products;
layout transposes; attention; copies; the optimizer), with the longest kernels listed. `coil_b` is coil with other options (--coil-b-options): an A/B of one option in
one process, on one card. Where the dashboard's step time is close to the kernel time, the model
is GPU-bound and these kinds say where the gap is; coil's kernel names match the `kernelN` of a
COIL_DEBUG dump's 03_schedule.txt and 05_kernels.cpp. With COIL_DEBUG=1 and one coil variant,
each listed coil kernel also shows the bandwidth it reached: the bytes its schedule says it moves
(03_schedule.txt's `traffic:` line, a lower bound) over its time, so a slow kernel stands out
against the card's copy bandwidth (a kernel on too few blocks reads at a few GB/s).
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import coil  # noqa: E402,F401  (registers the backend where the entry point is not installed)
from coil import backend as coil_backend  # noqa: E402
import dashboard  # noqa: E402
import dashboard_models  # noqa: E402
from gpu_profile import kernel_kind  # noqa: E402


def parse_options(text: str) -> dict:
    out = {}
    for kv in filter(None, text.split(",")):
        k, v = kv.split("=", 1)
        out[k] = {"1": True, "0": False}.get(v, v)
    return out


def make_step(model, inputs, mode: str, compiler: str, compile_mode: str | None, options: dict):
    m = copy.deepcopy(model)
    if options and compile_mode:  # torch.compile takes a mode or options, not both
        options = {**coil_backend.mode_options(compile_mode), **options}
    kw = {"options": options} if options else {"mode": compile_mode}
    fn = torch.compile(m, backend=compiler, **kw)
    opt = torch.optim.SGD(m.parameters(), lr=1e-4)

    def step():
        if mode == "infer":
            with torch.no_grad():
                return fn(*inputs)
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=mode == "train_bf16"):
            loss = dashboard_models.loss_of(fn(*inputs))
        loss.backward()
        opt.step()

    return step


def print_cudnn_choices() -> None:
    """What timing cuDNN's engines (option cuda_conv_measure) gained over the heuristics' first,
    summed over the process's convolution problems (each measured once, whichever variant)."""
    from coil import _coil

    every = _coil.cudnn_engine_choices()
    got = [c for c in every if len(c["ms"]) > 1 and c["chosen"] >= 0]
    if not got:
        return
    print(f"cuDNN plans built for {len(every)} problems in {sum(c['build_ms'] for c in every):.0f} ms"
          f" ({sum(any(c['runtime_compiled']) for c in every)} with engines compiled at run time)")
    first = sum(c["ms"][0] for c in got if c["ms"][0] >= 0)
    best = sum(c["ms"][c["chosen"]] for c in got if c["ms"][0] >= 0)
    print(f"cuDNN engines timed for {len(got)} problems: heuristics' first {first:.3f} ms, "
          f"fastest {best:.3f} ms (one call of each)")
    for c in sorted(got, key=lambda c: c["ms"][c["chosen"]] - c["ms"][0])[:8]:
        rc = "rtc " if c["runtime_compiled"][c["chosen"]] else ""
        print(f"   {c['ms'][0]:.3f} -> {c['ms'][c['chosen']]:.3f} ms {rc} {c['problem'][:150]}")


_ENTRY_SUFFIXES = ("_impl", "_s", "_v", "_t", "_w", "_b", "_wv", "_bv", "_c", "_cv", "_br")


def coil_kernel_bytes(debug_dir: str) -> dict[str, int]:
    """Kernel name -> bytes read and written, from every 03_schedule.txt under a debug dump."""
    import glob
    import re

    out: dict[str, int] = {}
    head = re.compile(r"^(\w+) over .*:$")
    traffic = re.compile(r"^  traffic: reads ~?(\d+), writes ~?(\d+) bytes$")
    for path in glob.glob(os.path.join(debug_dir, "*", "03_schedule.txt")):
        name = None
        with open(path) as f:
            for line in f:
                m = head.match(line.rstrip("\n"))
                if m:
                    name = m.group(1)
                    continue
                m = traffic.match(line.rstrip("\n"))
                if m and name:
                    out[name] = int(m.group(1)) + int(m.group(2))
    return out


def print_host_profiles(steps: dict, top: int) -> None:
    """Where each variant's host time goes: a step whose time exceeds its kernels' is waiting
    for the host somewhere, and the functions with the most own time say where."""
    import cProfile
    import pstats

    for v, s in steps.items():
        torch.cuda.synchronize()
        prof = cProfile.Profile()
        t = time.perf_counter()
        prof.enable()
        for _ in range(10):
            s()
        prof.disable()
        host = (time.perf_counter() - t) / 10 * 1e3
        torch.cuda.synchronize()
        st = pstats.Stats(prof)
        print(f"== {v}: host ms/step under cProfile {host:.3f} (kernels still queued after it "
              f"are not counted); own time per step:")
        rows = sorted(st.stats.items(), key=lambda kv: -kv[1][2])[:top]
        for (file, line, fn), (_cc, calls, tottime, cumtime, _) in rows:
            print(f"   {tottime / 10 * 1e3:7.3f} ms own, {cumtime / 10 * 1e3:7.3f} cum, "
                  f"{calls // 10:5d} calls/step  {os.path.basename(file)}:{line} {fn}")


def device_activity(prof, steps: int) -> tuple[float, float, float]:
    """(kernels per step, ms per step some kernel ran, ms per step from the first kernel's start
    to the last one's end). Busy below the span is time the GPU idled: between the kernels of a
    replayed graph (a launch gap per dependent kernel) or waiting for the host."""
    spans = sorted((e.time_range.start, e.time_range.end) for e in prof.events()
                   if e.device_type == torch.autograd.DeviceType.CUDA and e.time_range.end > 0)
    if not spans:
        return 0.0, 0.0, 0.0
    busy, end = 0.0, spans[0][0]
    for a, b in spans:
        if b > end:
            busy += b - max(a, end)
            end = b
    whole = spans[-1][1] - spans[0][0]
    return len(spans) / steps, busy / steps / 1e3, whole / steps / 1e3


def kernel_base(name: str) -> str:
    for suffix in sorted(_ENTRY_SUFFIXES, key=len, reverse=True):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--mode", choices=("infer", "train", "train_bf16"), default="infer")
    ap.add_argument("--compile-mode", default="default")
    ap.add_argument("--variants", default="inductor,coil", help="inductor, coil, coil_b")
    ap.add_argument("--coil-options", default="", help="k=v,... for coil")
    ap.add_argument("--coil-b-options", default="", help="k=v,... for coil_b")
    ap.add_argument("--no-profile", action="store_true")
    ap.add_argument("--top", type=int, default=22)
    ap.add_argument("--host-profile", type=int, default=0, metavar="N",
                    help="also print the N Python functions with the most own host time "
                         "over 10 steps of each variant (cProfile)")
    a = ap.parse_args()
    compile_mode = None if a.compile_mode == "default" else a.compile_mode

    torch.manual_seed(0)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    built = dashboard_models.get(a.model).build("cuda", "gpu")
    model = built.model
    dashboard._no_dropout(model)
    dtype = torch.bfloat16 if a.mode == "infer" else torch.float32
    if a.mode == "infer":
        model.eval()
    model = model.to(dtype)
    inputs = dashboard._cast_inputs(tuple(built.inputs), dtype)

    steps = {}
    for v in a.variants.split(","):
        compiler = "coil" if v.startswith("coil") else v
        opts = parse_options(a.coil_b_options if v == "coil_b" else a.coil_options)
        steps[v] = make_step(model, inputs, a.mode, compiler, compile_mode,
                             opts if compiler == "coil" else {})
    first = {}  # the first step: compilation (and first-call measurements) included
    for v, s in steps.items():
        torch.cuda.synchronize()
        t = time.perf_counter()
        s()
        torch.cuda.synchronize()
        first[v] = time.perf_counter() - t
        for _ in range(3):
            s()
    torch.cuda.synchronize()
    print("first step s (compile included): " + ", ".join(f"{v} {t:.1f}" for v, t in first.items()))
    best = {v: float("inf") for v in steps}
    for _ in range(5):
        for v, s in steps.items():
            torch.cuda.synchronize()
            t = time.perf_counter()
            for _ in range(10):
                s()
            torch.cuda.synchronize()
            best[v] = min(best[v], (time.perf_counter() - t) / 10 * 1e3)
    ref = best.get("inductor")
    print(f"{a.model} {a.mode} {a.compile_mode} on {torch.cuda.get_device_name()}: ms/step "
          + ", ".join(f"{v} {t:.3f}" + (f" ({ref / t:.3f}x Inductor)" if ref else "")
                      for v, t in best.items()))
    # What coil's captured graphs did on each call (every coil variant's together): a graph
    # that captured anew or ran ordinarily in the timed steps was launch-bound there.
    from coil.reduce_overhead import capture_traffic, replay_events

    for name, ev in replay_events():
        print(f"  coil CUDA graph {name}: " + ", ".join(f"{k} {n}" for k, n in sorted(ev.items())))
    for name, lines in capture_traffic():
        for line in lines:
            print(f"    {name} {line}")
    from coil.training_graphs import choices

    for names, state, reason in choices():  # the default mode's training CUDA graphs
        print(f"  coil training CUDA graphs ({', '.join(names)}): {state}: {reason}")
    # Peak memory of one step above what was live before it (parameters, inputs, the
    # optimizer's state): in training mostly what the forward saves for the backward.
    # (Not under reduce-overhead: a captured graph's memory comes from its pool, allocated at
    # capture, so a replayed step allocates nothing. Where the default mode keeps training
    # graphs, the pools' size of all coil variants together is printed beside.)
    peaks = {}
    for v, s in (steps.items() if compile_mode != "reduce-overhead" else ()):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        s()
        torch.cuda.synchronize()
        peaks[v] = (torch.cuda.max_memory_allocated() - base) / 2**20
    if peaks:
        from coil.reduce_overhead import pool_bytes

        pools = pool_bytes() / 2**20
        print("peak MiB above the step's start: "
              + ", ".join(f"{v} {m:.0f}" for v, m in peaks.items())
              + (f"; coil's CUDA graph pools {pools:.0f}" if pools else ""))
    print_cudnn_choices()
    if a.host_profile:
        print_host_profiles(steps, a.host_profile)
    if a.no_profile:
        return
    from torch.profiler import ProfilerActivity, profile

    n = 5
    coil_variants = [v for v in steps if v.startswith("coil")]
    traffic = {}
    if os.environ.get("COIL_DEBUG") == "1" and len(coil_variants) == 1:
        traffic = coil_kernel_bytes(os.environ.get("COIL_DEBUG_DIR") or "coil_debug")
    for v, s in steps.items():
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(n):
                s()
            torch.cuda.synchronize()
        kinds: dict[str, float] = {}
        kernels = []
        launches, busy, span = device_activity(prof, n)
        for e in prof.key_averages():
            t = e.self_device_time_total / n / 1e3
            if t <= 0:
                continue
            kinds[kernel_kind(e.key)] = kinds.get(kernel_kind(e.key), 0.0) + t
            kernels.append((t, e.count // n, e.key[:110]))
        print(f"== {v}: kernel ms/step {sum(kinds.values()):.3f}: " + ", ".join(
            f"{k} {t:.3f}" for k, t in sorted(kinds.items(), key=lambda x: -x[1])))
        print(f"   {launches:.0f} kernels/step; the GPU busy {busy:.3f} of {span:.3f} ms/step "
              f"between the first kernel and the last")
        for t, count, name in sorted(kernels, reverse=True)[:a.top]:
            moved = traffic.get(kernel_base(name)) if v.startswith("coil") else None
            rate = f"  {count * moved / (t * 1e-3) / 1e9:6.0f} GB/s" if moved else ""
            print(f"   {t:7.3f} ms x{count:<3d} {kernel_kind(name):9s} {name}{rate}")


if __name__ == "__main__":
    main()
