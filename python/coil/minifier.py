"""The minifier: shrinks a graph that coil compiles wrongly, or fails on, to a small repro.

    coil.minify(model_or_fn, *inputs, mode="accuracy" | "error", out_dir="coil_minify")

compiles `model_or_fn` with coil, capturing every ATen graph coil receives (what
backend.compile_aten_graph gets from AOTAutograd) together with the real inputs of its first
call, checks each graph in order and shrinks the first failing one. `minify_graph(gm, inputs,
mode)` does the same for one ATen FX graph at hand (a graph with meta["val"] on its nodes, as
AOTAutograd or make_fx give it).

The failure (check_graph):
  "accuracy"  coil's outputs (and the inputs the graph writes) differ from eager's by the
              benchmark runner's rule, bench/accuracy.py: close to the eager run of the same FX
              graph in the inputs' dtypes, or no farther from a float64 run of it than eager
              (floating inputs and dtype arguments made float64). coil compiles with the options
              given (not strict): a graph that falls back runs eagerly and does not fail.
  "error"     coil raises: compiled and run with strict on, so a graph or an op that would fall
              back raises instead. A cut keeps failing only with the same error: by default the
              same exception type and first message line, numbers left out (`match`).
A candidate whose eager run raises is not a failure (the cut made an invalid graph).

Shrinking (Minifier) works on cuts of the original graph: a cut turns computed values into
graph inputs (with the values they had in an eager run of the original graph: same shape, dtype
and strides), keeps a subset of the outputs (plus the input mutations, copy_ nodes) and drops
every node no output needs. In order: bisect for the shortest prefix of the graph whose live
values, made outputs, still fail; delta-debug (ddmin) the outputs; bisect for the longest prefix
that can become inputs; then ddmin the computed nodes and the outputs, and try replacing each
output node by its inputs, until nothing changes: no single computed node can become an input,
and no output or mutation can be dropped, with the graph still failing. Every candidate is a
fresh compile (kernels come from coil's cache where the source repeats); identical candidates
are checked once.

The result is a folder (write_repro): repro.py (the minimal graph's code, inputs.pt, the check;
exit status 1 while the failure reproduces, 0 once it does not), graph.txt (the coil graph text
coil handed its C++ core, for `coil-opt graph.txt --emit=cpp`), coil_debug/ (coil's debug dump
of the minimal graph: its folder and the HTML report) and, from coil.minify, original/repro.py
(the whole failing graph).
`python -m coil.minifier DIR/repro.py` minifies a repro again (another mode, other options).
docs/debugging.md, "Minifying a failure".
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import functools
import importlib.util
import json
import logging
import operator
import re
import runpy
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import torch
import torch.fx as fx

log = logging.getLogger("coil")

__all__ = ["minify", "minify_graph", "check_graph", "trace_graph", "write_repro", "Outcome",
           "MinifyResult"]

MODES = ("accuracy", "error")
_ROOT = Path(__file__).resolve().parents[2]


# ---------------------------------------------------------------------------------------------
# The failure predicate


@dataclasses.dataclass
class Outcome:
    """One check of a graph: failed, and what happened (the verdict or the error's line)."""
    failed: bool
    detail: str = ""
    # mode "error": the error's signature (type and first line, numbers left out).
    signature: str = ""


def _accuracy():
    """bench/accuracy.py: the benchmark runner's accuracy rule, the one the dashboard, the
    OpInfo sweep and the fuzzer apply (coil's source tree; not part of the package)."""
    mod = sys.modules.get("accuracy")
    if mod is not None and hasattr(mod, "compare") and hasattr(mod, "MULTIPLIER"):
        return mod
    path = _ROOT / "bench" / "accuracy.py"
    if not path.is_file():
        raise RuntimeError(f"coil minifier: mode 'accuracy' uses bench/accuracy.py of coil's "
                           f"source tree, not found at {path}")
    name = "coil._bench_accuracy"
    mod = sys.modules.get(name)
    if mod is None:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # before running it: its dataclasses look their module up
        try:
            spec.loader.exec_module(mod)
        except BaseException:
            del sys.modules[name]
            raise
    return mod


def _clone(x: Any) -> Any:
    """A copy with the same sizes and strides (storage offset dropped), detached."""
    if not isinstance(x, torch.Tensor):
        return x
    with torch.no_grad():
        out = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype, device=x.device)
        out.copy_(x.detach())
    return out


def _is_float_dtype(d) -> bool:
    return isinstance(d, torch.dtype) and d.is_floating_point and d != torch.float64


