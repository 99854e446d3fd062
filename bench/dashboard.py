"""The model dashboard: real models (bench/dashboard_models.py: timm, HuggingFace transformers,
torchvision, coil's own set) run eagerly, with Inductor and with coil, side by side in one
process per model and mode.

    python3 bench/dashboard.py [--device cpu|cuda] [--suite timm,huggingface] [--models a,b]
        [--mode infer,train] [--out bench/results/dashboard_cpu.jsonl] [--timeout 1200]
        [--fresh] [--write bench/results/dashboard_cpu.md]
    python3 bench/dashboard.py --summary bench/results/dashboard_cpu.jsonl [--write FILE]

Each (model, mode) runs in a subprocess of its own with a time limit, so a crash or a hang
costs one row. On a machine with several GPUs, --gpus N runs N rows at once, each child on a GPU
of its own (CUDA_VISIBLE_DEVICES) and pinned to its own slice of the cores, so that one row's
compilation does not take the host time another row's timed launches need; such rows name
"N rows at once" in their machine line, and the summary lists them apart. Rows are appended to
--out (JSON lines) as they finish; a second run skips the
(model, mode, device) rows already there unless --fresh, so a long run can be done in slices
(--suite, --models, --mode) and resumed. The summary (and --write) is made from the file.

Per row, measured in the child (docs/benchmarks.md says how to read it):
  accuracy   coil's and Inductor's outputs (inference) or loss and parameter gradients
             (training) against eager by bench/accuracy.py's rule (float64 reference)
  strict     every graph ran in coil (no graph or op fell back; else the reasons)
  ms         median step time of eager, Inductor and coil, interleaved round by round, with
             the spread (min and max); a training step is forward, loss, backward and an SGD step
  compile    cold: the first call with empty kernel caches (coil's and Inductor's); warm: the
             first call after torch._dynamo.reset() with the caches filled
  peak MB    CUDA: max_memory_allocated over one step minus what was allocated before, or
             the memory the pools of coil's pooled CUDA graphs (mode reduce-overhead, option
             cuda_graphs_training) reserve where that is larger (not Inductor's: its
             reduce-overhead rows undercount);
             CPU: the process's peak resident memory over one step above the resident memory
             before it (VmHWM - VmRSS)
Inference runs in float32 on the CPU and in bfloat16 on the GPU; training in float32 (GPU: TF32
matmuls allowed, for both compilers alike); mode train_bf16 trains float32 weights with the
forward and loss under bfloat16 autocast (mixed precision; --mode train_bf16). Dropout is switched off in every copy (the
compilers draw other random numbers than eager, and accuracy could not be judged).
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import json
import math
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

DEFAULT_OUT = {"cpu": HERE / "results" / "dashboard_cpu.jsonl",
               "cuda": HERE / "results" / "dashboard_gpu.jsonl"}
COMPILERS = ("eager", "inductor", "coil")


# ---------------------------------------------------------------------------------------------
# The child: one model, one mode


def _no_dropout(model) -> None:
    """Dropout off everywhere: nn.Dropout modules, and the float rates that models keep as
    attributes and pass to functional dropout / SDPA (HuggingFace's attention_dropout)."""
    import torch

    for m in model.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd):
            m.p = 0.0
        for k, v in list(vars(m).items()):
            if "dropout" in k.lower() and isinstance(v, float):
                setattr(m, k, 0.0)


def _cast_inputs(inputs: tuple, dtype) -> tuple:
    import torch

    return tuple(x.to(dtype) if isinstance(x, torch.Tensor) and x.is_floating_point() else x
                 for x in inputs)


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _peak_mb(device: str, step: Callable[[], Any], pools: Callable[[], int] = lambda: 0
             ) -> float | None:
    import torch

    import harness

    if device == "cuda":
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        # A replayed CUDA graph allocates nothing: its activations and temporaries live in the
        # graph's private pool, reserved since its capture. That pool's size counts instead
        # where it is larger (`pools`: coil's; Inductor's are not counted).
        return max(torch.cuda.max_memory_allocated() - base, pools()) / 2**20
    harness.reset_peak_rss()
    before = harness.rss_kib("VmRSS")
    step()
    return max(harness.rss_kib("VmHWM") - before, 0) / 1024


