"""The channels-last pass for convolution graphs (python/coil/layout.py): run directly on ATen
graphs, the result compiled by coil and compared with eager; through torch.compile (inference
graphs get it, training graphs not; the option turns it off), on the CPU and on a GPU."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch._functorch.aot_autograd import aot_module_simplified

pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
import coil  # noqa: E402
from coil.backend import compile_aten_graph  # noqa: E402
from coil.decompositions import coil_decompositions  # noqa: E402
from coil.layout import channels_last_convolutions  # noqa: E402
from coil.options import build_options  # noqa: E402


class Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.c1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.b1 = nn.BatchNorm2d(c)
        self.c2 = nn.Conv2d(c, c, 1, bias=False)
        self.b2 = nn.BatchNorm2d(c)

    def forward(self, x):
        return torch.relu(self.b2(self.c2(torch.relu(self.b1(self.c1(x))))) + x)


class Net(nn.Module):
    """A stem, two residual blocks, global average pooling and a linear head; returns the head's
    logits and the last activation (a 4-d graph output whose layout the pass must restore)."""

    def __init__(self, flatten: bool = False):
        super().__init__()
        self.stem = nn.Conv2d(3, 16, 3, stride=2, padding=1)
        self.blocks = nn.Sequential(Block(16), Block(16))
        self.fc = nn.Linear(16 * 10 * 10 if flatten else 16, 10)
        self.flatten = flatten

    def forward(self, x):
        y = self.blocks(torch.relu(self.stem(x)))
        pooled = y.flatten(1) if self.flatten else y.mean((2, 3))
        return self.fc(pooled), y


def _model(flatten=False):
    torch.manual_seed(0)
    m = Net(flatten).eval()
    for mod in m.modules():
        if isinstance(mod, nn.BatchNorm2d):
            mod.running_mean.uniform_(-1, 1)
            mod.running_var.uniform_(0.5, 2)
    return m


def _compile_with_pass(model, x, tmp_path):
    """torch.compile through AOTAutograd with the pass applied before coil compiles the
    inference graph; returns (outputs, the pass's notes, the loop program text)."""
    notes = []

    def backend(gm, example_inputs):
        def inference(g, ex):
            notes.append(channels_last_convolutions(g))
            opts = build_options({"strict": True, "debug_dir": str(tmp_path)})
            return compile_aten_graph(g, ex, opts, "inference")

        return aot_module_simplified(gm, example_inputs, fw_compiler=inference,
                                     inference_compiler=inference,
                                     decompositions=coil_decompositions())

    torch._dynamo.reset()
    with torch.no_grad():
        out = torch.compile(model, backend=backend)(x)
    programs = list(tmp_path.glob("*/02_loop_program.txt"))
    return out, notes, programs[0].read_text() if programs else ""


def test_activations_become_channels_last_and_outputs_keep_their_strides(tmp_path):
    model = _model()
    x = torch.randn(2, 3, 20, 20)
    with torch.no_grad():
        want = model(x)
    got, notes, program = _compile_with_pass(model, x, tmp_path)
    assert notes == ["channels-last activations for 5 convolution(s): 1 input copy in, "
                     "1 output(s) copied back"]
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
        assert g.stride() == w.stride()
    # The convolution results and the realized activations are NHWC: [2, 16, 10, 10] with
    # strides (1600, 1, 160, 16).
    assert program.count("f32[2, 16, 10, 10]{1600, 1, 160, 16}") >= 5, program[:2000]


def test_a_view_that_nhwc_strides_forbid_leaves_the_graph_as_it_was(tmp_path):
    model = _model(flatten=True)  # y.flatten(1) is a view only of a contiguous y
    x = torch.randn(2, 3, 20, 20)
    with torch.no_grad():
        want = model(x)
    got, notes, program = _compile_with_pass(model, x, tmp_path)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    assert notes == [""]  # aten.view of an NHWC activation fails: nothing changed
    assert "{1600, 1, 160, 16}" not in program


def test_graphs_without_convolutions_are_untouched():
    gm = torch.fx.symbolic_trace(nn.Linear(4, 4))
    before = gm.code
    assert channels_last_convolutions(gm) == ""
    assert gm.code == before


def test_option_parses():
    assert build_options({}).channels_last is True
    assert build_options({"channels_last": False}).channels_last is False


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_inference_graph_runs_channels_last(tmp_path, dtype):
    model = _model().to("cuda", dtype)
    x = torch.randn(2, 3, 20, 20, device="cuda", dtype=dtype)
    with torch.no_grad():
        want = model(x)
        torch._dynamo.reset()
        compiled = torch.compile(model, backend="coil",
                                 options={"strict": True, "debug_dir": str(tmp_path)})
        got = compiled(x)
    tol = dict(rtol=1e-3, atol=1e-3) if dtype == torch.float32 else dict(rtol=5e-2, atol=5e-2)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, **tol)
        assert g.stride() == w.stride()
    notes = "".join(p.read_text() for p in tmp_path.glob("*/00_passes.txt"))
    assert "channels-last activations for 5 convolution(s)" in notes


def test_backend_applies_it_to_inference_graphs_only(tmp_path):
    model = _model()
    x = torch.randn(2, 3, 20, 20)

    def passes(options, grad):
        torch._dynamo.reset()
        out = tmp_path / f"{len(list(tmp_path.iterdir()))}"
        compiled = torch.compile(model, backend="coil",
                                 options={"strict": True, "debug_dir": str(out), **options})
        with torch.set_grad_enabled(grad):
            got = compiled(x.requires_grad_(grad))
            want = model(x)
        for g, w in zip(got, want):
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
        return "".join(p.read_text() for p in out.glob("*/00_passes.txt"))

    assert "channels-last activations for 5 convolution(s)" in passes({}, grad=False)
    assert passes({"channels_last": False}, grad=False) == ""
    model.train(False)
    assert passes({}, grad=True) == ""  # forward/backward graphs keep NCHW
