#!/usr/bin/env python3
"""Checks that coil's C++ layers include only downward (issue 28, item 5).

The single source of truth is CMakeLists.txt: every `coil_layer(<name> DEPS <targets>...)`
call declares a layer and the libraries it links. A layer may include headers of the layers in
the transitive closure of its `coil_*` DEPS (and its own); anything else is a violation:
upward (the other layer depends on this one) or sideways (neither depends on the other).

Where the files of a layer live: `coil_layer(<name> ...)` globs `src/<name>/**.cpp` and its
target is `coil_<name with / -> _>`; headers are `include/coil/<name>/`. Every layer today has
directories named exactly as the layer (`backend/cpu` -> src/backend/cpu, include/coil/backend/
cpu), so DIR_OVERRIDES below is empty; a layer whose directories are named otherwise must be
listed there explicitly.

Consumers on top of the layers (not `coil_layer` calls, but checked the same way):
  src/python  -> the nanobind module `_coil` (`target_link_libraries(_coil PRIVATE coil)`),
  tools       -> the `tools/*.cpp` executables (`target_link_libraries(${tool_name} PRIVATE
                 coil)`),
and `coil` is `target_link_libraries(coil INTERFACE coil_runtime)`; their allowed layers are read
from those calls, so today they may include every layer.

Scanned: C++ files (.h .hpp .cpp .cc .cxx .cuh .inc) under src/, include/coil/ and tools/.
Included files: `#include "coil/..."` resolves to include/coil/...; another quoted include
resolves as the compiler would (the including file's folder first, then include/); a quoted
include found in neither (a system or generated header) and every <...> include is not checked.

Known violations may be listed in tools/layer_exceptions.txt, one per line:
    <including file> <included file>   # reason
(both paths relative to the repository root, e.g.
 `src/passes/dce.cpp include/coil/ops/registry.h  # ...`). They are reported as allowed;
an entry that no longer matches anything is reported as stale (a warning: delete the line).

Usage: python3 tools/check_layers.py [--root DIR] [--exceptions FILE] [-v]
Exit status: 0 no violations, 1 violations, 2 CMakeLists.txt could not be read as expected.
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

# Layer name -> (src directory, include directory), both relative to the root, for layers whose
# directories are NOT src/<name> and include/coil/<name>. None today.
DIR_OVERRIDES: dict[str, tuple[str, str]] = {}

# Directories built into targets that are not coil_layer()s, and the CMake target each builds.
CONSUMERS: dict[str, str] = {
    "src/python": "_coil",
    "tools": "${tool_name}",
}

CPP_SUFFIXES = {".h", ".hpp", ".hh", ".cpp", ".cc", ".cxx", ".cuh", ".cu", ".inc"}
SCAN_DIRS = ("src", "include/coil", "tools")


class ConfigError(Exception):
    pass


@dataclass(frozen=True)
class Unit:
    """A layer or a consumer: the directories it owns and the layers it may include."""

    name: str
    dirs: tuple[str, ...]
    allowed: frozenset[str]  # layer names, including its own when it is a layer


@dataclass(frozen=True)
class Violation:
    file: str
    line: int
    include: str
    target: str  # root-relative path of the included file
    from_unit: str
    to_layer: str
    kind: str  # "upward", "sideways" or "undeclared"

    def key(self) -> tuple[str, str]:
        return (self.file, self.target)

    def describe(self) -> str:
        if self.kind == "undeclared":
            return (f"{self.file}:{self.line}: {self.from_unit} includes \"{self.include}\" "
                    f"({self.target}), which is in no layer of CMakeLists.txt")
        return (f"{self.file}:{self.line}: {self.kind} include: {self.from_unit} -> "
                f"{self.to_layer} (\"{self.include}\")")


# ---------------------------------------------------------------- CMakeLists.txt

def _strip_cmake_comments(text: str) -> str:
    out = []
    for line in text.splitlines():
        # '#' starts a comment unless inside a quoted argument.
        in_str, cut = False, len(line)
        for i, ch in enumerate(line):
            if ch == '"' and (i == 0 or line[i - 1] != "\\"):
                in_str = not in_str
            elif ch == "#" and not in_str:
                cut = i
                break
        out.append(line[:cut])
    return "\n".join(out)


def _cmake_calls(text: str, command: str) -> list[list[str]]:
    """The argument lists of every `command(...)` call (arguments split on whitespace)."""
    calls = []
    for m in re.finditer(rf"(?<![\w$]){re.escape(command)}\s*\(([^)]*)\)", text):
        calls.append(m.group(1).split())
    return calls


def _target_of_layer(name: str) -> str:
    return "coil_" + name.replace("/", "_")


def parse_cmake(root: Path) -> list[Unit]:
    path = root / "CMakeLists.txt"
    try:
        text = _strip_cmake_comments(path.read_text())
    except OSError as e:
        raise ConfigError(f"cannot read {path}: {e}") from e

    # Layers, in declaration order.
    layer_deps: dict[str, list[str]] = {}
    for args in _cmake_calls(text, "coil_layer"):
        if not args:
            raise ConfigError("coil_layer() without a name")
        name, rest = args[0], args[1:]
        if rest and rest[0] != "DEPS":
            raise ConfigError(f"coil_layer({name} ...): expected DEPS, got {rest[0]}")
        layer_deps[name] = rest[1:]
    if not layer_deps:
        raise ConfigError(f"no coil_layer(...) calls in {path}")

    target_to_layer = {_target_of_layer(n): n for n in layer_deps}

    # Plain link dependencies of other targets (coil, _coil, ${tool_name}, ...).
    links: dict[str, list[str]] = {}
    for args in _cmake_calls(text, "target_link_libraries"):
        if not args:
            continue
        deps = [a for a in args[1:] if a not in ("PUBLIC", "PRIVATE", "INTERFACE")]
        links.setdefault(args[0], []).extend(deps)
    for name, deps in layer_deps.items():
        links.setdefault(_target_of_layer(name), []).extend(deps)

    def closure(target: str) -> frozenset[str]:
        """Layers reachable from target through link dependencies (target's own included)."""
        seen: set[str] = set()
        stack = [target]
        while stack:
            t = stack.pop()
            if t in seen:
                continue
            seen.add(t)
            stack.extend(d for d in links.get(t, []) if d.startswith("coil") or d == "_coil")
        return frozenset(target_to_layer[t] for t in seen if t in target_to_layer)

    units = []
    for name in layer_deps:
        for dep in layer_deps[name]:
            if dep.startswith("coil_") and dep not in target_to_layer:
                raise ConfigError(f"coil_layer({name}): DEPS {dep} is not a coil_layer target")
        src, inc = DIR_OVERRIDES.get(name, (f"src/{name}", f"include/coil/{name}"))
        units.append(Unit(name, (src, inc), closure(_target_of_layer(name))))
    for directory, target in CONSUMERS.items():
        if target not in links:
            if not (root / directory).is_dir():
                continue
            raise ConfigError(f"{directory}: no target_link_libraries({target} ...) in {path}")
        units.append(Unit(f"{directory} ({target})", (directory,), closure(target)))
    return units


# ---------------------------------------------------------------- includes

_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"')


def quoted_includes(text: str):
    """(line number, path) of every `#include "..."` outside comments and `#if 0` blocks."""
    in_block = False
    if0_depth = 0  # > 0 inside an `#if 0` region (counting nested #if inside it)
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw
        # Drop block comments (possibly spanning lines) and line comments.
        out, i = [], 0
        while i < len(line):
            if in_block:
                end = line.find("*/", i)
                if end < 0:
                    i = len(line)
                else:
                    in_block, i = False, end + 2
            else:
                start_block = line.find("/*", i)
                start_line = line.find("//", i)
                if start_line >= 0 and (start_block < 0 or start_line < start_block):
                    # A '//' inside the include's quotes is part of the path, not a comment.
                    if _INCLUDE.match(line) and line.find('"') < start_line:
                        out.append(line[i:])
                    else:
                        out.append(line[i:start_line])
                    i = len(line)
                elif start_block >= 0:
                    out.append(line[i:start_block])
                    in_block, i = True, start_block + 2
                else:
                    out.append(line[i:])
                    i = len(line)
        line = "".join(out)
        directive = line.strip()
        if if0_depth:
            if re.match(r"#\s*if", directive):
                if0_depth += 1
            elif re.match(r"#\s*endif", directive):
                if0_depth -= 1
            elif if0_depth == 1 and re.match(r"#\s*(else|elif)", directive):
                if0_depth = 0
            continue
        if re.match(r"#\s*if\s+0\b", directive):
            if0_depth = 1
            continue
        m = _INCLUDE.match(line)
        if m:
            yield lineno, m.group(1)


def resolve(root: Path, including: Path, inc: str) -> Path | None:
    """The file a quoted include names, or None (system, generated or missing header)."""
    candidates = []
    if not inc.startswith("coil/"):
        candidates.append(including.parent / inc)
    candidates.append(root / "include" / inc)
    for c in candidates:
        if c.is_file():
            return c.resolve()
    return None


def unit_of(rel: str, units: list[Unit]) -> Unit | None:
    """The unit owning a root-relative path: the longest directory that contains it."""
    best, best_len = None, -1
    for u in units:
        for d in u.dirs:
            if (rel == d or rel.startswith(d + "/")) and len(d) > best_len:
                best, best_len = u, len(d)
    return best


def check(root: Path, units: list[Unit]) -> tuple[list[Violation], list[str]]:
    """All violations under root, and warnings (C++ files that belong to no layer)."""
    root = root.resolve()
    layers = {u.name for u in units if u.name in u.allowed}
    violations, warnings = [], []
    files = sorted({p for d in SCAN_DIRS if (root / d).is_dir()
                    for p in (root / d).rglob("*")
                    if p.is_file() and p.suffix in CPP_SUFFIXES})
    for path in files:
        rel = path.relative_to(root).as_posix()
        unit = unit_of(rel, units)
        if unit is None:
            warnings.append(f"{rel}: not in any layer or consumer of CMakeLists.txt; not checked")
            continue
        try:
            text = path.read_text(errors="replace")
        except OSError as e:
            warnings.append(f"{rel}: cannot read: {e}")
            continue
        for lineno, inc in quoted_includes(text):
            target = resolve(root, path, inc)
            if target is None:
                continue
            try:
                target_rel = target.relative_to(root).as_posix()
            except ValueError:
                continue  # outside the tree
            owner = unit_of(target_rel, units)
            if owner is None:
                if target_rel.startswith(("include/coil/", "src/")):
                    violations.append(Violation(rel, lineno, inc, target_rel, unit.name, "?",
                                                "undeclared"))
                continue
            if owner is unit or owner.name in unit.allowed:
                continue
            if owner.name not in layers:
                kind = "sideways"  # a layer or consumer including a consumer's file
            else:
                kind = "upward" if unit.name in owner.allowed else "sideways"
            violations.append(Violation(rel, lineno, inc, target_rel, unit.name, owner.name, kind))
    return violations, warnings


# ---------------------------------------------------------------- exceptions

def read_exceptions(path: Path) -> dict[tuple[str, str], str]:
    """(including file, included file) -> reason."""
    entries: dict[tuple[str, str], str] = {}
    if not path.is_file():
        return entries
    for lineno, raw in enumerate(path.read_text().splitlines(), 1):
        body, _, reason = raw.partition("#")
        fields = body.split()
        if not fields:
            continue
        if len(fields) != 2 or not reason.strip():
            raise ConfigError(f"{path}:{lineno}: expected '<file> <included file>  # reason'")
        entries[(fields[0], fields[1])] = reason.strip()
    return entries


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", type=Path, default=Path(__file__).resolve().parents[1],
                    help="repository root (default: this script's parent's parent)")
    ap.add_argument("--exceptions", type=Path, default=None,
                    help="allow-list (default: <root>/tools/layer_exceptions.txt)")
    ap.add_argument("-v", "--verbose", action="store_true",
                    help="print the layers and what each may include")
    args = ap.parse_args(argv)
    root = args.root.resolve()
    exceptions_path = args.exceptions or root / "tools" / "layer_exceptions.txt"
    try:
        units = parse_cmake(root)
        exceptions = read_exceptions(exceptions_path)
    except ConfigError as e:
        print(f"check_layers: error: {e}", file=sys.stderr)
        return 2

    if args.verbose:
        for u in units:
            below = sorted(u.allowed - {u.name})
            print(f"{u.name}: {', '.join(u.dirs)}; may include {', '.join(below) or 'nothing'}")

    violations, warnings = check(root, units)
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    new, allowed = [], []
    for v in violations:
        (allowed if v.key() in exceptions else new).append(v)
    for v in allowed:
        print(f"allowed: {v.describe()}  [{exceptions[v.key()]}]")
    for v in new:
        print(v.describe())
    used = {v.key() for v in allowed}
    for key in exceptions:
        if key not in used:
            print(f"warning: stale entry in {exceptions_path.name}: {key[0]} {key[1]} "
                  f"(no such include any more: delete the line)", file=sys.stderr)

    n_layers = sum(1 for u in units if u.name in u.allowed)
    if new:
        print(f"check_layers: FAIL: {len(new)} layering violation(s) "
              f"({len(allowed)} allowed by {exceptions_path.name}), {n_layers} layers")
        return 1
    print(f"check_layers: OK: {n_layers} layers, no upward or sideways includes"
          + (f" ({len(allowed)} allowed by {exceptions_path.name})" if allowed else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
