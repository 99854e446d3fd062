"""coil: a PyTorch deep-learning compiler with a C++ core.

Use it through TorchDynamo:  torch.compile(model, backend="coil").
The compiled extension is `coil._coil` (see docs/python-binding.md); this package is the
glue: FX graph export, decompositions, options, fallbacks and debug dumps.
"""

from __future__ import annotations

from .torch_logs import import_torch as _import_torch

_import_torch()  # first: TORCH_LOGS may name coil's artifacts (torch_logs.py)
from .backend import coil_backend, profile_report, report, reset_report, set_profiling
from .decompositions import coil_decompositions
from .extending import (register_decomposition, temporary_decomposition,
                        unregister_decomposition)
from .html_report import write_html_report
from .plugin import LoadedPlugin, PluginError, load_plugin, loaded_plugins
from .torch_logs import register as _register_torch_logs

__all__ = [
    "coil_backend",
    "coil_decompositions",
    "LoadedPlugin",
    "load_plugin",
    "loaded_plugins",
    "minify",
    "PluginError",
    "profile_report",
    "register_decomposition",
    "report",
    "reset_report",
    "set_profiling",
    "temporary_decomposition",
    "unregister_decomposition",
    "write_html_report",
]
__version__ = "0.1.0"


def minify(model_or_fn, *inputs, **kwargs):
    """Shrinks the first graph of `model_or_fn` that coil compiles wrongly (mode="accuracy") or
    fails on (mode="error") to a small repro folder: coil.minifier.minify (imported on first
    use, so that `python -m coil.minifier` runs the module once)."""
    from .minifier import minify as _minify

    return _minify(model_or_fn, *inputs, **kwargs)


def _register() -> None:
    # The pyproject entry point registers "coil" for installed packages; in a development tree
    # (PYTHONPATH=python) register it here. Both paths resolve to the same function.
    try:
        from torch._dynamo.backends import registry
    except Exception:  # pragma: no cover - torch without dynamo
        return
    if "coil" in registry._COMPILER_FNS:
        return
    # Installed: torch's lookup_backend loads the entry point (importing this package first)
    # and then registers the name itself, failing on a duplicate; so leave it to torch.
    try:
        from importlib.metadata import entry_points

        if any(ep.name == "coil" for ep in entry_points(group="torch_dynamo_backends")):
            return
    except Exception:  # pragma: no cover - broken metadata: register below
        pass
    try:
        registry.register_backend(coil_backend, name="coil")
    except AssertionError:  # registered concurrently / by the entry point
        pass


_register()
# TORCH_LOGS="+coil,coil_fusion" / torch._logging.set_logs (torch_logs.py).
_register_torch_logs()
