"""PyTorch's OpInfo database through torch.compile(backend="coil") on the CPU.

    python3 tools/opinfo_sweep.py --mode both --write docs/op_coverage.md          # full sweep
    python3 tools/opinfo_sweep.py --ops add,mul --dtypes f32 --mode strict        # a few ops
    python3 tools/opinfo_sweep.py --table-only --write docs/op_coverage.md        # regenerate

Run with PYTHONPATH=python (and, in a development tree, SKBUILD_EDITABLE_SKIP as
docs/contributing.md says). Every OpInfo entry of
`torch.testing._internal.common_methods_invocations.op_db` is one row; its *variants* are the
forward pass in f32, bf16, i64 and b8 (each where the op supports the dtype; `--dtypes` picks
others) and the gradients of the f32 samples (`f32.grad`, for ops that support autograd).

One variant of one entry is one torch.compile of one function that runs ALL its samples (up to
`--max-samples`), so Dynamo traces one graph and g++ compiles once; only when that run shows a
fallback, an error or a graph break are the samples re-run one by one to attribute the outcome.
Outcomes per sample:

  pass      coil's outputs (and gradients) meet bench/accuracy.py's rule: close to eager, or
            within a factor of eager's own error against a float64 reference
  wrong     they do not
  fallback  part of the work ran eagerly: a Dynamo graph break, a graph coil refused, an op
            through the per-op eager fallback; in strict mode the CompileError coil raises
  error     anything else: a crash, an exception eager does not raise, a coil InternalError
  skip      eager itself raises on the sample (not counted)

A variant's outcome is the worst of its samples' (wrong > error > fallback > pass). Outputs
that eager computes differently on two identical runs (random ops) and the outputs of the
`empty*` ops are compared by dtype and shape only ("values not compared" in the table).

Modes: `fallback` (coil's default: is the answer right?) and `strict` (strict=True: does coil
lower the op itself?); `both` runs both. Results are appended to a JSONL file (`--results`,
default build/opinfo/results.jsonl), one line per (entry, variant, mode), so an interrupted
sweep resumes where it stopped (a line is keyed by entry, variant, mode and max samples; `--redo`
reruns the selected entries). `--write docs/op_coverage.md` merges them into the committed
results beside the table (docs/op_coverage.jsonl, compact; a later result replaces an earlier
one) and regenerates both, so a partial rerun keeps every other row. Each entry runs in a worker subprocess (`--jobs` of them), so a
crash or a hang (`--timeout`) costs that entry, never the sweep.

Core ATen: an entry belongs to PyTorch's core ATen op set when the ATen op packet named by its
`aten_name` (e.g. `max.reduction_with_dim` -> aten.max) has an overload tagged torch.Tag.core.
The headline figure is the share of those entries whose f32 forward variant passes in strict
mode (entries without f32 support or whose samples all skip are left out of the count).
"""

from __future__ import annotations

import argparse
import collections
import datetime
import itertools
import json
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
from opinfo_table import _RANK, DEFAULT_DTYPES, STATUSES, first8 as _first8, render_table  # noqa: E402,E501
DEFAULT_RESULTS = ROOT / "build" / "opinfo" / "results.jsonl"
RESULT_TAG = "@@OPINFO "

# Ops whose results are uninitialized memory: only dtype and shape are compared.
UNDEFINED_VALUES = ("empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided",
                    "empty_permuted")


def _dtype(name: str):
    import torch

    return {
        "f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16,
        "f64": torch.float64, "i64": torch.int64, "i32": torch.int32, "i16": torch.int16,
        "i8": torch.int8, "u8": torch.uint8, "b8": torch.bool,
    }[name]


def entry_name(op) -> str:
    return op.name + (f".{op.variant_test_name}" if op.variant_test_name else "")


def core_overloads(op) -> list[str]:
    """The overloads tagged core of the ATen packet the entry names (see the module doc)."""
    import torch

    name = op.aten_name or op.name
    packet = getattr(torch.ops.aten, name, None) if name and "." not in name else None
    if packet is None:
        return []
    out = []
    for ov in packet.overloads():
        if torch.Tag.core in getattr(packet, ov).tags:
            out.append(f"aten.{name}.{ov}")
    return out


