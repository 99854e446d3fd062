"""One self-contained HTML page of what coil did in this process: every graph it compiled (or
ran eagerly), with compile timings, fallbacks and their reasons, the kernels with their source,
a picture of the fusion groups and, once coil.set_profiling(True) ran some steps, the time of
each kernel.

    coil.set_profiling(True); model(x); ...
    coil.write_html_report("report.html")

With debug on (COIL_DEBUG=1 or options {"debug": True}) the dump writes it as well, to
<debug dir>/report_pid<PID>.html, rewritten as graphs are added (GraphDump, debug.py).

What the page keeps per graph is small (names, numbers, reasons: GraphRecord); the long texts
(schedule, fusion log, source) are read when the page is written, from the live compiled graph
(CompiledGraph.artifacts, also its profile()) or else from the graph's dump folder, so that a
process that compiles hundreds of graphs does not hold every source twice.

The fusion picture is drawn from the schedule (03_schedule.txt: kernels in run order and the
loop-IR buffers each computes), the loop IR (which buffers each kernel reads, which graph node
each extern call runs) and the fusion log (why each buffer joined its kernel). Pointwise graph
nodes inlined into a buffer's loop body are not tracked by the compiler, so kernels are shown
by their buffers; extern calls and per-op fallbacks name their graph node.

No scripts, no external style sheets or fonts: collapsible parts are <details>, and every text
from the compiler or the user goes through html.escape.
"""

from __future__ import annotations

import atexit
import dataclasses
import html
import logging
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Callable, Mapping

log = logging.getLogger("coil")

# A text block longer than this is cut in the page (the dump folder has it whole).
MAX_TEXT = 1_000_000


@dataclasses.dataclass
class GraphRecord:
    """What the report keeps of one graph for the life of the process."""

    name: str
    fx_ops: int | None = None          # call_function nodes of the ATen FX graph
    num_ops: int | None = None         # nodes of coil's graph text
    timings: dict[str, float] = dataclasses.field(default_factory=dict)  # stage -> s
    compile_seconds: float = 0.0
    num_kernels: int = 0
    cache_hit: bool = False
    fallback_ops: list[str] = dataclasses.field(default_factory=list)    # "op: reason"
    warnings: list[str] = dataclasses.field(default_factory=list)
    reason: str | None = None          # set where the whole graph ran eagerly
    dump_dir: str | None = None

    @property
    def kind(self) -> str:
        return self.name.rsplit("_", 1)[0]


_records: dict[str, GraphRecord] = {}
_lock = threading.RLock()
# The debug dump's report: its path, and the throttle of its rewrites.
_auto_path: Path | None = None
_auto_last_end = 0.0
_auto_last_cost = 0.0
_auto_dirty = False
_atexit_registered = False


def compile_seconds(timings: Mapping[str, float]) -> float:
    """A graph's compile time: the Python export plus the C++ call (whose stages are parts of
    it), or the C++ stages where the call was not timed."""
    stages = sum(float(t) for k, t in timings.items() if not k.startswith("python_"))
    return float(timings.get("python_export", 0.0)) + float(
        timings.get("python_compile_call", stages))


def count_ops(graph_text: str) -> int | None:
    """Nodes of coil's graph text: the indented lines but the return."""
    if not graph_text:
        return None
    return sum(1 for line in graph_text.splitlines()
               if line.startswith("  ") and not line.startswith("  return"))


def record_compiled(name: str, art: Mapping[str, Any], timings: Mapping[str, float],
                    fx_ops: int | None = None, dump_dir: str | None = None,
                    num_ops: int | None = None) -> GraphRecord:
    if num_ops is None:
        num_ops = count_ops(str(art.get("input_graph") or ""))
    rec = GraphRecord(
        name=name, fx_ops=fx_ops, num_ops=num_ops,
        timings={str(k): float(v) for k, v in timings.items()},
        compile_seconds=compile_seconds(timings),
        num_kernels=int(art.get("num_kernels", 0) or 0),
        cache_hit=bool(art.get("cache_hit", False)),
        fallback_ops=[str(op) for op in art.get("fallback_ops", []) or []],
        warnings=[str(w) for w in art.get("warnings", []) or []],
        dump_dir=dump_dir)
    with _lock:
        _records[name] = rec
    return rec