class Variant:
    """One compiler's copy of the model and its step."""

    def __init__(self, name: str, model, inputs: tuple, mode: str, loss_of,
                 compile_mode: str = "default"):
        import torch

        self.name, self.mode, self.loss_of = name, mode, loss_of
        self.model = copy.deepcopy(model)
        self.inputs = inputs
        # torch.compile's mode, the same for both compilers.
        kw = {} if compile_mode == "default" else {"mode": compile_mode}
        if name == "eager":
            self.fn = self.model
        elif name == "inductor":
            self.fn = torch.compile(self.model, backend="inductor", **kw)
        else:
            self.fn = torch.compile(self.model, backend="coil", **kw)
        self.opt = (torch.optim.SGD(self.model.parameters(), lr=1e-4) if mode != "infer" else None)
        # train_bf16: float32 weights, forward (and loss) under bfloat16 autocast, as mixed-
        # precision training runs.
        device = next((t.device.type for t in inputs if isinstance(t, torch.Tensor)), "cpu")
        self.amp = ((lambda: torch.autocast(device, dtype=torch.bfloat16))
                    if mode == "train_bf16" else contextlib.nullcontext)

    def forward(self):
        import torch

        if self.mode == "infer":
            with torch.no_grad():
                return self.fn(*self.inputs)
        with self.amp():
            return self.fn(*self.inputs)

    def grads(self):
        """Loss and parameter gradients of one forward and backward (no optimizer step)."""
        self.model.zero_grad(set_to_none=True)
        with self.amp():
            loss = self.loss_of(self.fn(*self.inputs))
        loss.backward()
        return [loss.detach()] + [p.grad for p in self.model.parameters() if p.grad is not None]

    def step(self):
        if self.mode == "infer":
            return self.forward()
        self.opt.zero_grad(set_to_none=True)
        with self.amp():
            loss = self.loss_of(self.fn(*self.inputs))
        loss.backward()
        self.opt.step()
        return loss


