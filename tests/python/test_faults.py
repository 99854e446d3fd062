"""Fault injection, end to end (docs/reliability.md): each fault a user or an attacker can
cause around a compile, and the exact behaviour coil promises for it — correct results, or a
clean eager fallback with its reason; never a crash, a hang, a wrong answer or a lost program.

The kernel cache's own rules (modes, digests, symlinks, ownership) are unit-tested in C++
(tests/cpp/backend_cpu/disk_cache_test.cpp, host_compiler_test.cpp); here each fault is met
by a real process compiling a graph through torch.compile (tests/python/fault_driver.py), so
what is checked is what a user sees.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch

pytest.importorskip("coil._coil", reason="the C++ extension coil._coil is not built")

import coil  # noqa: E402

HERE = Path(__file__).resolve().parent
DRIVER = HERE / "fault_driver.py"


def driver_env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    for k in ("COIL_STRICT", "COIL_DEBUG", "COIL_DEBUG_DIR", "COIL_CXX"):
        env.pop(k, None)
    env["COIL_CACHE_DIR"] = str(tmp_path / "cache")
    env["TMPDIR"] = str(tmp_path / "tmp")
    (tmp_path / "tmp").mkdir(exist_ok=True)
    env.update(extra)
    return env


def run_driver(env: dict[str, str], *args: str, options: dict | None = None,
               timeout: float = 300) -> dict:
    env = dict(env)
    if options is not None:
        env["COIL_TEST_OPTIONS"] = json.dumps(options)
    p = subprocess.run([sys.executable, str(DRIVER), *args], env=env, capture_output=True,
                       text=True, timeout=timeout)
    assert p.returncode == 0, f"driver died (rc {p.returncode}):\n{p.stdout}\n{p.stderr}"
    return json.loads(p.stdout.strip().splitlines()[-1])


def libraries(cache: Path) -> list[Path]:
    return sorted(p for p in cache.glob("*.so") if ".tmp." not in p.name)


@pytest.fixture
def first_compile(tmp_path):
    """A cache holding the driver graph's library, compiled by a first process."""
    env = driver_env(tmp_path)
    r = run_driver(env)
    assert r["ok"] and r["compiled"] == 1 and not r["fallen_back"], r
    libs = libraries(tmp_path / "cache")
    assert len(libs) == 1, libs
    return env, libs[0]


# ---- the cache -------------------------------------------------------------------------------


def build_planted_library(tmp_path: Path, marker: Path) -> bytes:
    src = tmp_path / "planted.c"
    src.write_text(textwrap.dedent(f"""
        #include <stdio.h>
        __attribute__((constructor)) static void planted(void) {{
          FILE* f = fopen("{marker}", "w");
          if (f) {{ fputs("ran", f); fclose(f); }}
        }}
        """))
    out = tmp_path / "planted.so"
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(out), str(src)], check=True)
    return out.read_bytes()


def test_planted_library_never_runs(first_compile, tmp_path):
    # An attacker who can write the entry (or a stale, foreign file) puts a library there whose
    # constructor runs on dlopen. The digest no longer matches: it is evicted unloaded.
    env, lib = first_compile
    marker = tmp_path / "planted_ran"
    lib.write_bytes(build_planted_library(tmp_path, marker))
    r = run_driver(env)
    assert not marker.exists(), "the planted library's constructor ran"
    assert r["ok"] and r["compiled"] == 1 and not r["fallen_back"], r
    assert any("evict" in line for line in r["log"]), r["log"]


def test_planted_library_with_forged_digest_cannot_bind(first_compile, tmp_path):
    # Whoever can write the folder can also write a digest that matches the planted bytes: the
    # folder's 0700 mode is what keeps others out. Still, a forged pair must not give wrong
    # numbers: the kernels' symbols carry the key, so nothing binds, and it is recompiled.
    env, lib = first_compile
    marker = tmp_path / "planted_ran"
    lib.write_bytes(build_planted_library(tmp_path, marker))
    import hashlib

    for digest in lib.parent.glob(lib.name + ".*"):
        if digest.suffix in (".sha256", ".digest"):
            text = digest.read_text()
            old = text.split()[0]
            digest.write_text(text.replace(old, hashlib.sha256(lib.read_bytes()).hexdigest()))
    r = run_driver(env)
    assert r["ok"] and r["compiled"] == 1 and not r["fallen_back"], r