def record_fallback(name: str, reason: str, fx_ops: int | None = None,
                    dump_dir: str | None = None) -> GraphRecord:
    rec = GraphRecord(name=name, fx_ops=fx_ops, reason=reason, dump_dir=dump_dir)
    with _lock:
        _records[name] = rec
    return rec


def clear() -> None:
    """Forgets the graphs recorded so far and the dump's report (tests)."""
    global _auto_path, _auto_dirty, _auto_last_end, _auto_last_cost
    with _lock:
        _records.clear()
        _auto_path = None
        _auto_dirty = False
        _auto_last_end = _auto_last_cost = 0.0


def records() -> list[GraphRecord]:
    with _lock:
        return list(_records.values())


# ---------------------------------------------------------------------------------------------
# Writing


def default_path() -> Path:
    """The debug dump's report where one was written, else report_pid<PID>.html in the debug
    dir of the current environment (COIL_DEBUG_DIR, default ./coil_debug)."""
    with _lock:
        if _auto_path is not None:
            return _auto_path
    from .options import build_options

    return Path(build_options(None).debug_dir) / f"report_pid{os.getpid()}.html"


def write_html_report(path: str | os.PathLike | None = None) -> Path:
    """Writes the report of every graph of this process (with per-kernel times where
    coil.set_profiling(True) ran some steps); returns the file's path. An OSError reaches the
    caller: unlike the dump's rewrites, this is a request."""
    p = Path(path) if path is not None else default_path()
    text = render()
    p.parent.mkdir(parents=True, exist_ok=True)
    # Whole or not at all: a reader (a browser reloading it) never sees half a page.
    tmp = p.with_name(p.name + f".tmp{os.getpid()}.{threading.get_ident()}")
    try:
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, p)
    except OSError:
        tmp.unlink(missing_ok=True)
        raise
    return p


def after_dump(root: str, on_error: Callable[[OSError], None]) -> None:
    """The dump's rewrite after a graph: best-effort, and throttled so that writing the page
    takes at most about a tenth of the time (a rewrite waits until ten times the last write's
    duration passed; a skipped one is made at exit). A new debug dir is written at once."""
    global _auto_path, _auto_last_end, _auto_last_cost, _auto_dirty, _atexit_registered
    with _lock:
        path = Path(root) / f"report_pid{os.getpid()}.html"
        same = path == _auto_path
        _auto_path = path
        now = time.perf_counter()
        if same and _auto_last_end and now - _auto_last_end < 10 * _auto_last_cost:
            _auto_dirty = True
            if not _atexit_registered:
                atexit.register(_write_at_exit)
                _atexit_registered = True
            return
        _write_auto(on_error)


def _write_auto(on_error: Callable[[OSError], None]) -> None:
    global _auto_last_end, _auto_last_cost, _auto_dirty
    t0 = time.perf_counter()
    try:
        write_html_report(_auto_path)
        _auto_dirty = False
    except OSError as e:
        on_error(e)
    except Exception as e:  # a fault of the report itself must not stop compilation
        _warn_bug(e)
    _auto_last_end = time.perf_counter()
    _auto_last_cost = _auto_last_end - t0


_bug_warned = False


def _warn_bug(e: Exception) -> None:
    global _bug_warned
    if not _bug_warned:
        _bug_warned = True
        log.warning("coil: writing the HTML report failed (%s: %s); compiling without it",
                    type(e).__name__, e)


def _write_at_exit() -> None:
    with _lock:
        if _auto_dirty and _auto_path is not None:
            _write_auto(lambda e: log.debug("coil: HTML report at exit: %s", e))


# ---------------------------------------------------------------------------------------------
# What the page shows of one graph


@dataclasses.dataclass
class Texts:
    input_graph: str = ""
    loop_program: str = ""
    schedule: str = ""
    fusion_log: str = ""
    source: str = ""
    runs: int = 0
    steps: list[tuple[str, float]] = dataclasses.field(default_factory=list)
    # The graph after each pass that changed it: (pass name, graph text), in pipeline order.
    pass_graphs: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    live: bool = False


