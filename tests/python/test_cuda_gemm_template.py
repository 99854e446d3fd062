"""coil's CUDA GEMM template (src/backend/cuda/gemm_template*.cpp) against torch.matmul.

The template is coil's own matrix-product kernel (mma.sync tensor cores, ldmatrix, cp.async
pipeline) that mode="max-autotune" measures against cuBLASLt (option cuda_gemm_templates).
Here every tile configuration is forced (option cuda_gemm_force) and run through
torch.compile(backend="coil") on products of many shapes: square, tall, skinny, odd sizes
(M, N, K from 1, 7, 33, 127, 255, 1000, 1024, 4097: K not a multiple of BLOCK_K, ragged tile
edges), transposed operands (read in place), batched products, bias / ReLU / GELU-tanh
epilogues, alpha, in bf16, f16 and float32 as TF32. Each result is checked against a float64
reference with an error bound of torch's own (twice eager's error, plus a small fraction of
the largest value), and the events coil records say that the template ran (no fallback to
cuBLASLt). Then the measured choice (first call measures and caches on disk; a second process
reads the cache), and an MLP under mode="max-autotune-no-cudagraphs" against eager.

The template reads operands in place only where each is 16-byte aligned with a leading dim of
a multiple of 16 bytes; odd shapes therefore use operands sliced from padded storage (as
coil's own buffers are), and one test checks that an unaligned operand falls back to cuBLASLt
with the reason recorded.

Without a GPU the GPU tests skip visibly; test_every_config_compiles_with_nvrtc runs on any
machine where libnvrtc can be loaded (NVRTC compile of the generated kernels for sm_90).
A failure prints the shape, the configuration, the dtype, the error and the bound.
"""

from __future__ import annotations

import copy
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

C = pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
import coil  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "tf32": torch.float32}
# Of the largest |reference| value, on top of twice eager's error: room for a different
# accumulation order (and TF32 rounding to nearest where cuBLAS may truncate).
EPS = {torch.bfloat16: 4e-3, torch.float16: 1e-3, torch.float32: 2e-3}


def _configs(tag):
    return C.gemm_template_configs("float32" if tag == "tf32" else str(DTYPES[tag]).split(".")[1])


def _round_up(x, to):
    return (x + to - 1) // to * to


def _operand(rows, cols, dtype, col_major=False, batch=None):
    """A [rows, cols] (or [batch, rows, cols]) operand whose leading dim is padded to 16 bytes,
    row-major or column-major (a transposed view), sliced from larger storage whose padding
    holds NaN: a kernel that read past the operand's edge would show it in the result."""
    per = 16 // torch.empty((), dtype=dtype).element_size()
    lead = () if batch is None else (batch,)
    inner, outer = (rows, cols) if col_major else (cols, rows)
    store = torch.randn(*lead, outer, _round_up(inner, per) + per, device="cuda").to(dtype)
    store[..., inner:] = float("nan")
    view = store[..., :inner]
    return view.transpose(-1, -2) if col_major else view


def _reference(fn, inputs):
    return fn(*[x.double() for x in inputs])


class _TF32:
    """torch's TF32 switch for float32 products (coil follows it: option cuda_allow_tf32)."""

    def __init__(self, on):
        self.on = on

    def __enter__(self):
        self.old = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision("high" if self.on else "highest")

    def __exit__(self, *exc):
        torch.set_float32_matmul_precision(self.old)


def _run(fn, inputs, options):
    torch._dynamo.reset()
    coil.reset_report()
    C.clear_gemm_template_events()
    compiled = torch.compile(fn, backend="coil", dynamic=False,
                             options={"strict": True, **options})
    got = compiled(*inputs)
    torch.cuda.synchronize()
    rep = coil.report()
    assert rep.graphs_compiled >= 1 and not rep.graphs_fallen_back, str(rep)
    return got, C.gemm_template_events()


def _check(fn, inputs, dtype, what, config=None, options=None):
    """Runs fn compiled (config forced unless None) and checks it against float64; returns
    the events coil recorded."""
    opts = dict(options or {})
    if config is not None:
        opts["cuda_gemm_force"] = config
    with _TF32(dtype == torch.float32):
        got, events = _run(fn, inputs, opts)
        eager = fn(*inputs)
    ref = _reference(fn, inputs)
    scale = ref.abs().max().item() if ref.numel() else 0.0
    err = (got.double() - ref).abs().max().item() if ref.numel() else 0.0
    err_eager = (eager.double() - ref).abs().max().item() if ref.numel() else 0.0
    bound = 2 * err_eager + EPS[dtype] * max(scale, 1e-6)
    info = (f"{what}: config {config}, dtype {dtype}, max error {err:.4g} (eager's "
            f"{err_eager:.4g}), bound {bound:.4g}, max |ref| {scale:.4g}; events {events}")
    assert got.shape == ref.shape, info
    assert err <= bound, info
    return events