def run_child(name: str, mode: str, device: str, min_reps: int, budget_s: float,
              compile_mode: str = "default") -> dict:
    import torch

    import accuracy
    import dashboard_models

    row: dict[str, Any] = {"model": name, "mode": mode, "device": device}
    if compile_mode != "default":
        row["compile_mode"] = compile_mode
    spec = dashboard_models.get(name)
    row["suite"] = spec.suite
    torch.manual_seed(0)
    built = spec.build(device, "gpu" if device == "cuda" else "cpu")
    model, inputs = built.model, tuple(built.inputs)
    row["batch"] = built.batch
    _no_dropout(model)
    dtype = torch.float32
    if device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
        if mode == "infer":
            dtype = torch.bfloat16
    if mode == "infer":
        model.eval()
    model = model.to(dtype)
    inputs = _cast_inputs(inputs, dtype)
    row["dtype"] = str(dtype).replace("torch.", "") + (
        " weights, bfloat16 autocast" if mode == "train_bf16" else "")

    # Dynamo's own first-use costs, paid before anything is timed.
    torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))

    import coil

    coil.reset_report()
    variants = {n: Variant(n, model, inputs, mode, dashboard_models.loss_of, compile_mode)
                for n in COMPILERS}
    # Cold compile: the first call, empty caches (the parent gave this process fresh ones).
    cold = {}
    for n in ("coil", "inductor"):
        t0 = time.perf_counter()
        variants[n].step()
        _sync(device)
        cold[n] = time.perf_counter() - t0
    row["compile_cold_s"] = cold
    variants["eager"].step()

    # Accuracy, on fresh copies of the weights (the steps above moved them).
    ref64 = copy.deepcopy(model).to(torch.float64)
    inputs64 = _cast_inputs(inputs, torch.float64)
    fp64 = Variant("eager", ref64, inputs64, mode, dashboard_models.loss_of)
    checks = {}
    for n in ("coil", "inductor"):
        variants[n].model.load_state_dict(model.state_dict())
    variants["eager"].model.load_state_dict(model.state_dict())
    if mode == "infer":
        want, ref = variants["eager"].forward(), fp64.forward()
        for n in ("coil", "inductor"):
            v = accuracy.compare(variants[n].forward(), want, ref)
            checks[n] = {"ok": bool(v), "detail": v.detail}
    else:
        fp64.amp = contextlib.nullcontext  # the float64 reference runs without autocast
        want, ref = variants["eager"].grads(), fp64.grads()
        for n in ("coil", "inductor"):
            v = accuracy.compare(variants[n].grads(), want, ref)
            checks[n] = {"ok": bool(v), "detail": v.detail}
    del ref64, fp64
    row["accuracy"] = checks
    rep = coil.report()
    row["coil_graphs"] = rep.graphs_compiled
    row["fallbacks"] = [r for _, r in rep.graphs_fallen_back] + [
        f"op {op}" for op in sorted(rep.fallback_ops)]
    row["strict"] = not row["fallbacks"] and rep.graphs_compiled > 0

    # Step time, interleaved round by round.
    times: dict[str, list[float]] = {n: [] for n in COMPILERS}
    for n in COMPILERS:
        variants[n].step()  # warm (CUDA graphs, autotuning, allocator)
    _sync(device)
    t_end = time.perf_counter() + budget_s
    while True:
        for n in COMPILERS:
            _sync(device)
            t0 = time.perf_counter()
            variants[n].step()
            _sync(device)
            times[n].append(time.perf_counter() - t0)
        if len(times["coil"]) >= min_reps and time.perf_counter() > t_end:
            break
        if len(times["coil"]) >= 200:
            break
    row["ms"] = {n: statistics.median(t) * 1e3 for n, t in times.items()}
    row["ms_min"] = {n: min(t) * 1e3 for n, t in times.items()}
    row["ms_max"] = {n: max(t) * 1e3 for n, t in times.items()}
    row["reps"] = len(times["coil"])
    from coil.reduce_overhead import pool_bytes

    row["peak_mb"] = {n: _peak_mb(device, variants[n].step, pool_bytes if n == "coil" else
                                  lambda: 0) for n in COMPILERS}

    # Warm compile: Dynamo's caches dropped, the kernel caches kept.
    warm = {}
    for n in ("coil", "inductor"):
        torch._dynamo.reset()
        v = Variant(n, model, inputs, mode, dashboard_models.loss_of, compile_mode)
        t0 = time.perf_counter()
        v.step()
        _sync(device)
        warm[n] = time.perf_counter() - t0
    row["compile_warm_s"] = warm
    if device == "cuda":
        row["card"] = torch.cuda.get_device_name()
    row["status"] = "ok"
    return row


# ---------------------------------------------------------------------------------------------
# The parent: slices, subprocesses, resume, summary


def versions() -> dict[str, str]:
    out = {"python": platform.python_version()}
    try:
        import dashboard_models

        dashboard_models.import_torchvision()  # timm and transformers import it
    except Exception:  # noqa: BLE001 - reported as missing below
        pass
    for mod in ("torch", "timm", "transformers", "torchvision"):
        try:
            m = __import__(mod)
            out[mod] = getattr(m, "__version__", "?")
        except Exception:  # noqa: BLE001 - a missing library is reported as such
            out[mod] = "missing"
    # Which coil made the row: the checkout's commit (a copy without .git, as the GPU machine
    # gets, says COIL_REVISION or nothing).
    rev = os.environ.get("COIL_REVISION", "")
    if not rev:
        try:
            rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=HERE,
                                 capture_output=True, text=True, timeout=10).stdout.strip()
        except Exception:  # noqa: BLE001 - no git: no revision
            rev = ""
    if rev:
        out["coil"] = rev
    return out


def load_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    # A rerun of a (model, mode, device) row (--fresh, or a file appended to by hand)
    # supersedes the earlier one; the order is the first run's.
    rows: dict[tuple, dict] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            r = json.loads(line)
            rows[row_key(r)] = r
    return list(rows.values())


