"""Shared pytest fixtures for coil's Python tests.

`fake_coil` installs a stand-in for the C++ extension `coil._coil` (docs/python-binding.md).
Its CompiledGraph.run is an "all-fallback" interpreter: it parses the graph *text* (not the FX
graph) and runs every node through the `fallback(node_index, inputs)` callable handed to
compile, with the inputs taken from the text's argument order and each result checked against
the output metas declared in the text. Comparing such runs with PyTorch eager tests export +
fallback plumbing end to end.
"""

from __future__ import annotations

import os
import re
import sys
import types
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
for p in (ROOT / "python", ROOT / "bench"):
    if str(p) not in sys.path:
        sys.path.insert(0, str(p))

torch.set_num_threads(1)

_DTYPES = {
    "f32": torch.float32, "bf16": torch.bfloat16, "f16": torch.float16, "f64": torch.float64,
    "i64": torch.int64, "i32": torch.int32, "i16": torch.int16, "i8": torch.int8,
    "u8": torch.uint8, "b8": torch.bool,
}
_META = re.compile(
    r"^(?P<dt>[a-z0-9]+)\[(?P<sizes>[^\]]*)\](?:\{(?P<strides>[^}]*)\})?"
    r"(?:\+(?P<off>\d+))?(?:@(?P<dev>\w+))?$"
)
_DECL = re.compile(r"%(\d+): (\S+?\[[^\]]*\](?:\{[^}]*\})?(?:\+\d+)?(?:@\w+)?)")
_REF = re.compile(r"%(\d+)")


def parse_meta(text: str):
    m = _META.match(text)
    assert m, f"bad meta {text!r}"
    ints = lambda s: [int(x) for x in s.split(",")] if s and s.strip() else []
    sizes = ints(m["sizes"])
    strides = ints(m["strides"]) if m["strides"] is not None else None
    if strides is None:
        strides, acc = [0] * len(sizes), 1
        for i in range(len(sizes) - 1, -1, -1):
            strides[i] = acc
            acc *= sizes[i]
    return _DTYPES[m["dt"]], sizes, strides, int(m["off"] or 0), m["dev"] or "cpu"


def _strip_strings(s: str) -> str:
    # String literals could contain '%'; blank them out before scanning for value refs.
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', s)


class ParsedGraph:
    """The bits of graph text the fake runtime needs."""

    def __init__(self, text: str):
        lines = text.splitlines()
        head = lines[0]
        assert head.startswith("graph(") and head.endswith("):"), head
        self.inputs = [(int(i), m) for i, m in _DECL.findall(head[len("graph("):-2])]
        self.nodes = []  # (op, [input ids], [(out id, meta)])
        for line in lines[1:-1]:
            assert line.startswith("  "), line
            if " = " in line.split("(", 1)[0]:
                lhs, rhs = line[2:].split(" = ", 1)
                outs = [(int(i), m) for i, m in _DECL.findall(lhs)]
                assert outs, line
            else:  # a call without outputs: an input mutation, copy_(input, value)
                rhs, outs = line[2:], []
            op, rest = rhs.split("(", 1)
            assert rest.endswith(")"), line
            refs = [int(i) for i in _REF.findall(_strip_strings(rest))]
            self.nodes.append((op, refs, outs))
        last = lines[-1]
        assert last.startswith("  return (") and last.endswith(")"), last
        self.outputs = [int(i) for i in _REF.findall(last)]