def _assert_template_ran(events, config, what):
    fallbacks = [e for e in events if e["how"] == "fallback"]
    assert not fallbacks, f"{what}: the template fell back to cuBLASLt: {fallbacks}"
    assert any(e["how"] == "forced" and e["choice"] == config for e in events), \
        f"{what}: no product ran the forced template {config}: events {events}"


def _mm(a, b):
    return a @ b


# --------------------------------------------------------------------------------------------
# Every configuration, on square, tall, skinny and odd shapes (row-major operands)

SHAPES = [
    (128, 128, 128),     # one tile or less
    (1024, 1024, 1024),  # square, many tiles
    (4097, 64, 256),     # tall, ragged last tile row
    (64, 4097, 256),     # wide
    (255, 127, 33),      # odd everything: K tail inside the first k-tile
    (1000, 1000, 4097),  # K not a multiple of BLOCK_K, long K loop
    (7, 1024, 1000),     # skinny M
    (1, 255, 1024),      # one row
    (33, 1, 127),        # one column
    (127, 33, 1),        # K = 1
]


@pytest.mark.gpu
@pytest.mark.parametrize("tag", list(DTYPES))
@pytest.mark.parametrize("index", range(9))
def test_every_config_on_every_shape(tag, index):
    dtype = DTYPES[tag]
    configs = _configs(tag)
    if index >= len(configs):
        pytest.skip(f"{tag} has {len(configs)} configurations")
    config = configs[index]
    for m, n, k in SHAPES:
        a, b = _operand(m, k, dtype), _operand(k, n, dtype)
        what = f"[{m}, {k}] @ [{k}, {n}]"
        events = _check(_mm, (a, b), dtype, what, config)
        _assert_template_ran(events, config, what)


# --------------------------------------------------------------------------------------------
# Operand layouts: A and/or B transposed views read in place, on odd shapes

ODD = [(1000, 1024, 4097), (33, 127, 255), (4097, 7, 1024), (1, 1000, 33)]


@pytest.mark.gpu
@pytest.mark.parametrize("tag", list(DTYPES))
@pytest.mark.parametrize("a_t", [False, True], ids=["A", "At"])
@pytest.mark.parametrize("b_t", [False, True], ids=["B", "Bt"])
def test_transposed_operands(tag, a_t, b_t):
    dtype = DTYPES[tag]
    for config in (_configs(tag)[2], _configs(tag)[-1]):  # a large and the smallest tile
        for m, n, k in ODD:
            a = _operand(m, k, dtype, col_major=a_t)
            b = _operand(k, n, dtype, col_major=b_t)
            what = f"[{m}, {k}]{'^T' if a_t else ''} @ [{k}, {n}]{'^T' if b_t else ''}"
            events = _check(_mm, (a, b), dtype, what, config)
            _assert_template_ran(events, config, what)


# --------------------------------------------------------------------------------------------
# Epilogues: bias row, ReLU, GELU (tanh form), alpha


def _bias(n, dtype):
    # A contiguous 16-byte-aligned row (the epilogue reads it per column).
    return torch.randn(n, device="cuda").to(dtype)


EPILOGUES = {
    "bias": lambda a, b, c: torch.addmm(c, a, b),
    "relu": lambda a, b, c: torch.relu(a @ b),
    "gelu": lambda a, b, c: F.gelu(a @ b, approximate="tanh"),
    "bias_relu": lambda a, b, c: torch.relu(torch.addmm(c, a, b)),
    "bias_gelu": lambda a, b, c: F.gelu(torch.addmm(c, a, b), approximate="tanh"),
    "alpha": lambda a, b, c: torch.addmm(c, a, b, beta=0.0, alpha=0.5),
}


