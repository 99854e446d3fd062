"""coil's CUDA GEMM template against cuBLASLt, shape by shape (mode="max-autotune"'s choice).

For each shape and dtype, compiles `a @ b` with option cuda_gemm_templates into a fresh cache
folder, so that the first call measures: cuBLASLt (as coil runs it) and the template tile
shapes chosen for the problem size, each candidate checked against cuBLASLt's result and timed
on the call's own operands (src/runtime/cuda_matmul.cpp). Prints cuBLASLt's time, the best
template's time and configuration, their ratio, TFLOP/s of both, and what coil chose; with
-v also every candidate's time. torch.matmul's time is printed as a second reference.

Operands are sliced from storage whose rows are padded to 16 bytes (as coil's own buffers are:
the template reads only such operands in place), so odd N (GPT-2's 50257-word head) is
measured too. Shapes are M x N x K; "^T" marks B given as a transposed view (x @ W^T, as
nn.Linear). Runs in well under 2 minutes on an H100 (template kernels compile once per tile
shape and dtype, in parallel).

    python bench/gemm_template.py [-v] [--dtypes bf16,tf32] [--shapes 4096x4096x4096,...]
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

import coil
import coil._coil as C

SHAPES = ["4096x4096x4096", "8192x768x3072", "8192x3072x768^T", "512x50257x768",
          "64x1000x2048", "2048x2048x512", "1000x1000x1000", "16x4096x4096^T"]
DTYPES = {"bf16": torch.bfloat16, "f16": torch.float16, "tf32": torch.float32}


def operand(rows, cols, dtype, col_major=False):
    per = 16 // torch.empty((), dtype=dtype).element_size()
    inner, outer = (rows, cols) if col_major else (cols, rows)
    lead = (inner + per - 1) // per * per
    store = torch.randn(outer, lead, device="cuda", dtype=dtype)
    view = store[:, :inner]
    return view.t() if col_major else view


def torch_ms(a, b, reps=20):
    for _ in range(3):
        a @ b
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    best = float("inf")
    for _ in range(reps):
        start.record()
        a @ b
        end.record()
        end.synchronize()
        best = min(best, start.elapsed_time(end))
    return best


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--dtypes", default="bf16,tf32")
    ap.add_argument("-v", "--verbose", action="store_true", help="every candidate's time")
    args = ap.parse_args()
    torch.set_float32_matmul_precision("high")  # float32 products as TF32, as the template runs
    print(f"device: {torch.cuda.get_device_name()}, torch {torch.__version__}")
    print(f"{'shape':>18} {'dtype':>5} {'cuBLASLt ms':>11} {'template ms':>11} {'best config':>18} "
          f"{'tmpl/blas':>9} {'TF/s blas':>9} {'TF/s tmpl':>9} {'torch ms':>8}  chosen")
    t0 = time.time()
    for tag in args.dtypes.split(","):
        dtype = DTYPES[tag]
        for shape in args.shapes.split(","):
            b_t = shape.endswith("^T")
            m, n, k = map(int, shape.rstrip("^T").split("x"))
            a, b = operand(m, k, dtype), operand(k, n, dtype, col_major=b_t)
            C.clear_gemm_template_events()
            torch._dynamo.reset()
            with tempfile.TemporaryDirectory() as cache:
                f = torch.compile(lambda x, y: x @ y, backend="coil", dynamic=False,
                                  options={"cuda_gemm_templates": True, "cache_dir": cache})
                f(a, b)
                torch.cuda.synchronize()
            events = [e for e in C.gemm_template_events() if e["how"] == "measured"]
            flop = 2.0 * m * n * k
            tms = torch_ms(a, b)
            if not events:
                why = [e["detail"] for e in C.gemm_template_events()] or ["not planned"]
                print(f"{shape:>18} {tag:>5} {'-':>11} {'-':>11} {'-':>18} {'-':>9} {'-':>9} "
                      f"{'-':>9} {tms:8.4f}  no measurement: {why[0]}")
                continue
            e = events[0]
            blas, tmpl = e["cublaslt_ms"], e["template_ms"]
            tf = (lambda ms: flop / ms / 1e9 if ms > 0 else float("nan"))
            ratio = tmpl / blas if tmpl > 0 and blas > 0 else float("nan")
            print(f"{shape:>18} {tag:>5} {blas:11.4f} {tmpl:11.4f} {e['best_template'] or '-':>18} "
                  f"{ratio:9.3f} {tf(blas):9.1f} {tf(tmpl):9.1f} {tms:8.4f}  {e['choice']}")
            if args.verbose:
                print("      " + e["detail"].replace("; ", "\n      "))
    print(f"total {time.time() - t0:.1f} s")


if __name__ == "__main__":
    coil  # the backend registers itself on import
    main()