_DUMP_FILES = {"input_graph": "01_graph.txt", "loop_program": "02_loop_program.txt",
               "schedule": "03_schedule.txt", "fusion_log": "04_fusion_log.txt",
               "source": "05_kernels.cpp"}


def _live_graphs() -> dict[str, Any]:
    try:
        from . import backend

        with backend._lock:
            fns = list(backend._graph_fns)
        return {fn.name: fn for fn in fns}
    except Exception:  # pragma: no cover - the backend failed to import
        return {}


def _texts(rec: GraphRecord, live: Mapping[str, Any]) -> Texts:
    t = Texts()
    fn = live.get(rec.name)
    if fn is not None:
        try:
            art = fn.compiled.artifacts
            for key in _DUMP_FILES:
                setattr(t, key, str(art.get(key) or ""))
            t.pass_graphs = [(str(p), str(g)) for p, g in art.get("pass_graphs") or []]
            runs, steps = fn.compiled.profile()
            t.runs, t.steps = int(runs), [(str(s), float(x)) for s, x in steps]
            t.live = True
            return t
        except Exception as e:  # a fake or freed graph: try the dump
            log.debug("coil: report: graph %s has no artifacts (%s)", rec.name, e)
    if rec.dump_dir:
        for key, filename in _DUMP_FILES.items():
            try:
                setattr(t, key, (Path(rec.dump_dir) / filename).read_text())
            except OSError:
                pass
        t.pass_graphs = _dumped_pass_graphs(Path(rec.dump_dir))
    return t


_PASS_FILE = re.compile(r"^01b_(\d+)_after_(\w+)\.txt$")


def _dumped_pass_graphs(folder: Path) -> list[tuple[str, str]]:
    """The dump's 01b_<k>_after_<pass>.txt files, in pipeline order."""
    found = []
    try:
        for f in folder.iterdir():
            m = _PASS_FILE.match(f.name)
            if m:
                found.append((int(m.group(1)), m.group(2), f.read_text()))
    except OSError:
        return []
    return [(name, text) for _, name, text in sorted(found)]


@dataclasses.dataclass
class Box:
    """One step of the fusion picture: a kernel, a library call or an op run eagerly."""

    kind: str                     # "kernel", "extern" or "fallback"
    name: str                     # kernel0 / addmm
    detail: str = ""              # loop ranges / ATen op
    steps: list[tuple[str, str, str]] = dataclasses.field(default_factory=list)
    outputs: list[str] = dataclasses.field(default_factory=list)
    reads: list[str] = dataclasses.field(default_factory=list)
    node: str = ""                # the graph node an extern runs
    why: list[str] = dataclasses.field(default_factory=list)
    seconds: float | None = None  # profiled, per run


_KERNEL = re.compile(r"^(\w+) over (.*):$")
_STEP = re.compile(r"^  step\d+ (\w+) = (pointwise .*?|reduce .*?)"
                   r"(?: \((local)\)| -> (\w+)(?: \((input mutation)\))?)?$")
_EXTERN = re.compile(r"^extern (\w+)(?: (\S+))? \(step\d+\):(.*?) ->(.*)$")
_BODY = re.compile(r"^(\w+): .*? = (?:pointwise|reduce)")
_VIEW = re.compile(r"^  (\w+): .* view of (\w+)\s*$")
_LOAD = re.compile(r"\bload (\w+)\[")
_LOOP_EXTERN = re.compile(r"^extern \w+\((.*?)\) -> \((.*?)\).*#\s*(.*?), node (\d+)\s*$")


def _loads(loop_program: str) -> tuple[dict[str, set[str]], dict[str, int], dict[str, str]]:
    """Loop IR: buffer -> buffers its body loads; extern output buffer -> graph node index;
    view buffer -> the buffer it views."""
    loads: dict[str, set[str]] = {}
    nodes: dict[str, int] = {}
    views: dict[str, str] = {}
    cur: set[str] | None = None
    for line in loop_program.splitlines():
        m = _VIEW.match(line)
        if m and cur is None:
            views[m.group(1)] = m.group(2)
            continue
        m = _BODY.match(line)
        if m:
            cur = loads.setdefault(m.group(1), set())
            continue
        m = _LOOP_EXTERN.match(line)
        if m:
            for b in re.findall(r"\w+", m.group(2)):
                nodes[b] = int(m.group(4))
            cur = None
            continue
        if cur is not None and line.startswith("  "):
            cur.update(_LOAD.findall(line))
        elif not line.startswith("  "):
            cur = None
    return loads, nodes, views


