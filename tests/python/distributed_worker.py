"""Two ranks training one model under torch.distributed, eager and compiled with coil side by
side (tests/python/test_distributed.py runs this script in a subprocess of its own).

    python distributed_worker.py --wrap ddp|ddp-inner|fsdp --device cpu|cuda --dtype fp32|bf16
        [--checkpoint] [--steps N] [--out result.json] [--compare-inductor]

Each rank builds the same model twice from one seed: a reference run eagerly and a copy
compiled with coil (strict: any fallback is an error), both wrapped the same way (DDP, or
FSDP2's fully_shard per block then the root). Each step feeds both the same batch, runs forward,
backward and an SGD step, and records the loss and every gradient's largest difference from
the reference's. Rank 0 writes the JSON result: losses, differences, coil.report()'s counts and,
with --compare-inductor, the step time of eager, Inductor and coil measured in this run.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


class Block(torch.nn.Module):
    """A pre-norm MLP block with a residual (LayerNorm, Linear, GELU, Linear)."""

    def __init__(self, dim: int, checkpoint: bool):
        super().__init__()
        self.norm = torch.nn.LayerNorm(dim)
        self.up = torch.nn.Linear(dim, 4 * dim)
        self.down = torch.nn.Linear(4 * dim, dim)
        self.checkpoint = checkpoint

    def body(self, x):
        return self.down(torch.nn.functional.gelu(self.up(self.norm(x))))

    def forward(self, x):
        if self.checkpoint:
            return x + torch.utils.checkpoint.checkpoint(self.body, x, use_reentrant=False)
        return x + self.body(x)


class Model(torch.nn.Module):
    def __init__(self, dim: int = 256, depth: int = 3, checkpoint: bool = False):
        super().__init__()
        self.embed = torch.nn.Linear(16, dim)
        self.blocks = torch.nn.ModuleList(Block(dim, checkpoint) for _ in range(depth))
        self.head = torch.nn.Linear(dim, 8)

    def forward(self, x):
        x = self.embed(x)
        for b in self.blocks:
            x = b(x)
        return self.head(x)


class SequentialModel(torch.nn.Sequential):
    """The same computation as an nn.Sequential (a frame in torch/nn, which Dynamo does not
    compile as a top-level frame: see wrap's "ddp-inner")."""

    def __init__(self, dim: int = 256, depth: int = 3):
        layers = [torch.nn.Linear(16, dim)]
        for _ in range(depth):
            layers += [torch.nn.LayerNorm(dim), torch.nn.Linear(dim, 4 * dim), torch.nn.GELU(),
                       torch.nn.Linear(4 * dim, dim)]
        super().__init__(*layers, torch.nn.Linear(dim, 8))


def wrap(model: torch.nn.Module, how: str, device: torch.device, compile_with: str | None,
         options: dict | None):
    """DDP around the whole model compiled through Dynamo's DDP graph splitting, or FSDP2 per
    block with each block compiled (as FSDP2's documentation does).

    "ddp-inner" compiles the module inside DDP instead of DDP itself: torch.compile(DDP(m))
    compiles nothing, with any backend, when m's forward is PyTorch's own (nn.Sequential):
    Dynamo breaks the graph at DDP's C++ logger, cannot resume inside the inlined call, and
    skips the frames under torch/ that run next (docs/reliability.md). Compiled inside DDP's
    forward, the module still gets Dynamo's DDP graph splitting."""
    if how == "ddp-inner":
        from torch.nn.parallel import DistributedDataParallel as DDP

        ids = [device.index] if device.type == "cuda" else None
        m = DDP(model, device_ids=ids, bucket_cap_mb=1.0)
        if compile_with:
            # (nn.Module.compile would compile Module._call_impl, a frame under torch/ too.)
            m.module = torch.compile(m.module, backend=compile_with, options=options)
        return m
    if how == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP

        # 1 MB buckets (DDP's first bucket is 1 MB; none may be smaller): a block's 2 MB of
        # weights fill more than one, so DDPOptimizer splits the graph into several.
        ids = [device.index] if device.type == "cuda" else None
        m = DDP(model, device_ids=ids, bucket_cap_mb=1.0)
        if compile_with:
            return torch.compile(m, backend=compile_with, options=options)
        return m
    from torch.distributed.fsdp import fully_shard

    for b in model.blocks:
        fully_shard(b)
        if compile_with:
            b.compile(backend=compile_with, options=options)
    fully_shard(model)
    return model


def grads(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    out = {}
    for name, p in model.named_parameters():
        if p.grad is None:
            continue
        g = p.grad
        if hasattr(g, "full_tensor"):  # FSDP2's DTensor shards
            g = g.full_tensor()
        out[name.replace("_orig_mod.", "").replace("module.", "")] = g.detach().float()
    return out


def step(model, opt, x, y, autocast_dtype):
    opt.zero_grad(set_to_none=True)
    with torch.autocast(x.device.type, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        loss = torch.nn.functional.mse_loss(model(x).float(), y)
    loss.backward()
    opt.step()
    return loss.detach().float()


def run_rank(rank: int, world: int, args) -> None:
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(args.port)
    if args.device == "cuda":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        dist.init_process_group("nccl", rank=rank, world_size=world, device_id=device)
    else:
        device = torch.device("cpu")
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    import coil

    autocast_dtype = torch.bfloat16 if args.dtype == "bf16" else None
    torch.manual_seed(0)
    if args.wrap == "ddp-inner":
        base = SequentialModel().to(device)
    else:
        base = Model(checkpoint=args.checkpoint).to(device)
    options = {"strict": True, **json.loads(os.environ.get("COIL_TEST_OPTIONS", "{}"))}
    ref = wrap(copy.deepcopy(base), args.wrap, device, None, None)
    comp = wrap(copy.deepcopy(base), args.wrap, device, "coil", options)
    opt_ref = torch.optim.SGD(ref.parameters(), lr=0.05)
    opt_comp = torch.optim.SGD(comp.parameters(), lr=0.05)
    result = {"losses_ref": [], "losses_coil": [], "grad_diff": [], "grad_scale": []}
    gen = torch.Generator().manual_seed(1234 + rank)
    for _ in range(args.steps):
        x = torch.randn(32, 16, generator=gen).to(device)
        y = torch.randn(32, 8, generator=gen).to(device)
        result["losses_ref"].append(step(ref, opt_ref, x, y, autocast_dtype).item())
        result["losses_coil"].append(step(comp, opt_comp, x, y, autocast_dtype).item())
        gr, gc = grads(ref), grads(comp)
        assert gr.keys() == gc.keys(), (sorted(gr), sorted(gc))
        result["grad_diff"].append(max((gr[k] - gc[k]).abs().max().item() for k in gr))
        result["grad_scale"].append(max(gr[k].abs().max().item() for k in gr))
    rep = coil.report()
    result["graphs_compiled"] = rep.graphs_compiled
    result["graphs_fallen_back"] = [list(x) for x in rep.graphs_fallen_back]
    if args.compare_inductor:
        result["step_ms"] = time_steps(base, args, device, autocast_dtype)
    # Every rank's counts: each compiles its own graphs.
    counts = [None] * world
    dist.all_gather_object(counts, result["graphs_compiled"])
    result["graphs_compiled_per_rank"] = counts
    if rank == 0 and args.out:
        with open(args.out, "w") as f:
            json.dump(result, f)
    dist.barrier()
    dist.destroy_process_group()


def time_steps(base, args, device, autocast_dtype) -> dict[str, float]:
    """Median step time of eager, Inductor and coil, measured in this run, interleaved."""
    models = {}
    for name in ("eager", "inductor", "coil"):
        m = wrap(copy.deepcopy(base), args.wrap, device, None if name == "eager" else name,
                 None)
        models[name] = (m, torch.optim.SGD(m.parameters(), lr=0.01))
    x = torch.randn(32, 16, device=device)
    y = torch.randn(32, 8, device=device)
    for m, o in models.values():
        for _ in range(3):
            step(m, o, x, y, autocast_dtype)
    times = {k: [] for k in models}
    for _ in range(20):
        for name, (m, o) in models.items():
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            t0 = time.perf_counter()
            step(m, o, x, y, autocast_dtype)
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            times[name].append(time.perf_counter() - t0)
    return {k: sorted(v)[len(v) // 2] * 1e3 for k, v in times.items()}


def _entry(rank, world, args):
    try:
        run_rank(rank, world, args)
    except BaseException:
        traceback.print_exc()
        sys.stdout.flush()
        raise


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--wrap", choices=["ddp", "ddp-inner", "fsdp"], default="ddp")
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    p.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--checkpoint", action="store_true")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--port", type=int, default=29600)
    p.add_argument("--out", default="")
    p.add_argument("--compare-inductor", action="store_true")
    args = p.parse_args()
    mp.spawn(_entry, args=(2, args), nprocs=2, join=True)


if __name__ == "__main__":
    main()
