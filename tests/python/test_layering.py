"""Layers include only downward (issue 28, item 5): tools/check_layers.py on the tree, and on
small fake trees so that the checker itself is known to catch what it should."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECKER = ROOT / "tools" / "check_layers.py"

FAKE_CMAKE = """\
cmake_minimum_required(VERSION 3.24)
project(fake LANGUAGES CXX)
function(coil_layer name)
  # (the real one builds src/${name})
endfunction()
coil_layer(base DEPS Threads::Threads)
coil_layer(top DEPS coil_base)
"""


def run_checker(root: Path, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(CHECKER), "--root", str(root), *extra],
                          capture_output=True, text=True, timeout=120)


def write(root: Path, rel: str, text: str) -> None:
    path = root / rel
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def fake_tree(root: Path, upward: bool) -> None:
    """Two layers, base <- top; with upward, base/b.cpp includes top's header on line 3."""
    write(root, "CMakeLists.txt", FAKE_CMAKE)
    write(root, "include/coil/base/b.h", "#pragma once\nint b();\n")
    write(root, "include/coil/top/t.h", '#pragma once\n#include "coil/base/b.h"\nint t();\n')
    write(root, "src/top/t.cpp", '#include "coil/top/t.h"\n#include "coil/base/b.h"\n'
                                 "int t() { return b(); }\n")
    base = '#include "coil/base/b.h"\n// #include "coil/top/t.h" (a comment: not an include)\n'
    if upward:
        base += '#include "coil/top/t.h"\n'
    write(root, "src/base/b.cpp", base + "int b() { return 1; }\n")


def test_tree_has_no_layering_violations():
    result = run_checker(ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "check_layers: OK" in result.stdout


def test_fake_tree_clean(tmp_path):
    fake_tree(tmp_path, upward=False)
    result = run_checker(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout.strip().splitlines()[-1].startswith("check_layers: OK: 2 layers")


def test_fake_tree_upward_include_is_reported(tmp_path):
    fake_tree(tmp_path, upward=True)
    result = run_checker(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    lines = result.stdout.strip().splitlines()
    violations = [l for l in lines if not l.startswith(("check_layers:", "allowed:"))]
    assert violations == ['src/base/b.cpp:3: upward include: base -> top ("coil/top/t.h")']
    assert lines[-1].startswith("check_layers: FAIL: 1 layering violation")


def test_sideways_relative_include_is_reported(tmp_path):
    fake_tree(tmp_path, upward=False)
    with open(tmp_path / "CMakeLists.txt", "a") as f:
        f.write("coil_layer(side DEPS coil_base)\n")
    write(tmp_path, "src/side/s.cpp", '#include "coil/base/b.h"\n#include "../top/t_impl.h"\n')
    write(tmp_path, "src/top/t_impl.h", "#pragma once\n")
    result = run_checker(tmp_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert 'src/side/s.cpp:2: sideways include: side -> top ("../top/t_impl.h")' in result.stdout


def test_exceptions_file_allows_listed_violation_only(tmp_path):
    fake_tree(tmp_path, upward=True)
    exceptions = tmp_path / "exceptions.txt"
    exceptions.write_text("# comment line\n"
                          "src/base/b.cpp include/coil/top/t.h  # kept for the test\n")
    result = run_checker(tmp_path, "--exceptions", str(exceptions))
    assert result.returncode == 0, result.stdout + result.stderr
    assert "allowed: src/base/b.cpp:3" in result.stdout
    # A second, unlisted violation still fails.
    write(tmp_path, "include/coil/base/b2.h", '#pragma once\n#include "coil/top/t.h"\n')
    result = run_checker(tmp_path, "--exceptions", str(exceptions))
    assert result.returncode == 1, result.stdout + result.stderr
    assert 'include/coil/base/b2.h:2: upward include: base -> top' in result.stdout