class FakeCompiledGraph:
    def __init__(self, text, options, fallback, check_strides=True):
        self.text = text
        self.options = dict(options)
        self.fallback = fallback
        self.graph = ParsedGraph(text)
        self.check_strides = check_strides
        self.artifacts = {
            "input_graph": text, "loop_program": "", "schedule": "", "fusion_log": "",
            "source": "// fake", "compiler_command": "true", "compiler_log": "",
            "fallback_ops": sorted({op for op, _, _ in self.graph.nodes}),
            "timings": [("fake", 0.0)], "num_kernels": 0, "cache_hit": False,
        }
        self.runs = 0

    def run(self, inputs, checked=None):
        g = self.graph
        assert len(inputs) == len(g.inputs), (len(inputs), len(g.inputs))
        env = {}
        for (i, meta), t in zip(g.inputs, inputs):
            assert isinstance(t, torch.Tensor)
            # The runtime reads a tensor that requires grad as data (torch._C._to_dlpack):
            # what the fallback gets has no autograd history, as from the real run.
            t = t.detach()
            dt, sizes, strides, off, _ = parse_meta(meta)
            assert t.dtype == dt and list(t.shape) == sizes, (meta, t.dtype, t.shape)
            assert list(t.stride()) == strides or t.numel() <= 1, (meta, t.stride())
            env[i] = t
        if checked is not None:  # the inputs passed the checks: the caller drops its references
            checked()
        for k, (op, refs, outs) in enumerate(g.nodes):
            res = self.fallback(k, [env[r] for r in refs])
            if not outs:
                continue  # copy_ wrote its input; its result is not a graph value
            assert isinstance(res, list) and len(res) == len(outs), (op, len(res), len(outs))
            for (i, meta), t in zip(outs, res):
                dt, sizes, strides, off, _ = parse_meta(meta)
                assert t.dtype == dt and list(t.shape) == sizes, (op, meta, t.dtype, t.shape)
                if self.check_strides and t.numel() > 1:
                    # Size-1 dims may have any stride in PyTorch.
                    got = [s for s, n in zip(t.stride(), sizes) if n != 1]
                    want = [s for s, n in zip(strides, sizes) if n != 1]
                    assert got == want, (op, meta, t.stride())
                env[i] = t
        self.runs += 1
        return [env[i] for i in g.outputs]

    # coil.set_profiling / profile_report reach every live graph, fakes of earlier tests too.
    def set_profiling(self, on):
        pass

    def profile(self):
        return 0, []


class FakeCoil(types.ModuleType):
    """Stand-in for coil._coil. `compile_error` makes compile raise; `texts` records graphs."""

    def __init__(self):
        super().__init__("coil._coil")

        class CompileError(RuntimeError):
            pass

        class InternalError(RuntimeError):
            pass

        self.CompileError = CompileError
        self.InternalError = InternalError
        self.texts: list[str] = []
        self.options: list[dict] = []
        self.compiled: list[FakeCompiledGraph] = []
        self.compile_error: Exception | None = None

    def compile(self, text, options, fallback):
        self.texts.append(text)
        self.options.append(dict(options))
        if self.compile_error is not None:
            raise self.compile_error
        g = FakeCompiledGraph(text, options, fallback)
        self.compiled.append(g)
        return g

    def lowered_ops(self):
        return []


@pytest.fixture
def fake_coil(monkeypatch):
    import coil

    fake = FakeCoil()
    monkeypatch.setitem(sys.modules, "coil._coil", fake)
    monkeypatch.setattr(coil, "_coil", fake, raising=False)
    for var in ("COIL_STRICT", "COIL_DEBUG", "COIL_DEBUG_DIR"):
        monkeypatch.delenv(var, raising=False)
    coil.reset_report()
    torch._dynamo.reset()
    yield fake
    torch._dynamo.reset()


@pytest.fixture
def real_coil():
    """The real extension, or skip (it is built by the C++ side)."""
    try:
        import coil._coil as C  # noqa: F401
    except ImportError as e:
        pytest.skip(f"coil._coil not built: {e}")
    return C


# Markers. `slow`: long suites (full sweeps, long fuzz runs), run only with COIL_SLOW=1 so CI
# stays well inside its time budget. `gpu`: needs a CUDA device; skipped with a visible reason
# elsewhere, never passed silently.
def pytest_configure(config):
    config.addinivalue_line("markers", "slow: long suite, runs only with COIL_SLOW=1")
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU, skipped visibly without one")


def pytest_collection_modifyitems(config, items):
    run_slow = os.environ.get("COIL_SLOW") == "1"
    has_gpu = torch.cuda.is_available()
    skip_slow = pytest.mark.skip(reason="slow suite: set COIL_SLOW=1 to run it")
    skip_gpu = pytest.mark.skip(reason="no CUDA GPU on this machine")
    for item in items:
        if "slow" in item.keywords and not run_slow:
            item.add_marker(skip_slow)
        if "gpu" in item.keywords and not has_gpu:
            item.add_marker(skip_gpu)