def variants_of(op, dtypes, grad: bool) -> list[tuple[str, bool]]:
    """(variant name, supported) for the requested dtypes (+ f32.grad)."""
    supported = op.supported_dtypes("cpu")
    out = [(d, _dtype(d) in supported) for d in dtypes]
    if grad:
        import torch

        ok = torch.float32 in supported and op.supports_autograd
        out.append(("f32.grad", bool(ok)))
    return out


# ---------------------------------------------------------------------------------------------
# Running one variant (inside a worker)


def _accuracy():
    """bench/accuracy.py: the benchmark runner's accuracy rule."""
    import importlib

    if str(ROOT / "bench") not in sys.path:
        sys.path.insert(0, str(ROOT / "bench"))
    return importlib.import_module("accuracy")


def _is_tensor(x) -> bool:
    import torch

    return isinstance(x, torch.Tensor)


class _Sample:
    """One SampleInput taken apart: its tensors, and a template to rebuild (input, args,
    kwargs) from them."""

    def __init__(self, s):
        from torch.utils._pytree import tree_flatten

        leaves, self.spec = tree_flatten((s.input, tuple(s.args), dict(s.kwargs)))
        self.template = [None if _is_tensor(x) else x for x in leaves]
        self.tensors = [x for x in leaves if _is_tensor(x)]
        self.positions = [i for i, x in enumerate(leaves) if _is_tensor(x)]
        self.process = s.output_process_fn_grad

    def rebuild(self, tensors):
        from torch.utils._pytree import tree_unflatten

        leaves = list(self.template)
        for p, t in zip(self.positions, tensors):
            leaves[p] = t
        return tree_unflatten(leaves, self.spec)


def _samples(op, dtype, requires_grad: bool, max_samples: int) -> list[_Sample]:
    import torch

    torch.manual_seed(0)
    gen = op.sample_inputs("cpu", dtype, requires_grad=requires_grad)
    # max_samples 0: every sample.
    return [_Sample(s) for s in itertools.islice(gen, max_samples or None)]


def _call(op, sample: _Sample, tensors):
    inp, args, kwargs = sample.rebuild(tensors)
    return op.op(inp, *args, **kwargs)


def _grad_inputs(tensors) -> list[int]:
    return [i for i, t in enumerate(tensors) if t.requires_grad]


def _diff_outputs(out) -> list:
    from torch.utils._pytree import tree_flatten

    return [t for t in tree_flatten(out)[0]
            if _is_tensor(t) and t.requires_grad and t.is_floating_point()]


def _grad_outputs(outs, seed: int) -> list:
    import torch

    g = torch.Generator().manual_seed(seed)
    return [torch.randn(o.shape, generator=g, dtype=torch.float64).to(o.dtype) for o in outs]


def _fresh(tensors, fp64: bool = False):
    """Independent copies of the sample tensors (ops may mutate inputs), same strides."""
    import torch

    out = []
    for t in tensors:
        c = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype) if t.numel() else \
            torch.empty(t.shape, dtype=t.dtype)
        if t.numel() and not _dense(t):
            c = torch.empty(t.shape, dtype=t.dtype)
        with torch.no_grad():
            c.copy_(t)
        if fp64 and c.is_floating_point():
            c = c.double()
        out.append(c.requires_grad_(t.requires_grad))
    return out


def _dense(t) -> bool:
    # Non-overlapping and dense: empty_strided with its strides holds exactly its elements.
    import torch

    try:
        return torch._prims_common.is_non_overlapping_and_dense(t)
    except Exception:
        return t.is_contiguous()


def _run_eager(op, sample, tensors, grad: bool, seed: int, fp64: bool = False):
    """(outputs, grads or None) of one sample in eager."""
    import torch

    ts = _fresh(tensors, fp64)
    out = _call(op, sample, ts)
    if not grad:
        return _detach(out), None
    out = sample.process(out)
    diff = _diff_outputs(out)
    gi = [ts[i] for i in _grad_inputs(ts)]
    if not diff or not gi:
        return _detach(out), []
    gos = _grad_outputs(diff, seed)
    if fp64:
        gos = [g.double() for g in gos]
    grads = torch.autograd.grad(diff, gi, gos, allow_unused=True)
    return _detach(out), list(grads)


def _detach(x):
    from torch.utils._pytree import tree_map

    return tree_map(lambda t: t.detach() if _is_tensor(t) else t, x)


