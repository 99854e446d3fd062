"""The channels-last pass for convolution graphs (python/coil/layout.py): run directly on ATen
graphs, the result compiled by coil and compared with eager; through torch.compile (inference
graphs get it everywhere, training graphs on the GPU; the option turns it off), on the CPU and on
a GPU; a training step whose saved activations travel channels-last from the forward graph to
the backward graph."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from torch._functorch.aot_autograd import aot_module_simplified

pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
import coil  # noqa: E402
from coil.backend import _relayout, compile_aten_graph  # noqa: E402
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


def _compile_with_pass(model, x, tmp_path, **options):
    """torch.compile through AOTAutograd with the pass applied before coil compiles the
    inference graph; returns (outputs, the pass's notes, the loop program text)."""
    notes = []

    def backend(gm, example_inputs):
        def inference(g, ex):
            notes.append(channels_last_convolutions(g))
            opts = build_options({"strict": True, "debug_dir": str(tmp_path), **options})
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
    assert notes == ["channels-last activations for 5 convolution operand(s): 1 copy in, "
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
    # (Convolutions through ATen: coil's own small ones produce channels-last products.)
    got, notes, program = _compile_with_pass(model, x, tmp_path, cpu_native_convolutions=False)
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
    assert build_options({}).channels_last_weights is True
    assert build_options({"channels_last_weights": False}).channels_last_weights is False


def test_weight_copies_are_for_cuda_weights_only(tmp_path):
    # With weights=True the pass copies only the CUDA weights cuDNN would transpose; the CPU's
    # oneDNN reorders weights to its own layout in any case, so a CPU graph is as without it.
    model = _model()
    x = torch.randn(2, 3, 20, 20)
    notes = []

    def backend(gm, example_inputs):
        def inference(g, ex):
            notes.append(channels_last_convolutions(g, weights=True))
            return g

        return aot_module_simplified(gm, example_inputs, fw_compiler=inference,
                                     inference_compiler=inference,
                                     decompositions=coil_decompositions())

    torch._dynamo.reset()
    with torch.no_grad():
        torch.compile(model, backend=backend)(x)
    assert notes and "weight(s) copied" not in notes[0], notes


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
    assert "channels-last activations for 5 convolution operand(s)" in notes
    # The weights cuDNN would transpose at each call are copied in the graph (option
    # channels_last_weights, on): 3x3 convolutions with more than one input channel.
    assert "weight(s) copied" in notes, notes


def test_backend_applies_it_to_cpu_inference_and_training_graphs(tmp_path):
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

    assert "channels-last activations for 5 convolution operand(s)" in passes({}, grad=False)
    assert passes({"channels_last": False}, grad=False) == ""
    model.train(False)
    # Training graphs too: the forward's saved activations stay channels-last for the backward.
    assert "saved activation(s) stay in their new layout" in passes({}, grad=True)


def _train_step(model, x):
    """One forward and backward through both outputs; returns (outputs, parameter grads)."""
    out = model(x)
    (out[0].float().sum() + out[1].float().square().sum()).backward()
    return out, [p.grad for p in model.parameters()]


def _assert_same_step(got, want, tol):
    """Outputs and grads within tol of the largest magnitude of each tensor (a sum of squares
    makes grads of a few hundred), with eager's strides."""
    for g, w in [*zip(got[0], want[0]), *zip(got[1], want[1])]:
        scale = w.float().abs().max().item() or 1.0
        err = (g.float() - w.float()).abs().max().item()
        assert err <= tol * scale, (tuple(w.shape), err, scale)
        assert g.stride() == w.stride()  # parameter grads keep the parameters' layout


def test_training_saved_activations_travel_channels_last(tmp_path):
    """The backend's training path (_relayout for forward and backward graphs): the forward graph keeps its saved activations NHWC and reports their
    strides, AOTAutograd restrides the backward graph's inputs, the backward graph recomputes
    with them; outputs and grads match eager with eager's strides."""
    notes, strides = [], []
    opts = build_options({"strict": True, "debug_dir": str(tmp_path)})

    def backend(gm, example_inputs):
        def fw(g, ex):
            notes.append(_relayout(g, ex, opts, "forward"))
            return compile_aten_graph(g, ex, opts, "forward")

        def bw(g, ex):
            strides.extend(e.stride() for e in ex if isinstance(e, torch.Tensor) and e.dim() == 4)
            notes.append(_relayout(g, ex, opts, "backward"))
            return torch._dynamo.disable(compile_aten_graph)(g, ex, opts, "backward")

        return aot_module_simplified(gm, example_inputs, fw_compiler=fw, bw_compiler=bw,
                                     decompositions=coil_decompositions(),
                                     keep_inference_input_mutations=False)

    x = torch.randn(2, 3, 20, 20)
    want = _train_step(_model().train(), x)
    torch._dynamo.reset()
    got = _train_step(torch.compile(_model().train(), backend=backend), x)
    _assert_same_step(got, want, 1e-4)
    fw_note, bw_note = notes
    assert "1 output(s) copied back" in fw_note  # y, a user output, keeps NCHW
    assert "saved activation(s) stay in their new layout" in fw_note
    assert "input(s) arrive restrided" in bw_note
    assert "5 output(s) copied back" in bw_note  # the convolution weights' grads
    assert (1600, 1, 160, 16) in strides  # AOTAutograd handed the backward NHWC activations


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_cuda_training_step_runs_channels_last(tmp_path, dtype):
    x = torch.randn(2, 3, 20, 20, device="cuda", dtype=dtype)
    # cuDNN picks other algorithms for NHWC than for NCHW: in TF32 their grads differ by 1e-2
    # relative. Full fp32 compares the layouts, not the algorithms' rounding.
    tf32 = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        want = _train_step(_model().to("cuda", dtype).train(), x)
        torch._dynamo.reset()
        compiled = torch.compile(_model().to("cuda", dtype).train(), backend="coil",
                                 options={"strict": True, "debug_dir": str(tmp_path)})
        got = _train_step(compiled, x)
    finally:
        torch.backends.cudnn.allow_tf32 = tf32
    _assert_same_step(got, want, 1e-4 if dtype == torch.float32 else 4e-2)
    notes = "".join(p.read_text() for p in tmp_path.glob("*/00_passes.txt"))
    assert "saved activation(s) stay in their new layout" in notes
    assert "input(s) arrive restrided" in notes


def test_restrided_inputs_a_graph_cannot_take_are_copied_back():
    """A backward graph whose inputs arrive channels-last but which cannot recompute with them
    (an aten.view that NHWC strides forbid) copies them back to the traced strides at its start
    and still gives the same result."""
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x):
        return torch.ops.aten.view.default(x, [2, -1]).sum(0)

    x = torch.randn(2, 3, 4, 4)
    gm = make_fx(f, tracing_mode="fake")(x)
    x_cl = x.contiguous(memory_format=torch.channels_last)
    note = channels_last_convolutions(gm, input_strides=[x_cl])
    assert note.startswith("channels-last: 1 input(s) arrive channels-last; copied back"), note
    clones = [n for n in gm.graph.nodes if n.target is torch.ops.aten.clone.default]
    assert len(clones) == 1 and clones[0].kwargs["memory_format"] == torch.contiguous_format
    torch.testing.assert_close(gm(x_cl), f(x))
