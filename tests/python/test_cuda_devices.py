"""Any CUDA device of the machine: a graph compiled for cuda:1 loads its kernels, allocates and
launches there, on that device's current stream, whichever device the calling thread has
current; models on two devices in one process, interleaved; a model moved between devices;
graphs whose tensors straddle devices run eagerly with a reason (or correctly); and an
out-of-memory error inside a compiled call is PyTorch's own, leaving the process usable.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")

import coil  # noqa: E402

pytestmark = pytest.mark.gpu
two_gpus = pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")


def mlp(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.GELU(), torch.nn.LayerNorm(128),
                               torch.nn.Linear(128, 32))


def train_step(model, x):
    model.zero_grad(set_to_none=True)
    out = model(x)
    out.square().mean().backward()
    return out.detach(), [p.grad.detach().clone() for p in model.parameters()]


def assert_close_lists(a, b, tol=1e-4):
    for x, y in zip(a, b):
        torch.testing.assert_close(x, y, rtol=tol, atol=tol)


@two_gpus
def test_training_on_two_devices_interleaved():
    coil.reset_report()
    models = {d: mlp().to(d) for d in ("cuda:0", "cuda:1")}
    refs = {d: mlp().to(d) for d in models}
    compiled = {d: torch.compile(m, backend="coil", options={"strict": True})
                for d, m in models.items()}
    for step in range(4):
        for d in ("cuda:1", "cuda:0"):  # cuda:1 first: compiled while cuda:0 is current
            x = torch.randn(16, 64, device=d)
            out, grads = train_step(compiled[d], x)
            ref_out, ref_grads = train_step(refs[d], x)
            assert out.device == torch.device(d) and all(g.device == out.device for g in grads)
            torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-4)
            assert_close_lists(grads, ref_grads)
    torch.cuda.synchronize("cuda:0")
    torch.cuda.synchronize("cuda:1")
    assert coil.report().graphs_compiled >= 4 and not coil.report().graphs_fallen_back


@two_gpus
@pytest.mark.parametrize("current", [0, 1])
def test_inference_on_cuda1_whatever_device_is_current(current):
    model = mlp(1).to("cuda:1").eval()
    compiled = torch.compile(model, backend="coil", options={"strict": True})
    with torch.cuda.device(current), torch.no_grad():
        for _ in range(6):  # past the CUDA-graph warm-up: capture and replay on cuda:1
            x = torch.randn(8, 64, device="cuda:1")
            torch.testing.assert_close(compiled(x), model(x), rtol=1e-4, atol=1e-4)
        assert torch.cuda.current_device() == current


@two_gpus
def test_side_stream_of_the_graphs_device():
    model = mlp(2).to("cuda:1").eval()
    compiled = torch.compile(model, backend="coil", options={"strict": True,
                                                             "cuda_graphs": False})
    s = torch.cuda.Stream(device="cuda:1")
    x = torch.randn(32, 64, device="cuda:1")
    with torch.no_grad():
        want = model(x)
        torch.cuda.synchronize("cuda:1")
        with torch.cuda.stream(s):
            got = compiled(x)
        s.synchronize()
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@two_gpus
def test_model_moved_between_devices():
    model = mlp(3)
    ref = mlp(3)
    compiled = torch.compile(model, backend="coil", options={"strict": True})
    for d in ("cuda:0", "cuda:1", "cuda:0"):
        model.to(d)
        ref.to(d)
        x = torch.randn(4, 64, device=d)
        out, grads = train_step(compiled, x)
        ref_out, ref_grads = train_step(ref, x)
        assert out.device == torch.device(d)
        torch.testing.assert_close(out, ref_out, rtol=1e-4, atol=1e-4)
        assert_close_lists(grads, ref_grads)


@two_gpus
def test_inputs_on_two_devices_fall_back_with_a_reason():
    coil.reset_report()

    def f(a, b):
        return (a.sin() + b.to(a.device).cos()).sum(0)

    a = torch.randn(8, 8, device="cuda:0")
    b = torch.randn(8, 8, device="cuda:1")
    got = torch.compile(f, backend="coil")(a, b)
    torch.testing.assert_close(got, f(a, b))
    reasons = [r for _, r in coil.report().graphs_fallen_back]
    assert any("several CUDA devices" in r for r in reasons), reasons


def test_cpu_scalar_with_cuda_tensor():
    def f(x, s):
        return (x * s).relu() + s

    x = torch.randn(33, 7, device="cuda")
    s = torch.tensor(1.5)
    got = torch.compile(f, backend="coil")(x, s)
    torch.testing.assert_close(got, f(x, s))


def test_out_of_memory_is_pytorchs_error_and_the_process_goes_on():
    coil.reset_report()
    torch.cuda.empty_cache()

    def f(x):
        return torch.cat([x, x * 2, x * 3, x * 4]).sin()

    x = torch.randn(64, 1 << 20, device="cuda")  # 256 MiB; the output is 1 GiB
    compiled = torch.compile(f, backend="coil", options={"cuda_graphs": False})
    torch.testing.assert_close(compiled(x), f(x))
    torch.cuda.empty_cache()  # the 1 GiB blocks cached by that call go back to the device
    free, _ = torch.cuda.mem_get_info()
    hog = torch.empty(max(free - (512 << 20), 0), dtype=torch.uint8, device="cuda")
    with pytest.raises(torch.OutOfMemoryError):
        compiled(x)
    del hog
    torch.cuda.empty_cache()
    torch.testing.assert_close(compiled(x), f(x))  # still compiled, still right
    assert not coil.report().graphs_fallen_back, coil.report()


# ---- the cubin cache (the same rules as the host libraries' cache: tests/python/test_faults.py)


def _compile_softplus(cache_dir):
    torch._dynamo.reset()

    def f(x):
        return torch.nn.functional.softplus(x * 1.25).sum(-1)

    x = torch.randn(64, 300, device="cuda")
    got = torch.compile(f, backend="coil", options={"cache_dir": str(cache_dir), "strict": True,
                                                    "cuda_graphs": False})(x)
    torch.testing.assert_close(got, f(x))


def _cubins(cache_dir):
    return sorted((cache_dir / "cuda").glob("*.cubin"))


def test_cubin_cache_modes_and_digests(tmp_path):
    cache = tmp_path / "cache"
    old = os.umask(0)
    try:
        _compile_softplus(cache)
    finally:
        os.umask(old)
    cubins = _cubins(cache)
    assert cubins
    for c in cubins:
        assert c.stat().st_mode & 0o777 == 0o600
        assert Path(str(c) + ".sha256").exists()
    assert (cache / "cuda").stat().st_mode & 0o777 == 0o700


@pytest.mark.parametrize("damage", ["truncate", "forged"])
def test_damaged_cubin_is_evicted_and_recompiled(tmp_path, damage):
    cache = tmp_path / "cache"
    _compile_softplus(cache)
    for c in _cubins(cache):
        data = c.read_bytes()
        if damage == "truncate":
            c.write_bytes(data[: len(data) // 3])
        else:  # garbage whose digest matches: only the driver can tell
            import hashlib

            junk = b"\x7fELF" + bytes(len(data))
            digest = Path(str(c) + ".sha256")
            key = c.name[: -len(".cubin")]
            digest.write_text(hashlib.sha256(key.encode() + b"\0" + junk).hexdigest() + "\n")
            c.write_bytes(junk)
    coil.reset_report()
    _compile_softplus(cache)  # strict: recompiled, not fallen back
    assert not coil.report().graphs_fallen_back
