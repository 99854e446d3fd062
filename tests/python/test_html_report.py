"""The HTML report (python/coil/html_report.py): written by the debug dump per process and by
coil.write_html_report(); graphs, fallbacks and their reasons, kernel sources, the fusion
picture and per-kernel times after profiling; escaped, self-contained, best-effort."""

from __future__ import annotations

import logging
import os
import re
from html.parser import HTMLParser

import pytest
import torch

import coil
from coil import html_report


def f(x):
    # A fused softmax kernel, then erfcx (no lowering: run eagerly, per op) and a reduction.
    return torch.special.erfcx(torch.softmax(x, -1) + 1).sum(-1)


X = torch.rand(4, 8)


@pytest.fixture(autouse=True)
def fresh_report():
    html_report.clear()
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()
    html_report.clear()


class Structure(HTMLParser):
    """Tags, ids, and whatever would load something from elsewhere."""

    VOID = {"meta", "br", "hr", "img", "link", "input", "wbr"}

    def __init__(self, text: str):
        super().__init__()
        self.stack: list[str] = []
        self.errors: list[str] = []
        self.ids: list[str] = []
        self.external: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        if tag in ("script", "link", "iframe", "img"):
            self.external.append(tag)
        for k, v in attrs:
            if k == "id":
                self.ids.append(v)
            if k in ("src", "href") and not (v or "").startswith("#"):
                self.external.append(v)
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_endtag(self, tag):
        if not self.stack or self.stack[-1] != tag:
            self.errors.append(f"</{tag}> closes {self.stack[-1:]}")
        else:
            self.stack.pop()


def _check_page(text: str) -> None:
    s = Structure(text)
    assert not s.errors and not s.stack, (s.errors, s.stack)
    assert len(s.ids) == len(set(s.ids)), "duplicate ids"
    assert not s.external, s.external
    assert "url(" not in text and "@import" not in text


def test_debug_dump_report_and_profile(real_coil, tmp_path):
    dump = tmp_path / "dump"
    cf = torch.compile(f, backend="coil", options={"debug": True, "debug_dir": str(dump)})
    torch.testing.assert_close(cf(X), f(X))
    # The dump wrote the page along with the graph's folder.
    (page,) = dump.glob("report_pid*.html")
    assert page.name == f"report_pid{os.getpid()}.html"
    text = page.read_text()
    name = re.search(r'<section class="graph" id="g-(inference_\d+)">', text).group(1)
    assert "No per-kernel times" in text

    coil.set_profiling(True)
    try:
        for _ in range(3):
            cf(X)
    finally:
        coil.set_profiling(False)
    assert coil.write_html_report() == page  # the dump's page by default
    text = page.read_text()
    _check_page(text)
    # The graph, its op count and compile timings.
    assert f'<a href="#g-{name}">{name}</a>' in text
    assert re.search(r"\d+ coil graph ops, \d+ kernel\(s\), compiled in [\d.]+ m?s", text)
    assert "<td>host_compile</td>" in text
    # The fallback and its reason.
    assert "<li>aten.special_erfcx.default: no lowering</li>" in text
    # Kernels with their source, collapsible.
    assert re.search(r'<details class="kernel"><summary>kernel0 — [\d.]+ (µs|ms)/run</summary>'
                     r'<pre class="source">// kernel0: ', text)
    assert "COIL_KERNEL void COIL_ENTRY(kernel0)" in text
    # The fusion picture: the softmax kernel with its fused buffers and why they joined, the
    # eager op with its graph node, and what reads what.
    fmap = re.search(r'<div class="fusion-map">.*?</div>\n', text, re.S).group(0)
    kernel_box = re.search(r'<div class="box kernel" id="box-[^"]+"><div class="bn">kernel0'
                           r'</div>.*?<ul class="why">(.*?)</ul>', fmap).group(1)
    assert "starts kernel0" in kernel_box and "fused buf" in kernel_box
    assert re.search(r'<div class="box fallback"[^>]*><div class="bn">run eagerly</div>'
                     r'<div>aten.special_erfcx.default</div><div class="muted">graph node: '
                     r'%\d+: f32\[4, 8\] = aten.special_erfcx.default', fmap)
    assert re.search(r"reads buf\d+ \(aten.special_erfcx.default\)", fmap)
    # Per-kernel time after profiling: in the picture, the kernel list and the profile table.
    assert re.search(r'<div class="bn">kernel0</div><div>over \[4\]</div>'
                     r'<div>[\d.]+ (µs|ms)/run, [\d.]+%</div><div class="bar">', fmap)
    assert "Profile: 3 run(s)" in text
    assert re.search(r"<td>kernel kernel0</td><td class=\"n\">[\d.]+</td>", text)
    assert "Slowest kernels and calls" in text


def test_whole_graph_fallback_reason_escaped(fake_coil, tmp_path):
    fake_coil.compile_error = fake_coil.CompileError("no <b>lowering</b> for a & 'b'")
    with pytest.warns(RuntimeWarning, match="runs eagerly"):
        torch.compile(f, backend="coil", options={"debug": True, "debug_dir": str(tmp_path)})(X)
    (page,) = tmp_path.glob("report_pid*.html")
    text = page.read_text()
    _check_page(text)
    assert "<b>lowering</b>" not in text
    assert ("The whole graph ran eagerly: CompileError: no &lt;b&gt;lowering&lt;/b&gt; for a "
            "&amp; &#x27;b&#x27;") in text
    assert re.search(r'<tr><td><a href="#g-inference_\d+">inference_\d+</a></td>'
                     r'<td><span class="eager">ran eagerly</span>', text)


