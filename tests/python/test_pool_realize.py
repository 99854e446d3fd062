"""max_pool2d over a computed input on the CPU: the input is realized once, not recomputed for
every tap of the window (src/lower/pool.cpp: lower_max_pool2d), and the result matches eager."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
import coil  # noqa: E402, F401


@pytest.mark.parametrize("with_indices", [False, True])
def test_pool_reads_a_realized_batchnorm_relu(tmp_path, with_indices):
    def f(x, scale, shift):
        y = torch.relu(x * scale[:, None, None] + shift[:, None, None])
        return F.max_pool2d(y, 3, stride=2, padding=1, return_indices=with_indices)

    x, scale, shift = torch.randn(2, 4, 9, 9), torch.rand(4) + 0.5, torch.randn(4)
    torch._dynamo.reset()
    compiled = torch.compile(f, backend="coil", options={"strict": True,
                                                         "debug_dir": str(tmp_path)})
    torch.testing.assert_close(compiled(x, scale, shift), f(x, scale, shift))
    (schedule,) = [p.read_text() for p in tmp_path.glob("*/03_schedule.txt")]
    # The activation [2, 4, 9, 9] is stored once; the pool's kernel reads it.
    assert "pointwise [2, 4, 9, 9]" in schedule, schedule
