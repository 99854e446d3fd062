"""The benchmark runner's accuracy rule (bench/accuracy.py) accepts rounding noise, rejects bugs."""

import torch

from accuracy import compare


def test_bf16_rounding_noise_passes_but_a_bug_fails():
    torch.manual_seed(0)
    x = torch.randn(4096, dtype=torch.float64)
    fp64 = torch.exp(x).sum().reshape(1)
    eager = torch.exp(x.bfloat16()).sum().reshape(1)
    # A different but equally valid summation order: error of the same size as eager's.
    coil = torch.exp(x.bfloat16()).float().sum().bfloat16().reshape(1)
    assert compare(coil, eager, fp64)
    assert not compare(coil * 1.05, eager, fp64)


def test_exact_dtypes_and_nan_placement():
    a = torch.tensor([1, 2, 3])
    assert compare(a.clone(), a)
    assert not compare(a + torch.tensor([0, 0, 1]), a)
    f = torch.tensor([1.0, float("nan"), 2.0])
    assert compare(f.clone(), f)
    assert not compare(torch.tensor([1.0, 0.0, 2.0]), f)
    assert not compare([f, f], [f])
