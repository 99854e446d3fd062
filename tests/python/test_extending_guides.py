"""The guides of docs/extending/ are run: their ```python blocks, in order, in one fresh
process (one namespace, as a reader pasting them into one session would), so a guide whose code
no longer works fails here. A block meant to be shown but not run would use another info string
(```text, ```sh)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDES = ["docs/extending/custom-ops.md"]

_BLOCK = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)


def python_blocks(text: str) -> list[str]:
    """The bodies of the ```python fenced blocks of a Markdown text, in order."""
    return [m.group(1) for m in _BLOCK.finditer(text)]


def test_python_blocks_extraction():
    text = "a\n```python\nx = 1\n```\n```sh\nls\n```\n```python\nprint(x)\n```\n"
    assert python_blocks(text) == ["x = 1\n", "print(x)\n"]


@pytest.mark.parametrize("guide", GUIDES)
def test_guide_runs(guide, real_coil, tmp_path):
    blocks = python_blocks((ROOT / guide).read_text())
    assert blocks, f"{guide} has no ```python blocks"
    # One script; each block is marked so that a failure names its block.
    script = "\n".join(f"# --- {guide}, python block {i + 1}\n{b}" for i, b in enumerate(blocks))
    path = tmp_path / "guide.py"
    path.write_text(script)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "python")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    for var in ("COIL_STRICT", "COIL_DEBUG"):
        env.pop(var, None)
    proc = subprocess.run([sys.executable, str(path)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, (
        f"{guide} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
