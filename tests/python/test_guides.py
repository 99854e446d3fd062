"""The guides of docs/extending/ are real: their marked code blocks are built and run here, so a
guide that rots fails CI. The markers (docs/extending/README.md, "Guides that run"), in the info
string of a fenced block:

  ```python                  run: all python blocks of a guide, in order, as one script in a
                             fresh interpreter (cwd: the guide's scratch folder)
  ```cpp file=PATH           written to PATH in the scratch folder (cmake, c, ... too; blocks
                             naming the same PATH are concatenated in order)
  ```sh run                  run with bash in the scratch folder, in document order with the
                             file blocks, before the python blocks; $COIL_SOURCE_DIR is this
                             checkout
  ```cpp tree=PATH           must appear in PATH of this checkout, verbatim; a line `// ...`
                             (or `# ...`) in the block stands for lines left out, so each piece
                             between such lines must appear, in order

The attributes may also stand in an HTML comment on the line before the fence,
`<!-- guide: tree=PATH -->`, for a block whose info string must stay plain (write-a-pass.md's
```cpp block, which tests/cpp/passes/guide_example_test.cpp also finds by its fence).

Any other block (```text, ```sh without `run`) is shown, not run; a ```cpp or ```cmake block
without a marker is an error, so no C++ in a guide escapes checking.

Every docs/extending/*.md is run here, except custom-ops.md, which
tests/python/test_extending_guides.py runs (python blocks only), and the index; the index must
link every guide (test_every_guide_is_checked)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE_DIR = ROOT / "docs" / "extending"
# Guides run elsewhere, and the index (no code).
OTHER_RUNNERS = {"custom-ops.md": "tests/python/test_extending_guides.py", "README.md": None}
# Every other docs/extending/*.md is run here: a new guide is checked from its first commit.
GUIDES = sorted(p.name for p in GUIDE_DIR.glob("*.md") if p.name not in OTHER_RUNNERS)
# Guides whose markers are still to come: skipped with this reason (visibly), not passed.
PENDING: dict[str, str] = {}

_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```[ \t]*$", re.M | re.S)
_MUST_MARK = {"cpp", "c++", "cmake", "c"}


@dataclass
class Block:
    lang: str
    attrs: dict[str, str]
    body: str
    line: int  # 1-based line of the opening fence


_COMMENT = re.compile(r"<!--\s*guide:(.*?)-->[ \t]*\n$")


def parse_blocks(text: str) -> list[Block]:
    """The fenced blocks of a Markdown text: language, key=value / bare attributes (from the
    info string and a `<!-- guide: ... -->` line right before the fence), body."""
    out = []
    for m in _FENCE.finditer(text):
        words = m.group(1).split()
        lang = words[0] if words else ""
        before = text[text.rfind("\n", 0, max(m.start() - 1, 0)) + 1:m.start()]
        comment = _COMMENT.search(before)
        attrs = {}
        for w in words[1:] + (comment.group(1).split() if comment else []):
            k, _, v = w.partition("=")
            attrs[k] = v
        out.append(Block(lang, attrs, m.group(2), text.count("\n", 0, m.start()) + 1))
    return out


_ELISION = re.compile(r"^[ \t]*(?://|#) \.\.\.[ \t]*$", re.M)


def tree_pieces(body: str) -> list[str]:
    """The verbatim pieces of a tree= block (split at `// ...` lines), trimmed of blank edges."""
    return [p.strip("\n") for p in _ELISION.split(body) if p.strip()]


def missing_tree_piece(body: str, text: str) -> str | None:
    """The first piece of `body` not found in `text` after the previous one, else None."""
    pos = 0
    for piece in tree_pieces(body):
        at = text.find(piece, pos)
        if at < 0:
            return piece
        pos = at + len(piece)
    return None


# --- the convention itself

def test_parse_blocks_and_markers():
    text = ("# t\n```python\nx = 1\n```\n```cpp file=src/a.cpp\nint a;\n```\n"
            "```sh run\nls\n```\n```text\nshown\n```\n<!-- guide: tree=src/b.cpp -->\n"
            "```cpp\nint b;\n```\n")
    blocks = parse_blocks(text)
    assert [(b.lang, b.attrs, b.body, b.line) for b in blocks] == [
        ("python", {}, "x = 1\n", 2), ("cpp", {"file": "src/a.cpp"}, "int a;\n", 5),
        ("sh", {"run": ""}, "ls\n", 8), ("text", {}, "shown\n", 11),
        ("cpp", {"tree": "src/b.cpp"}, "int b;\n", 15)]


def test_tree_blocks_match_in_order_with_elisions():
    text = "int f() {\n  a();\n  b();\n  c();\n}\nint g();\n"
    assert missing_tree_piece("int f() {\n  a();\n", text) is None
    assert missing_tree_piece("int f() {\n// ...\n  c();\n}\n", text) is None
    assert missing_tree_piece("  c();\n// ...\nint f() {\n", text) == "int f() {"  # order
    assert missing_tree_piece("int f() {\n  b();\n", text) == "int f() {\n  b();"


def test_every_guide_is_checked():
    assert {"add-a-pointwise-op.md", "add-a-reduction.md", "write-a-pass.md",
            "write-a-plugin.md"} <= set(GUIDES)
    for runner in OTHER_RUNNERS.values():
        assert runner is None or (ROOT / runner).is_file(), runner
    index = (GUIDE_DIR / "README.md").read_text()
    for g in GUIDES + [g for g in OTHER_RUNNERS if g != "README.md"]:
        assert f"({g})" in index, f"docs/extending/README.md does not link {g}"


# --- the guides

def _check_static(guide: str, blocks: list[Block]) -> None:
    for b in blocks:
        where = f"{guide}:{b.line}"
        if "tree" in b.attrs:
            path = ROOT / b.attrs["tree"]
            assert path.is_file(), f"{where}: tree={b.attrs['tree']} does not exist"
            piece = missing_tree_piece(b.body, path.read_text())
            assert piece is None, (f"{where}: this part of the block is not in "
                                   f"{b.attrs['tree']} (the guide no longer matches the tree; "
                                   f"update one of them):\n{piece}")
        elif b.lang in _MUST_MARK:
            assert "file" in b.attrs, (f"{where}: a ```{b.lang} block needs a marker "
                                       "(file= or tree=; docs/extending/README.md)")


def _tools_for(blocks: list[Block]) -> list[str]:
    if not any(b.lang == "sh" and "run" in b.attrs for b in blocks):
        return []
    need = {"cmake": "cmake", "ninja": "ninja", "C++ compiler": os.environ.get("CXX", "c++")}
    return [name for name, exe in need.items() if shutil.which(exe) is None]


@pytest.mark.parametrize("guide", GUIDES)
def test_guide(guide, tmp_path):
    blocks = parse_blocks((GUIDE_DIR / guide).read_text())
    assert blocks, f"{guide} has no code blocks"
    if guide in PENDING:
        try:
            _check_static(guide, blocks)
        except AssertionError as e:
            pytest.skip(f"{guide}: {PENDING[guide]} ({str(e).splitlines()[0]})")
        pytest.fail(f"{guide} is checked now: remove it from PENDING in tests/python/test_guides.py")
    _check_static(guide, blocks)
    runnable = [b for b in blocks if b.lang == "python" or "file" in b.attrs
                or (b.lang == "sh" and "run" in b.attrs)]
    if not runnable:
        return
    missing = _tools_for(blocks)
    if missing:
        pytest.skip(f"{guide} builds C++: no {', '.join(missing)} on PATH")
    try:
        import coil._coil  # noqa: F401
    except ImportError as e:
        pytest.skip(f"coil._coil not built: {e}")

    env = dict(os.environ)
    env["COIL_SOURCE_DIR"] = str(ROOT)
    env["PYTHONPATH"] = os.pathsep.join(
        [str(ROOT / "python")] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    for var in ("COIL_STRICT", "COIL_DEBUG"):
        env.pop(var, None)
    written: set[str] = set()
    for b in blocks:
        where = f"{guide}:{b.line}"
        if "file" in b.attrs:
            path = tmp_path / b.attrs["file"]
            assert tmp_path in path.resolve().parents, f"{where}: file= leaves the folder"
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(path, "a" if b.attrs["file"] in written else "w") as f:
                f.write(b.body)
            written.add(b.attrs["file"])
        elif b.lang == "sh" and "run" in b.attrs:
            proc = subprocess.run(["bash", "-euo", "pipefail", "-c", b.body], cwd=tmp_path,
                                  env=env, capture_output=True, text=True, timeout=600)
            assert proc.returncode == 0, (f"{where}: the shell block failed (exit "
                                          f"{proc.returncode}):\n{b.body}\n{proc.stdout[-4000:]}"
                                          f"\n{proc.stderr[-4000:]}")
    py = [b for b in blocks if b.lang == "python"]
    if py:
        script = "\n".join(f"# --- {guide}:{b.line}\n{b.body}" for b in py)
        (tmp_path / "guide.py").write_text(script)
        proc = subprocess.run([sys.executable, "guide.py"], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=600)
        assert proc.returncode == 0, (f"{guide}'s python blocks failed (exit "
                                      f"{proc.returncode}):\n{proc.stdout[-3000:]}\n"
                                      f"{proc.stderr[-6000:]}")
