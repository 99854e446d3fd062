"""Where a training step's memory goes: per compiler, what the forward leaves alive for the
backward (saved activations) and the peaks of the forward and of the backward, in MiB above
what was live before the step (parameters, inputs, the optimizer's state).

    python bench/train_memory.py --cases resnet50_train,gpt2_train            # on the GPU
    python bench/train_memory.py --cases gpt2_train --size quick --compilers coil,inductor
    python bench/train_memory.py --dashboard hf_t5 --snapshot 12   # a dashboard model's step

bench/gpu.py reports one peak per step; this splits it, to tell a forward that saves more than
Inductor's from a backward that holds its inputs longer.
"""

from __future__ import annotations

import argparse
import copy
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import torch  # noqa: E402

from gpu import Device, _parse_options, compile_model, tf32  # noqa: E402
from gpu_models import CASES  # noqa: E402

MIB = 1 << 20


def live_at_peak(snapshot: dict, top: int, at_end: bool = False) -> list[str]:
    """The largest blocks live when the recorded trace reached its peak (at_end: when it
    ended), with where each was allocated (the innermost Python frames)."""
    events = [e for dev in snapshot["device_traces"] for e in dev]
    live: dict[int, dict] = {}
    total = peak = 0
    peak_live: list[dict] = []
    for e in events:
        if e["action"] == "alloc":
            live[e["addr"]] = e
            total += e["size"]
            if total > peak:
                peak, peak_live = total, list(live.values())
        elif e["action"] == "free_requested" and e["addr"] in live:
            total -= live.pop(e["addr"])["size"]
    if at_end:
        peak, peak_live = total, list(live.values())
    what = "at the trace's end" if at_end else "peak"
    lines = [f"{what} {peak / MIB:.0f} MiB above the trace's start, {len(peak_live)} blocks"]
    by_size: dict[int, int] = {}
    for e in peak_live:
        by_size[e["size"]] = by_size.get(e["size"], 0) + 1
    lines.append("  by size: " + ", ".join(
        f"{s / MIB:.1f} MiB x{n}" for s, n in sorted(by_size.items(), key=lambda kv: -kv[0] * kv[1])[:8]))
    for e in sorted(peak_live, key=lambda e: -e["size"])[:top]:
        frames = [f"{f['filename'].split('/')[-1]}:{f['line']} {f['name']}"
                  for f in e.get("frames", []) if f["filename"].endswith(".py")][:3]
        lines.append(f"  {e['size'] / MIB:8.1f} MiB  " + " <- ".join(frames))
    return lines


def measure(compiler: str, master, inputs, dev: Device, cache_root: str,
            coil_options: dict, snapshot_top: int = 0, loss_of=None) -> dict:
    torch._dynamo.reset()
    model = copy.deepcopy(master).to(dev.device)
    target = compile_model(compiler, model, coil_options, cache_root)
    params = list(model.parameters())
    opt = torch.optim.SGD(params, lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = target(*inputs)
        (loss if loss_of is None else loss_of(loss)).backward()
        opt.step()

    for _ in range(3):  # compile, then reach the steady state (optimizer buffers, caches)
        step()
    torch.cuda.synchronize()
    opt.zero_grad(set_to_none=True)
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    if snapshot_top:
        torch.cuda.memory._record_memory_history(max_entries=200000)
    loss = target(*inputs)
    if loss_of is not None:
        loss = loss_of(loss)
    torch.cuda.synchronize()
    if snapshot_top:  # what the forward left alive: its outputs and saved values
        print(f"{compiler} forward:")
        for line in live_at_peak(torch.cuda.memory._snapshot(), snapshot_top, at_end=True):
            print(line)
        torch.cuda.memory._record_memory_history(enabled=None)
    saved = torch.cuda.memory_allocated() - base
    fw_peak = torch.cuda.max_memory_allocated() - base
    torch.cuda.reset_peak_memory_stats()
    if snapshot_top:
        torch.cuda.memory._record_memory_history(max_entries=200000)
    loss.backward()
    torch.cuda.synchronize()
    if snapshot_top:
        print(f"{compiler} backward:")
        for line in live_at_peak(torch.cuda.memory._snapshot(), snapshot_top):
            print(line)
        torch.cuda.memory._record_memory_history(enabled=None)
    bw_peak = torch.cuda.max_memory_allocated() - base
    grads = torch.cuda.memory_allocated() - base
    del loss, target, model, opt, params
    torch._dynamo.reset()
    return {"saved": saved / MIB, "fw_peak": fw_peak / MIB, "bw_peak": bw_peak / MIB,
            "grads": grads / MIB}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", default="resnet50_train,gpt2_train")
    p.add_argument("--compilers", default="aot_eager,inductor,coil")
    p.add_argument("--size", default="full", choices=["full", "quick"])
    p.add_argument("--coil-options", default="", help="k=v,... passed to coil (as bench/gpu.py)")
    p.add_argument("--snapshot", type=int, default=0, metavar="N",
                   help="print the N largest blocks live at the forward's end and at the "
                        "backward's peak")
    p.add_argument("--dashboard", default="",
                   help="dashboard models instead of --cases (bench/dashboard_models.py: the "
                        "GPU batch, float32 with TF32, dropout off, the dashboard's loss)")
    args = p.parse_args(argv)
    dev = Device("cuda")
    cache_root = tempfile.mkdtemp(prefix="coil-train-memory-")
    print("| case | compiler | saved by forward MiB | forward peak MiB | backward peak MiB "
          "| gradients MiB |")
    print("|---|---|---|---|---|---|")
    for name in (args.dashboard or args.cases).split(","):
        loss_of = None
        if args.dashboard:
            import dashboard
            import dashboard_models

            built = dashboard_models.get(name).build("cuda", "gpu")
            master, inputs, use_tf32 = built.model, tuple(built.inputs), True
            dashboard._no_dropout(master)
            loss_of = dashboard_models.loss_of
        else:
            case = CASES[name]
            master, inputs = case.build(args.size)
            inputs = tuple(x.to(dev.device) for x in inputs)
            use_tf32 = case.tf32
        with tf32(use_tf32):
            for comp in args.compilers.split(","):
                r = measure(comp, master, inputs, dev, cache_root,
                            _parse_options(args.coil_options), args.snapshot, loss_of)
                label = f"{comp} ({args.coil_options})" if comp == "coil" and args.coil_options \
                    else comp
                print(f"| {name} | {label} | {r['saved']:.0f} | {r['fw_peak']:.0f} | "
                      f"{r['bw_peak']:.0f} | {r['grads']:.0f} |", flush=True)
                torch.cuda.empty_cache()
    return 0


if __name__ == "__main__":
    sys.exit(main())
