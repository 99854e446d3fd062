"""aten._softmax lowered by C++ (src/lower/reduction.cpp: lower_softmax) against eager: dims,
dtypes, rows of -inf, strided inputs; and the reason it exists: a masked softmax compiles to one
row kernel that keeps max and sum in registers and stores only its result."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
import coil  # noqa: E402


def _compile(fn, **opts):
    torch._dynamo.reset()
    return torch.compile(fn, backend="coil", options={"strict": True, **opts})


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_softmax_matches_eager(dim, dtype):
    torch.manual_seed(0)
    x = (torch.randn(6, 5, 33) * 4).to(dtype)
    got = _compile(lambda a: torch.softmax(a, dim))(x)
    want = torch.softmax(x, dim)
    assert got.dtype == want.dtype
    tol = {torch.float32: 1e-6, torch.bfloat16: 1e-2, torch.float16: 1e-3}[dtype]
    torch.testing.assert_close(got, want, rtol=tol, atol=tol)


def test_half_to_float_and_strided_input():
    x = torch.randn(7, 9, dtype=torch.bfloat16)
    got = _compile(lambda a: torch.softmax(a.t(), -1, dtype=torch.float32))(x)
    torch.testing.assert_close(got, torch.softmax(x.t(), -1, dtype=torch.float32))


def test_rows_of_minus_infinity_give_nan_as_eager():
    x = torch.randn(4, 8)
    x[1] = float("-inf")
    x[2, :3] = float("-inf")
    got = _compile(lambda a: torch.softmax(a, -1))(x)
    torch.testing.assert_close(got, torch.softmax(x, -1), equal_nan=True)


def test_masked_softmax_is_one_row_kernel_storing_only_its_result(tmp_path):
    def attention_probs(scores):
        t = scores.shape[-1]
        mask = torch.ones(t, t, dtype=torch.bool).tril()
        return torch.softmax((scores * 0.125).masked_fill(~mask, float("-inf")), dim=-1)

    x = torch.randn(2, 3, 16, 16, dtype=torch.bfloat16)
    got = _compile(attention_probs, debug_dir=str(tmp_path))(x)
    torch.testing.assert_close(got, attention_probs(x), rtol=1e-2, atol=1e-2)
    (schedule,) = [p.read_text() for p in tmp_path.glob("*/03_schedule.txt")]
    kernels = [k for k in schedule.split("\nkernel")[1:] if "reduce max" in k]
    assert len(kernels) == 1, schedule
    body = kernels[0].split("\n\n")[0]
    steps = [ln for ln in body.splitlines() if "step" in ln]
    assert len(steps) == 3, body  # max and sum in registers, then the result
    assert "reduce max" in steps[0] and "(local)" in steps[0]
    assert "reduce sum" in steps[1] and "(local)" in steps[1]
    assert "pointwise [2, 3, 16, 16]" in steps[2]


def test_zero_dim_softmax_is_one_or_nan():
    f = _compile(lambda a: torch.softmax(a, 0))
    for v in (1.5, float("inf"), float("nan")):
        x = torch.tensor(v)
        torch.testing.assert_close(f(x), torch.softmax(x, 0), equal_nan=True)