def row_key(r: dict) -> tuple:
    return (r.get("model"), r.get("mode"), r.get("device"), r.get("compile_mode", "default"))


def run_one(name: str, mode: str, device: str, timeout: float, min_reps: int,
            budget_s: float, compile_mode: str = "default", gpu: int | None = None,
            cpus: list[int] | None = None) -> dict:
    with tempfile.TemporaryDirectory(prefix="coil-dashboard-") as tmp:
        env = dict(os.environ)
        if gpu is not None:  # one of --gpus N: this GPU and these cores only
            env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        if cpus:
            env["OMP_NUM_THREADS"] = str(len(cpus))
            env["TORCHINDUCTOR_COMPILE_THREADS"] = str(len(cpus))
        # Empty kernel caches for the cold compile of both compilers.
        env["COIL_CACHE_DIR"] = os.path.join(tmp, "coil")
        env["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(tmp, "inductor")
        env["TRITON_CACHE_DIR"] = os.path.join(tmp, "triton")
        env["CUDA_CACHE_DISABLE"] = "1"
        out = os.path.join(tmp, "row.json")
        cmd = [sys.executable, __file__, "--child", name, "--mode", mode, "--device", device,
               "--row", out, "--min-reps", str(min_reps), "--budget", str(budget_s),
               "--compile-mode", compile_mode]
        t0 = time.perf_counter()
        try:
            p = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout,
                               preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None)
        except subprocess.TimeoutExpired:
            row = {"model": name, "mode": mode, "device": device, "status": "timeout",
                   "error": f"no result in {timeout:.0f} s"}
            if compile_mode != "default":
                row["compile_mode"] = compile_mode
            return row
        if os.path.exists(out):
            row = json.loads(Path(out).read_text())
        elif compile_mode != "default":
            row = {"model": name, "mode": mode, "device": device, "compile_mode": compile_mode}
        else:
            tail = (p.stderr or p.stdout).strip().splitlines()[-3:]
            row = {"model": name, "mode": mode, "device": device, "status": "crash",
                   "error": f"rc {p.returncode}: " + " | ".join(tail)}
            if compile_mode != "default":
                row["compile_mode"] = compile_mode
        row["wall_s"] = time.perf_counter() - t0
        return row


def geomean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x and x > 0 and math.isfinite(x)]
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else None


