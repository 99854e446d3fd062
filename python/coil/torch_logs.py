"""coil's logs in PyTorch's logging system (torch._logging), as Inductor's are.

PyTorch users turn compiler logs on with TORCH_LOGS (or torch._logging.set_logs); coil
registers there at `import coil`:

  coil             the "coil" logger used across python/coil: TORCH_LOGS="coil" shows its INFO
                   lines (one per compiled graph), TORCH_LOGS="+coil" its DEBUG lines too
  coil_fusion      per graph, the fusion decisions           (04_fusion_log.txt of a dump)
  coil_schedule    per graph, kernels and memory plan         (03_schedule.txt)
  coil_fallbacks   per graph, the ops run eagerly and why     (fallbacks.txt)
  coil_loop_ir     per graph, the loop IR after lowering      (02_loop_program.txt)
  coil_kernels     per graph, the generated source            (05_kernels.cpp)

Artifacts are DEBUG records of child loggers of "coil" (torch._logging.getArtifactLogger), so
"+coil" shows fusion, schedule and fallbacks too; loop IR and kernels are long and, like
Inductor's output_code, show only where named. A disabled artifact costs one isEnabledFor
check per graph: its text is neither read nor formatted.

TORCH_LOGS is parsed when torch is imported, and a name torch does not know then is an error.
Where a program imports torch first, torch accepts "coil" as a module name and imports coil
to resolve it, which registers the artifacts: so name coil first, e.g.
TORCH_LOGS="+coil,coil_kernels" (docs/debugging.md). Where coil is imported first, it imports
torch itself (import_torch) and any order works. In-process, after `import coil`:
torch._logging.set_logs(modules={"coil": logging.INFO, "coil_fusion": True}).

Registration is best-effort: a torch without these APIs logs one debug line and coil's
artifacts go to plain child loggers of "coil" instead.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Any, Callable, Mapping

log = logging.getLogger("coil")

# artifact name -> (CompileArtifacts key or None, description, off by default)
ARTIFACTS: dict[str, tuple[str | None, str, bool]] = {
    "coil_fusion": ("fusion_log", "coil's fusion decisions, per compiled graph", False),
    "coil_schedule": ("schedule", "coil's kernels and memory plan, per compiled graph", False),
    "coil_fallbacks": (None, "ops coil ran eagerly (per op or the whole graph) and why",
                       False),
    "coil_loop_ir": ("loop_program", "coil's loop IR after lowering, per compiled graph",
                     True),
    "coil_kernels": ("source", "the source coil generated, per compiled graph", True),
}

_loggers: dict[str, logging.Logger] = {}
_registered = False
_lock = threading.Lock()


def register() -> bool:
    """Registers the "coil" log and the artifacts with torch._logging (once per process);
    True where torch took them. Called at `import coil`."""
    global _registered
    with _lock:
        if _loggers:
            return _registered
        try:
            from torch._logging import _internal as tl

            tl.register_log("coil", ["coil"])
            for name, (_, description, off) in ARTIFACTS.items():
                tl.register_artifact(name, description, off_by_default=off)
            for name in ARTIFACTS:
                _loggers[name] = tl.getArtifactLogger("coil", name)
            _registered = True
        except Exception as e:  # an older or newer torch without these APIs
            log.debug("coil: torch._logging registration unavailable (%s: %s); coil's "
                      "artifacts log to plain 'coil.__<artifact>' loggers", type(e).__name__, e)
            _loggers.clear()
            for name in ARTIFACTS:
                _loggers[name] = logging.getLogger(f"coil.__{name}")
            _registered = False
        return _registered


def import_torch() -> None:
    """Imports torch where `import coil` comes first, so that TORCH_LOGS may name coil's
    artifacts in any order: torch parses TORCH_LOGS at its import and rejects names it does not
    know yet, so the variable is held back for that import, and parsed again
    (torch._logging._init_logs) once coil registered. Without coil artifacts in TORCH_LOGS it
    is a plain import."""
    if "torch" in sys.modules:
        return
    setting = os.environ.get("TORCH_LOGS")
    names = {n.strip().lstrip("+-") for n in (setting or "").split(",")}
    if not names & set(ARTIFACTS):
        import torch  # noqa: F401

        return
    del os.environ["TORCH_LOGS"]
    try:
        import torch  # noqa: F401
    finally:
        os.environ["TORCH_LOGS"] = setting
    if not register():
        return
    try:
        from torch._logging import _init_logs
    except ImportError as e:  # a torch that configures its logs otherwise
        log.debug("coil: cannot re-read TORCH_LOGS (%s)", e)
        return
    # An unknown name in TORCH_LOGS raises here, as it would have at torch's import.
    _init_logs()


def artifact_logger(name: str) -> logging.Logger:
    if not _loggers:
        register()
    return _loggers[name]


def enabled(name: str) -> bool:
    """Whether a DEBUG record of the artifact would reach a handler: the cheap check made
    before an artifact's text is read (an off-by-default artifact under "+coil" is DEBUG-enabled
    but cut off from the handlers, torch._logging's configure_artifact_log)."""
    lg = artifact_logger(name)
    return lg.isEnabledFor(logging.DEBUG) and (lg.propagate or bool(lg.handlers))


def _emit(name: str, graph: str, what: str, text: Callable[[], str]) -> None:
    if not enabled(name):
        return
    body = text()
    if body:
        artifact_logger(name).debug("coil: %s %s:\n%s", graph, what, body.rstrip("\n"))


def graph_compiled(graph: str, art: Mapping[str, Any], seconds: float,
                   num_ops: int | None) -> None:
    """One compiled graph: the INFO summary line and each enabled artifact."""
    if log.isEnabledFor(logging.INFO):
        log.info("coil: compiled %s: %s ops -> %s kernel(s), %d op(s) run eagerly, %.3f s%s",
                 graph, "?" if num_ops is None else num_ops, art.get("num_kernels", "?"),
                 len(art.get("fallback_ops", []) or []), seconds,
                 " (kernel cache hit)" if art.get("cache_hit") else "")
    for name, (key, _, _) in ARTIFACTS.items():
        if key is not None:
            _emit(name, graph, key.replace("_", " "), lambda key=key: str(art.get(key) or ""))
    _emit("coil_fallbacks", graph, "ops run eagerly",
          lambda: "".join(f"  {op}\n" for op in art.get("fallback_ops", []) or []))


def graph_fell_back(graph: str, reason: str) -> None:
    """A graph that runs eagerly as a whole (the warning is logged once per reason elsewhere;
    the artifact names every graph)."""
    _emit("coil_fallbacks", graph, "ran eagerly as a whole", lambda: f"  {reason}\n")
