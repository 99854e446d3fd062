"""The out-of-tree example plugin (examples/plugin/) is built with cmake + ninja into a temporary
folder, loaded with coil.load_plugin, and used: its op through the graph-text API and through
torch.compile (strict: a fallback would fail), its pass through the `passes` option; results
are compared with eager PyTorch; its backend through the `backend_target` option, and its
pass replayed by coil-opt --plugin. Loading errors (missing file, not a plugin, another coil's
plugin, a taken name) must be clear exceptions. Each check runs in a fresh interpreter: a
plugin stays loaded for the life of its process, and these tests must not change the rest of
the suite's."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "plugin"


def _missing_tools() -> list[str]:
    tools = {"cmake": "cmake", "ninja": "ninja", "C++ compiler": os.environ.get("CXX", "c++")}
    return [name for name, exe in tools.items() if shutil.which(exe) is None]


@pytest.fixture(scope="module")
def plugin_lib(tmp_path_factory) -> Path:
    """The example plugin, built against this tree's headers."""
    missing = _missing_tools()
    if missing:
        pytest.skip(f"cannot build the example plugin: no {', '.join(missing)} on PATH")
    try:
        import coil._coil  # noqa: F401
    except ImportError as e:
        pytest.skip(f"coil._coil not built: {e}")
    build = tmp_path_factory.mktemp("plugin_build")
    subprocess.run(["cmake", "-S", str(EXAMPLE), "-B", str(build), "-G", "Ninja",
                    f"-DCOIL_SOURCE_DIR={ROOT}"], check=True, capture_output=True, text=True)
    proc = subprocess.run(["ninja", "-C", str(build)], capture_output=True, text=True)
    assert proc.returncode == 0, f"the example plugin does not build:\n{proc.stdout[-6000:]}"
    lib = build / "libcoil_example_plugin.so"
    assert lib.exists()
    return lib


