#!/usr/bin/env python3
"""coil's differential fuzzer (docs/fuzzing.md).

  python3 tools/fuzz_graphs.py --seeds 0:5000 --jobs 2           # long run, resumable
  python3 tools/fuzz_graphs.py --show 123                        # print program 123
  python3 tools/fuzz_graphs.py --seeds 123:124 --minimize        # rerun one seed, shrink it

Each seed is one random program compiled with torch.compile(backend="coil") and compared with
eager (tools/fuzz/runner.py). Results go to OUT/log.jsonl, one line per seed; a rerun with the
same OUT skips seeds already there (a seed whose worker died is recorded as "crash"). Failing
seeds get a minimized standalone reproducer OUT/seed_<N>.py. The summary counts programs per
status and lists the failures and coverage gaps.
"""

from __future__ import annotations

import argparse
import collections
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for p in (ROOT / "tools", ROOT / "bench"):
    sys.path.insert(0, str(p))


def _find_coil() -> None:
    try:  # a development tree without an installed coil
        import coil  # noqa: F401
    except ImportError:
        sys.path.insert(0, str(ROOT / "python"))

FAILING = ("wrong", "coil_error", "crash")


def parse_seeds(s: str) -> range:
    a, _, b = s.partition(":")
    return range(int(a), int(b) if b else int(a) + 1)


def read_log(path: Path) -> tuple[dict, set]:
    done, started = {}, set()
    if path.exists():
        for line in path.read_text().splitlines():
            try:
                r = json.loads(line)
            except json.JSONDecodeError:
                continue
            if r.get("start"):
                started.add(r["seed"])
            else:
                done[r["seed"]] = r
    return done, started


def append(path: Path, rec: dict) -> None:
    with open(path, "a") as f:  # one short write per line: safe with several workers
        f.write(json.dumps(rec) + "\n")


def worker(args) -> int:
    _find_coil()
    import torch

    from fuzz.generator import generate
    from fuzz.minimize import minimize
    from fuzz.runner import Result, run_program

    torch.set_num_threads(1)
    out = Path(args.out)
    log = out / "log.jsonl"
    done, started = read_log(log)
    seeds = [s for s in parse_seeds(args.seeds) if s % args.stride == args.offset]
    for s in seeds:
        if s in done:
            continue
        if s in started:  # this worker died on it before
            append(log, Result(s, "crash", "the worker process died on this seed").as_dict())
            continue
        append(log, {"seed": s, "start": True})
        prog = generate(s, n_ops=args.ops)
        res = run_program(prog, cache_dir=args.cache_dir)
        append(log, res.as_dict())
        if res.status in FAILING and args.minimize:
            small = minimize(prog, lambda p: run_program(p, args.cache_dir).status == res.status,
                             budget_s=args.minimize_budget)
            head = f"coil fuzz seed {s}: {res.status}: {res.detail}"
            (out / f"seed_{s}.py").write_text(small.reproducer(head))
        torch._dynamo.reset()
    return 0


def summary(log: Path, seeds: range) -> str:
    done, _ = read_log(log)
    recs = [done[s] for s in seeds if s in done]
    counts = collections.Counter(r["status"] for r in recs)
    ok = counts["pass"] + counts["gap"]
    lines = [f"{len(recs)} programs run (seeds {seeds.start}:{seeds.stop}): "
             + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())),
             f"{ok} ran without a mismatch ({counts['pass']} fully compiled in strict mode)"]
    for r in recs:
        if r["status"] in FAILING:
            lines.append(f"  seed {r['seed']}: {r['status']}: {r['detail']}")
    gaps = collections.Counter(g for r in recs for g in r.get("gaps", []))
    if gaps:
        lines.append("coverage gaps (strict mode refused):")
        for g, n in gaps.most_common(20):
            lines.append(f"  {n:5d}  {g}")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", default="0:100", help="A:B, the seeds to run")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default="fuzz_out", help="log and reproducers (resumable)")
    ap.add_argument("--ops", type=int, default=None, help="ops per program (default random 3-12)")
    ap.add_argument("--cache-dir", default=None, help="coil kernel cache (default: a fresh temp dir)")
    ap.add_argument("--minimize", action=argparse.BooleanOptionalAction, default=True)
    ap.add_argument("--minimize-budget", type=float, default=300.0, help="seconds per failure")
    ap.add_argument("--show", type=int, default=None, help="print the program of one seed")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--stride", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--offset", type=int, default=0, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.show is not None:
        from fuzz.generator import generate

        print(generate(args.show, n_ops=args.ops).reproducer())
        return 0
    if args.worker:
        return worker(args)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = None
    if args.cache_dir is None:
        tmp = tempfile.TemporaryDirectory(prefix="coil_fuzz_cache_")
        args.cache_dir = tmp.name
    base = [sys.executable, str(Path(__file__).resolve()), "--worker", "--seeds", args.seeds,
            "--out", str(out), "--cache-dir", args.cache_dir, "--stride", str(args.jobs),
            "--minimize-budget", str(args.minimize_budget),
            "--minimize" if args.minimize else "--no-minimize"]
    if args.ops is not None:
        base += ["--ops", str(args.ops)]
    seeds = parse_seeds(args.seeds)
    t0 = time.time()
    # SIGTERM ends the run like Ctrl-C: the finally below stops the workers.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(130))
    procs = {i: subprocess.Popen(base + ["--offset", str(i)]) for i in range(args.jobs)}
    try:
        while procs:
            time.sleep(1.0)
            for i, p in list(procs.items()):
                rc = p.poll()
                if rc is None:
                    continue
                del procs[i]
                if rc != 0:  # a crash: restart; it records the seed it died on and goes on
                    print(f"worker {i} exited with {rc}; restarting", file=sys.stderr)
                    procs[i] = subprocess.Popen(base + ["--offset", str(i)])
    finally:
        for p in procs.values():
            p.kill()
        if tmp is not None:
            tmp.cleanup()
    print(summary(out / "log.jsonl", seeds))
    print(f"({time.time() - t0:.0f} s; log {out / 'log.jsonl'})")
    done, _ = read_log(out / "log.jsonl")
    return 1 if any(done[s]["status"] in FAILING for s in seeds if s in done) else 0


if __name__ == "__main__":
    sys.exit(main())