def _values_undefined(op, out1, out2) -> bool:
    """Random or uninitialized results: eager disagrees with itself."""
    if op.name.split(".")[-1] in UNDEFINED_VALUES or op.name in UNDEFINED_VALUES:
        return True
    compare = _accuracy().compare

    return not compare(out1, out2, None, tol=0.0)


def _meta_only(res, ref):
    """Same structure, dtypes and shapes."""
    from torch.utils._pytree import tree_flatten

    r, e = tree_flatten(res)[0], tree_flatten(ref)[0]
    if len(r) != len(e):
        return f"{len(r)} outputs, eager has {len(e)}"
    for a, b in zip(r, e):
        if _is_tensor(b):
            if not _is_tensor(a) or a.dtype != b.dtype or a.shape != b.shape:
                return f"output meta differs: {getattr(a, 'dtype', a)} {getattr(a, 'shape', '')}"
    return None


class _Outcome:
    def __init__(self, status: str, reason: str = ""):
        self.status, self.reason = status, reason

    def as_dict(self, **kw):
        d = {"status": self.status}
        if self.reason:
            d["reason"] = self.reason[:300]
        d.update(kw)
        return d


def _one_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    return f"{type(e).__name__}: {msg[0] if msg else ''}"[:300]


def _root_cause(e: BaseException) -> BaseException:
    seen = set()
    while True:
        # `raise X from None` hides the context: X itself is the cause to report.
        nxt = e.__cause__ or (None if e.__suppress_context__ else e.__context__)
        inner = getattr(e, "inner_exception", None)
        nxt = inner or nxt
        if nxt is None or id(nxt) in seen:
            return e
        seen.add(id(e))
        e = nxt


# CompileErrors that are coil failing, not declining: g++ rejecting the generated code.
_BUG_MARKERS = ("host C++ compilation failed",)


def _is_refusal(e: BaseException) -> bool:
    """An exception that is coil declining to compile (strict mode's stand-in for a fallback)."""
    name = type(e).__name__
    return name in ("CompileError", "ExportError") and not any(m in str(e) for m in _BUG_MARKERS)


def _classify_fallback_reason(reason: str) -> str:
    # A graph that fell back because coil crashed inside is a bug, not a missing feature.
    if reason.startswith("InternalError") or reason.startswith("run failed"):
        return "error"
    if any(m in reason for m in _BUG_MARKERS):
        return "error"
    return "fallback"


def _compiled_run(op, samples, all_tensors, seeds, grad: bool, strict: bool):
    """Compiles one function over `samples` and runs it. Returns (outputs per sample, grads per
    sample or None, problems), where problems is a list of (status, reason) for fallbacks and
    errors seen; raises on an exception out of the compiled call."""
    import torch
    import torch._dynamo
    from torch._dynamo.utils import counters

    import coil

    torch._dynamo.reset()
    coil.reset_report()
    counters.clear()

    def fn(*flat):
        outs, k = [], 0
        for s in samples:
            n = len(s.tensors)
            outs.append(_call(op, s, flat[k:k + n]))
            k += n
        return outs

    cfn = torch.compile(fn, backend="coil", dynamic=False, options={"strict": strict})
    fresh = [_fresh(ts) for ts in all_tensors]
    flat = [t for ts in fresh for t in ts]
    outs = cfn(*flat)
    grads = None
    if grad:
        # One backward over every sample's outputs: the samples share one compiled graph, so
        # one autograd.grad call per sample would run its backward several times.
        all_diff, all_go, all_in, counts = [], [], [], []
        # Compared after output_process_fn_grad, as eager's outputs are (_run_eager).
        outs = [s.process(o) for s, o in zip(samples, outs)]
        for i, (s, ts) in enumerate(zip(samples, fresh)):
            diff = _diff_outputs(outs[i])
            gi = [ts[j] for j in _grad_inputs(ts)]
            if not diff or not gi:
                counts.append(0)
                continue
            all_diff += diff
            all_go += _grad_outputs(diff, seeds[i])
            all_in += gi
            counts.append(len(gi))
        flat_grads = (list(torch.autograd.grad(all_diff, all_in, all_go, allow_unused=True))
                      if all_diff else [])
        grads, k = [], 0
        for n in counts:
            grads.append(flat_grads[k:k + n])
            k += n
    problems = []
    rep = coil.report()
    for name, reason in rep.graphs_fallen_back:
        problems.append((_classify_fallback_reason(reason), f"graph {name}: {reason}"))
    for opname in rep.fallback_ops:
        problems.append(("fallback", f"per-op fallback: {opname}"))
    for reason, n in counters["graph_break"].items():
        problems.append(("fallback", f"graph break: {str(reason).splitlines()[0][:200]}"))
    if rep.graphs_compiled == 0 and not rep.graphs_fallen_back and not problems:
        problems.append(("fallback", "no graph reached coil"))
    return _detach(outs), grads, problems


