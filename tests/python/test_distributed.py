"""torch.distributed with coil: DDP (through Dynamo's DDP graph splitting) and FSDP2
(fully_shard per block, each block compiled), two ranks, losses and gradients against the same
wrapping run eagerly, over several steps, in float32 and in bfloat16 autocast, with and without
activation checkpointing inside the compiled blocks. coil runs strict: a graph it did not
compile fails the run, and coil.report() must count the graphs on every rank.

On the CPU the ranks talk through gloo (so CI runs these); on a machine with two GPUs the same
runs use NCCL, one GPU per rank. tests/python/distributed_worker.py is the program both run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")

WORKER = Path(__file__).resolve().parent / "distributed_worker.py"
_port = [29650]


def run_worker(tmp_path: Path, *args: str, timeout: float = 900) -> dict:
    out = tmp_path / "result.json"
    _port[0] += 7
    env = dict(os.environ)
    env.pop("COIL_STRICT", None)
    p = subprocess.run([sys.executable, str(WORKER), *args, "--out", str(out),
                        "--port", str(_port[0])], env=env, capture_output=True, text=True,
                       timeout=timeout)
    assert p.returncode == 0, f"rc {p.returncode}\n{p.stdout[-4000:]}\n{p.stderr[-6000:]}"
    return json.loads(out.read_text())


def check(r: dict, dtype: str) -> None:
    assert not r["graphs_fallen_back"], r["graphs_fallen_back"]
    assert all(n and n > 0 for n in r["graphs_compiled_per_rank"]), r
    tol = 1e-4 if dtype == "fp32" else 5e-2
    for a, b in zip(r["losses_ref"], r["losses_coil"]):
        assert abs(a - b) <= tol * max(1.0, abs(a)), (r["losses_ref"], r["losses_coil"])
    for d, s in zip(r["grad_diff"], r["grad_scale"]):
        assert d <= tol * max(s, 1e-3) + 1e-6, (r["grad_diff"], r["grad_scale"])


needs_gloo = pytest.mark.skipif(not dist.is_available() or not dist.is_gloo_available(),
                                reason="torch.distributed with gloo is not available")
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2 or not dist.is_nccl_available(),
                              reason="needs two CUDA GPUs and NCCL")

CASES = [
    pytest.param("ddp", "fp32", False, id="ddp-fp32"),
    pytest.param("ddp", "bf16", True, id="ddp-bf16-checkpoint"),
    pytest.param("ddp-inner", "fp32", False, id="ddp-sequential-inner"),
    pytest.param("fsdp", "fp32", False, id="fsdp-fp32"),
    pytest.param("fsdp", "bf16", True, id="fsdp-bf16-checkpoint"),
]


@needs_gloo
@pytest.mark.parametrize("wrap,dtype,checkpoint", CASES)
def test_two_ranks_cpu(tmp_path, wrap, dtype, checkpoint):
    args = ["--wrap", wrap, "--device", "cpu", "--dtype", dtype, "--steps", "3"]
    r = run_worker(tmp_path, *args, *(["--checkpoint"] if checkpoint else []))
    check(r, dtype)
    if wrap.startswith("ddp"):
        # Dynamo's DDPOptimizer splits the forward at bucket boundaries: several graphs.
        assert r["graphs_compiled_per_rank"][0] >= 4, r


@pytest.mark.gpu
@two_gpus
@pytest.mark.parametrize("wrap,dtype,checkpoint", CASES + [
    pytest.param("ddp", "fp32", True, id="ddp-fp32-checkpoint"),
    pytest.param("fsdp", "bf16", False, id="fsdp-bf16")])
def test_two_ranks_cuda(tmp_path, wrap, dtype, checkpoint):
    # Step time beside Inductor's, measured in the same run, for two of the cases (Inductor's
    # compile takes most of a case's time).
    timed = (wrap, dtype, checkpoint) in (("ddp", "fp32", False), ("fsdp", "bf16", True))
    args = ["--wrap", wrap, "--device", "cuda", "--dtype", dtype, "--steps", "4",
            *(["--compare-inductor"] if timed else []), *(["--checkpoint"] if checkpoint else [])]
    r = run_worker(tmp_path, *args)
    check(r, dtype)
    if timed:
        print(f"\n{wrap} {dtype} checkpoint={checkpoint}: median step ms {r['step_ms']}")
