"""Per-call overhead of a compiled graph: x*2+1 on 16 floats, 2000 calls of g.run vs eager.

Run: PYTHONPATH=python python bench/overhead.py
"""

import time

import torch

import coil._coil as C

TEXT = """graph(%0: f32[16]):
  %1: f32[16] = aten.mul.Tensor(%0, 2.0)
  %2: f32[16] = aten.add.Tensor(%1, 1.0)
  return (%2)
"""
CALLS = 2000


def best_of(fn, repeats=5):
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(CALLS):
            fn()
        best = min(best, time.perf_counter() - t0)
    return best / CALLS * 1e6  # microseconds per call


def main():
    torch.set_num_threads(1)
    g = C.compile(TEXT, {}, None)
    x = torch.randn(16)
    assert torch.equal(g.run([x])[0], x * 2 + 1)
    inputs = [x]
    eager = best_of(lambda: x * 2 + 1)
    coil = best_of(lambda: g.run(inputs))
    empty = best_of(lambda: None)
    print(f"eager x*2+1:      {eager:6.2f} us/call")
    print(f"coil g.run([x]):  {coil:6.2f} us/call")
    print(f"python loop+call: {empty:6.2f} us/call (lambda baseline)")


if __name__ == "__main__":
    main()
