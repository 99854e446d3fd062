"""Compile time of symbolic graphs against the same graphs with static sizes (issue 5: at most
1.5x), on the C++ pipeline alone (graph text -> coil._coil.compile, no Dynamo): a cat of 16 and
64 pieces times 2 (`max_pointwise_cat` 8, the default: a Cat extern; 1000: the where-chain it
replaced), 80 reshapes [a, b, 16] -> [a*b, 16] -> [a, b*16] -> ... with an add between, and
resnet18_eval (bench/models.py, test width, 2x3x32x32) as Dynamo hands it to coil with
`dynamic=False` and `dynamic=True` (batch and image side symbolic; its graph text is taken from
a debug dump of one torch.compile call, and that call's `python_export` is printed too).
Each compile gets an empty kernel cache (g++ runs every time); best of --reps; g++ as CPU
time. The tests check
deterministic proxies of the same (tests/python/test_dynamic_shapes.py); this prints seconds.

  PYTHONPATH=python python bench/dynamic_compile.py [--reps 3] [--no-resnet]
"""

from __future__ import annotations

import argparse
import resource
import tempfile


def cat_text(n: int, symbolic: bool) -> str:
    """torch.cat of n [len_k, 8] pieces, times 2; symbolic lengths s0..s(n-1) or static ones."""
    lens = [f"s{k}" if symbolic else str(2 + k % 5) for k in range(n)]
    total = " + ".join(lens) if symbolic else str(sum(2 + k % 5 for k in range(n)))
    hdr = ", ".join(f"%{k}: f32[{t}, 8]" for k, t in enumerate(lens))
    args = ", ".join(f"%{k}" for k in range(n))
    return (f"graph({hdr}):\n  %{n}: f32[{total}, 8] = aten.cat.default([{args}])\n"
            f"  %{n + 1}: f32[{total}, 8] = aten.mul.Tensor(%{n}, 2.0)\n  return (%{n + 1})\n")


def reshape_chain_text(symbolic: bool) -> str:
    """80 views [a, b, 16] -> [a*b, 16] -> [a, b*16] -> ... with an add between; the sizes as
    the type shows them and as view's size argument takes them."""
    a, b, ab, b16 = ("a", "b", "a*b", "b*16") if symbolic else ("6", "5", "30", "80")
    arg = (lambda d: f"sym({d})") if symbolic else (lambda d: d)
    shapes = [[ab, "16"], [a, b16], [a, b, "16"]]
    lines, v = [], 0
    for i in range(81):
        dims = shapes[i % 3] if i < 80 else [a, b, "16"]
        args = ", ".join(d if d == "16" else arg(d) for d in dims)
        lines.append(f"  %{v + 1}: f32[{', '.join(dims)}] = aten.view.default(%{v}, [{args}])")
        v += 1
        if i < 80:
            lines.append(f"  %{v + 1}: f32[{', '.join(dims)}] = aten.add.Tensor(%{v}, 1.0)")
            v += 1
    return f"graph(%0: f32[{a}, {b}, 16]):\n" + "\n".join(lines) + f"\n  return (%{v})\n"


def resnet18_eval_texts() -> tuple[str, str, dict]:
    """(static graph text, dynamic graph text, {mode: python_export seconds}) of resnet18_eval
    as torch.compile hands it to coil, each from the debug dump of one compile."""
    import glob
    import json
    import os
    import sys

    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import models as zoo

    model, _ = zoo.MODELS["resnet18_eval"][0]("test")
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    texts, export = {}, {}
    for dynamic in (False, True):
        torch._dynamo.reset()
        dump = tempfile.mkdtemp(prefix="coil-dc-dump-")
        opts = {"cache_dir": tempfile.mkdtemp(prefix="coil-dc-"), "debug": True,
                "debug_dir": dump}
        with torch.no_grad():
            torch.compile(model.eval(), backend="coil", dynamic=dynamic, options=opts)(x)
        d = sorted(glob.glob(os.path.join(dump, "*")))[0]
        texts[dynamic] = open(os.path.join(d, "01_graph.txt")).read()
        export["dynamic" if dynamic else "static"] = json.load(
            open(os.path.join(d, "timings.json")))["python_export"]
    return texts[False], texts[True], export


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def compile_once(text: str, extra: dict) -> tuple[float, float, int]:
    """(seconds of coil's passes, CPU seconds of g++, source bytes), empty kernel cache. g++
    is a child process: its CPU time (user + sys) varies less than its wall time on a busy
    machine."""
    import coil._coil as C
    from coil.options import build_options

    opts = build_options({"strict": True, "cache_dir": tempfile.mkdtemp(prefix="coil-dc-"),
                          **extra}).compile_options(None)
    cpu0 = _children_cpu()
    g = C.compile(text, opts, None)
    gxx = _children_cpu() - cpu0
    t = dict(g.artifacts["timings"])
    return sum(v for k, v in t.items() if k != "host_compile"), gxx, len(g.artifacts["source"])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--no-resnet", dest="resnet", action="store_false",
                    help="skip resnet18_eval (needs torch and a Dynamo compile per mode)")
    args = ap.parse_args()
    cases = [(f"cat {n}", (lambda s, n=n: cat_text(n, s)), {}) for n in (16, 64)]
    cases += [(f"cat {n} where-chain", (lambda s, n=n: cat_text(n, s)),
               {"max_pointwise_cat": 1000}) for n in (16, 64)]
    cases.append(("reshape chain 80", reshape_chain_text, {}))
    if args.resnet:
        static, dynamic, export = resnet18_eval_texts()
        print(f"resnet18_eval python_export: static {export['static'] * 1e3:.1f} ms, "
              f"dynamic {export['dynamic'] * 1e3:.1f} ms (first compile of the process)")
        cases.append(("resnet18_eval", lambda s: dynamic if s else static, {}))
    print("| graph | static: coil ms, g++ cpu ms, source KB | symbolic: coil ms, g++ cpu ms, source KB |"
          " ratio (total) |")
    print("|---|---|---|---|")
    for name, text_of, extra in cases:
        cells, totals = [], []
        for symbolic in (False, True):
            runs = [compile_once(text_of(symbolic), extra) for _ in range(args.reps)]
            own = min(r[0] for r in runs)
            gxx = min(r[1] for r in runs)
            cells.append(f"{own * 1e3:.1f}, {gxx * 1e3:.0f}, {runs[0][2] / 1e3:.1f}")
            totals.append(own + gxx)
        print(f"| {name} | {cells[0]} | {cells[1]} | {totals[1] / totals[0]:.2f}x |", flush=True)


if __name__ == "__main__":
    main()