@pytest.mark.gpu
@pytest.mark.parametrize("tag", list(DTYPES))
@pytest.mark.parametrize("epilogue", list(EPILOGUES))
def test_epilogues(tag, epilogue):
    dtype = DTYPES[tag]
    fn = EPILOGUES[epilogue]
    config = _configs(tag)[3]
    for m, n, k in [(512, 768, 1024), (33, 127, 255), (1000, 4097, 64)]:
        a, b, c = _operand(m, k, dtype), _operand(k, n, dtype), _bias(n, dtype)
        if epilogue == "alpha":
            c = torch.full((m, n), float("nan"), device="cuda").to(dtype)  # beta=0: ignored
        what = f"{epilogue} on [{m}, {k}] @ [{k}, {n}]"
        events = _check(fn, (a, b, c), dtype, what, config)
        _assert_template_ran(events, config, what)


# --------------------------------------------------------------------------------------------
# Batched products (bmm), operands strided per batch, transposed


@pytest.mark.gpu
@pytest.mark.parametrize("tag", list(DTYPES))
@pytest.mark.parametrize("b_t", [False, True], ids=["B", "Bt"])
def test_batched(tag, b_t):
    dtype = DTYPES[tag]
    config = _configs(tag)[-2]
    for batch, m, n, k in [(12, 512, 64, 512), (3, 33, 127, 255), (64, 7, 1000, 1)]:
        a = _operand(m, k, dtype, batch=batch)
        b = _operand(k, n, dtype, col_major=b_t, batch=batch)
        what = f"bmm [{batch}, {m}, {k}] @ [{batch}, {k}, {n}]{'^T' if b_t else ''}"
        events = _check(torch.bmm, (a, b), dtype, what, config)
        _assert_template_ran(events, config, what)


# --------------------------------------------------------------------------------------------
# Operands the template does not take: cuBLASLt runs, and the reason is recorded


@pytest.mark.gpu
def test_unaligned_operand_falls_back_to_cublaslt():
    dtype = torch.bfloat16
    a = torch.randn(255, 33, device="cuda").to(dtype)  # leading dim 33: not 16 bytes
    b = _operand(33, 128, dtype)
    config = _configs("bf16")[0]
    events = _check(_mm, (a, b), dtype, "unaligned A", config)
    fallbacks = [e for e in events if e["how"] == "fallback"]
    assert fallbacks and "16-byte" in fallbacks[0]["detail"], events


@pytest.mark.gpu
def test_forcing_an_unknown_config_is_a_clear_error():
    a, b = _operand(64, 64, torch.bfloat16), _operand(64, 64, torch.bfloat16)
    torch._dynamo.reset()
    f = torch.compile(_mm, backend="coil", options={"strict": True, "cuda_gemm_force": "big"})
    with pytest.raises(Exception, match="cuda_gemm_force"):
        f(a, b)


# --------------------------------------------------------------------------------------------
# The measured choice: first call measures (template only where faster than cuBLASLt), the
# disk cache answers a second process


_SECOND_PROCESS = textwrap.dedent("""
    import sys, torch, coil, coil._coil as C
    m, n, k = map(int, sys.argv[2:5])
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    f = torch.compile(lambda a, b: a @ b, backend="coil",
                      options={"strict": True, "cuda_gemm_templates": True,
                               "cache_dir": sys.argv[1]})
    got = f(a, b)
    torch.testing.assert_close(got.float(), (a.float() @ b.float()), rtol=2e-2, atol=2e-1)
    print("EVENTS", [(e["how"], e["choice"]) for e in C.gemm_template_events()])
""")


@pytest.mark.gpu
@pytest.mark.parametrize("shape", [(4096, 4096, 4096), (1000, 4097, 1000), (64, 1000, 2048)])
def test_measured_choice_is_cached_on_disk(shape, tmp_path):
    m, n, k = shape
    dtype = torch.bfloat16
    aligned = k % 8 == 0 and n % 8 == 0
    if aligned:  # contiguous, as the second process makes them (the key has the leading dims)
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(k, n, device="cuda", dtype=dtype)
    else:
        a, b = _operand(m, k, dtype), _operand(k, n, dtype)
    opts = {"cuda_gemm_templates": True, "cache_dir": str(tmp_path)}
    events = _check(_mm, (a, b), dtype, f"measured {shape}", options=opts)
    measured = [e for e in events if e["how"] == "measured"]
    assert len(measured) == 1, events
    e = measured[0]
    print(f"\n{shape}: chose {e['choice']}: cuBLASLt {e['cublaslt_ms']:.4f} ms, best template "
          f"{e['template_ms']:.4f} ms\n  {e['detail']}")
    assert e["cublaslt_ms"] > 0, e
    assert "WRONG" not in e["detail"], f"a candidate disagreed with cuBLASLt: {e}"
    if e["choice"] != "cublaslt":
        assert 0 < e["template_ms"] < e["cublaslt_ms"], e
    # The second call of the same key measures nothing.
    C.clear_gemm_template_events()
    torch._dynamo.reset()
    f = torch.compile(_mm, backend="coil", dynamic=False, options={"strict": True, **opts})
    f(a, b)
    assert not [x for x in C.gemm_template_events() if x["how"] == "measured"]
    # A fresh process (contiguous operands: the same key) reads the choice from
    # <cache_dir>/cuda/gemm.
    if aligned:
        env = dict(os.environ)
        proc = subprocess.run([sys.executable, "-c", _SECOND_PROCESS, str(tmp_path),
                               str(m), str(n), str(k)], capture_output=True, text=True,
                              timeout=600, env=env)
        assert proc.returncode == 0, proc.stderr[-3000:]
        line = [x for x in proc.stdout.splitlines() if x.startswith("EVENTS")][0]
        assert f"('disk cache', '{e['choice']}')" in line, (line, e)