def summary(rows: list[dict], header: str = "") -> str:
    import harness

    out = [header] if header else []
    groups = [(cm, mode) for cm in ("default", "reduce-overhead", "max-autotune",
                                    "max-autotune-no-cudagraphs")
              for mode in ("infer", "train", "train_bf16")]
    for cm, mode in groups:
        rs = [r for r in rows if r.get("mode") == mode and r.get("compile_mode", "default") == cm]
        if not rs:
            continue
        ok = [r for r in rs if r.get("status") == "ok"]
        coil_pass = [r for r in ok if r["accuracy"]["coil"]["ok"]]
        ind_pass = [r for r in ok if r["accuracy"]["inductor"]["ok"]]
        ratio = {r["model"]: r["ms"]["inductor"] / r["ms"]["coil"] for r in ok}
        g = geomean(list(ratio.values()))
        title = {"infer": "Inference", "train": "Training",
                 "train_bf16": "Training, bfloat16 autocast"}[mode]
        if cm != "default":
            title += f", mode={cm} (both compilers)"
        out.append(f"\n### {title}: {len(rs)} models\n")
        out.append(f"- pass rate: coil {len(coil_pass)}/{len(rs)}, Inductor "
                   f"{len(ind_pass)}/{len(rs)}; strict (no fallback): "
                   f"{sum(1 for r in ok if r['strict'])}/{len(rs)}")
        out.append(f"- geomean coil/Inductor speed: {harness.fmt(g, '{:.3f}')} "
                   f"(>1: coil faster), over {len(ratio)} models")
        slow = sorted((v, m) for m, v in ratio.items() if v < 0.95)
        out.append("- below 0.95x Inductor: " + (", ".join(f"{m} {v:.2f}" for v, m in slow)
                                                  or "none"))
        behind = [r["model"] for r in ok if r["ms"]["coil"] > r["ms"]["eager"]]
        ind_ahead = [r["model"] for r in ok if r["ms"]["inductor"] < r["ms"]["eager"]]
        out.append("- coil slower than eager: " + (", ".join(behind) or "none")
                   + f" ({sum(1 for m in behind if m in ind_ahead)} of them where Inductor is "
                   "faster than eager)")
        failed = [f"{r['model']} ({r.get('status')}: {r.get('error', '')[:80]})"
                  for r in rs if r.get("status") != "ok"]
        if failed:
            out.append("- no result: " + "; ".join(failed))
        table = []
        for r in rs:
            if r.get("status") != "ok":
                table.append([r["model"], r.get("status"), "-", "-", "-", "-", "-", "-", "-",
                              "-", r.get("error", "")[:60]])
                continue
            ms = r["ms"]
            acc = "".join("y" if r["accuracy"][n]["ok"] else "N" for n in ("coil", "inductor"))
            table.append([
                r["model"], acc, "y" if r["strict"] else f"N ({len(r['fallbacks'])})",
                harness.fmt(ms["eager"]), harness.fmt(ms["eager"] / ms["inductor"]),
                harness.fmt(ms["eager"] / ms["coil"]),
                f"**{ms['inductor'] / ms['coil']:.2f}**",
                f"{r['ms_min']['coil']:.1f}-{r['ms_max']['coil']:.1f}",
                f"{r['compile_cold_s']['coil']:.1f} / {r['compile_cold_s']['inductor']:.1f}",
                f"{r['compile_warm_s']['coil']:.1f} / {r['compile_warm_s']['inductor']:.1f}",
                "/".join(harness.fmt(r["peak_mb"][n], "{:.0f}") for n in COMPILERS)])
        out.append("")
        out.append(harness.markdown_table(
            ["model", "accurate (coil, Ind.)", "strict", "eager ms", "Inductor x eager",
             "coil x eager", "coil / Inductor", "coil ms min-max", "cold compile s (coil / Ind.)",
             "warm compile s", "peak MB (eager/Ind./coil)"], table))
        fb = [(r["model"], r["fallbacks"]) for r in ok if r["fallbacks"]]
        if fb:
            out.append("\nFallbacks:\n")
            out += [f"- {m}: " + "; ".join(f[:100] for f in fs) for m, fs in fb]
    return "\n".join(out) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--suite", default="")
    p.add_argument("--models", default="")
    p.add_argument("--mode", default="infer,train")
    p.add_argument("--out", default="")
    p.add_argument("--timeout", type=float, default=1500)
    p.add_argument("--fresh", action="store_true")
    p.add_argument("--write", default="")
    p.add_argument("--summary", default="")
    p.add_argument("--min-reps", type=int, default=5)
    p.add_argument("--budget", type=float, default=10.0, help="seconds of timed rounds")
    p.add_argument("--compile-mode", default="default",
                   choices=["default", "reduce-overhead", "max-autotune",
                            "max-autotune-no-cudagraphs"],
                   help="torch.compile's mode, given to both compilers")
    p.add_argument("--gpus", type=int, default=1,
                   help="CUDA: rows run at once, one a GPU, each on its own slice of the cores")
    p.add_argument("--child", default="")
    p.add_argument("--row", default="")
    a = p.parse_args()

    if a.child:
        try:
            row = run_child(a.child, a.mode, a.device, a.min_reps, a.budget, a.compile_mode)
        except Exception as e:  # noqa: BLE001 - the row says what failed
            traceback.print_exc()
            row = {"model": a.child, "mode": a.mode, "device": a.device, "status": "error",
                   "error": f"{type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"}
        Path(a.row).write_text(json.dumps(row))
        return 0

    out = Path(a.summary or a.out or DEFAULT_OUT[a.device])
    if not a.summary:
        import dashboard_models

        names = dashboard_models.names()
        if a.suite:
            names = [n for n in names if dashboard_models.get(n).suite in a.suite.split(",")]
        if a.models:
            names = [n for n in a.models.split(",")]
        done = set() if a.fresh else {row_key(r) for r in load_rows(out)}
        out.parent.mkdir(parents=True, exist_ok=True)
        gpus = max(1, a.gpus) if a.device == "cuda" else 1
        info = {"machine": machine_line(a.device, gpus), "versions": versions(),
                "started": time.strftime("%Y-%m-%d %H:%M:%S")}
        print(json.dumps(info), flush=True)
        todo = [(name, mode) for name in names for mode in a.mode.split(",")
                if (name, mode, a.device, a.compile_mode) not in done]

        def record(name: str, mode: str, row: dict) -> None:
            row["machine"] = info["machine"]
            row["versions"] = info["versions"]
            with open(out, "a") as f:
                f.write(json.dumps(row) + "\n")
            r = row
            brief = (f"coil/Ind {r['ms']['inductor'] / r['ms']['coil']:.2f} "
                     f"acc {r['accuracy']['coil']['ok']} strict {r['strict']}"
                     if r.get("status") == "ok" else r.get("error", ""))
            print(f"{name:32s} {mode:5s} {r.get('status'):8s} {brief}", flush=True)

        if gpus == 1:
            for name, mode in todo:
                record(name, mode, run_one(name, mode, a.device, a.timeout, a.min_reps,
                                           a.budget, a.compile_mode))
        else:
            run_concurrently(todo, gpus, record, lambda name, mode, gpu, cpus: run_one(
                name, mode, a.device, a.timeout, a.min_reps, a.budget, a.compile_mode, gpu,
                cpus))
    rows = load_rows(out)
    header = ""
    if rows:
        r0 = rows[-1]
        header = (f"Machine: {r0.get('machine', '?')}  \nVersions: "
                  + ", ".join(f"{k} {v}" for k, v in r0.get("versions", {}).items()))
        machines: dict[str, list[str]] = {}
        for r in rows:
            cm = r.get("compile_mode", "default")
            machines.setdefault(r.get("machine", "?"), []).append(
                f"{r['model']} ({r['mode']}{'' if cm == 'default' else ', ' + cm})")
        if len(machines) > 1:  # rows from several machines (H100 and H200 both come)
            header += "\n\nRows by machine (a figure from one says nothing about another):\n"
            header += "".join(f"\n- {m}: {', '.join(ms)}" for m, ms in machines.items())
    text = summary(rows, header)
    print(text)
    if a.write:
        Path(a.write).write_text("# Model dashboard\n\n" + text)
    return 0


