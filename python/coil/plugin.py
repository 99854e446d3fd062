"""C++ plugins: shared libraries that add ops (meta functions), lowerings, graph passes and
backends to coil at load time (include/coil/plugin/plugin.h; docs/extending/write-a-plugin.md).

`coil.load_plugin(path)` loads one (a second load of the same file is a no-op) and returns what
it registered. Load plugins before compiling what uses them: TorchDynamo caches compiled code,
so a function compiled before a plugin was loaded keeps its graphs (and their per-op fallbacks
for the plugin's ops) until torch._dynamo.reset().

Installed packages can name plugins in the entry point group `coil.plugins`; each entry point
is a str/PathLike path to the library, or a callable returning one:

    [project.entry-points."coil.plugins"]
    my_plugin = "my_package:plugin_path"

`load_entry_point_plugins()` loads them all (once per process).
"""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass, field

__all__ = ["LoadedPlugin", "PluginError", "load_plugin", "loaded_plugins",
           "load_entry_point_plugins", "registered_backends"]

ENTRY_POINT_GROUP = "coil.plugins"


class PluginError(RuntimeError):
    """A plugin could not be loaded: not a coil plugin, built against another coil, its
    registration failed, or a name it registers is taken. Nothing of it was registered."""


@dataclass(frozen=True)
class LoadedPlugin:
    path: str  # the library's canonical path
    name: str  # the name it declared (COIL_PLUGIN_ABI)
    ops: list[str] = field(default_factory=list)
    lowerings: list[str] = field(default_factory=list)
    passes: list[str] = field(default_factory=list)
    backends: list[str] = field(default_factory=list)  # option backend_target selects them


def _coil():
    from . import _coil  # imported here: coil imports without the extension (tests' fake)

    return _coil


def load_plugin(path: str | os.PathLike) -> LoadedPlugin:
    """Loads the coil plugin library at `path` and returns what it registered. Loading a file
    that is already loaded does nothing and returns its record. Raises FileNotFoundError for a
    missing file and PluginError when the library cannot be loaded or registered."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"coil plugin {path}: no such file")
    ext = _coil()
    try:
        info = ext.load_plugin(os.path.abspath(path))
    except ext.PluginError as e:
        raise PluginError(str(e)) from None
    return LoadedPlugin(**info)


def loaded_plugins() -> list[LoadedPlugin]:
    """The plugins loaded in this process, in load order."""
    return [LoadedPlugin(**info) for info in _coil().loaded_plugins()]


def registered_backends() -> list[str]:
    """The names the option backend_target accepts: coil's backends (cpu, cuda, portable), then
    those that loaded plugins registered, in order."""
    return list(_coil().registered_backends())


_entry_points_lock = threading.Lock()
_entry_points_loaded = False


def load_entry_point_plugins() -> list[LoadedPlugin]:
    """Loads every plugin that an installed package names in the `coil.plugins` entry point
    group; the first call does the work, later calls return []. A plugin that fails raises
    PluginError naming its entry point."""
    global _entry_points_loaded
    with _entry_points_lock:
        if _entry_points_loaded:
            return []
        _entry_points_loaded = True
        from importlib.metadata import entry_points

        out = []
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            target = ep.load()
            path = target() if callable(target) else target
            try:
                out.append(load_plugin(path))
            except (PluginError, FileNotFoundError) as e:
                raise PluginError(f"entry point {ep.name} ({ep.value}): {e}") from None
        return out
