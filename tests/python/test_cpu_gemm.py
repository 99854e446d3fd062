"""CPU products run OpenBLAS or PyTorch's MKL (src/runtime/gemm_libraries.cpp): "auto" times
both on the first product of each shape and keeps the faster; "openblas" and "mkl" force one.
Every policy gives eager's numbers, whatever the operands' strides."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
import coil  # noqa: E402, F401
from coil import _coil  # noqa: E402


def test_mkl_is_found_next_to_pytorch():
    if not torch.backends.mkl.is_available():
        pytest.skip("this PyTorch build has no MKL")
    assert _coil.mkl_gemm_available()


def _products(a, b, c, bias):
    return (a @ b, torch.addmm(bias, a, b, beta=0.5, alpha=2.0), torch.bmm(c, c.transpose(1, 2)),
            a.t() @ a)


@pytest.mark.parametrize("policy", ["auto", "openblas", "mkl"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_policies_match_eager(policy, dtype):
    g = torch.Generator().manual_seed(0)
    a = torch.randn(37, 53, generator=g, dtype=dtype)
    b = torch.randn(64, 53, generator=g, dtype=dtype).t()  # transposed operand, read in place
    c = torch.randn(3, 9, 21, generator=g, dtype=dtype)
    bias = torch.randn(64, generator=g, dtype=dtype)
    torch._dynamo.reset()
    compiled = torch.compile(_products, backend="coil",
                             options={"strict": True, "cpu_gemm": policy})
    for _ in range(2):  # the second call uses the measured choice
        for got, want in zip(compiled(a, b, c, bias), _products(a, b, c, bias)):
            torch.testing.assert_close(got, want)


def test_unknown_policy_is_a_clear_error():
    torch._dynamo.reset()
    compiled = torch.compile(lambda a: a @ a, backend="coil",
                             options={"strict": True, "cpu_gemm": "cublas"})
    with pytest.raises(Exception, match="cpu_gemm must be auto, openblas or mkl"):
        compiled(torch.randn(4, 4))