def test_symlinked_entry_not_followed(first_compile, tmp_path):
    env, lib = first_compile
    target = tmp_path / "elsewhere.so"
    target.write_bytes(lib.read_bytes())
    lib.unlink()
    lib.symlink_to(target)
    r = run_driver(env)
    assert r["ok"] and r["compiled"] == 1 and not r["fallen_back"], r
    assert not lib.is_symlink(), "the symlink was left in the cache"


@pytest.mark.parametrize("size", ["0", "1", "4096", "half"])
def test_truncated_library_recompiled(first_compile, size):
    # A crash or a full disk mid-write (or a careless copy) leaves a short file: dlopen of it
    # died with SIGBUS in every later run. Now the digest catches it first.
    env, lib = first_compile
    data = lib.read_bytes()
    n = len(data) // 2 if size == "half" else int(size)
    lib.write_bytes(data[:n])
    r = run_driver(env)
    assert r["ok"] and r["compiled"] == 1 and not r["fallen_back"], r
    assert lib.read_bytes() == data or len(lib.read_bytes()) > n  # replaced, not kept
    r = run_driver(env)  # and the next process hits the repaired entry
    assert r["ok"] and r["compiled"] == 1, r


def test_swapped_entry_recompiled(tmp_path):
    # A valid library of another graph, digest and all, moved under this graph's key: every
    # kernel used to be named kernel0, kernel1, ... and it silently gave wrong numbers.
    env = driver_env(tmp_path)
    assert run_driver(env, "--variant", "0")["ok"]
    lib0 = libraries(tmp_path / "cache")
    assert run_driver(env, "--variant", "1")["ok"]
    lib1 = [p for p in libraries(tmp_path / "cache") if p not in lib0]
    assert len(lib0) == 1 and len(lib1) == 1
    for src in [lib1[0]] + list(tmp_path.joinpath("cache").glob(lib1[0].name + ".*")):
        dst = lib0[0].parent / src.name.replace(lib1[0].stem, lib0[0].stem)
        dst.write_bytes(src.read_bytes())
    r = run_driver(env, "--variant", "0")
    assert r["ok"] and r["compiled"] == 1 and not r["fallen_back"], r


def test_cache_modes_ignore_umask(tmp_path):
    env = driver_env(tmp_path)
    old = os.umask(0)
    try:
        r = run_driver(env)
    finally:
        os.umask(old)
    assert r["ok"], r
    cache = tmp_path / "cache"
    assert cache.stat().st_mode & 0o777 == 0o700
    for p in cache.rglob("*"):
        mode = p.stat().st_mode & 0o777
        if p.is_dir():
            assert mode == 0o700, (p, oct(mode))
        elif p.suffix == ".so":
            assert mode == 0o700, (p, oct(mode))
        else:
            assert mode == 0o600, (p, oct(mode))