def _to_fp64_graph(gm: fx.GraphModule) -> fx.GraphModule:
    """The graph with every floating dtype argument made float64 (convert_element_type's
    target, dtype= of _to_copy, full, ...), for the float64 reference run; as torch._dynamo's
    cast_dtype_args_to_fp64 does."""
    gm = _copy_gm(gm)
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        node.args = tuple(torch.float64 if _is_float_dtype(a) else a for a in node.args)
        node.kwargs = {k: torch.float64 if _is_float_dtype(v) else v
                       for k, v in node.kwargs.items()}
    gm.recompile()
    return gm


def _as_list(out: Any) -> list:
    return list(out) if isinstance(out, (list, tuple)) else [out]


def _mutated_input_positions(gm: fx.GraphModule) -> list[int]:
    """Placeholders (by position) that the graph writes with copy_(input, value)."""
    pos = {n: i for i, n in enumerate(n for n in gm.graph.nodes if n.op == "placeholder")}
    out = []
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target is torch.ops.aten.copy_.default:
            p = pos.get(n.args[0])
            if p is not None and p not in out:
                out.append(p)
    return out


def _copy_gm(gm: fx.GraphModule) -> fx.GraphModule:
    """A copy whose graph can be changed (compile_aten_graph's passes rewrite the graph)."""
    return copy.deepcopy(gm)


