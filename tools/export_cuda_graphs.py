#!/usr/bin/env python3
"""Exports model graphs as the CUDA path would compile them, without a GPU.

  python3 tools/export_cuda_graphs.py --cases gpt2_train,resnet50_train --out tests/golden/cuda_models

Each case of bench/gpu_models.py (size "quick" unless --size says otherwise) runs on the CPU through torch.compile(backend=
"coil") with the glue told its graphs are CUDA graphs: CSE and the channels-last training relayout
run as on a GPU. The exported graph text is then re-annotated `@cuda`, so the C++ CUDA emitter
(tests/cpp/backend_cuda: EmitCuda.ModelGraphsEmitAndCompile) can generate, and where NVRTC loads
compile, every kernel of a real model. Not identical to a GPU export: decompositions that look at
the device (scaled-dot-product attention, low-precision batch norm) take their CPU paths.
"""

from __future__ import annotations

import argparse
import re
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
sys.path.insert(0, str(ROOT / "bench"))

_META = re.compile(r"((?:f64|f32|f16|bf16|i64|i32|i16|i8|u8|b8)\[[^\]]*\](?:\{[^}]*\})?(?:\+\d+)?)")


def as_cuda(text: str) -> str:
    """Graph text with every tensor meta and device argument on CUDA."""
    return _META.sub(r"\1@cuda", text).replace("device(cpu)", "device(cuda)")


def export(case: str, out: Path, size: str = "quick") -> list[Path]:
    import torch

    import coil.backend as backend
    from gpu_models import CASES

    # The glue's view of the graph's device (layout, CSE); the C++ compile then fails, which
    # only makes the graph run eagerly: the text is dumped before it.
    backend.coil_cuda.graph_on_cuda = lambda example_inputs: True
    backend.coil_cuda.unavailable_reason = lambda C, options: "exporting only"
    model, inputs = CASES[case].build(size)[:2]
    with tempfile.TemporaryDirectory() as tmp:
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="coil", options={"debug_dir": tmp})
        result = compiled(*inputs)
        if CASES[case].trains:
            result.backward()
        written = []
        for d in sorted(p for p in Path(tmp).iterdir() if p.is_dir()):
            kind = d.name.split("_")[1]  # 000_forward_0_pid... -> forward
            path = out / f"{case}_{kind}.graph"
            path.write_text(as_cuda((d / "01_graph.txt").read_text()))
            written.append(path)
        return written


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="gpt2_train,resnet50_train")
    ap.add_argument("--out", default=str(ROOT / "tests" / "golden" / "cuda_models"))
    ap.add_argument("--size", default="quick", choices=("tiny", "quick", "full"))
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for case in args.cases.split(","):
        for p in export(case, out, args.size):
            print(p)


if __name__ == "__main__":
    main()