def test_write_without_debug(fake_coil, tmp_path):
    torch.compile(f, backend="coil")(X)
    assert not list(tmp_path.iterdir())
    out = coil.write_html_report(tmp_path / "r" / "report.html")
    text = out.read_text()
    _check_page(text)
    assert re.search(r'id="g-inference_\d+"', text)
    # The fake runs every op through the per-op fallback and says so.
    assert "aten.special_erfcx.default" in text and "1 graph(s) compiled, 0 ran eagerly" in text


def test_report_write_failure_warns_once(fake_coil, tmp_path, caplog):
    # The page's path is taken by a folder: the dump's rewrites fail; one warning, and the
    # forward and backward graphs compile and run.
    (tmp_path / f"report_pid{os.getpid()}.html").mkdir()
    x = X.clone().requires_grad_()
    with caplog.at_level(logging.WARNING, logger="coil"):
        c = torch.compile(f, backend="coil", options={"debug": True, "debug_dir": str(tmp_path)})
        c(x).sum().backward()
    ref = X.clone().requires_grad_()
    f(ref).sum().backward()
    torch.testing.assert_close(x.grad, ref.grad)
    assert coil.report().graphs_compiled == 2
    warned = [r.getMessage() for r in caplog.records if "failed" in r.getMessage()]
    assert len(warned) == 1 and "debug dump to" in warned[0], warned
    assert not list(tmp_path.glob("*.tmp*"))
    with pytest.raises(OSError):  # asked for explicitly, the error reaches the caller
        coil.write_html_report(tmp_path / f"report_pid{os.getpid()}.html")


def test_fusion_boxes_from_texts():
    t = html_report.Texts(
        input_graph="graph(%0: f32[4, 8]):\n  %1: f32[8, 4]{1, 8} = aten.permute.default(%0)\n"
                    "  %2: f32[4, 4] = aten.mm.default(%0, %1)\n  return (%2)\n",
        loop_program="buffers:\n  in0: f32[4, 8] input 0\n  buf1: f32[8, 4]{1, 8} view of in0\n"
                     "buf3: f32[4, 4] = pointwise over (i0 < 4, i1 < 4):\n"
                     "  %0 = load buf2[i0, i1] : f32\n  -> store [i0, i1] %0\n"
                     "extern mm(in0, buf1) -> (buf2)  # aten.mm.default, node 1\n",
        schedule="extern mm aten.mm.default (step0): in0, buf1 -> buf2 -> storage0\n"
                 "kernel0 over [4, 4]:\n  step1 buf3 = pointwise [4, 4] -> storage1\n"
                 "outputs: buf3\n",
        fusion_log="buf3 starts kernel0 over [4, 4]\n",
        runs=2, steps=[("extern mm aten.mm.default (library)", 4e-6), ("kernel kernel0", 2e-6)])
    ext, k = html_report.fusion_boxes(t)
    assert (ext.kind, ext.name, ext.detail, ext.outputs) == ("extern", "mm", "aten.mm.default",
                                                            ["buf2"])
    assert ext.node.startswith("%2: f32[4, 4] = aten.mm.default")
    assert ext.reads == ["in0 (input 0)", "buf1 (view of in0)"]
    assert (k.kind, k.name, k.steps) == ("kernel", "kernel0",
                                        [("buf3", "pointwise [4, 4]", "-> storage1")])
    assert k.reads == ["buf2 (aten.mm.default)"] and k.why == ["buf3 starts kernel0 over [4, 4]"]
    assert (ext.seconds, k.seconds) == (2e-6, 1e-6)
    src = "// prelude\n// kernel0: outer [4]\nvoid k0() {}\n// kernel1: the same code\n"
    assert [n for n, _ in html_report.kernel_sources(src, ["kernel0", "kernel1"])] == [
        "common", "kernel0", "kernel1"]


def test_report_shows_each_pass_and_its_time(real_coil, tmp_path):
    """The graph after each pass that changed it (CompileArtifacts::pass_graphs, the dump's
    01b_* files) and each pass's compile time appear in the page."""
    def g(x, y):
        return torch.exp(x) * y + torch.exp(x) * y  # the cse pass merges the repeat

    dump = tmp_path / "dump"
    torch._dynamo.reset()
    cg = torch.compile(g, backend="coil", options={"debug_dir": str(dump)})
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    torch.testing.assert_close(cg(x, y), g(x, y))
    text = coil.write_html_report(tmp_path / "page.html").read_text()
    after = re.search(r"<details><summary>coil graph after pass cse</summary><pre>(.*?)</pre>",
                      text, re.S)
    assert after is not None
    assert after.group(1).count("aten.exp.default") == 1  # merged: one exp left
    assert "<td>pass:cse</td>" in text and "<td>pass:dce</td>" in text
    # The same from the dump alone (a graph no longer alive): the 01b_* files.
    (folder,) = [p for p in dump.iterdir() if p.is_dir() and "inference" in p.name]
    from coil.html_report import _dumped_pass_graphs

    passes = _dumped_pass_graphs(folder)
    assert [p for p, _ in passes] == ["cse"] and passes[0][1].count("aten.exp.default") == 1
