"""The C++ cse pass (src/passes/cse.cpp, option passes "dce,cse") on the graphs torch.compile
gives coil: identical nodes merged, graph outputs kept distinct (a clone), random draws never
shared; a residual block's two BatchNorm backwards stop summing the same gradient twice, and
GPT-2's forward loses a kernel. Option cse=False turns it off. (Golden tests of the pass on
graph texts: tests/golden/passes/cse_*.graph.)"""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
import torch.nn as nn

pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
import coil  # noqa: E402,F401  (registers the backend)
import models as zoo  # noqa: E402  (bench/models.py, on sys.path via conftest)


def _compile(fn, tmp_path, **options):
    torch._dynamo.reset()
    return torch.compile(fn, backend="coil",
                         options={"strict": True, "debug_dir": str(tmp_path), **options})


def _graph_dir(tmp_path, kind: str) -> Path:
    return next(tmp_path.glob(f"*_{kind}_*"))


def _after_cse(graph_dir: Path) -> str:
    """The graph the cse pass left ("" where it changed nothing)."""
    dumps = sorted(graph_dir.glob("01b_*_after_cse.txt"))
    return dumps[-1].read_text() if dumps else ""


def _ops(graph_text: str) -> list[str]:
    return [line.split("= ", 1)[1].split("(", 1)[0]
            for line in graph_text.splitlines() if " = " in line]


def _num_kernels(graph_dir: Path) -> int:
    return json.loads((graph_dir / "timings.json").read_text())["num_kernels"]


def test_identical_nodes_merge_and_outputs_stay_distinct(tmp_path):
    def f(x, y):
        a = torch.exp(x) * y
        b = torch.exp(x) * y  # the same twice: one exp, one mul
        return a + b, a.sum(0), b.sum(0)

    x, y = torch.randn(4, 3), torch.randn(4, 3)
    got = _compile(f, tmp_path)(x, y)
    for g, w in zip(got, f(x, y)):
        torch.testing.assert_close(g, w)
    assert got[1].data_ptr() != got[2].data_ptr()
    ops = _ops(_after_cse(_graph_dir(tmp_path, "inference")))
    assert ops.count("aten.exp.default") == 1 and ops.count("aten.mul.Tensor") == 1
    # The second sum, a graph output, is a clone of the first.
    assert ops.count("aten.sum.dim_IntList") == 1 and ops.count("aten.clone.default") == 1


def test_random_ops_are_never_merged(tmp_path):
    def f(x):
        return torch.rand_like(x), torch.rand_like(x), x.exp() + x.exp()

    r1, r2, _ = _compile(f, tmp_path)(torch.randn(64))
    assert not torch.equal(r1, r2)  # two draws
    ops = _ops(_after_cse(_graph_dir(tmp_path, "inference")))
    assert ops.count("aten.rand_like.default") == 2 and ops.count("aten.exp.default") == 1


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
    _compile(model, tmp_path)(x).backward()
    ref(x).backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-4, msg=name)
    # The two bias gradients are the same sum: one computed, the other output its clone.
    assert model.b1.bias.grad.data_ptr() != model.bd.bias.grad.data_ptr()
    graph = _after_cse(_graph_dir(tmp_path, "backward"))
    sums = [line.split("= ", 1)[1] for line in graph.splitlines() if "aten.sum.dim_IntList" in line]
    assert sums and len(sums) == len(set(sums)), sums  # no sum computed twice


def test_gpt2_forward_loses_a_kernel(tmp_path):
    """On the model set the pass merges what the partitioner duplicated: GPT-2's forward has
    one kernel fewer (19, against 20 with cse=False); the answers are test_models.py's."""
    counts = {}
    for cse in (True, False):
        model, inputs = zoo.gpt2("test")
        ref = copy.deepcopy(model)
        out = tmp_path / str(cse)
        loss = _compile(model, out, cse=cse)(*inputs)
        torch.testing.assert_close(loss, ref(*inputs), rtol=1.3e-4, atol=1e-5)
        counts[cse] = _num_kernels(_graph_dir(out, "forward"))
        assert bool(_after_cse(_graph_dir(out, "forward"))) == cse
    assert counts[True] < counts[False], counts


def test_option_turns_it_off(tmp_path):
    from coil.options import build_options

    assert build_options({}).cse is True
    assert build_options({"cse": False}).cse is False

    def f(x):
        return torch.exp(x) + torch.exp(x)

    _compile(f, tmp_path, cse=False)(torch.randn(8))
    assert not list(tmp_path.glob("*/01b_*_after_cse.txt"))
    assert _ops((_graph_dir(tmp_path, "inference") / "01_graph.txt").read_text()).count(
        "aten.exp.default") == 2


def test_cse_off_is_the_pipeline_without_cse():
    """Option cse=False: the C++ pipeline runs without its cse pass (an explicit `passes` list
    wins)."""
    from coil.options import build_options

    assert build_options({"cse": False}).compile_options()["passes"] == "dce"
    assert "passes" not in build_options({}).compile_options()
    assert build_options({"cse": False, "passes": "cse"}).compile_options()["passes"] == "cse"