def fusion_boxes(t: Texts) -> list[Box]:
    """The schedule's steps in run order, each kernel with its buffers, what it reads from
    other steps or the inputs, and the fusion log lines about it."""
    loads, extern_nodes, views = _loads(t.loop_program)
    graph_nodes = [line.strip() for line in t.input_graph.splitlines()
                   if line.startswith("  ") and not line.startswith("  return")]
    boxes: list[Box] = []
    cur: Box | None = None
    for line in t.schedule.splitlines():
        m = _KERNEL.match(line)
        if m:
            cur = Box("kernel", m.group(1), m.group(2))
            boxes.append(cur)
            continue
        m = _STEP.match(line)
        if m and cur is not None:
            buf, what = m.group(1), m.group(2)
            where = ("local" if m.group(3) else
                     f"into {m.group(4)}" if m.group(5) else
                     f"-> {m.group(4)}" if m.group(4) else "")
            cur.steps.append((buf, what, where))
            cur.outputs.append(buf)
            continue
        cur = None
        m = _EXTERN.match(line)
        if m:
            kind, op = m.group(1), m.group(2) or ""
            outs = [o for o in re.findall(r"\w+", m.group(4)) if not o.startswith("storage")]
            box = Box("fallback" if kind == "fallback" else "extern", kind, op,
                      reads=re.findall(r"\w+", m.group(3)), outputs=outs)
            for o in outs:
                k = extern_nodes.get(o)
                if k is not None and 0 <= k < len(graph_nodes):
                    box.node = graph_nodes[k]
                    break
            boxes.append(box)
    produced: dict[str, str] = {}
    for b in boxes:
        for o in b.outputs:
            produced[o] = b.name if b.kind == "kernel" else b.detail or b.name
    for b in boxes:
        if b.kind == "kernel":
            mine = set(b.outputs)
            b.reads = sorted({r for o in b.outputs for r in loads.get(o, ())} - mine,
                             key=_natural)
        # Where each read comes from: another step (by name) or a graph input.
        b.reads = [f"{r} ({produced[r]})" if r in produced else
                   f"{r} (input {r[2:]})" if re.fullmatch(r"in\d+", r) else
                   f"{r} (view of {views[r]})" if r in views else r
                   for r in b.reads]
    for b in boxes:
        if b.kind != "kernel":
            continue
        word = re.compile(rf"\b{re.escape(b.name)}\b")
        b.why = [line for line in t.fusion_log.splitlines() if word.search(line)]
    # Per-kernel time: profile steps "kernel <name> ..."; extern steps in run order.
    if t.runs and t.steps:
        by_kernel: dict[str, float] = {}
        externs: list[float] = []
        for step, secs in t.steps:
            parts = step.split()
            if len(parts) > 1 and parts[0] == "kernel":
                by_kernel[parts[1]] = by_kernel.get(parts[1], 0.0) + secs
            elif parts and parts[0] == "extern":
                externs.append(secs)
        ext_boxes = [b for b in boxes if b.kind != "kernel"]
        for b in boxes:
            if b.kind == "kernel" and b.name in by_kernel:
                b.seconds = by_kernel[b.name] / t.runs
        if len(ext_boxes) == len(externs):
            for b, secs in zip(ext_boxes, externs):
                b.seconds = secs / t.runs
    return boxes


def _natural(s: str) -> tuple:
    return tuple(int(p) if p.isdigit() else p for p in re.split(r"(\d+)", s))