# --------------------------------------------------------------------------------------------
# End to end: an MLP under mode="max-autotune-no-cudagraphs" against eager


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_mlp_max_autotune_matches_eager(dtype):
    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(1024, 4096), torch.nn.GELU(approximate="tanh"),
                              torch.nn.Linear(4096, 1024), torch.nn.ReLU(),
                              torch.nn.Linear(1024, 1000)).cuda().to(dtype)
    x = torch.randn(512, 1024, device="cuda", dtype=dtype)
    torch._dynamo.reset()
    coil.reset_report()
    C.clear_gemm_template_events()
    compiled = torch.compile(mlp, backend="coil", mode="max-autotune-no-cudagraphs")
    with torch.no_grad():
        got = compiled(x)
        got2 = compiled(x)
        want = mlp(x)
        ref = copy.deepcopy(mlp).double()(x.double())
    rep = coil.report()
    assert rep.graphs_compiled >= 1 and not rep.graphs_fallen_back, str(rep)
    events = C.gemm_template_events()
    measured = [e for e in events if e["how"] in ("measured", "disk cache")]
    assert len(measured) >= 3, events  # one per product shape
    for e in measured:
        print(f"\n{e['key']}: {e['choice']} ({e['how']}) cuBLASLt {e['cublaslt_ms']:.4f} ms, "
              f"template {e['template_ms']:.4f} ms")
    err = (got.double() - ref).abs().max().item()
    err_eager = (want.double() - ref).abs().max().item()
    scale = ref.abs().max().item()
    assert err <= 2 * err_eager + EPS[dtype] * scale, \
        f"MLP {dtype}: max error {err} (eager's {err_eager}), max |ref| {scale}; events {events}"
    assert torch.equal(got, got2)


# --------------------------------------------------------------------------------------------
# Any machine with libnvrtc: every configuration compiles for sm_90 (the C++ test
# GemmTemplate.EveryConfigCompilesForSm90 compiles more combinations)


def _nvrtc_options():
    from coil import cuda as coil_cuda

    return {"cuda_nvrtc_path": coil_cuda.nvrtc_path()}


def _nvrtc_missing():
    """The reason NVRTC cannot be loaded, or "" (compiles the smallest kernel to find out)."""
    try:
        C.gemm_template_compile("32x64x64_w4_s4", "bfloat16", True, False, False, 0, 90,
                                _nvrtc_options())
        return ""
    except Exception as e:  # noqa: BLE001 - only a missing compiler skips; else re-raised
        if "no CUDA compiler" in str(e):
            return str(e)
        raise


@pytest.mark.parametrize("tag", list(DTYPES))
def test_every_config_compiles_with_nvrtc(tag):
    missing = _nvrtc_missing()
    if missing:
        pytest.skip(f"NVRTC not available: {missing}")
    dtype = {"bf16": "bfloat16", "f16": "float16", "tf32": "float32"}[tag]
    for i, config in enumerate(_configs(tag)):
        # The four operand layouts spread over the configurations, bias + GELU epilogue.
        name, size = C.gemm_template_compile(config, dtype, bool(i & 1), bool(i & 2), True, 2,
                                             90, _nvrtc_options())
        assert name.startswith("coil_gemm_" + config) and size > 1000, (config, name, size)