def signature_of(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    line = msg[0] if msg else ""
    return f"{type(e).__name__}: {re.sub(r'[0-9]+', '#', line)}"


def _options(options: Any, mode: str):
    from .options import CoilOptions, build_options

    opts = options if isinstance(options, CoilOptions) else build_options(options)
    # The checks never dump (each candidate would get a folder); "error" raises what would
    # fall back.
    return dataclasses.replace(opts, debug=False, strict=(mode == "error") or opts.strict)


def _compile(gm: fx.GraphModule, inputs: list, options, kind: str):
    # Late lookup: a test (or a user) may wrap compile_aten_graph.
    from . import backend

    return backend.compile_aten_graph(_copy_gm(gm), [_clone(x) for x in inputs], options, kind)


def check_graph(gm: fx.GraphModule, inputs: Sequence[Any], mode: str = "accuracy",
                options: Any = None, kind: str = "graph", match: Any = "message") -> Outcome:
    """Compiles `gm` with coil (backend.compile_aten_graph) and runs it on copies of `inputs`;
    failed when, by `mode`, coil raised ("error", strict) or its outputs broke bench/accuracy.py's
    rule against the eager runs of `gm` ("accuracy"). `match` (mode "error"): "message" (the
    same exception type and first line, numbers left out, as the signature string given),
    "type" (any error), a signature string (the message form) or a callable(exception) -> bool.
    """
    if mode not in MODES:
        raise ValueError(f"coil minifier: mode must be one of {MODES}, got {mode!r}")
    inputs = list(inputs)
    opts = _options(options, mode)
    mutated = _mutated_input_positions(gm)
    eager_in = [_clone(x) for x in inputs]
    try:
        with torch.no_grad():
            want = _as_list(gm(*eager_in))
    except Exception as e:
        return Outcome(False, f"the graph fails eagerly too: {signature_of(e)}")
    want += [eager_in[i] for i in mutated]
    coil_in = [_clone(x) for x in inputs]
    try:
        fn = _compile(gm, inputs, opts, kind)
        got = _as_list(fn(coil_in))
        got += [coil_in[i] for i in mutated]
    except Exception as e:
        sig = signature_of(e)
        if mode == "accuracy":
            return Outcome(False, f"coil raised (not an accuracy failure): {sig}")
        if not match or match == "type":
            ok = True
        elif callable(match):
            ok = bool(match(e))
        elif match == "message":
            ok = True
        else:
            ok = sig == match
        return Outcome(ok, f"{type(e).__name__}: {str(e).strip()}", sig)
    if mode == "error":
        return Outcome(False, "coil compiled and ran it")
    acc = _accuracy()
    fp64 = None
    try:
        gm64 = _to_fp64_graph(gm)
        in64 = [_clone(x).double() if isinstance(x, torch.Tensor) and x.is_floating_point()
                else _clone(x) for x in inputs]
        with torch.no_grad():
            fp64 = _as_list(gm64(*in64)) + [in64[i] for i in mutated]
    except Exception as e:  # a graph float64 cannot run (a bitcast): compare to eager only
        log.debug("coil minifier: no float64 reference (%s)", signature_of(e))
    verdict = acc.compare(got, want, fp64)
    return Outcome(not verdict.ok, verdict.detail or "coil matches eager")


# ---------------------------------------------------------------------------------------------
# Cuts of a graph


def _tensor_val(node: fx.Node) -> bool:
    v = node.meta.get("val")
    return isinstance(v, torch.Tensor)


def _arg_nodes(node: fx.Node) -> list[fx.Node]:
    out: list[fx.Node] = []
    fx.node.map_arg((node.args, node.kwargs), lambda n: out.append(n))
    return out


def _fake_val(t: torch.Tensor, like: Sequence[Any]):
    """meta["val"] for a get_attr tensor made an input: a FakeTensor of the graph's mode."""
    from torch._guards import detect_fake_mode
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = detect_fake_mode(list(like)) or FakeTensorMode()
    return mode.from_tensor(t)


@dataclasses.dataclass(frozen=True)
class Cut:
    """A cut of the original graph: nodes made inputs, and the roots kept: ("out", name) an
    output, ("effect", name) an input mutation (a copy_ node)."""
    cut: frozenset
    roots: tuple


class _Original:
    """The graph to shrink, its nodes in order and every value of an eager run of it."""

    def __init__(self, gm: fx.GraphModule, inputs: Sequence[Any]):
        self.gm = gm
        self.inputs = list(inputs)
        self.nodes = list(gm.graph.nodes)
        self.by_name = {n.name: n for n in self.nodes}
        self.placeholders = [n for n in self.nodes if n.op == "placeholder"]
        if len(self.placeholders) != len(self.inputs):
            raise ValueError(f"coil minifier: the graph has {len(self.placeholders)} inputs, "
                             f"{len(self.inputs)} given")
        self.values = self._record()
        out = next(n for n in reversed(self.nodes) if n.op == "output")
        roots: list = []
        for n in _arg_nodes(out):  # the outputs that are tensors, once each
            if ("out", n.name) not in roots and (_tensor_val(n) or n.op == "placeholder"):
                roots.append(("out", n.name))
        for n in self.nodes:
            if (n.op == "call_function" and not n.users
                    and n.target is torch.ops.aten.copy_.default):
                roots.append(("effect", n.name))
        self.roots = tuple(roots)

    def _record(self) -> dict[str, Any]:
        """Every node's value in an eager run (copies: an input mutation writes the inputs)."""
        values: dict[str, Any] = {}

        class Recorder(fx.Interpreter):
            def run_node(self, n):
                r = super().run_node(n)
                values[n.name] = _clone(r) if isinstance(r, torch.Tensor) else r
                return r

        with torch.no_grad():
            Recorder(self.gm).run(*[_clone(x) for x in self.inputs])
        for n, x in zip(self.placeholders, self.inputs):
            values[n.name] = x
        return values

    def cuttable(self, node: fx.Node) -> bool:
        """A computed node whose value can become an input: a tensor."""
        return (node.op in ("call_function", "get_attr")
                and isinstance(self.values.get(node.name), torch.Tensor)
                and (_tensor_val(node) or node.op == "get_attr"))

    def live(self, c: Cut) -> list[fx.Node]:
        """The nodes the cut's roots need, in graph order."""
        seen: set[str] = set()
        stack = [name for _, name in c.roots]
        while stack:
            name = stack.pop()
            if name in seen:
                continue
            seen.add(name)
            n = self.by_name[name]
            if n.op == "call_function" and name not in c.cut:
                stack.extend(a.name for a in _arg_nodes(n))
        return [n for n in self.nodes if n.name in seen]

    def computed(self, c: Cut) -> list[fx.Node]:
        """The live nodes the cut computes, in graph order."""
        return [n for n in self.live(c) if n.op == "call_function" and n.name not in c.cut]

    def build(self, c: Cut) -> tuple[fx.GraphModule, list]:
        """The cut as a graph module and its inputs."""
        live = self.live(c)
        g = fx.Graph()
        env: dict[fx.Node, fx.Node] = {}
        inputs: list = []
        # Inputs first: the original placeholders, then the values made inputs (and get_attr
        # constants), in graph order.
        as_input = [n for n in live if n.op == "placeholder"] + [
            n for n in live if n.op == "get_attr" or (n.op == "call_function" and n.name in c.cut)]
        for n in as_input:
            p = g.placeholder(n.name)
            p.meta = copy.copy(n.meta)
            value = self.values[n.name]
            if n.op == "get_attr" and not isinstance(p.meta.get("val"), torch.Tensor):
                p.meta["val"] = _fake_val(value, [m.meta.get("val") for m in self.nodes])
            env[n] = p
            inputs.append(value)
        for n in live:
            if n.op == "call_function" and n.name not in c.cut:
                env[n] = g.node_copy(n, lambda a: env[a])
        outs = [env[self.by_name[name]] for kind, name in c.roots if kind == "out"]
        g.output(tuple(outs))
        gm = fx.GraphModule(torch.nn.Module(), g)
        return gm, inputs

    def frontier(self, c: Cut, k: int) -> Cut:
        """The cut that keeps the computed nodes before position k (among computed ones) and
        returns each of their tensor values that a later node or an output reads."""
        computed = self.computed(c)
        keep = {n.name for n in computed[:k]}
        later = computed[k:]
        outs = {name for kind, name in c.roots if kind == "out"}
        roots: list = []
        for n in computed[:k]:
            if not _tensor_val(n):
                continue
            used = n.name in outs or any(n in _arg_nodes(m) for m in later)
            if used:
                roots.append(("out", n.name))
        roots += [r for r in c.roots if r[0] == "out" and (
            r[1] in keep or self.by_name[r[1]].op != "call_function" or r[1] in c.cut)
            and r not in roots]
        roots += [r for r in c.roots if r[0] == "effect" and r[1] in keep]
        return Cut(c.cut, tuple(roots))


def num_ops(gm: fx.GraphModule) -> int:
    """call_function nodes, getitem left out (a multi-output op's parts are one op)."""
    return sum(1 for n in gm.graph.nodes
               if n.op == "call_function" and n.target is not operator.getitem)


# ---------------------------------------------------------------------------------------------
# Shrinking


def _ddmin(items: list, test: Callable[[list], bool]) -> list:
    """Zeller's delta debugging: a 1-minimal sublist of `items` (test(items) holds) for which
    test holds: dropping any single item breaks it (within the tests made)."""
    n = 2
    while len(items) >= 2:
        size = len(items)
        chunks = [items[i * size // n:(i + 1) * size // n] for i in range(n)]
        chunks = [ch for ch in chunks if ch]
        for ch in chunks:
            if test(ch):
                items, n = ch, 2
                break
        else:
            for i in range(len(chunks)):
                rest = [x for j, ch in enumerate(chunks) if j != i for x in ch]
                if test(rest):
                    items, n = rest, max(n - 1, 2)
                    break
            else:
                if n >= len(items):
                    break
                n = min(len(items), 2 * n)
    return items


class _Budget(Exception):
    pass


class Minifier:
    """Shrinks a cut of `original` for which `test(gm, inputs)` holds (see the module doc)."""

    def __init__(self, gm: fx.GraphModule, inputs: Sequence[Any],
                 test: Callable[[fx.GraphModule, list], Outcome], max_checks: int = 400,
                 time_limit_s: float | None = None):
        self.orig = _Original(gm, inputs)
        self.test = test
        self.max_checks = max_checks
        self.deadline = None if time_limit_s is None else time.monotonic() + time_limit_s
        self.checks = 0
        self.cache: dict[str, Outcome] = {}
        self.state = Cut(frozenset(), self.orig.roots)
        self.outcome: Outcome | None = None

    def _key(self, gm: fx.GraphModule, inputs: list) -> str:
        metas = [(tuple(x.shape), tuple(x.stride()), str(x.dtype)) if isinstance(
            x, torch.Tensor) else repr(x) for x in inputs]
        return gm.code + repr(metas)

    def fails(self, c: Cut) -> bool:
        if not any(k == "out" for k, _ in c.roots) and not any(
                k == "effect" for k, _ in c.roots):
            return False
        gm, inputs = self.orig.build(c)
        key = self._key(gm, inputs)
        if key not in self.cache:
            if self.checks >= self.max_checks or (
                    self.deadline is not None and time.monotonic() > self.deadline):
                raise _Budget()
            self.checks += 1
            self.cache[key] = self.test(gm, inputs)
            log.debug("coil minifier: check %d: %d ops: %s", self.checks, num_ops(gm),
                      "fails" if self.cache[key].failed else "passes")
        out = self.cache[key]
        return out.failed

    def accept(self, c: Cut) -> bool:
        if c == self.state:
            return False
        self.state = c
        return True

    def run(self) -> Cut:
        if not self.fails(self.state):
            raise RuntimeError("coil minifier: the graph does not fail: "
                               + self._outcome(self.state).detail)
        try:
            self._bisect_outputs()
            self._ddmin_roots()
            self._bisect_inputs()
            changed = True
            while changed:
                changed = self._ddmin_computed()
                changed |= self._ddmin_roots()
                changed |= self._drop_output_nodes()
        except _Budget:
            log.warning("coil minifier: stopped after %d checks (max_checks / time limit); "
                        "the graph may shrink further", self.checks)
        self.outcome = self._outcome(self.state)
        return self.state

    def _outcome(self, c: Cut) -> Outcome:
        gm, inputs = self.orig.build(c)
        return self.cache.get(self._key(gm, inputs)) or Outcome(False, "not checked")

    def _bisect_outputs(self) -> bool:
        """The shortest prefix of the computed nodes whose live values, as outputs, fail."""
        n = len(self.orig.computed(self.state))
        lo, hi = 0, n  # frontier(hi) fails (hi = n: the graph itself)
        while lo + 1 < hi:
            mid = (lo + hi) // 2
            if self.fails(self.orig.frontier(self.state, mid)):
                hi = mid
            else:
                lo = mid
        return hi < n and self.accept(self.orig.frontier(self.state, hi))

    def _bisect_inputs(self) -> bool:
        """The longest prefix of the computed nodes that can become inputs."""
        base = self.state

        def cut(j: int) -> Cut:
            names = [n.name for n in self.orig.computed(base) if self.orig.cuttable(n)][:j]
            return Cut(base.cut | frozenset(names), base.roots)

        n = len([x for x in self.orig.computed(base) if self.orig.cuttable(x)])
        lo, hi = 0, n
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.fails(cut(mid)):
                lo = mid
            else:
                hi = mid - 1
        return lo > 0 and self.accept(cut(lo))

    def _ddmin_roots(self) -> bool:
        base = self.state
        roots = list(base.roots)
        if len(roots) < 2:
            return False
        kept = _ddmin(roots, lambda sub: self.fails(Cut(base.cut, tuple(sub))))
        return self.accept(Cut(base.cut, tuple(kept)))

    def _ddmin_computed(self) -> bool:
        """Keeps a 1-minimal set of computed nodes: every other one becomes an input."""
        base = self.state
        names = [n.name for n in self.orig.computed(base) if self.orig.cuttable(n)]
        if not names:
            return False

        def with_kept(sub: list) -> Cut:
            return Cut(base.cut | (frozenset(names) - frozenset(sub)), base.roots)

        if self.fails(with_kept([])):
            return self.accept(with_kept([]))
        kept = _ddmin(names, lambda sub: self.fails(with_kept(sub)))
        return self.accept(with_kept(kept))

    def _drop_output_nodes(self) -> bool:
        """Replaces an output node by the values it reads (drops the graph's last op there)."""
        changed = False
        for root in list(self.state.roots):
            kind, name = root
            node = self.orig.by_name[name]
            if kind != "out" or node.op != "call_function" or name in self.state.cut:
                continue
            new = [r for r in self.state.roots if r != root]
            for a in _arg_nodes(node):
                if (_tensor_val(a) or a.op == "placeholder") and ("out", a.name) not in new:
                    new.append(("out", a.name))
            c = Cut(self.state.cut, tuple(new))
            if self.fails(c):
                changed |= self.accept(c)
        return changed


# ---------------------------------------------------------------------------------------------
# Results


@dataclasses.dataclass(repr=False)
class MinifyResult:
    gm: fx.GraphModule          # the minimal graph
    inputs: list                # its inputs
    kind: str                   # the graph's kind (inference, forward, backward, graph)
    mode: str
    detail: str                 # how the minimal graph fails
    original_ops: int
    checks: int                 # candidate graphs compiled and run
    out_dir: Path | None = None
    graph_text: str = ""        # the coil graph text handed to C++ (graph.txt)

    @property
    def num_ops(self) -> int:
        return num_ops(self.gm)

    def __str__(self) -> str:
        where = f"; repro in {self.out_dir}" if self.out_dir else ""
        return (f"coil minifier: {self.kind} graph of {self.original_ops} ops -> {self.num_ops} "
                f"op(s) after {self.checks} checks ({self.mode}: {self.detail}){where}")

    __repr__ = __str__


def _options_dict(options: Any) -> dict[str, Any]:
    """The options to rebuild in a repro: what differs from the defaults (not the cache,
    debug or runtime-header paths)."""
    from .options import CoilOptions, PYTHON_OPTION_FIELDS, build_options

    if options is None:
        return {}
    if not isinstance(options, CoilOptions):
        options = build_options(options)
    defaults = CoilOptions()
    out: dict[str, Any] = {}
    if options.strict:
        out["strict"] = True
    for name in PYTHON_OPTION_FIELDS:
        if name != "debug" and getattr(options, name) != getattr(defaults, name):
            out[name] = getattr(options, name)
    for name, v in options.extra:
        if name not in ("runtime_headers_dir", "debug_dir", "cache_dir"):
            out[name] = v
    return out


def trace_graph(module: torch.nn.Module, inputs: Sequence[Any]) -> fx.GraphModule:
    """A repro's graph: `module`'s forward (an ATen FX graph's code) traced as it is
    (symbolic_trace records each aten call) with meta["val"] from a FakeTensor run on `inputs`,
    as coil's export needs."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    gm = fx.symbolic_trace(module)
    FakeTensorProp(gm, FakeTensorMode(allow_non_fake_inputs=True)).propagate(*inputs)
    return gm


_REPRO = '''"""coil minifier repro: {what}

{detail_comment}

Rerun:  python {name}            exit status 1 while the failure reproduces, 0 once it does not
        (mode {mode!r}: {mode_doc})
The coil graph text of this graph is graph.txt (what coil handed its C++ core):
        coil-opt graph.txt --emit=cpp       parse, verify, lower, schedule, print the kernels
coil_debug/ is coil's debug dump of it (loop IR, schedule, fusion log, kernels, HTML report).
Minify again (another mode or options):  python -m coil.minifier {name} --mode MODE
"""

import sys
from pathlib import Path

import torch
from torch import device, inf, nan  # noqa: F401  (names the graph code may use)

from coil.minifier import check_graph, trace_graph

MODE = {mode!r}
KIND = {kind!r}
OPTIONS = {options!r}
MATCH = {match!r}


class Repro(torch.nn.Module):
{code}

def load():
    """The graph (traced from Repro with FakeTensor metas) and its inputs."""
    inputs = torch.load(Path(__file__).with_name("{inputs_file}"), weights_only=True)
    return trace_graph(Repro(), inputs), inputs


if __name__ == "__main__":
    gm, inputs = load()
    outcome = check_graph(gm, inputs, MODE, OPTIONS, KIND, MATCH)
    if outcome.failed:
        print(f"coil repro: failure reproduced ({{MODE}}): {{outcome.detail}}")
        sys.exit(1)
    print(f"coil repro: no failure ({{MODE}}): {{outcome.detail}}")
'''

_MODE_DOC = {
    "accuracy": "coil's outputs against eager's by bench/accuracy.py's rule, float64 reference",
    "error": "coil, strict, raises the same error (type and first line, numbers left out)",
}


def _graph_text_and_dump(gm: fx.GraphModule, inputs: list, options: Any, kind: str,
                         mode: str, out_dir: Path) -> str:
    """Compiles the graph once more with coil's debug dump on, into out_dir/coil_debug (one
    graph folder and the HTML report); the graph text coil handed C++ (its 01_graph.txt), else
    export_graph's text."""
    root = out_dir / "coil_debug"
    if root.exists():
        shutil.rmtree(root)
    opts = dataclasses.replace(_options(options, mode), debug=True, debug_dir=str(root))
    try:
        fn = _compile(gm, inputs, opts, kind)
        fn([_clone(x) for x in inputs])
    except Exception:
        pass  # the failure being reproduced
    texts = sorted(root.glob("*/01_graph.txt")) if root.is_dir() else []
    if texts:
        return texts[-1].read_text()
    try:
        from .fx_export import export_graph

        return export_graph(_copy_gm(gm)).text
    except Exception as e:
        return f"# no graph text: export failed: {signature_of(e)}\n"


def write_repro(out_dir: str | Path, gm: fx.GraphModule, inputs: Sequence[Any],
                mode: str, kind: str = "graph", options: Any = None, match: Any = "message",
                detail: str = "", what: str = "", graph_text: bool = True) -> Path:
    """Writes repro.py and inputs.pt (and graph.txt, coil_debug/ with graph_text) to
    out_dir; returns the repro.py path."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    inputs = list(inputs)
    torch.save([x.detach() if isinstance(x, torch.Tensor) else x for x in inputs],
               out / "inputs.pt")
    code = gm.code.strip("\n")
    code = "\n".join(("    " + line) if line.strip() else "" for line in code.splitlines())
    detail_comment = "\n".join(f"    {line}" for line in (detail or "").splitlines()[:20])
    text = _REPRO.format(
        what=what or f"{mode} failure, {kind} graph ({num_ops(gm)} ops)",
        detail_comment=("The failure when minified:\n" + detail_comment) if detail else "",
        name="repro.py", mode=mode, mode_doc=_MODE_DOC[mode], kind=kind,
        options=_options_dict(options), match=match if isinstance(match, str) else "message",
        code=code, inputs_file="inputs.pt")
    path = out / "repro.py"
    path.write_text(text)
    if graph_text:
        (out / "graph.txt").write_text(_graph_text_and_dump(gm, inputs, options, kind, mode, out))
    return path


def minify_graph(gm: fx.GraphModule, inputs: Sequence[Any], mode: str = "accuracy",
                 options: Any = None, kind: str = "graph", out_dir: str | Path | None = None,
                 match: Any = "message", max_checks: int = 400,
                 time_limit_s: float | None = None) -> MinifyResult:
    """Shrinks one ATen FX graph (meta["val"] on its nodes) that fails with `inputs` (real
    tensors) by `mode`; writes the repro folder to out_dir where given. Raises RuntimeError
    when the graph does not fail."""
    if mode not in MODES:
        raise ValueError(f"coil minifier: mode must be one of {MODES}, got {mode!r}")
    inputs = list(inputs)
    first = check_graph(gm, inputs, mode, options, kind, match)
    if not first.failed:
        raise RuntimeError(f"coil minifier: the graph does not fail ({mode}): {first.detail}")
    if mode == "error" and match == "message":
        match = first.signature  # cuts must fail with this error
    test = functools.partial(check_graph, mode=mode, options=options, kind=kind, match=match)
    m = Minifier(gm, inputs, test, max_checks=max_checks, time_limit_s=time_limit_s)
    state = m.run()
    small, small_inputs = m.orig.build(state)
    detail = m.outcome.detail if m.outcome else first.detail
    res = MinifyResult(small, small_inputs, kind, mode, detail, num_ops(gm), m.checks)
    if out_dir is not None:
        out = Path(out_dir)
        write_repro(out, small, small_inputs, mode, kind, options, match, detail)
        res.out_dir = out
        res.graph_text = (out / "graph.txt").read_text()
    log.info("%s", res)
    return res


# ---------------------------------------------------------------------------------------------
# coil.minify: capture the graphs coil receives


@dataclasses.dataclass
class Captured:
    gm: fx.GraphModule           # as compile_aten_graph received it (before its passes)
    kind: str
    options: Any
    example_inputs: list         # what AOTAutograd passed (FakeTensors)
    inputs: list | None = None   # the real inputs of the first call


_capture_lock = threading.RLock()  # one capture at a time (nested ones chain)


def _random_like(x: Any) -> Any:
    """A real tensor for a graph that never ran (its compile raised): seeded random values of
    the example's sizes, strides and dtype."""
    if not isinstance(x, torch.Tensor):
        return x
    sizes = [int(s) for s in x.shape]
    strides = [int(s) for s in x.stride()]
    out = torch.empty_strided(sizes, strides, dtype=x.dtype, device=x.device)
    with torch.no_grad():
        if x.dtype.is_floating_point or x.dtype.is_complex:
            out.copy_(torch.randn(sizes, dtype=x.dtype, device=x.device))
        elif x.dtype == torch.bool:
            out.copy_(torch.randint(0, 2, sizes, device=x.device).bool())
        else:
            out.zero_()
    return out


@contextlib.contextmanager
def capture_graphs():
    """Within the block, every ATen graph coil compiles (backend.compile_aten_graph, the
    forward, backward and inference compilers of coil_backend) is recorded, with the real
    inputs of its first call; yields the list."""
    from . import backend

    captured: list[Captured] = []
    with _capture_lock:
        real = backend.compile_aten_graph

        def capturing(gm, example_inputs, options, kind="graph", *rest):
            entry = Captured(_copy_gm(gm), kind, options, list(example_inputs))
            captured.append(entry)
            fn = real(gm, example_inputs, options, kind, *rest)

            def call(args):
                if entry.inputs is None:
                    entry.inputs = [_clone(a) for a in args]
                return fn(args)

            call._boxed_call = True
            return call

        backend.compile_aten_graph = capturing
        try:
            yield captured
        finally:
            backend.compile_aten_graph = real


def minify(model_or_fn: Callable, *inputs: Any, mode: str = "accuracy",
           options: dict[str, Any] | None = None, out_dir: str | Path = "coil_minify",
           backward: bool = False, match: Any = "message", max_checks: int = 400,
           time_limit_s: float | None = None, save_original: bool = True,
           ) -> MinifyResult | None:
    """Compiles `model_or_fn` with coil (torch.compile, backend coil, `options`) and calls it on
    `inputs` (then .backward() on the sum of its floating outputs with backward=True),
    capturing every ATen graph coil receives; checks them in order by `mode` ("accuracy":
    coil's outputs against eager's by bench/accuracy.py's rule; "error": coil raises in strict
    mode) and shrinks the first failing one (minify_graph). Writes the repro folder to out_dir
    (and the whole failing graph to out_dir/original with save_original). Returns None when no
    graph fails. The run compiles anew (torch._dynamo.reset() first: compiled code of this
    process is dropped), not strict, so that every graph gets real inputs."""
    from .backend import coil_backend

    if mode not in MODES:
        raise ValueError(f"coil minifier: mode must be one of {MODES}, got {mode!r}")
    run_options = dict(options or {})
    run_options["strict"] = False
    torch._dynamo.reset()
    backend_fn = functools.partial(coil_backend, options=run_options)
    compiled = torch.compile(model_or_fn, backend=backend_fn)
    with capture_graphs() as captured:
        try:
            out = compiled(*inputs)
            if backward:
                flat = [t for t in torch.utils._pytree.tree_leaves(out)
                        if isinstance(t, torch.Tensor) and t.requires_grad]
                if flat:
                    sum(t.float().sum() for t in flat).backward()
        except Exception as e:
            log.warning("coil minifier: the compiled run raised (%s); checking the graphs "
                        "captured so far", signature_of(e))
    torch._dynamo.reset()
    out_dir = Path(out_dir)
    for i, cap in enumerate(captured):
        real_inputs = cap.inputs
        if real_inputs is None:  # never called: seeded random inputs
            torch.manual_seed(0)
            real_inputs = [_random_like(x) for x in cap.example_inputs]
        outcome = check_graph(cap.gm, real_inputs, mode, options, cap.kind,
                              "type" if match == "message" else match)
        log.info("coil minifier: graph %d (%s, %d ops): %s", i, cap.kind, num_ops(cap.gm),
                 "fails: " + outcome.detail if outcome.failed else "passes")
        if not outcome.failed:
            continue
        if save_original:
            write_repro(out_dir / "original", cap.gm, real_inputs, mode, cap.kind, options,
                        match if match != "message" else (outcome.signature or match),
                        outcome.detail,
                        what=f"{mode} failure, {cap.kind} graph (the original, "
                             f"{num_ops(cap.gm)} ops)", graph_text=False)
        return minify_graph(cap.gm, real_inputs, mode, options, cap.kind, out_dir, match,
                            max_checks, time_limit_s)
    log.info("coil minifier: none of the %d graph(s) fails (%s)", len(captured), mode)
    return None


# ---------------------------------------------------------------------------------------------
# Command line: python -m coil.minifier DIR/repro.py


def _load_repro(path: Path):
    mod = runpy.run_path(str(path), run_name="coil_repro")
    gm, inputs = mod["load"]()
    return gm, inputs, mod


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m coil.minifier",
        description="Minify a coil repro (repro.py written by coil.minify / minify_graph) "
                    "again, or check it.")
    p.add_argument("repro", help="a repro.py (or the folder holding it)")
    p.add_argument("--mode", choices=MODES, help="default: the repro's")
    p.add_argument("--options", default=None,
                   help="coil options as JSON (default: the repro's)")
    p.add_argument("--out", default=None, help="output folder (default: <repro dir>/min)")
    p.add_argument("--check", action="store_true", help="only check, do not minify")
    p.add_argument("--max-checks", type=int, default=400)
    args = p.parse_args(argv)
    path = Path(args.repro)
    if path.is_dir():
        path = path / "repro.py"
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    gm, inputs, mod = _load_repro(path)
    mode = args.mode or mod["MODE"]
    options = json.loads(args.options) if args.options else mod["OPTIONS"]
    match = mod.get("MATCH", "message") if mode == mod["MODE"] else "message"
    if args.check:
        outcome = check_graph(gm, inputs, mode, options, mod["KIND"], match)
        print(("fails: " if outcome.failed else "passes: ") + outcome.detail)
        return 1 if outcome.failed else 0
    out = Path(args.out) if args.out else path.parent / "min"
    try:
        res = minify_graph(gm, inputs, mode, options, mod["KIND"], out, match,
                           args.max_checks)
    except RuntimeError as e:
        print(e)
        return 0
    print(res)
    print(res.gm.code)
    return 0


if __name__ == "__main__":
    sys.exit(main())