def kernel_sources(source: str, names: list[str]) -> list[tuple[str, str]]:
    """The generated source cut at each kernel's header comment ("// kernel0: ..."): the
    shared part first (named "common"), then one piece per kernel found."""
    if not source:
        return []
    if not names:
        return [("source", source)]
    head = re.compile(r"^// (" + "|".join(re.escape(n) for n in names) + r"): ", re.M)
    cuts = [(m.start(), m.group(1)) for m in head.finditer(source)]
    if not cuts:
        return [("source", source)]
    pieces = []
    if source[:cuts[0][0]].strip():
        pieces.append(("common", source[:cuts[0][0]]))
    for i, (start, name) in enumerate(cuts):
        end = cuts[i + 1][0] if i + 1 < len(cuts) else len(source)
        pieces.append((name, source[start:end]))
    return pieces


# ---------------------------------------------------------------------------------------------
# HTML


def _e(x: Any) -> str:
    return html.escape(str(x), quote=True)


def _ms(seconds: float | None) -> str:
    if seconds is None:
        return ""
    if seconds < 1e-3:
        return f"{seconds * 1e6:.1f} µs"
    return f"{seconds * 1e3:.3f} ms"


def _pre(text: str, cls: str = "") -> str:
    note = ""
    if len(text) > MAX_TEXT:
        note = f"\n… ({len(text) - MAX_TEXT} more characters in the graph's dump folder)"
        text = text[:MAX_TEXT]
    c = f' class="{cls}"' if cls else ""
    return f"<pre{c}>{_e(text)}{_e(note)}</pre>"


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fff}
h1{font-size:1.5em}h2{font-size:1.2em;margin-top:2em;border-bottom:1px solid #ccc}
table{border-collapse:collapse;margin:.5em 0}td,th{border:1px solid #ddd;padding:2px 8px;
text-align:left;vertical-align:top}th{background:#f3f3f3}td.n{text-align:right}
pre{background:#f7f7f7;padding:.5em;overflow:auto;max-height:40em;font-size:12px}
details{margin:.3em 0}summary{cursor:pointer}
.eager{color:#a00}.ok{color:#070}.muted{color:#777}
.fusion-map{display:flex;flex-wrap:wrap;align-items:flex-start;gap:6px;margin:.5em 0}
.box{border:2px solid #4a7bd0;border-radius:6px;padding:4px 8px;background:#eef3fc;
min-width:9em;max-width:28em;font-size:12px}
.box.extern{border-color:#888;background:#f1f1f1}.box.fallback{border-color:#c33;
background:#fdeaea}.box .bn{font-weight:bold}.box ul{margin:2px 0;padding-left:1.2em}
.box .why{color:#555}.arrow{align-self:center;color:#999;font-size:18px}
.bar{height:5px;background:#ddd;margin:2px 0}.bar span{display:block;height:5px;
background:#e08a00}
.legend span{display:inline-block;padding:0 6px;margin-right:6px;border-radius:4px}
"""


def _summary_row(rec: GraphRecord, t: Texts, run_failed: str | None) -> str:
    if rec.reason is not None:
        status = '<span class="eager">ran eagerly</span>'
    elif run_failed:
        status = '<span class="eager">compiled; run failed, eager since</span>'
    else:
        status = '<span class="ok">compiled</span>'
    per_run = ""
    if t.runs and t.steps:
        per_run = _ms(sum(s for _, s in t.steps) / t.runs)
    fb = len(rec.fallback_ops) if rec.reason is None else "whole graph"
    return (f'<tr><td><a href="#g-{_e(rec.name)}">{_e(rec.name)}</a></td><td>{status}</td>'
            f'<td class="n">{_e(rec.fx_ops if rec.fx_ops is not None else "")}</td>'
            f'<td class="n">{_e(rec.num_ops if rec.num_ops is not None else "")}</td>'
            f'<td class="n">{_e(rec.num_kernels if rec.reason is None else "")}</td>'
            f'<td class="n">{_e(fb)}</td>'
            f'<td class="n">{_e(_ms(rec.compile_seconds) if rec.reason is None else "")}</td>'
            f'<td>{"yes" if rec.cache_hit else ""}</td>'
            f'<td class="n">{_e(t.runs or "")}</td><td class="n">{_e(per_run)}</td></tr>')


def _fusion_html(graph: str, boxes: list[Box], total: float | None) -> str:
    if not boxes:
        return '<p class="muted">No schedule (no kernels, or the texts are gone).</p>'
    out = ['<div class="fusion-map">']
    for i, b in enumerate(boxes):
        if i:
            out.append('<div class="arrow">&rarr;</div>')
        out.append(f'<div class="box {b.kind}" id="box-{_e(graph)}-{i}">')
        title = {"kernel": b.name, "extern": f"extern {b.name}"}.get(b.kind, "run eagerly")
        out.append(f'<div class="bn">{_e(title)}</div>')
        if b.detail:
            out.append(f"<div>{_e(('over ' if b.kind == 'kernel' else '') + b.detail)}</div>")
        if b.node:
            out.append(f'<div class="muted">graph node: {_e(b.node)}</div>')
        if b.seconds is not None:
            share = 100.0 * b.seconds / total if total else 0.0
            out.append(f'<div>{_e(_ms(b.seconds))}/run, {share:.1f}%</div>'
                       f'<div class="bar"><span style="width:{min(share, 100.0):.1f}%"></span>'
                       "</div>")
        if b.reads:
            out.append(f'<div class="muted">reads {_e(", ".join(b.reads))}</div>')
        if b.steps:
            out.append("<ul>")
            for buf, what, where in b.steps:
                w = f" ({where})" if where else ""
                out.append(f"<li>{_e(buf)} = {_e(what)}{_e(w)}</li>")
            out.append("</ul>")
        elif b.outputs:
            out.append(f'<div>-&gt; {_e(", ".join(b.outputs))}</div>')
        if b.why:
            shown = b.why[:8]
            more = f"<li>… {len(b.why) - 8} more</li>" if len(b.why) > 8 else ""
            out.append('<ul class="why">' + "".join(f"<li>{_e(w)}</li>" for w in shown)
                       + more + "</ul>")
        out.append("</div>")
    out.append("</div>")
    return "".join(out)


def _graph_html(rec: GraphRecord, t: Texts, run_failed: str | None) -> str:
    out = [f'<section class="graph" id="g-{_e(rec.name)}"><h2>{_e(rec.name)}</h2>']
    facts = [f"kind {rec.kind}"]
    if rec.fx_ops is not None:
        facts.append(f"{rec.fx_ops} FX ops")
    if rec.num_ops is not None:
        facts.append(f"{rec.num_ops} coil graph ops")
    if rec.reason is None:
        facts.append(f"{rec.num_kernels} kernel(s)")
        facts.append(f"compiled in {_ms(rec.compile_seconds)}")
        if rec.cache_hit:
            facts.append("kernel cache hit")
    if rec.dump_dir:
        facts.append(f"dump: {rec.dump_dir}")
    out.append(f"<p>{_e(', '.join(facts))}</p>")
    if rec.reason is not None:
        out.append(f'<p class="eager">The whole graph ran eagerly: {_e(rec.reason)}</p>')
    if run_failed:
        out.append(f'<p class="eager">Ran eagerly after a failed run: {_e(run_failed)}</p>')
    for w in rec.warnings:
        out.append(f'<p class="eager">warning: {_e(w)}</p>')
    if rec.fallback_ops:
        out.append("<h3>Ops run eagerly</h3><ul class=\"fallbacks\">")
        out.extend(f"<li>{_e(op)}</li>" for op in rec.fallback_ops)
        out.append("</ul>")
    if rec.timings:
        out.append("<details><summary>Compile timings</summary><table><tr><th>stage</th>"
                   "<th>ms</th></tr>")
        for stage, secs in rec.timings.items():
            out.append(f'<tr><td>{_e(stage)}</td><td class="n">{secs * 1e3:.3f}</td></tr>')
        out.append("</table></details>")
    if rec.reason is None:
        total = sum(s for _, s in t.steps) / t.runs if t.runs and t.steps else None
        boxes = fusion_boxes(t)
        out.append("<h3>Fusion groups</h3>")
        out.append('<p class="legend"><span class="box">kernel: fused loop-IR buffers</span>'
                   '<span class="box extern">library call</span>'
                   '<span class="box fallback">op run eagerly</span></p>')
        out.append(_fusion_html(rec.name, boxes, total))
        kernel_names = [b.name for b in boxes if b.kind == "kernel"]
        pieces = kernel_sources(t.source, kernel_names)
        if pieces:
            secs = {b.name: b.seconds for b in boxes}
            out.append("<h3>Kernels</h3>")
            for name, text in pieces:
                s = secs.get(name)
                label = name + (f" — {_ms(s)}/run" if s is not None else "")
                out.append(f'<details class="kernel"><summary>{_e(label)}</summary>'
                           f"{_pre(text, 'source')}</details>")
        if t.runs and t.steps:
            out.append(f"<details open><summary>Profile: {t.runs} run(s), "
                       f"{_e(_ms(total))} per run</summary><table class=\"profile\">"
                       "<tr><th>step</th><th>ms/run</th><th>share</th></tr>")
            for step, secs in sorted(t.steps, key=lambda x: -x[1]):
                share = 100.0 * secs / t.runs / total if total else 0.0
                out.append(f'<tr><td>{_e(step)}</td><td class="n">{secs / t.runs * 1e3:.4f}'
                           f'</td><td class="n">{share:.1f}%</td></tr>')
            out.append("</table></details>")
        for title, text in (("Schedule", t.schedule), ("Fusion log", t.fusion_log),
                            ("Loop IR", t.loop_program), ("coil graph", t.input_graph),
                            *((f"coil graph after pass {p}", g) for p, g in t.pass_graphs)):
            if text:
                out.append(f"<details><summary>{_e(title)}</summary>{_pre(text)}</details>")
    out.append("</section>")
    return "\n".join(out)


def render() -> str:
    """The page, from the graphs recorded so far."""
    recs = records()
    live = _live_graphs()
    run_failures: dict[str, str] = {}
    try:
        from . import backend

        for name, reason in backend.report().graphs_fallen_back:
            if reason.startswith("run failed"):
                run_failures.setdefault(name, reason)
    except Exception:  # pragma: no cover
        pass
    texts = {rec.name: _texts(rec, live) for rec in recs}
    n_eager = sum(1 for r in recs if r.reason is not None)
    head = (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
            f"<title>coil report, pid {os.getpid()}</title><style>{_CSS}</style></head><body>"
            f"<h1>coil report</h1><p>Process {os.getpid()}, written "
            f"{_e(time.strftime('%Y-%m-%d %H:%M:%S'))}: {len(recs) - n_eager} graph(s) "
            f"compiled, {n_eager} ran eagerly.</p>")
    out = [head]
    if recs:
        out.append("<table class=\"summary\"><tr><th>graph</th><th>status</th><th>FX ops</th>"
                   "<th>coil ops</th><th>kernels</th><th>ops run eagerly</th>"
                   "<th>compile</th><th>cache hit</th><th>profiled runs</th>"
                   "<th>time/run</th></tr>")
        out.extend(_summary_row(r, texts[r.name], run_failures.get(r.name)) for r in recs)
        out.append("</table>")
        slow = []
        for r in recs:
            t = texts[r.name]
            if t.runs:
                for step, secs in t.steps:
                    if step.startswith(("kernel", "extern")):
                        slow.append((secs / t.runs, r.name, step))
        if slow:
            slow.sort(key=lambda x: -x[0])
            out.append("<h2>Slowest kernels and calls</h2><table class=\"slowest\">"
                       "<tr><th>graph</th><th>step</th><th>ms/run</th></tr>")
            for secs, name, step in slow[:20]:
                out.append(f'<tr><td><a href="#g-{_e(name)}">{_e(name)}</a></td>'
                           f'<td>{_e(step)}</td><td class="n">{secs * 1e3:.4f}</td></tr>')
            out.append("</table>")
        else:
            out.append('<p class="muted">No per-kernel times: call coil.set_profiling(True), '
                       "run the model, then coil.write_html_report().</p>")
    else:
        out.append('<p class="muted">No graph compiled yet.</p>')
    out.extend(_graph_html(r, texts[r.name], run_failures.get(r.name)) for r in recs)
    out.append("</body></html>\n")
    return "\n".join(out)