# Ops whose index output is unspecified among tied values ("If there are ties, the indices
# returned are not guaranteed to be stable": ATen's CPU topk uses std::nth_element and an
# unstable sort): its indices are checked for what they mean instead of compared with eager's.
TIED_INDICES = ("topk",)


def _tied_indices(op, sample, c_out, e_out):
    """(coil's outputs, eager's) with topk's indices replaced by the values they select, or a
    reason why coil's indices are wrong: out of range or repeated within a row."""
    import torch

    inp, args, kwargs = sample.rebuild(sample.tensors)
    dim = args[1] if len(args) > 1 else kwargs.get("dim", -1)
    if inp.dim() == 0:
        return c_out, e_out, None
    n = inp.shape[dim]
    idx = c_out[1]
    if idx.numel() and (idx.min() < 0 or idx.max() >= n):
        return c_out, e_out, "indices out of range"
    srt = torch.sort(idx, dim=dim).values
    if srt.shape[dim] > 1 and bool((srt.narrow(dim, 1, srt.shape[dim] - 1) ==
                                    srt.narrow(dim, 0, srt.shape[dim] - 1)).any()):
        return c_out, e_out, "an index repeated within a row"
    pick = (lambda out: (out[0], torch.gather(inp.detach(), dim, out[1])))
    return pick(c_out), pick(e_out), None


def _compare_sample(op, ref, res, meta_only: bool, sample=None):
    """ref/res: (outputs, grads) of eager (with fp64 reference) and coil."""
    compare = _accuracy().compare
    (e_out, e_grads, f_out, f_grads), (c_out, c_grads) = ref, res
    if op.name in TIED_INDICES and sample is not None and not meta_only:
        c_out, e_out, bad = _tied_indices(op, sample, c_out, e_out)
        if bad:
            return _Outcome("wrong", f"forward out[1]: {bad}")
        f_out = None if f_out is None else (f_out[0], None)
    if meta_only:
        why = _meta_only(c_out, e_out)
        return _Outcome("wrong", why) if why else _Outcome("pass", "values not compared")
    v = compare(c_out, e_out, f_out)
    if not v:
        return _Outcome("wrong", f"forward {v.detail}")
    if e_grads is not None:
        v = compare(c_grads, e_grads, f_grads)
        if not v:
            return _Outcome("wrong", f"gradient {v.detail}")
    return _Outcome("pass")


