"""bench/dashboard.py --gpus N: rows run N at a time, each on a GPU of its own and a slice of
the cores that no other running row has; every row is recorded once. The scheduling is checked
with a stand-in for the child process (nothing is compiled or timed here)."""

from __future__ import annotations

import os
import threading
import time

import dashboard  # bench/ is on sys.path through conftest.py


def test_rows_run_at_once_on_their_own_gpu_and_cores():
    todo = [(f"m{k}", mode) for k in range(5) for mode in ("infer", "train")]
    running: dict[int, list[int]] = {}
    lock = threading.Lock()
    seen_at_once = []
    recorded = []

    def run(name, mode, gpu, cpus):
        with lock:
            assert gpu not in running, f"GPU {gpu} given to two rows at once"
            for other in running.values():
                assert not set(other) & set(cpus), "two running rows share a core"
            running[gpu] = cpus
            seen_at_once.append(len(running))
        time.sleep(0.02)
        with lock:
            del running[gpu]
        return {"model": name, "mode": mode, "gpu": gpu, "cpus": cpus}

    def record(name, mode, row):
        recorded.append((name, mode))
        assert row["model"] == name and row["mode"] == mode

    dashboard.run_concurrently(todo, 2, record, run)
    assert sorted(recorded) == sorted(todo)
    assert max(seen_at_once) == 2  # rows did overlap
    k = dashboard.cores_per_gpu(2)
    assert k == max(1, len(os.sched_getaffinity(0)) // 2)
