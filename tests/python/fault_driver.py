"""One process compiling one small graph with coil, for the fault-injection tests
(tests/python/test_faults.py), which run it in subprocesses: planted and damaged cache
entries must be met by a fresh process, and a crash must cost the subprocess, not pytest.

    python fault_driver.py [--variant K] [--calls N] [--sleep-after-start S]

Options for coil come from the environment (COIL_CACHE_DIR, COIL_CXX, COIL_STRICT, ...) and
from COIL_TEST_OPTIONS (a JSON dict handed to torch.compile's options). Prints one JSON line:
whether every call matched eager, coil.report()'s counts and reasons, and the warnings logged.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

import torch


def make_fn(variant: int):
    # Distinct graphs per variant (the constant differs), each a few fused pointwise ops and a
    # reduction, so each compiles to a library of its own.
    def fn(x, y):
        z = torch.sigmoid(x * (variant + 1.5)) + torch.tanh(y)
        return z.sum(dim=1) + z.amax(dim=1) * (variant + 1)

    return fn


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--variant", type=int, default=0)
    p.add_argument("--calls", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(1)
    import coil

    records: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record):
            records.append(record.getMessage())

    logging.getLogger("coil").addHandler(Keep())
    logging.getLogger("coil").setLevel(logging.INFO)
    options = json.loads(os.environ.get("COIL_TEST_OPTIONS", "{}"))
    fn = make_fn(args.variant)
    compiled = torch.compile(fn, backend="coil", options=options)
    ok = True
    for i in range(args.calls):
        g = torch.Generator().manual_seed(i)
        x = torch.randn(64, 33, generator=g)
        y = torch.randn(64, 33, generator=g)
        got = compiled(x, y)
        ok = ok and torch.allclose(got, fn(x, y), rtol=1e-5, atol=1e-5)
    rep = coil.report()
    print(json.dumps({"ok": bool(ok), "compiled": rep.graphs_compiled,
                      "fallen_back": [r for _, r in rep.graphs_fallen_back],
                      "log": records}), flush=True)


if __name__ == "__main__":
    sys.exit(main())