def run_isolated(code: str, tmp_path: Path, **env_extra) -> str:
    """Runs `code` in a fresh interpreter (this checkout's coil) and returns its stdout."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "python"), str(EXAMPLE)] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH")
                                                 else []))
    for var in ("COIL_STRICT", "COIL_DEBUG"):
        env.pop(var, None)
    env.update({k: str(v) for k, v in env_extra.items()})
    script = tmp_path / "check.py"
    script.write_text(textwrap.dedent(code))
    proc = subprocess.run([sys.executable, str(script)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"exit {proc.returncode}:\n{proc.stdout[-3000:]}\n" \
                                 f"{proc.stderr[-6000:]}"
    return proc.stdout


def test_graph_text_op_and_pass(plugin_lib, tmp_path):
    """The op lowers (no fallback) and computes what eager does; the plugin's pass runs where
    the `passes` option names it and removes the x * 1."""
    run_isolated(r"""
        import os, torch, coil
        from coil import _coil
        import coil_example

        text = '''graph(%0: f32[4, 33], %1: f32[4, 33]):
          %2: f32[4, 33] = aten.mul.Tensor(%0, 1.0)
          %3: f32[4, 33] = coil_example.scaled_softsign.default(%2, 2.5)
          %4: f32[4, 33] = aten.add.Tensor(%3, %1)
          return (%4)
        '''
        def fallback(*args):
            raise AssertionError("nothing may fall back")
        # Before the plugin: coil does not know the op, which would run through the fallback.
        before = _coil.compile(text, {}, fallback).artifacts["fallback_ops"]
        assert any("coil_example.scaled_softsign.default" in f for f in before), before

        lib = os.environ["PLUGIN"]
        info = coil.load_plugin(lib)
        assert info.name == "coil_example", info
        assert info.ops == ["coil_example.scaled_softsign.default"], info
        assert info.lowerings == info.ops and info.passes == ["coil_example_identity_arith"]
        assert coil.load_plugin(lib) == info  # the same path again: a no-op
        assert [p.name for p in coil.loaded_plugins()] == ["coil_example"]
        assert "coil_example_identity_arith" in _coil.registered_passes()
        assert "coil_example.scaled_softsign.default" in _coil.registered_ops()
        assert "coil_example.scaled_softsign.default" in _coil.lowered_ops()

        x, y = torch.randn(4, 33) * 4, torch.randn(4, 33)
        want = 2.5 * x / (1 + x.abs()) + y
        dump = os.path.abspath("dump")
        g = _coil.compile(text, {"passes": "coil_example_identity_arith,dce",
                                 "debug_dir": dump, "strict": True}, fallback)
        torch.testing.assert_close(g.run([x, y])[0], want)
        art = g.artifacts
        assert not art["fallback_ops"], art["fallback_ops"]
        assert art["num_kernels"] == 1, art["schedule"]  # the op fused with the add
        after = [f for _, _, fs in os.walk(dump) for f in fs if "after_coil_example" in f]
        assert after == ["01b_1_after_coil_example_identity_arith.txt"], after
        after_text = open(next(os.path.join(d, f) for d, _, fs in os.walk(dump) for f in fs
                               if f == after[0])).read()
        # The op reads %0 now; the x * 1 is left dead for dce.
        assert "coil_example.scaled_softsign.default(%0, 2.5)" in after_text, after_text

        # Integer inputs compute in f32 (the meta function's dtype rule), as eager does.
        ints = _coil.compile('''graph(%0: i64[3, 5]):
          %1: f32[3, 5] = coil_example.scaled_softsign.default(%0, -1.5)
          return (%1)
        ''', {"strict": True}, fallback)
        i = torch.randint(-9, 9, (3, 5))
        torch.testing.assert_close(ints.run([i])[0], torch.ops.coil_example.scaled_softsign(i, -1.5))

        # A wrong meta is caught by the plugin's meta function (the verifier uses it).
        bad = text.replace("%3: f32[4, 33] = coil_example", "%3: f32[4, 34] = coil_example")
        try:
            _coil.compile(bad, {"strict": True}, fallback)
            raise SystemExit("a wrong meta compiled")
        except _coil.CompileError as e:
            assert "coil_example.scaled_softsign.default" in str(e), e
        print("ok")
    """, tmp_path, PLUGIN=plugin_lib)


def test_torch_compile_uses_plugin(plugin_lib, tmp_path):
    """torch.compile(backend="coil") with strict=True: the custom op compiles into coil's own
    kernels (no per-op fallback) once the plugin is loaded, forward and backward (the op's
    autograd formula is traced into ATen ops), and matches eager."""
    run_isolated(r"""
        import os, torch, coil
        import coil_example

        class Block(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = torch.nn.Linear(16, 24)

            def forward(self, x):
                h = torch.ops.coil_example.scaled_softsign(self.lin(x), 3.0)
                return torch.ops.coil_example.scaled_softsign(h * 1.0 - 0.25, 0.5)

        torch.manual_seed(0)
        model, x = Block(), torch.randn(8, 16)
        with torch.no_grad():
            want = model(x)

        # Without the plugin the op runs through the per-op fallback.
        coil.reset_report()
        with torch.no_grad():
            torch.testing.assert_close(torch.compile(model, backend="coil")(x), want)
        assert any("coil_example.scaled_softsign" in k for k in coil.report().fallback_ops)

        coil_example.load(os.environ["PLUGIN"])
        torch._dynamo.reset()
        coil.reset_report()
        opts = {"strict": True, "passes": "dce,cse,coil_example_identity_arith,dce"}
        compiled = torch.compile(model, backend="coil", options=opts)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), want)
        r = coil.report()
        assert r.graphs_compiled == 1 and not r.fallback_ops and not r.graphs_fallen_back, r
        print("ok")
    """, tmp_path, PLUGIN=plugin_lib)


def test_plugin_backend(plugin_lib, tmp_path):
    """The plugin's backend "coil_example_portable" (examples/plugin/counting_backend.cpp: the
    portable backend's code under its own name, counting what it builds) is unknown before the
    load, registered by it, selected by backend_target, and compiles and runs a model, forward
    and backward, that matches eager: its counters grow and every graph's source is its own. The
    device's default backend is still coil's cpu backend (the counters do not move)."""
    run_isolated(r"""
        import ctypes, os, torch, coil
        from coil import _coil
        import coil_example

        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                    torch.nn.Linear(32, 4))
        x = torch.randn(8, 16, requires_grad=True)

        def target(dump=None):
            opts = {"strict": True, "backend_target": "coil_example_portable"}
            if dump:
                opts["debug_dir"] = os.path.abspath(dump)
            torch._dynamo.reset()
            return torch.compile(model, backend="coil", options=opts)

        try:  # before the load: an unknown name, with the names that exist
            target()(x)
            raise SystemExit("an unknown backend_target compiled")
        except Exception as e:
            assert "unknown backend_target 'coil_example_portable' (registered: cpu, cuda, " \
                   "portable)" in str(e), e
        assert _coil.registered_backends() == ["cpu", "cuda", "portable"]

        lib = os.environ["PLUGIN"]
        info = coil_example.load(lib)
        assert info.backends == ["coil_example_portable"], info
        assert coil.plugin.registered_backends() == ["cpu", "cuda", "portable",
                                                     "coil_example_portable"]
        # The library coil loaded (ctypes opens the same handle): its counters.
        stats_fn = ctypes.CDLL(lib).coil_example_backend_stats
        def stats():
            m, k = ctypes.c_int64(), ctypes.c_int64()
            stats_fn(ctypes.byref(m), ctypes.byref(k))
            return m.value, k.value
        assert stats() == (0, 0)

        want = model(x)
        want.sum().backward()
        want_grads = [p.grad.clone() for p in model.parameters()] + [x.grad.clone()]
        model.zero_grad()
        x.grad = None

        got = target("dump")(x)
        torch.testing.assert_close(got, want, rtol=1.3e-4, atol=1e-5)
        got.sum().backward()
        for g, w in zip([p.grad for p in model.parameters()] + [x.grad], want_grads):
            torch.testing.assert_close(g, w, rtol=1.3e-4, atol=1e-5)
        modules, kernels = stats()
        sources = sorted(p for p, _, fs in os.walk("dump") if "05_kernels.cpp" in fs)
        assert len(sources) >= 2, sources  # forward and backward
        assert modules == len(sources) and kernels >= modules, (modules, kernels, sources)
        for d in sources:
            code = open(os.path.join(d, "05_kernels.cpp")).read()
            assert code.startswith("// backend coil_example_portable (the coil_example plugin)"
                                   "\n// Generated by coil (backend/portable)"), code[:200]
            assert "#pragma omp" not in code

        # Without backend_target the CPU default compiles: the plugin's backend is not used.
        torch._dynamo.reset()
        with torch.no_grad():
            torch.testing.assert_close(torch.compile(model, backend="coil")(x), want,
                                       rtol=1.3e-4, atol=1e-5)
        assert stats() == (modules, kernels)
        print("ok")
    """, tmp_path, PLUGIN=plugin_lib)


DUP_BACKEND_CPP = r"""
#include "coil/backend/portable/portable_backend.h"
#include "coil/plugin/plugin.h"

