"""ATen (host) vs coil's library path (OpenBLAS sgemm, im2col conv) for extern kernels.

Each case compiles a one-node graph twice, with extern_provider "host" (the fallback callable:
torch.ops.aten.*, i.e. MKL / oneDNN) and "library", and times g.run (median of repeats).
Run: OPENBLAS_NUM_THREADS=1 PYTHONPATH=python python bench/extern_providers.py
"""

import statistics
import time

import torch

import coil._coil as C


def timeit(fn, min_time=0.3):
    fn()
    n, t = 1, 0.0
    while t < 0.05:
        t0 = time.perf_counter()
        for _ in range(n):
            fn()
        t = time.perf_counter() - t0
        n *= 2
    reps = max(3, int(min_time / t))
    samples = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(n // 2):
            fn()
        samples.append((time.perf_counter() - t0) / (n // 2))
    return statistics.median(samples) * 1e6


def mm_case(m, k, n):
    text = f"""graph(%0: f32[{m}, {k}], %1: f32[{k}, {n}]):
  %2: f32[{m}, {n}] = aten.mm.default(%0, %1)
  return (%2)
"""
    inputs = [torch.randn(m, k), torch.randn(k, n)]
    return f"mm {m}x{k}x{n}", text, inputs, lambda node, ins: [torch.ops.aten.mm.default(*ins)]


def conv_case(nb, c, h, o, k, s, p):
    oh = (h + 2 * p - k) // s + 1
    text = f"""graph(%0: f32[{nb}, {c}, {h}, {h}], %1: f32[{o}, {c}, {k}, {k}]):
  %2: f32[{nb}, {o}, {oh}, {oh}] = aten.convolution.default(%0, %1, None, [{s}, {s}], [{p}, {p}], [1, 1], false, [0, 0], 1)
  return (%2)
"""
    inputs = [torch.randn(nb, c, h, h), torch.randn(o, c, k, k)]

    def fb(node, ins):
        return [torch.ops.aten.convolution.default(ins[0], ins[1], None, [s, s], [p, p], [1, 1],
                                                   False, [0, 0], 1)]

    return f"conv N{nb} C{c} {h}x{h} -> O{o} k{k} s{s}", text, inputs, fb


def main():
    cases = [mm_case(32, 32, 32), mm_case(128, 128, 128), mm_case(512, 512, 512),
             mm_case(64, 768, 3072), mm_case(1024, 1024, 1024),
             conv_case(1, 64, 56, 64, 3, 1, 1), conv_case(8, 3, 64, 32, 7, 2, 3),
             conv_case(4, 128, 28, 128, 1, 1, 0)]
    print(f"torch threads: {torch.get_num_threads()}")
    print(f"{'case':36s} {'host (ATen) us':>15s} {'library us':>12s} {'lib/host':>9s}")
    for name, text, inputs, fb in cases:
        times = {}
        for provider in ("host", "library"):
            g = C.compile(text, {"extern_provider": provider}, fb)
            out = g.run(inputs)[0]
            torch.testing.assert_close(out, fb(0, inputs)[0], rtol=1e-3, atol=1e-3)
            times[provider] = timeit(lambda: g.run(inputs))
        print(f"{name:36s} {times['host']:15.1f} {times['library']:12.1f} "
              f"{times['library'] / times['host']:9.2f}")


if __name__ == "__main__":
    main()
