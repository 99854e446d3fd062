"""The CSE pass on ATen graphs (python/coil/cse.py): identical nodes merged, graph outputs kept
distinct (a clone), random draws never shared; through torch.compile, a residual block's two
BatchNorm backwards stop summing the same gradient twice."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch.fx.experimental.proxy_tensor import make_fx

pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
import coil  # noqa: E402
from coil.cse import eliminate_common_subexpressions  # noqa: E402

aten = torch.ops.aten


def _targets(gm):
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_identical_nodes_merge_and_outputs_stay_distinct():
    def f(x, y):
        a = torch.exp(x) * y
        b = torch.exp(x) * y  # the same twice: one exp, one mul
        return a + b, a.sum(0), b.sum(0)

    gm = make_fx(f)(torch.randn(4, 3), torch.randn(4, 3))
    x, y = torch.randn(4, 3), torch.randn(4, 3)
    want = gm(x, y)
    assert len(eliminate_common_subexpressions(gm)) == 3  # exp, mul, the second sum (a clone)
    t = _targets(gm)
    assert t.count(aten.exp.default) == 1 and t.count(aten.mul.Tensor) == 1
    assert t.count(aten.sum.dim_IntList) == 1 and t.count(aten.clone.default) == 1
    got = gm(x, y)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w)
    assert got[1].data_ptr() != got[2].data_ptr()


def test_random_ops_are_never_merged():
    def f(x):
        return torch.rand_like(x) + torch.rand_like(x)

    gm = make_fx(f)(torch.randn(8))
    assert eliminate_common_subexpressions(gm) == []
    assert _targets(gm).count(aten.rand_like.default) == 2


def test_residual_block_backward_sums_the_gradient_once(tmp_path):
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(8, 16, 1, bias=False), nn.BatchNorm2d(16)
            self.cd, self.bd = nn.Conv2d(8, 16, 1, bias=False), nn.BatchNorm2d(16)

        def forward(self, x):
            return torch.relu(self.b1(self.c1(x)) + self.bd(self.cd(x))).square().sum()

    torch.manual_seed(0)
    model, ref = Block(), Block()
    ref.load_state_dict(model.state_dict())
    x = torch.randn(2, 8, 6, 6)
    torch._dynamo.reset()
    compiled = torch.compile(model, backend="coil",
                             options={"strict": True, "debug_dir": str(tmp_path)})
    compiled(x).backward()
    ref(x).backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=name)
    assert model.b1.bias.grad.data_ptr() != model.bd.bias.grad.data_ptr()
    bw = next(tmp_path.glob("*backward*"))
    assert "cse:" in (bw / "00_passes.txt").read_text()
    graph = (bw / "01_graph.txt").read_text()
    sums = [line.split("= ", 1)[1] for line in graph.splitlines() if "aten.sum.dim_IntList" in line]
    assert len(sums) == len(set(sums)), sums  # no sum computed twice


def test_option_turns_it_off(tmp_path):
    from coil.options import build_options

    assert build_options({}).cse is True
    assert build_options({"cse": False}).cse is False

    def f(x):
        return torch.exp(x) + torch.exp(x)

    torch._dynamo.reset()
    torch.compile(f, backend="coil", options={"cse": False, "debug_dir": str(tmp_path)})(
        torch.randn(8))
    assert "cse:" not in "".join(p.read_text() for p in tmp_path.glob("*/00_passes.txt"))


def test_cse_off_also_turns_off_the_cpp_pass():
    """Option cse=False: no merging anywhere, so the C++ pipeline runs without its cse pass
    (an explicit `passes` list wins)."""
    from coil.options import build_options

    assert build_options({"cse": False}).compile_options()["passes"] == "dce"
    assert "passes" not in build_options({}).compile_options()
    assert build_options({"cse": False, "passes": "cse"}).compile_options()["passes"] == "cse"
