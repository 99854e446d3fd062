"""bench/cpu_vector_report.py: which simd loops g++ left scalar, read from a dump's kernels.

The report must name the loop g++ did not vectorize (an opaque call in its body) and not the one
it did, and take the kernel's time from a profile report's lines.
"""

from __future__ import annotations

import shutil

import pytest

import cpu_vector_report as vr

SOURCE = """#include <cstdint>
extern "C" float opaque(float);
extern "C" void COIL_ENTRY(plain)(float* __restrict__ a, const float* __restrict__ b) {
  #pragma omp simd
  for (int64_t i = 0; i < 256; ++i) {
    a[i] = b[i] * 2.0f + 1.0f;
  }
}
extern "C" void COIL_ENTRY(called)(float* __restrict__ a, const float* __restrict__ b) {
  #pragma omp simd
  for (int64_t i = 0; i < 256; ++i) {
    a[i] = opaque(b[i]);
  }
}
"""


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
def test_names_the_scalar_simd_loop_only():
    cmd = ("g++ -O3 -march=x86-64-v3 -fopenmp -shared -fPIC -std=c++17 -DCOIL_ENTRY(n)=n "
           "-o /tmp/unused.so /tmp/unused.cpp")
    loops = vr.scalar_loops(SOURCE, cmd)
    assert [(k, line) for k, line, _ in loops] == [("called", 11)]
    assert loops[0][2].startswith("for (int64_t i = 0; i < 256")


def test_kernel_times_from_profile_lines():
    text = ("backward_0: 5 run(s), 2.781 ms per run: 44 kernel 0.543 ms\n"
            "      0.035 ms   1.3%  kernel bw_kernel38\n"
            "      0.020 ms   0.7%  extern mm aten.mm.default (library)\n")
    assert vr.kernel_times(text) == {"bw_kernel38": 0.035}
