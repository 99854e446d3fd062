"""coil's logs in torch._logging (python/coil/torch_logs.py): the "coil" log and the
coil_fusion / coil_schedule / coil_fallbacks / coil_loop_ir / coil_kernels artifacts, turned on
by torch._logging.set_logs in-process and by TORCH_LOGS in a fresh interpreter; nothing is
emitted (or even read) when they are off."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import coil
from coil import torch_logs

ROOT = Path(__file__).resolve().parents[2]


def f(x):
    # softmax: one fused kernel (fusion log, schedule); erfcx has no lowering (per-op
    # fallback with its reason).
    return torch.special.erfcx(torch.softmax(x, -1) + 1) * 2


class Records(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record):
        self.records.append(record)

    def artifact(self, name: str) -> str:
        return "\n".join(r.getMessage() for r in self.records if r.name == f"coil.__{name}")

    def artifacts(self) -> set[str]:
        return {r.name.split("__", 1)[1] for r in self.records if "__" in r.name}


@pytest.fixture
def logs(monkeypatch):
    """set_logs(**kwargs) for the test; afterwards torch's defaults, and the "coil" logger as
    it was (torch._logging takes over a registered log's level, handlers and propagation,
    which other tests' caplog relies on)."""
    if "TORCH_LOGS" in os.environ:
        monkeypatch.delenv("TORCH_LOGS")
    coil_log = logging.getLogger("coil")
    saved = (coil_log.level, coil_log.propagate, list(coil_log.handlers))
    handler = Records()
    coil_log.addHandler(handler)

    def set_logs(**modules):
        torch._logging.set_logs(modules=modules)
        if handler not in coil_log.handlers:
            coil_log.addHandler(handler)

    set_logs.records = handler
    torch._dynamo.reset()
    yield set_logs
    torch._dynamo.reset()
    torch._logging.set_logs()
    coil_log.setLevel(saved[0])
    coil_log.propagate = saved[1]
    coil_log.handlers[:] = saved[2]


def _compile_once():
    x = torch.rand(4, 8)
    torch.testing.assert_close(torch.compile(f, backend="coil")(x), f(x))


def test_registered_at_import():
    from torch._logging import _internal as tl

    assert torch_logs.register() is True  # once, at `import coil`; again a no-op
    assert tl.log_registry.is_log("coil")
    assert set(torch_logs.ARTIFACTS) <= tl.log_registry.artifact_names
    # The long texts show only where named, like Inductor's output_code.
    assert tl.log_registry.is_off_by_default("coil_kernels")
    assert not tl.log_registry.is_off_by_default("coil_fusion")
    assert torch_logs.artifact_logger("coil_fusion").name == "coil.__coil_fusion"


def test_named_artifacts_reach_the_log(real_coil, logs):
    logs(coil_fusion=True, coil_kernels=True, coil_fallbacks=True)
    _compile_once()
    rec = logs.records
    assert rec.artifacts() == {"coil_fusion", "coil_kernels", "coil_fallbacks"}
    assert re.search(r"coil: inference_\d+ fusion log:\n.*starts kernel\d+",
                     rec.artifact("coil_fusion")), rec.artifact("coil_fusion")
    assert "COIL_ENTRY(kernel" in rec.artifact("coil_kernels")
    assert "aten.special_erfcx.default: no lowering" in rec.artifact("coil_fallbacks")
    # The "coil" log itself stays at WARNING: no per-graph INFO line.
    assert not [r for r in rec.records if r.name == "coil" and r.levelno == logging.INFO]


def test_plus_coil_gives_info_and_the_short_artifacts(real_coil, logs):
    logs(coil=logging.DEBUG)  # TORCH_LOGS="+coil"
    _compile_once()
    rec = logs.records
    info = [r.getMessage() for r in rec.records if r.name == "coil" and r.levelno == logging.INFO]
    assert any(re.match(r"coil: compiled inference_\d+: \d+ ops -> \d+ kernel\(s\), 1 op\(s\) "
                        r"run eagerly", m) for m in info), info
    assert rec.artifacts() == {"coil_fusion", "coil_schedule", "coil_fallbacks"}
    assert re.search(r"kernel\d+ over \[4\]:", rec.artifact("coil_schedule"))


def test_info_level_only(real_coil, logs):
    logs(coil=logging.INFO)  # TORCH_LOGS="coil"
    _compile_once()
    assert any(r.levelno == logging.INFO and "coil: compiled" in r.getMessage()
               for r in logs.records.records)
    assert logs.records.artifacts() == set()


def test_nothing_when_off(real_coil, logs):
    logs()  # torch's defaults
    _compile_once()
    assert logs.records.records == []


def test_texts_not_read_when_off(logs):
    logs()

    class Untouchable(dict):
        def get(self, key, default=None):
            raise AssertionError(f"artifact {key!r} read while its log is off")

        __getitem__ = get

    torch_logs.graph_compiled("g", Untouchable(), 0.1, 3)
    torch_logs.graph_fell_back("g", "reason")
    assert logs.records.records == []


def test_registration_failure_is_wrapped(monkeypatch, caplog):
    from torch._logging import _internal as tl

    def broken(*args, **kwargs):
        raise AttributeError("no register_log in this torch")

    monkeypatch.setattr(tl, "register_log", broken)
    monkeypatch.setattr(torch_logs, "_loggers", {})
    monkeypatch.setattr(torch_logs, "_registered", False)
    with caplog.at_level(logging.DEBUG, logger="coil"):
        assert torch_logs.register() is False
    assert [r.getMessage() for r in caplog.records
            if "registration unavailable" in r.getMessage()] != []
    # The artifacts still have loggers: plain children of "coil".
    lg = torch_logs.artifact_logger("coil_fusion")
    assert lg.name == "coil.__coil_fusion"
    assert not torch_logs.enabled("coil_fusion")


SCRIPT = """
import sys
if sys.argv[1] == "coil_first":
    import coil, torch
else:
    import torch
x = torch.rand(4, 8)
torch.compile(lambda x: torch.special.erfcx(torch.softmax(x, -1) + 1), backend="coil")(x)
"""


@pytest.mark.parametrize("order,setting", [
    # torch first: torch resolves "coil" as a module, importing coil, which registers the
    # artifacts named after it.
    ("torch_first", "+coil,coil_kernels"),
    # coil first: coil imports torch itself and re-reads TORCH_LOGS: any order.
    ("coil_first", "coil_fallbacks,coil"),
])
def test_torch_logs_environment(real_coil, tmp_path, order, setting):
    env = dict(os.environ, TORCH_LOGS=setting,
               PYTHONPATH=os.pathsep.join([str(ROOT / "python"), os.environ.get("PYTHONPATH", "")]))
    env.pop("COIL_DEBUG", None)
    p = subprocess.run([sys.executable, "-c", SCRIPT, order], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    err = p.stderr
    assert re.search(r"coil: compiled inference_0: \d+ ops", err), err[-3000:]
    if order == "torch_first":
        assert "[__coil_fusion]" in err and "[__coil_kernels]" in err, err[-3000:]
        assert "COIL_ENTRY(kernel0)" in err
    else:
        assert "[__coil_fallbacks]" in err and "aten.special_erfcx.default: no lowering" in err
        assert "[__coil_fusion]" not in err  # "coil" at INFO: artifacts only where named
