"""aten.as_strided_scatter (what functionalization makes of a write through an as_strided view,
as in ConvNeXt's training graph): lowered as a pointwise select where the view is a box of the
output's dense layout, through ATen otherwise; results match eager either way."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
import coil  # noqa: E402, F401

# (self shape, channels-last?, view size, view stride, storage offset)
BOXES = [
    ((4, 6), False, (2, 3), (6, 1), 7),         # rows 1-2, columns 1-3
    ((4, 6), False, (3, 2), (1, 6), 2),         # a transposed view: dims matched by stride
    ((4, 6), False, (6,), (1,), 12),            # one whole row
    ((2, 3, 4, 5), True, (2, 3, 2, 5), (60, 1, 15, 3), 30),  # channels-last, rows 2-3
    ((2, 3, 4), False, (1, 3, 4), (12, 4, 1), 12),  # a size-1 dim pinned to the corner
]


def _schedules(tmp_path) -> str:
    return "\n".join(p.read_text() for p in tmp_path.glob("*/03_schedule.txt"))


def _run(tmp_path, shape, channels_last, size, stride, offset, strict):
    x = torch.randn(*shape)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    src = torch.randn(*size)

    def f(x, src):
        return torch.as_strided_scatter(x * 2, src + 1, size, stride, offset)

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="coil",
                             options={"strict": strict, "debug_dir": str(tmp_path)})
    got, want = compiled(x, src), f(x, src)
    torch.testing.assert_close(got, want)
    assert got.stride() == want.stride()


@pytest.mark.parametrize("case", BOXES, ids=lambda c: f"{c[0]}-{c[2]}-{c[3]}-{c[4]}")
def test_box_views_are_lowered(tmp_path, case):
    _run(tmp_path, *case, strict=True)
    assert "(host)" not in _schedules(tmp_path)


def test_a_skewed_view_runs_in_aten(tmp_path):
    # The diagonal of a 4 x 4: no box, so the node runs through ATen (not strict).
    _run(tmp_path, (4, 4), False, (4,), (5,), 0, strict=False)
    assert "as_strided_scatter" in _schedules(tmp_path)