def test_world_writable_cache_refused(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    r = run_driver(driver_env(tmp_path))
    assert r["ok"] and r["compiled"] == 1 and not r["fallen_back"], r
    assert sum("writable" in line for line in r["log"]) == 1, r["log"]
    assert not libraries(cache), "a library was written into an unsafe folder"


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to another user needs root")
def test_foreign_cache_refused(tmp_path):
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    os.chown(cache, 12345, 12345)
    r = run_driver(driver_env(tmp_path))
    assert r["ok"] and r["compiled"] == 1 and not r["fallen_back"], r
    assert sum("owned" in line for line in r["log"]) == 1, r["log"]


def test_unwritable_cache_warns_once_and_compiles(tmp_path):
    # Root ignores permission bits, so the cache path is made impossible instead: its parent
    # is a regular file.
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    env = driver_env(tmp_path, COIL_CACHE_DIR=str(blocker / "cache"))
    r = run_driver(env, "--calls", "2")
    assert r["ok"] and r["compiled"] == 1 and not r["fallen_back"], r
    assert sum("cache" in line for line in r["log"]) == 1, r["log"]


def test_unwritable_debug_dir_does_not_stop_compiling(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    env = driver_env(tmp_path, COIL_DEBUG="1", COIL_DEBUG_DIR=str(blocker / "dump"))
    r = run_driver(env)
    assert r["ok"] and r["compiled"] == 1 and not r["fallen_back"], r
    assert sum("debug dump" in line for line in r["log"]) == 1, r["log"]


# ---- the host compiler -----------------------------------------------------------------------


def fake_compiler(tmp_path: Path, body: str) -> Path:
    """A `cxx` that answers --version as g++ does (the cache key asks) and runs `body`
    otherwise."""
    script = tmp_path / "fake-cxx"
    script.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then exec g++ --version; fi\n"
                      + body + "\n")
    script.chmod(0o755)
    return script


def test_hanging_compiler_times_out(tmp_path):
    cxx = fake_compiler(tmp_path, "echo started-$$ > \"$COIL_TEST_PIDFILE\"\nexec sleep 300")
    pidfile = tmp_path / "pid"
    env = driver_env(tmp_path, COIL_CXX=str(cxx), COIL_TEST_PIDFILE=str(pidfile))
    t0 = time.monotonic()
    r = run_driver(env, options={"compile_timeout_s": 2}, timeout=120)
    assert time.monotonic() - t0 < 60
    assert r["ok"] and r["compiled"] == 0, r
    assert len(r["fallen_back"]) == 1 and "timed out" in r["fallen_back"][0], r
    pid = int(pidfile.read_text().split("-")[1])
    assert not Path(f"/proc/{pid}").exists(), "the hanging compiler was left running"


def test_hanging_compiler_strict_is_an_error(tmp_path):
    cxx = fake_compiler(tmp_path, "exec sleep 300")
    env = driver_env(tmp_path, COIL_CXX=str(cxx))
    env["COIL_TEST_OPTIONS"] = json.dumps({"compile_timeout_s": 1, "strict": True})
    p = subprocess.run([sys.executable, str(DRIVER)], env=env, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode != 0 and "timed out" in p.stderr, p.stderr[-2000:]


def test_failing_compiler_falls_back_with_its_message(tmp_path):
    cxx = fake_compiler(tmp_path, "echo 'fake-cxx: internal compiler error: out of luck' >&2\n"
                                  "exit 1")
    r = run_driver(driver_env(tmp_path, COIL_CXX=str(cxx)))
    assert r["ok"] and r["compiled"] == 0, r
    assert "host C++ compilation failed" in r["fallen_back"][0], r


@pytest.mark.parametrize("flags", ["-O1; touch {f}", "-O1 $(touch {f})", "-O1 `touch {f}`",
                                   "-O1 | touch {f}"])
def test_shell_metacharacters_in_flags_run_nothing(tmp_path, flags):
    victim = tmp_path / "pwned"
    r = run_driver(driver_env(tmp_path), options={"cxx_flags": flags.format(f=victim)})
    assert not victim.exists(), "a shell ran the flags"
    assert r["ok"], r  # compiled (g++ ignored nothing it understood) or fell back cleanly


def test_shell_metacharacters_in_compiler_name_run_nothing(tmp_path):
    victim = tmp_path / "pwned"
    r = run_driver(driver_env(tmp_path, COIL_CXX=f"g++;touch {victim}"))
    assert not victim.exists()
    assert r["ok"] and r["compiled"] == 0 and r["fallen_back"], r


# ---- concurrency -----------------------------------------------------------------------------


def test_processes_compiling_the_same_graph(tmp_path):
    env = driver_env(tmp_path)
    env["COIL_TEST_OPTIONS"] = "{}"
    procs = [subprocess.Popen([sys.executable, str(DRIVER)], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for _ in range(3)]
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        r = json.loads(out.strip().splitlines()[-1])
        assert r["ok"] and r["compiled"] == 1 and not r["fallen_back"], r
    assert len(libraries(tmp_path / "cache")) == 1
    assert not [p for p in (tmp_path / "cache").iterdir() if ".tmp." in p.name]
    r = run_driver(env)  # the entry they left is whole
    assert r["ok"] and r["compiled"] == 1, r


def test_threads_calling_one_compiled_model():
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(24, 48), torch.nn.GELU(), torch.nn.LayerNorm(48),
                                torch.nn.Linear(48, 8)).eval()
    compiled = torch.compile(model, backend="coil", options={"strict": True})
    with torch.no_grad():
        compiled(torch.randn(16, 24))  # compile once, on this thread
    errors: list[str] = []

    def worker(seed: int):
        g = torch.Generator().manual_seed(seed)
        for _ in range(40):
            x = torch.randn(16, 24, generator=g)
            with torch.no_grad():
                got, want = compiled(x), model(x)
            if not torch.allclose(got, want, rtol=1e-4, atol=1e-5):
                errors.append(f"thread {seed}: max diff {(got - want).abs().max().item()}")
                return

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors


# ---- signals ---------------------------------------------------------------------------------


def coil_temp_dirs(tmp: Path) -> list[Path]:
    return sorted(tmp.glob("coil-*"))


def wait_for(path: Path, seconds: float = 120) -> None:
    end = time.monotonic() + seconds
    while not path.exists():
        assert time.monotonic() < end, f"{path} never appeared"
        time.sleep(0.05)


def test_sigint_during_compile(tmp_path):
    # Ctrl-C while the host compiler runs: the program stops with KeyboardInterrupt as it
    # would without coil, the compiler is not left behind, and neither is a temporary folder.
    pidfile = tmp_path / "pid"
    cxx = fake_compiler(tmp_path, "echo $$ > \"$COIL_TEST_PIDFILE\"\nsleep 3\nexec g++ \"$@\"")
    env = driver_env(tmp_path, COIL_CXX=str(cxx), COIL_TEST_PIDFILE=str(pidfile))
    # The program starts with SIGINT's default disposition, as one started from a terminal
    # does: a suite run as a background job of a non-interactive shell inherits SIGINT
    # ignored, and Python then installs no KeyboardInterrupt handler at all.
    p = subprocess.Popen([sys.executable, str(DRIVER)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    wait_for(pidfile)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=120)
    assert p.returncode != 0 and "KeyboardInterrupt" in err, (p.returncode, err[-2000:], out)
    assert not coil_temp_dirs(tmp_path / "tmp"), coil_temp_dirs(tmp_path / "tmp")
    compiler = int(pidfile.read_text())
    assert not Path(f"/proc/{compiler}").exists()


def test_sigkill_during_compile(tmp_path):
    # kill -9 of the program mid-compile: the compiler dies with it (no orphan keeps running),
    # and the temporary folder it leaves is removed by the next process that compiles.
    pidfile = tmp_path / "pid"
    cxx = fake_compiler(tmp_path, "echo $$ > \"$COIL_TEST_PIDFILE\"\nexec sleep 300")
    env = driver_env(tmp_path, COIL_CXX=str(cxx), COIL_TEST_PIDFILE=str(pidfile))
    p = subprocess.Popen([sys.executable, str(DRIVER)], env=env, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE)
    wait_for(pidfile)
    time.sleep(0.2)
    p.kill()
    p.wait(timeout=60)
    compiler = int(pidfile.read_text())
    end = time.monotonic() + 10
    while Path(f"/proc/{compiler}").exists() and time.monotonic() < end:
        time.sleep(0.05)
    assert not Path(f"/proc/{compiler}").exists(), "the compiler outlived the killed program"
    assert coil_temp_dirs(tmp_path / "tmp"), "expected the killed compile's temporary folder"
    r = run_driver(driver_env(tmp_path))  # a later process: cleans the stale folder
    assert r["ok"] and r["compiled"] == 1, r
    assert not coil_temp_dirs(tmp_path / "tmp"), coil_temp_dirs(tmp_path / "tmp")