COIL_PLUGIN_ABI("dup_backend");

extern "C" COIL_PLUGIN_EXPORT void coil_plugin_register(coil::plugin::Registrar& r) {
  r.add_op("dup_backend.nothing.default", coil::ops::OpFamily::Other, nullptr_meta);
  r.add_backend(coil::backend::portable::make_portable_backend());  // "portable": coil's
}
"""


def test_duplicate_backend_is_an_error(plugin_lib, tmp_path):
    """A plugin registering a backend under a taken name (coil's "portable") is refused with
    an error naming it, and nothing of it is registered (not even its op)."""
    cxx = os.environ.get("CXX", "c++")
    src = tmp_path / "dup.cpp"
    src.write_text(DUP_BACKEND_CPP.replace(
        "nullptr_meta", "[](coil::sym::Context&, const coil::ops::OpCall&) "
                        "{ return std::vector<coil::TensorMeta>{}; }"))
    subprocess.run([cxx, "-std=c++20", "-O1", "-shared", "-fPIC", f"-I{ROOT / 'include'}",
                    "-o", str(tmp_path / "libdup.so"), str(src)], check=True)
    run_isolated(r"""
        import coil
        from coil import _coil

        try:
            coil.load_plugin("libdup.so")
            raise SystemExit("a taken backend name loaded")
        except coil.PluginError as e:
            assert "plugin 'dup_backend': backend 'portable' is already registered" in str(e), e
        assert coil.loaded_plugins() == []
        assert "dup_backend.nothing.default" not in _coil.registered_ops()
        assert _coil.registered_backends() == ["cpu", "cuda", "portable"]
        print("ok")
    """, tmp_path)


def _coil_opt() -> Path:
    """The coil-opt of this checkout's build (COIL_OPT overrides): the newest build/*/coil-opt."""
    if os.environ.get("COIL_OPT"):
        return Path(os.environ["COIL_OPT"])
    found = sorted(ROOT.glob("build/*/coil-opt"), key=lambda p: p.stat().st_mtime)
    if not found:
        pytest.skip("coil-opt is not built (build/*/coil-opt); set COIL_OPT to its path")
    return found[-1]


OPT_GRAPH = """graph(%0: f32[4, 33], %1: f32[4, 33]):
  %2: f32[4, 33] = aten.mul.Tensor(%0, 1.0)
  %3: f32[4, 33] = coil_example.scaled_softsign.default(%2, 2.5)
  %4: f32[4, 33] = aten.add.Tensor(%3, %1)
  return (%4)
"""


def test_coil_opt_replays_plugin_pass(plugin_lib, tmp_path):
    """coil-opt --plugin=PATH loads the plugin before the graph is parsed and the passes are
    named: its pass runs on a graph that uses its op (checked by its meta function), and its
    backend emits the kernels. Without --plugin the pass is unknown."""
    opt = _coil_opt()
    graph = tmp_path / "g.txt"
    graph.write_text(OPT_GRAPH)

    def coil_opt(*args):
        return subprocess.run([str(opt), str(graph), *args], capture_output=True, text=True,
                              timeout=120)

    proc = coil_opt("--passes=coil_example_identity_arith,dce")
    assert proc.returncode == 2 and "unknown pass 'coil_example_identity_arith'" in proc.stderr, \
        proc.stderr

    proc = coil_opt(f"--plugin={plugin_lib}", "--passes=coil_example_identity_arith,dce")
    assert proc.returncode == 0, proc.stderr
    after_pass, after_dce = proc.stdout.split("# after dce\n")
    assert after_pass.startswith("# after coil_example_identity_arith\n"), proc.stdout
    # The pass: the op reads %0, the x * 1 is left dead; dce removes it.
    assert "coil_example.scaled_softsign.default(%0, 2.5)" in after_pass, proc.stdout
    assert "aten.mul.Tensor" in after_pass and "aten.mul.Tensor" not in after_dce, proc.stdout
    assert "coil_example.scaled_softsign.default(%0, 2.5)" in after_dce, proc.stdout

    # The plugin's op is verified with its meta function: a wrong output meta is an error.
    graph.write_text(OPT_GRAPH.replace("%3: f32[4, 33] = coil", "%3: f32[4, 34] = coil"))
    proc = coil_opt(f"--plugin={plugin_lib}")
    assert proc.returncode == 1 and "coil_example.scaled_softsign.default" in proc.stderr, \
        (proc.returncode, proc.stderr)

    graph.write_text(OPT_GRAPH)
    proc = coil_opt(f"--plugin={plugin_lib}", "--emit=coil_example_portable")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("// backend coil_example_portable (the coil_example plugin)"), \
        proc.stdout[:300]
    assert "coil_example_portable" in coil_opt("--emit=nope", f"--plugin={plugin_lib}").stderr

    proc = coil_opt("--help", f"--plugin={plugin_lib}")  # the usage lists the plugin's pass
    assert proc.returncode == 2 and "coil_example_identity_arith" in proc.stderr, proc.stderr

    proc = coil_opt("--plugin=/nonexistent/libnothing.so")
    assert proc.returncode == 1 and "/nonexistent/libnothing.so: no such file" in proc.stderr, \
        proc.stderr


BAD_ABI_C = r"""
#include <stdint.h>
struct AbiInfo { uint32_t struct_size, api_version; uint64_t fingerprint;
                 const char* coil_version; const char* plugin_name; };
static const struct AbiInfo info = {sizeof(struct AbiInfo), API, FINGERPRINT, "0.0.1", "old"};
const struct AbiInfo* coil_plugin_abi(void) { return &info; }
void coil_plugin_register(void* r) { *(volatile int*)0 = 1; /* must never be called */ }
"""


def test_load_errors(plugin_lib, tmp_path):
    """Clear errors, and nothing registered, for each way loading can fail."""
    cc = os.environ.get("CC", "cc")
    if shutil.which(cc) is None:
        pytest.skip(f"no C compiler ({cc}) to build the mismatched plugins")
    # Plugins "built against another coil": another plugin API version; the same version but
    # another ABI fingerprint. They crash if their entry point is ever called.
    from coil import _coil
    current = _coil.plugin_abi()
    for name, api, fp in [("api", current["api_version"] + 1, 0),
                          ("fp", current["api_version"], current["fingerprint"] ^ 1)]:
        src = tmp_path / f"bad_{name}.c"
        src.write_text(BAD_ABI_C.replace("API", str(api)).replace("FINGERPRINT", f"{fp}ull"))
        subprocess.run([cc, "-shared", "-fPIC", "-o", str(tmp_path / f"libbad_{name}.so"),
                        str(src)], check=True)
    # The same plugin under another file name: a second library registering the same names.
    shutil.copy(plugin_lib, tmp_path / "libcopy.so")
    run_isolated(r"""
        import ctypes.util, os, torch, coil
        from coil import _coil

        def error_of(path, kind=coil.PluginError):
            try:
                coil.load_plugin(path)
            except kind as e:
                return str(e)
            raise SystemExit(f"{path} loaded")

        assert "no such file" in error_of("missing/libnothing.so", FileNotFoundError)
        ctypes.CDLL(ctypes.util.find_library("m"))  # loaded: its path is in our maps
        libm_path = next(line.split()[-1] for line in open("/proc/self/maps")
                         if "/libm." in line or "/libm-" in line)
        e = error_of(libm_path)
        assert "is not a coil plugin: it has no coil_plugin_abi symbol" in e, e
        e = error_of("libbad_api.so")
        assert "was built for coil plugin API version" in e and "rebuild it" in e, e
        e = error_of("libbad_fp.so")
        assert "was built against another coil (coil 0.0.1" in e, e
        e = error_of(__file__)
        assert "cannot load it" in e, e
        assert coil.loaded_plugins() == []

        first = coil.load_plugin(os.environ["PLUGIN"])
        e = error_of("libcopy.so")
        assert "plugin 'coil_example': op coil_example.scaled_softsign.default is already " \
               "registered" in e, e
        assert coil.loaded_plugins() == [first]
        assert coil.__version__ == _coil.plugin_abi()["coil_version"]  # pyproject's version
        print("ok")
    """, tmp_path, PLUGIN=plugin_lib)


def test_entry_point_group(plugin_lib, tmp_path):
    """An installed package names its plugin in the `coil.plugins` entry point group:
    load_entry_point_plugins() loads it, once per process."""
    site = tmp_path / "site"
    dist = site / "coil_example_pkg-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: coil-example-pkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[coil.plugins]\ncoil_example = coil_example_pkg:plugin_path\n")
    (site / "coil_example_pkg.py").write_text(
        f"def plugin_path():\n    return {str(plugin_lib)!r}\n")
    run_isolated(r"""
        import sys
        sys.path.insert(0, "site")
        import coil
        from coil.plugin import load_entry_point_plugins

        loaded = load_entry_point_plugins()
        assert [p.name for p in loaded] == ["coil_example"], loaded
        assert load_entry_point_plugins() == []  # once per process
        assert [p.name for p in coil.loaded_plugins()] == ["coil_example"]
        print("ok")
    """, tmp_path)


def test_broken_entry_point_plugin_does_not_stop_compiling(tmp_path):
    """The first compile loads the `coil.plugins` entry points; one that names a missing file
    is reported once as a warning, and the model still compiles (strict makes it an error)."""
    site = tmp_path / "site"
    dist = site / "coil_broken_pkg-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: coil-broken-pkg\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[coil.plugins]\nbroken = coil_broken_pkg:plugin_path\n")
    (site / "coil_broken_pkg.py").write_text(
        "def plugin_path():\n    return '/nonexistent/libbroken.so'\n")
    run_isolated(r"""
        import sys, warnings
        sys.path.insert(0, "site")
        import torch

        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            f = torch.compile(lambda x: torch.tanh(x) * 2, backend="coil")
            x = torch.randn(17)
            torch.testing.assert_close(f(x), torch.tanh(x) * 2)
        assert any("plugin was not loaded" in str(w.message) and "broken" in str(w.message)
                   for w in seen), [str(w.message) for w in seen]
        print("ok")
    """, tmp_path)
