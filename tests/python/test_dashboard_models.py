"""bench/dashboard_models.py: the dashboard's registry of timm / HuggingFace / torchvision / coil
models. Counts, names and the interface are checked always; building and running one eager
forward of every model at size "cpu" is `slow` (COIL_SLOW=1). Nothing is compiled here."""

from __future__ import annotations

import importlib.util
import time

import pytest
import torch

import dashboard_models as dm  # bench/ is on sys.path through conftest.py; needs only torch

# timm and transformers import torchvision, whose plain import fails with this CPU-only torch:
# run the registry's workaround first, or importorskip would raise instead of skipping.
if importlib.util.find_spec("torchvision") is None:
    pytest.skip("torchvision is not installed: dashboard models need it", allow_module_level=True)
dm.import_torchvision()
pytest.importorskip("timm", reason="timm is not installed: dashboard models need it")
pytest.importorskip("transformers", reason="transformers is not installed: dashboard models need it")


def _run(name: str):
    built = dm.get(name).build("cpu", "cpu")
    assert isinstance(built, dm.Built)
    assert built.model.training, f"{name}: model not in train() mode"
    assert isinstance(built.inputs, tuple) and built.inputs
    assert all(isinstance(i, torch.Tensor) and i.device.type == "cpu" for i in built.inputs)
    assert isinstance(built.batch, int) and built.batch >= 1
    for p in built.model.parameters():
        assert p.dtype == torch.float32, f"{name}: parameter of dtype {p.dtype}"
    with torch.no_grad():
        out = built.model(*built.inputs)
    tensors = [out] if isinstance(out, torch.Tensor) else list(out)
    assert tensors and all(isinstance(t, torch.Tensor) for t in tensors), (
        f"{name}: forward returned {type(out)}, not a Tensor or a tuple of Tensors")
    for t in tensors:
        if t.is_floating_point():
            assert torch.isfinite(t).all(), f"{name}: non-finite output"
    loss = dm.loss_of(out)
    assert loss.dim() == 0 and torch.isfinite(loss)
    return built, out


def test_counts_and_names():
    counts = {s: len(dm.names(s)) for s in dm.SUITES}
    assert counts["timm"] >= 15, counts
    assert counts["huggingface"] >= 15, counts
    assert counts["torchvision"] >= 5, counts
    assert counts["coil"] >= 1, counts
    assert len(dm.MODELS) >= 40
    assert len(set(dm.names())) == len(dm.names()) == len(dm.MODELS)
    prefix = {"timm": "timm_", "huggingface": "hf_", "torchvision": "tv_", "coil": "coil_"}
    for name, spec in dm.MODELS.items():
        assert spec.name == name
        assert spec.suite in dm.SUITES
        assert name.startswith(prefix[spec.suite]), name
        assert callable(spec.build)
    assert dm.names() == list(dm.MODELS)  # insertion order is the dashboard order
    with pytest.raises(KeyError):
        dm.get("no_such_model")
    with pytest.raises(ValueError):
        dm.names("no_such_suite")


def test_loss_of():
    a = torch.tensor([1.0, 3.0])
    b = torch.tensor([[2.0]], dtype=torch.bfloat16)
    assert dm.loss_of(a).item() == 5.0
    assert dm.loss_of((a, b, torch.tensor([7]))).item() == 9.0  # integer tensors are ignored
    with pytest.raises(ValueError):
        dm.loss_of((torch.tensor([1]),))


@pytest.mark.parametrize("name", ["timm_mobilenetv3_small_100", "hf_bert", "tv_squeezenet1_1"])
def test_quick_one_per_library(name):
    # Deterministic: two builds have the same weights (before a train-mode forward moves
    # BatchNorm running stats) and the same inputs.
    first = dm.get(name).build("cpu", "cpu")
    second = dm.get(name).build("cpu", "cpu")
    for x, y in zip(first.inputs, second.inputs):
        assert torch.equal(x, y)
    sd1, sd2 = first.model.state_dict(), second.model.state_dict()
    assert list(sd1) == list(sd2)
    for k in sd1:
        assert torch.equal(sd1[k], sd2[k]), k
    _run(name)
    with pytest.raises(ValueError):
        dm.get(name).build("cpu", "huge")


@pytest.mark.slow
@pytest.mark.parametrize("name", dm.names())
def test_every_model_builds_and_runs(name):
    t0 = time.perf_counter()
    _run(name)
    # One CPU build + forward should stay well under the budget the dashboard plans for.
    assert time.perf_counter() - t0 < 30.0