def run_variant(op, variant: str, strict: bool, max_samples: int) -> dict:
    """Runs one (entry, variant, mode); returns its record (without the key fields)."""
    import torch

    grad = variant.endswith(".grad")
    dtype = _dtype(variant.split(".")[0])
    t0 = time.perf_counter()
    try:
        samples = _samples(op, dtype, grad, max_samples)
    except Exception as e:
        return {"status": "skip", "reason": f"sample_inputs raised {_one_line(e)}",
                "samples": [], "seconds": time.perf_counter() - t0}
    # Eager: reference, second run (randomness), float64 reference.
    refs, live, per = {}, [], [None] * len(samples)
    for i, s in enumerate(samples):
        try:
            e1 = _run_eager(op, s, s.tensors, grad, i)
        except Exception as e:
            per[i] = {"status": "skip", "reason": f"eager raises {_one_line(e)}"}
            continue
        try:
            e2 = _run_eager(op, s, s.tensors, grad, i)
            meta_only = _values_undefined(op, e1, e2)
        except Exception:
            meta_only = True
        try:
            f = _run_eager(op, s, s.tensors, grad, i, fp64=True)
        except Exception:
            f = (None, None)
        refs[i] = ((e1[0], e1[1], f[0], f[1]), meta_only)
        live.append(i)

    def attempt(idx: list[int]):
        """Compiled run over samples idx: per-sample outcomes or None (re-run singly)."""
        try:
            outs, grads, problems = _compiled_run(
                op, [samples[i] for i in idx], [samples[i].tensors for i in idx], idx, grad, strict)
        except Exception as e:
            root = _root_cause(e)
            if len(idx) > 1:
                return None
            status = "fallback" if (strict and _is_refusal(root)) else "error"
            return [_Outcome(status, _one_line(root))]
        if problems:
            if len(idx) > 1:
                return None
            worst = max(problems, key=lambda p: _RANK[p[0]])
            # A wrong answer still counts as wrong, whatever else happened.
            cmp = _compare_sample(op, refs[idx[0]][0], (outs[0], grads[0] if grads else None),
                                  refs[idx[0]][1], samples[idx[0]])
            if cmp.status == "wrong":
                return [cmp]
            return [_Outcome(worst[0], "; ".join(sorted({p[1] for p in problems}))[:300])]
        return [_compare_sample(op, refs[i][0], (outs[k], grads[k] if grads else None),
                                refs[i][1], samples[i]) for k, i in enumerate(idx)]

    batched = bool(live)
    if live:
        res = attempt(live)
        if res is None:
            res = [attempt([i])[0] for i in live]
        else:
            batched = True
        for i, o in zip(live, res):
            per[i] = o.as_dict()
    statuses = [p["status"] for p in per if p["status"] != "skip"]
    if not statuses:
        status, reason = "skip", (per[0]["reason"] if per else "no samples")
    else:
        status = max(statuses, key=lambda s: _RANK[s])
        reason = next((p.get("reason", "") for p in per if p["status"] == status), "")
    return {"status": status, "reason": reason, "samples": per, "batched": batched,
            "seconds": round(time.perf_counter() - t0, 2)}


# ---------------------------------------------------------------------------------------------
# Worker process: reads tasks (JSON lines) on stdin, prints records tagged RESULT_TAG


def _worker_main(args) -> None:
    import warnings

    for sub in ("bench", "python"):
        if str(ROOT / sub) not in sys.path:
            sys.path.insert(0, str(ROOT / sub))

    import torch

    warnings.filterwarnings("ignore")
    torch.set_num_threads(1)
    import logging

    logging.getLogger("coil").setLevel(logging.ERROR)
    logging.getLogger("torch._dynamo").setLevel(logging.ERROR)
    from torch.testing._internal.common_methods_invocations import op_db

    by_name = {entry_name(o): o for o in op_db}
    out = sys.stdout
    out.write(RESULT_TAG + json.dumps({"ready": True}) + "\n")
    out.flush()
    for line in sys.stdin:
        task = json.loads(line)
        op = by_name[task["op"]]
        for variant in task["variants"]:
            prev = None
            for mode in task["modes"]:
                if mode == "strict" and _strict_same(prev, task):
                    rec = dict(prev, derived=True)
                else:
                    try:
                        rec = run_variant(op, variant, mode == "strict", task["max_samples"])
                    except Exception as e:
                        rec = {"status": "error", "reason": "sweep: " + _one_line(e),
                               "trace": traceback.format_exc()[-2000:], "samples": []}
                prev = rec
                rec.update(op=task["op"], variant=variant, mode=mode,
                           max_samples=task["max_samples"])
                out.write(RESULT_TAG + json.dumps(rec) + "\n")
                out.flush()
        out.write(RESULT_TAG + json.dumps({"done": task["op"]}) + "\n")
        out.flush()


def _strict_same(prev, task) -> bool:
    """Whether the strict run can be taken from the fallback-mode run just made: every sample
    passed without any fallback, graph break or error, so coil made no fallback decision that
    strict=True would turn into an error, and the strict run would compile the same graphs.
    `--strict-all` runs it anyway."""
    if prev is None or task.get("strict_all"):
        return False
    if task.get("derive_strict"):
        # --derive-strict: also when samples fell back. The fallback-mode run attributed each
        # sample (a fallback makes it re-run them one by one), and strict=True changes nothing
        # but turning those fallbacks into CompileErrors; only errors and wrong answers, whose
        # strict behaviour may differ, are run again.
        return all(s is None or s["status"] in ("pass", "fallback", "skip")
                   for s in prev["samples"]) and prev["status"] != "error"
    return prev["status"] == "pass" or (
        prev["status"] == "skip" and all(s and s["status"] == "skip" for s in prev["samples"]))


