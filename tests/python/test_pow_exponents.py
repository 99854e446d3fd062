"""pow with the exponents ATen's CPU kernel special-cases (2, 3, 0.5, -0.5, -1, -2) lowers to
multiplications, sqrt and reciprocals (src/lower/pointwise.cpp), vectorizable where a libm pow
call is not; the results match eager, signs and NaNs included."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
import coil  # noqa: E402, F401


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16])
@pytest.mark.parametrize("exponent", [3.0, 3, -1.0, -2.0, -0.5, 2.0, 0.5])
def test_special_exponents_match_eager(tmp_path, exponent, dtype):
    x = torch.linspace(-3, 3, 301, dtype=torch.float32).to(dtype)

    def f(x):
        return torch.pow(x, exponent) * 2  # exact: bf16 rounds as eager does

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="coil", options={"strict": True,
                                                         "debug_dir": str(tmp_path)})
    torch.testing.assert_close(compiled(x), f(x), equal_nan=True)
    (kernels,) = [p.read_text() for p in tmp_path.glob("*/05_kernels.cpp")]
    assert "coil::m::pow" not in kernels