# --------------------------------------------------------------------------------------------
# Any machine with g++: the kernel's own text run on the host (gemm_template_emulator.cpp:
# threads for the GPU threads, the PTX functions emulated from the ISA's fragment layouts,
# cp.async copies landing late or early), against a float64 reference, with shared-memory,
# global-read and store bounds checked. What it cannot show: timing, and the hardware's own
# reading of the PTX (the GPU tests above).

_EMULATOR = os.path.join(os.path.dirname(__file__), "gemm_template_emulator.cpp")
# Of the largest |reference| value: the output rounding of the dtype (a half ulp) and float
# accumulation.
_EMU_TOL = {"bfloat16": 5e-3, "float16": 1e-3, "float32": 1e-4}
_EMU_CASES = [
    # (config index, A layout, B layout, epilogue (bias, activation, alpha), shapes m x n x k x b)
    (0, True, False, (True, 2, 1.0), ["130x260x40x1", "1x1x1x1"]),
    (1, False, True, (False, 1, 1.0), ["260x130x33x1"]),
    (2, True, True, (True, 0, 1.0), ["129x129x70x1"]),
    (3, False, False, (False, 0, 0.5), ["127x255x97x2"]),
    (4, True, False, (False, 2, 1.0), ["200x70x129x1"]),
    (5, False, True, (True, 1, 1.0), ["70x200x65x1"]),
    (6, True, True, (False, 0, 1.0), ["65x65x200x3", "7x1x33x1"]),
    (7, False, False, (True, 2, 1.0), ["33x70x100x2", "1x33x7x1"]),
    (8, True, True, (True, 1, 1.0), ["17x130x70x2", "16x64x64x1"]),
    (8, False, False, (False, 2, 2.0), ["5x65x33x1"]),
]


def _gxx():
    from shutil import which

    return which("g++")


def _build_emulation(parts, path):
    src = (f'#define EMU_PART 1\n#include "{_EMULATOR}"\n' + parts["preamble"]
           + parts["constants"] + f'#undef EMU_PART\n#define EMU_PART 2\n#include "{_EMULATOR}"\n'
           + parts["kernel"] + f'#undef EMU_PART\n#define EMU_PART 3\n#include "{_EMULATOR}"\n')
    path.with_suffix(".cpp").write_text(src)
    proc = subprocess.run(["g++", "-std=c++20", "-O1", "-pthread", "-Wno-unknown-pragmas",
                           str(path.with_suffix(".cpp")), "-o", str(path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-5000:]


# One case per dtype by default (each builds a program: seconds of g++), every case with
# COIL_SLOW=1 (f16 on every other: it shares bf16's code but for the conversions).
_EMU_QUICK = {("bfloat16", 0), ("float32", 3), ("float16", 6), ("bfloat16", 8)}
_EMU_PARAMS = [
    pytest.param(dtype, case, id=f"{dtype}-{case}",
                 marks=() if (dtype, case) in _EMU_QUICK else pytest.mark.slow)
    for dtype in ("bfloat16", "float16", "float32") for case in range(len(_EMU_CASES))
    if not (dtype == "float16" and case % 2)
]


@pytest.mark.parametrize("dtype,case", _EMU_PARAMS)
def test_emulated_kernel(dtype, case, tmp_path):
    if not _gxx():
        pytest.skip("no g++ to build the host emulation")
    index, a_k, b_k, (bias, act, alpha), shapes = _EMU_CASES[case]
    config = C.gemm_template_configs(dtype)[index]
    parts = C.gemm_template_source_parts(config, dtype, a_k, b_k, bias, act)
    binary = tmp_path / "emu"
    _build_emulation(parts, binary)
    for shape in shapes:
        m, n, k, batch = shape.split("x")
        for late in ("1", "0"):
            what = (f"{config} {dtype} A {'K' if a_k else 'M'}-contiguous, B "
                    f"{'K' if b_k else 'N'}-contiguous, bias {bias}, activation {act}, alpha "
                    f"{alpha}, [{batch}] {m} x {n} x {k}, cp.async {'late' if late == '1' else 'early'}")
            proc = subprocess.run([str(binary), m, n, k, batch, str(int(bias)), str(act),
                                   str(alpha), late, str(parts["smem_bytes"])],
                                  capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, f"{what}: {proc.stdout[-2000:]} {proc.stderr[-2000:]}"
            fields = proc.stdout.split()
            err, ref = float(fields[1]), float(fields[3])
            assert err <= _EMU_TOL[dtype] * max(ref, 1e-6), \
                f"{what}: max error {err}, max |ref| {ref}"
