"""cuBLASLt's algorithms chosen by measurement (option cuda_gemm_measure; the max-autotune modes).

The first product of each shape times the heuristic's first few algorithms on its own operands
and keeps the fastest (runtime/cuda_matmul.cpp: chosen_algorithm); the choice is cached in
memory and on disk. Checked here against a float64 reference on aligned, padded (odd sizes),
transposed, batched and epilogue (bias + GELU) products in bf16 and TF32, with the events coil
records: one measurement per shape, none on the second call, the disk cache in a new process.
Without a GPU the GPU tests skip visibly.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F

C = pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
import coil  # noqa: E402

EPS = {torch.bfloat16: 4e-3, torch.float32: 2e-3}


def _events(how):
    return [e for e in C.gemm_template_events() if e["how"] == how]


class _Precision:
    """TF32 for float32 cases. Every call of a compiled function must run under it: the
    precision is part of Dynamo's guards, so a call outside it compiles a full-float32 product
    (another cuBLASLt key, measured again)."""

    def __init__(self, dtype):
        self.want = "high" if dtype == torch.float32 else "highest"

    def __enter__(self):
        self.old = torch.get_float32_matmul_precision()
        torch.set_float32_matmul_precision(self.want)

    def __exit__(self, *exc):
        torch.set_float32_matmul_precision(self.old)


def _compile_and_check(fn, inputs, dtype, options):
    torch._dynamo.reset()
    coil.reset_report()
    C.clear_gemm_template_events()
    with _Precision(dtype):
        f = torch.compile(fn, backend="coil", dynamic=False, options={"strict": True, **options})
        got = f(*inputs)
        eager = fn(*inputs)
    torch.cuda.synchronize()
    rep = coil.report()
    assert rep.graphs_compiled >= 1 and not rep.graphs_fallen_back, str(rep)
    ref = fn(*[x.double() for x in inputs])
    scale = ref.abs().max().item()
    err = (got.double() - ref).abs().max().item()
    err_eager = (eager.double() - ref).abs().max().item()
    bound = 2 * err_eager + EPS[dtype] * max(scale, 1e-6)
    assert err <= bound, (f"max error {err} (eager's {err_eager}), bound {bound}; "
                          f"events {C.gemm_template_events()}")
    return f


def _mm(a, b):
    return a @ b


def _bmm(a, b):
    return torch.bmm(a, b)


def _linear_gelu(x, w, b):
    return F.gelu(F.linear(x, w, b), approximate="tanh")


def _cases():
    g = torch.Generator().manual_seed(0)

    def r(*shape, dtype):
        return torch.randn(*shape, generator=g).to("cuda", dtype)

    bf, f32 = torch.bfloat16, torch.float32
    return {
        "square bf16": (_mm, (r(2048, 2048, dtype=bf), r(2048, 2048, dtype=bf)), bf),
        "odd tf32 (padded)": (_mm, (r(1000, 1001, dtype=f32), r(1001, 4097, dtype=f32)), f32),
        "transposed bf16": (_mm, (r(1024, 512, dtype=bf).t(), r(1024, 3072, dtype=bf)), bf),
        "batched bf16": (_bmm, (r(48, 512, 64, dtype=bf), r(48, 64, 512, dtype=bf)), bf),
        "bias gelu bf16": (_linear_gelu, (r(4096, 768, dtype=bf), r(3072, 768, dtype=bf),
                                          r(3072, dtype=bf)), bf),
    }


@pytest.mark.gpu
@pytest.mark.parametrize("case", ["square bf16", "odd tf32 (padded)", "transposed bf16",
                                  "batched bf16", "bias gelu bf16"])
def test_measured_algorithm_matches_reference(case, tmp_path):
    fn, inputs, dtype = _cases()[case]
    opts = {"cuda_gemm_measure": True, "cache_dir": str(tmp_path)}
    f = _compile_and_check(fn, inputs, dtype, opts)
    measured = _events("algorithm measured")
    assert len(measured) == 1, C.gemm_template_events()
    e = measured[0]
    print(f"\n{case}: {e['choice']}: {e['detail']}")
    assert e["choice"].startswith("cublaslt#"), e
    index, count = map(int, e["choice"][len("cublaslt#"):].split("/"))
    assert 1 <= count <= 8 and 0 <= index < count, e
    assert e["cublaslt_ms"] > 0, e
    # The same shape again measures nothing and gives the same numbers.
    C.clear_gemm_template_events()
    with _Precision(dtype):
        again, third = f(*inputs), f(*inputs)
    assert not _events("algorithm measured"), C.gemm_template_events()
    torch.testing.assert_close(again, third, rtol=0, atol=0)


# One process per run: the choice of a shape is also kept in the process's memory, so only a
# new process shows what the disk holds. The shape is used by no other test.
_PROCESS = textwrap.dedent("""
    import sys, torch, coil, coil._coil as C
    g = torch.Generator().manual_seed(1)
    a = torch.randn(1536, 2560, generator=g).to("cuda", torch.bfloat16)
    b = torch.randn(2560, 1536, generator=g).to("cuda", torch.bfloat16)
    f = torch.compile(lambda a, b: a @ b, backend="coil",
                      options={"strict": True, "cuda_gemm_measure": True,
                               "cache_dir": sys.argv[1]})
    torch.testing.assert_close(f(a, b).float(), a.float() @ b.float(), rtol=2e-2, atol=2e-1)
    print("EVENTS", [(e["how"], e["choice"]) for e in C.gemm_template_events()
                     if e["how"].startswith("algorithm")])
""")


def _run_process(cache_dir):
    proc = subprocess.run([sys.executable, "-c", _PROCESS, str(cache_dir)],
                          capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert proc.returncode == 0, proc.stderr[-3000:]
    return [x for x in proc.stdout.splitlines() if x.startswith("EVENTS")][0]


@pytest.mark.gpu
def test_algorithm_choice_is_read_from_disk_by_a_new_process(tmp_path):
    first = _run_process(tmp_path)
    assert "('algorithm measured', 'cublaslt#" in first, first
    index = first.split("cublaslt#")[1].split("/")[0]
    second = _run_process(tmp_path)
    assert f"('algorithm disk cache', 'cublaslt#{index}')" in second, (second, first)


@pytest.mark.gpu
@pytest.mark.parametrize("measure", [None, False])
def test_measured_by_default_and_off_by_option(measure, tmp_path):
    """On by default (it won 2% on DistilBERT's and 1% on GPT-2's float32 training steps on an
    H100; docs/decisions.md); the option turns it off."""
    dtype = torch.bfloat16
    opts = {"cache_dir": str(tmp_path)}
    if measure is not None:
        opts["cuda_gemm_measure"] = measure
    a, b = (torch.randn(320, 192, device="cuda", dtype=dtype),  # a shape no other test uses
            torch.randn(192, 448, device="cuda", dtype=dtype))
    _compile_and_check(_mm, (a, b), dtype, opts)
    assert bool(_events("algorithm measured")) == (measure is None), C.gemm_template_events()


def test_max_autotune_measures_algorithms():
    """The max-autotune modes ask for the measurement whatever the default."""
    assert coil.backend.mode_options("max-autotune")["cuda_gemm_measure"]
    assert coil.backend.mode_options("max-autotune-no-cudagraphs")["cuda_gemm_measure"]