def machine_line(device: str, gpus: int = 1) -> str:
    import harness

    line = harness.machine()
    if device == "cuda":
        import torch

        line += ", " + torch.cuda.get_device_name()
        if gpus > 1:
            line += f", {gpus} rows at once (one a GPU, {cores_per_gpu(gpus)} cores each)"
    return line


def cores_per_gpu(gpus: int) -> int:
    return max(1, len(os.sched_getaffinity(0)) // gpus)


def run_concurrently(todo: list[tuple[str, str]], gpus: int,
                     record: Callable[[str, str, dict], None],
                     run: Callable[[str, str, int, list[int]], dict]) -> None:
    """Runs `todo`'s rows `gpus` at a time: each on a free GPU with its own slice of the
    cores; `record` is called on this thread, in the order rows finish."""
    import concurrent.futures
    import queue

    cores = sorted(os.sched_getaffinity(0))
    k = cores_per_gpu(gpus)
    free: queue.Queue[int] = queue.Queue()
    for g in range(gpus):
        free.put(g)

    def task(name: str, mode: str) -> tuple[str, str, dict]:
        g = free.get()
        try:
            return name, mode, run(name, mode, g, cores[g * k:(g + 1) * k])
        finally:
            free.put(g)

    with concurrent.futures.ThreadPoolExecutor(max_workers=gpus) as pool:
        futures = [pool.submit(task, name, mode) for name, mode in todo]
        for f in concurrent.futures.as_completed(futures):
            record(*f.result())


if __name__ == "__main__":
    sys.exit(main())