class _Worker:
    def __init__(self, args, log):
        cmd = [sys.executable, str(Path(__file__).resolve()), "--worker"]
        self.log = log
        self.p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=log, text=True, start_new_session=True, bufsize=1)
        self.q: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()
        self.wait_line(600)  # ready

    def _read(self):
        for line in self.p.stdout:
            if line.startswith(RESULT_TAG):
                self.q.put(json.loads(line[len(RESULT_TAG):]))
            else:
                self.log.write(line)
        self.q.put(None)  # EOF: the worker died

    def wait_line(self, timeout):
        return self.q.get(timeout=timeout)

    def kill(self):
        try:
            os.killpg(self.p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.p.wait()


# ---------------------------------------------------------------------------------------------
# Results file and the driver


def load_results(path: Path) -> dict[tuple, dict]:
    recs = {}
    if path.exists():
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut by an interruption
            recs[(r["op"], r["variant"], r["mode"])] = r
    return recs


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def _cap_differs(rec, args) -> bool:
    # Imported records (cap unknown, see load_baseline) count as done; --redo reruns them.
    cap = rec.get("max_samples")
    return cap is not None and cap != args.max_samples


def _baseline_of(args) -> Path | None:
    """The committed results beside the table: docs/op_coverage.md -> docs/op_coverage.jsonl.

    build/ is not committed, so the table's source has to be: a later sweep of some entries on
    another checkout merges into it instead of dropping every other row."""
    if getattr(args, "baseline", None) == "":
        return None
    if getattr(args, "baseline", None):
        return Path(args.baseline)
    return Path(args.write).with_suffix(".jsonl") if args.write else None


_MODES = {"fallback": "f", "strict": "s"}


def compact(rec: dict) -> dict:
    """The committed form of a record: outcome, first reason, per-sample outcome counts, in
    short keys (op, v variant, m mode f/s, s status, r reason, n sample outcomes, cap the
    sample cap, d derived, t time, i imported without per-sample outcomes)."""
    out = {"op": rec["op"], "v": rec["variant"], "m": _MODES[rec["mode"]], "s": rec["status"]}
    if rec.get("reason") and rec["status"] != "pass":
        out["r"] = rec["reason"][:200]
    if "samples" in rec:
        out["n"] = dict(sorted(collections.Counter(
            s["status"] for s in rec["samples"] if s).items()))
    elif "n" in rec:
        out["n"] = rec["n"]
    first8 = _first8(rec)
    if first8:
        out["s8"] = first8
    for long, short in (("max_samples", "cap"), ("derived", "d"), ("t", "t"), ("imported", "i")):
        if rec.get(long) is not None:
            out[short] = rec[long]
    return out


def expand(c: dict) -> dict:
    """compact's inverse (without the per-sample detail)."""
    rec = {"op": c["op"], "variant": c["v"], "mode": {v: k for k, v in _MODES.items()}[c["m"]],
           "status": c["s"], "reason": c.get("r", ""), "max_samples": c.get("cap")}
    for long, short in (("n", "n"), ("derived", "d"), ("t", "t"), ("imported", "i"),
                        ("s8", "s8")):
        if short in c:
            rec[long] = c[short]
    return rec


def load_baseline(path: Path | None) -> tuple[dict, dict]:
    """(records, meta) of the committed results (`<table>.jsonl`: meta on the first line, then
    one line per (entry, variant, mode))."""
    if path is None or not path.exists():
        return {}, {}
    meta, recs = {}, {}
    for line in path.read_text().splitlines():
        if not line.strip():
            continue
        c = json.loads(line)
        if "meta" in c:
            meta = c["meta"]
            continue
        r = expand(c)
        recs[(r["op"], r["variant"], r["mode"])] = r
    # Entries: name -> [core?, supported variants]; the sweep's meta keeps them as dicts.
    meta["entries"] = {n: {"core": bool(e[0]), "variants": {v: True for v in e[1]}}
                       for n, e in meta.get("entries", {}).items()}
    return recs, meta


def load_merged(path: Path, baseline: Path | None) -> tuple[dict, dict]:
    """The committed results overlaid with this checkout's (a later record wins; a local
    record without a time stamp is taken as the later one)."""
    recs, meta = load_baseline(baseline)
    for key, r in load_results(path).items():
        old = recs.get(key)
        if old is None or r.get("t", "~") >= old.get("t", ""):
            recs[key] = r
    local_path = path.with_suffix(".meta.json")
    local = json.loads(local_path.read_text()) if local_path.exists() else {}
    merged = {"entries": dict(meta.get("entries", {})), "runs": list(meta.get("runs", []))}
    merged["entries"].update(local.get("entries", {}))
    seen = {(r["date"], r.get("command")) for r in merged["runs"]}
    merged["runs"] += [r for r in local.get("runs", [])
                       if (r["date"], r.get("command")) not in seen]
    merged["runs"].sort(key=lambda r: r["date"])
    return recs, merged


def write_baseline(path: Path, recs: dict, meta: dict) -> None:
    entries = {n: [int(bool(e["core"])), [v for v, ok in e["variants"].items() if ok]]
               for n, e in sorted(meta["entries"].items())}
    tight = {"separators": (",", ":")}
    lines = [json.dumps({"meta": {"runs": meta.get("runs", []), "entries": entries}}, **tight)]
    lines += [json.dumps(compact(recs[k]), **tight) for k in sorted(recs)]
    path.write_text("\n".join(lines) + "\n")


def _list_entries(args):
    from torch.testing._internal.common_methods_invocations import op_db

    wanted = set(args.ops.split(",")) if args.ops else None
    entries = []
    for op in op_db:
        name = entry_name(op)
        if wanted and name not in wanted and op.name not in wanted:
            continue
        core = core_overloads(op)
        if args.core_only and not core:
            continue
        # What the op supports of the default dtypes too, so that the table tells "not run"
        # from "not supported" when a run picks fewer dtypes.
        support = variants_of(op, tuple(dict.fromkeys(DEFAULT_DTYPES + args.dtypes)), True)
        entries.append((name, core, variants_of(op, args.dtypes, args.grad), support))
    return entries


def sweep(args) -> None:
    path = Path(args.results)
    path.parent.mkdir(parents=True, exist_ok=True)
    entries = _list_entries(args)
    modes = ["fallback", "strict"] if args.mode == "both" else [args.mode]
    # What is already known: the committed results beside the table, then this checkout's runs.
    done, _ = load_merged(path, _baseline_of(args))
    meta_path = path.with_suffix(".meta.json")
    meta = json.loads(meta_path.read_text()) if meta_path.exists() else {}
    meta.setdefault("entries", {})
    for n, c, _, support in entries:
        meta["entries"][n] = {"core": c, "variants": dict(support)}
    tasks = []
    for name, core, variants, _ in entries:
        todo = [v for v, ok in variants if ok and any(
            args.redo or (name, v, m) not in done or _cap_differs(done[(name, v, m)], args)
            for m in modes)]
        if todo:
            tasks.append({"op": name, "variants": todo, "modes": modes,
                          "max_samples": args.max_samples, "strict_all": args.strict_all,
                          "derive_strict": args.derive_strict,
                          "core": bool(core)})
    # Core entries first: the headline figure is known early in a long sweep.
    tasks.sort(key=lambda t: not t["core"])
    print(f"opinfo sweep: {len(entries)} entries, {len(tasks)} to run, {args.jobs} job(s), "
          f"results in {path}", flush=True)
    t_start = time.time()
    # The run is recorded now and completed at the end, so an interrupted run is listed too.
    run = {"date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
           "command": " ".join(["python3", "tools/opinfo_sweep.py"] + sys.argv[1:]),
           "wall_seconds": None, "tasks": len(tasks), "jobs": args.jobs,
           "max_samples": args.max_samples}
    meta.setdefault("runs", []).append(run)
    meta_path.write_text(json.dumps(meta, indent=1))
    lock = threading.Lock()
    log = open(args.log, "a") if args.log else open(os.devnull, "w")
    out = open(path, "a")
    work: queue.Queue = queue.Queue()
    for t in tasks:
        work.put(t)
    counter = [0]

    def record(rec):
        rec["t"] = _now()
        with lock:
            out.write(json.dumps(rec) + "\n")
            out.flush()

    def runner():
        w = None
        while True:
            try:
                task = work.get_nowait()
            except queue.Empty:
                break
            if w is None:
                w = _Worker(args, log)
            w.p.stdin.write(json.dumps(task) + "\n")
            w.p.stdin.flush()
            expected = {(v, m) for v in task["variants"] for m in task["modes"]}
            t0 = time.time()
            while True:
                try:
                    msg = w.wait_line(max(1.0, args.timeout - (time.time() - t0)))
                except queue.Empty:
                    msg = "timeout"
                if msg is None or msg == "timeout":
                    why = (f"timeout after {args.timeout} s" if msg == "timeout"
                           else f"worker died (exit {w.p.poll()})")
                    for v, m in sorted(expected):
                        record({"op": task["op"], "variant": v, "mode": m, "status": "error",
                                "reason": why, "samples": [], "max_samples": task["max_samples"]})
                    w.kill()
                    w = None
                    break
                if "done" in msg:
                    break
                expected.discard((msg["variant"], msg["mode"]))
                record(msg)
            with lock:
                counter[0] += 1
                print(f"[{counter[0]}/{len(tasks)}] {task['op']} "
                      f"({time.time() - t0:.1f} s, {time.time() - t_start:.0f} s total)",
                      flush=True)
        if w is not None:
            w.p.stdin.close()
            w.p.wait()

    threads = [threading.Thread(target=runner) for _ in range(max(1, args.jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out.close()
    wall = time.time() - t_start
    run["wall_seconds"] = round(wall)
    meta_path.write_text(json.dumps(meta, indent=1))
    print(f"opinfo sweep: done in {wall:.0f} s", flush=True)


# ---------------------------------------------------------------------------------------------
# The markdown table

def write_table(args) -> None:
    path = Path(args.results)
    baseline = _baseline_of(args)
    recs, meta = load_merged(path, baseline)
    recs = {k: r for k, r in recs.items() if k[0] in meta["entries"]}
    if baseline is not None:
        write_baseline(baseline, recs, meta)
        print(f"wrote {baseline}")
    # Error messages carry the C++ source paths of the build (__FILE__); the committed table
    # names them relative to the checkout, so it does not depend on where the sweep ran.
    text = re.sub(r"(/\S*?/|(\.\./)+)(src|include|python|tools)/", r"\3/",
                  render_table(recs, meta))
    Path(args.write).write_text(text)
    print(f"wrote {args.write}")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mode", choices=("fallback", "strict", "both"), default="both")
    p.add_argument("--ops", default="", help="comma-separated entry or op names (default: all)")
    p.add_argument("--dtypes", default=",".join(DEFAULT_DTYPES))
    p.add_argument("--no-grad", dest="grad", action="store_false", help="skip f32.grad")
    p.add_argument("--core-only", action="store_true", help="only entries naming a core op")
    p.add_argument("--max-samples", type=int, default=8, help="per variant; 0: every sample")
    p.add_argument("--jobs", type=int, default=1)
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per entry")
    p.add_argument("--results", default=str(DEFAULT_RESULTS))
    p.add_argument("--baseline", default=None,
                   help="committed results merged under --results (default: --write's .jsonl "
                        "sibling, docs/op_coverage.jsonl; '' for none)")
    p.add_argument("--log", default="", help="worker stderr goes here (default: discarded)")
    p.add_argument("--strict-all", action="store_true",
                   help="run strict mode also where the fallback-mode run passed cleanly")
    p.add_argument("--derive-strict", action="store_true",
                   help="take strict results from the fallback-mode run's per-sample outcomes "
                        "where it saw only passes and fallbacks (faster; see _strict_same)")
    p.add_argument("--redo", action="store_true", help="rerun selected entries already done")
    p.add_argument("--write", default="", help="regenerate this markdown table afterwards")
    p.add_argument("--table-only", action="store_true", help="only regenerate --write")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.dtypes = tuple(d for d in args.dtypes.split(",") if d)
    return args


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.worker:
        _worker_main(args)
        return
    if not args.table_only:
        sweep(args)
    if args.write:
        write_table(args)


if __name__ == "__main__":
    main()
