"""`torch.compile(m, backend="coil")` works in a fresh process that never imports coil: the
backend is found through the package's entry point (pyproject.toml)."""

import subprocess
import sys

import pytest

SCRIPT = r"""
import sys, torch
f = torch.compile(lambda x: torch.sigmoid(x) * 2 + 1, backend="coil")
x = torch.randn(64)
assert torch.allclose(f(x), torch.sigmoid(x) * 2 + 1), "wrong result"
import coil
print("ok", sum(1 for _ in coil.report().__str__()))
"""


def test_backend_found_without_importing_coil(tmp_path):
    from importlib.metadata import entry_points

    if not any(ep.name == "coil" for ep in entry_points(group="torch_dynamo_backends")):
        pytest.skip("coil is not installed (pip install -e .); the entry point is not registered")
    # Run outside the repository so that only the installed package can be found.
    proc = subprocess.run([sys.executable, "-c", SCRIPT], cwd=tmp_path, capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("ok")


def test_unknown_mode_is_a_clear_error():
    import torch

    torch._dynamo.reset()
    f = torch.compile(lambda x: x * 2, backend="coil", mode="max-autotuned")
    with pytest.raises(Exception, match="unknown torch.compile mode 'max-autotuned'"):
        f(torch.randn(4))


@pytest.mark.parametrize("mode", ["reduce-overhead", "max-autotune",
                                  "max-autotune-no-cudagraphs"])
def test_known_modes_compile(mode, caplog):
    import torch

    pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")
    torch._dynamo.reset()
    x = torch.randn(33)
    f = torch.compile(lambda x: torch.tanh(x) + 1, backend="coil", mode=mode)
    torch.testing.assert_close(f(x), torch.tanh(x) + 1)
