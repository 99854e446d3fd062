"""CUDA graphs for training steps in the default mode, kept only where replays measured faster.

mode="reduce-overhead" captures a model's forward and backward graphs and always replays them
(reduce_overhead.py: one memory pool per model, saved activations and gradients handed out as
the pool's memory). A step whose kernels are short is host-bound without them: a CNN's
backward issues hundreds of kernels and cuDNN calls, each costing host time the GPU waits for.
The default mode makes the same captures, but decides per compiled model whether to keep them,
by measurement on the first steps, as it does per inference graph (cuda_graphs.py):

  1. After `WARMUP_CALLS` calls of each graph (NVRTC builds and launch tuning done), the next
     `TIMED_CALLS` ordinary calls of the forward and of the backward are timed, each between two
     synchronizations (GPU work included: a step that is GPU-bound gains nothing from a replay).
  2. Then both graphs go through the PooledReplayer: its first call of a key runs ordinarily,
     the next captures, later ones replay. The first `TIMED_CALLS` replays of each are timed
     the same way.
  3. The captures are kept where a forward and a backward replayed take less than
     `KEEP_IF_BELOW` of their ordinary time (the median of each); otherwise they are released
     (the pool's memory with them) and both graphs run ordinarily from then on, the backward
     again freeing each saved activation after its last reader.
The choice is for the model, not per graph: a backward reads the forward's saved activations
in place only while the forward replays (reduce_overhead.py), so the two stay together. A model
whose replays do not come (saved values or outputs held past the next call, sizes that change
at every step, a forward called without its backward) is released once `MAX_UNTIMED` calls of
a phase went by without the timings it needs, with the reason in the log and the debug dump.
"""

from __future__ import annotations

import logging
import statistics
import time
import weakref
from typing import Callable, Sequence

import torch

from .reduce_overhead import PooledReplayer, pool_bytes

log = logging.getLogger("coil")

__all__ = ["StepChoice", "MeasuredReplayer", "choices"]

WARMUP_CALLS = 2
TIMED_CALLS = 3
# Kept when a replayed forward and backward take less than this share of their ordinary time.
KEEP_IF_BELOW = 0.95
# Calls of one graph in a phase without the timings the choice needs before it gives up.
MAX_UNTIMED = 12

_KINDS = ("forward", "backward")

# Every StepChoice alive, for choices() (weak: a choice lives as long as its model's graphs).
_CHOICES: "weakref.WeakSet[StepChoice]" = weakref.WeakSet()


def choices() -> list[tuple[list[str], str, str]]:
    """(graph names, state, reason) of each live model's choice: bench/dashboard_kernels.py and
    the tests print these."""
    return sorted(([m.name for m in c.members], c.state, c.reason) for c in list(_CHOICES))


class StepChoice:
    """The measured choice of one compiled model's training graphs (shared by its forward and
    backward replayers): "ordinary" (timing ordinary calls), "replay" (timing replays), then
    "kept" or "released"."""

    def __init__(self):
        self.state = "ordinary"
        self.ordinary: dict[str, list[float]] = {k: [] for k in _KINDS}
        self.replayed: dict[str, list[float]] = {k: [] for k in _KINDS}
        self.untimed: dict[str, int] = {k: 0 for k in _KINDS}
        self.reason = ""  # why the captures were kept or released
        # The most an ordinary forward left allocated for its backward (saved values and
        # outputs), against which the report sets the pool's size.
        self.held = 0
        self.members: list[MeasuredReplayer] = []
        _CHOICES.add(self)

    def timings(self) -> tuple[float, float] | None:
        """(ordinary, replayed) seconds of a forward plus a backward, medians; None until both
        phases are timed."""
        if not all(self.ordinary.values()) or not all(self.replayed.values()):
            return None
        return (sum(statistics.median(v) for v in self.ordinary.values()),
                sum(statistics.median(v) for v in self.replayed.values()))

    def record(self, kind: str, seconds: float | None) -> None:
        """A call of `kind` in the current phase took `seconds` (None: it was not one the
        phase times: a first call of a key, a capture, a call blocked by live outputs)."""
        timed = self.ordinary if self.state == "ordinary" else self.replayed
        if seconds is None:
            self.untimed[kind] += 1
        else:
            timed[kind].append(seconds)
        if all(len(timed[k]) >= TIMED_CALLS for k in _KINDS):
            if self.state == "ordinary":
                self.state = "replay"
                self.untimed = {k: 0 for k in _KINDS}
            else:
                self._decide()
        elif max(self.untimed.values()) >= MAX_UNTIMED or (
                max(len(v) for v in timed.values()) >= MAX_UNTIMED):
            missing = [k for k in _KINDS if len(timed[k]) < TIMED_CALLS]
            what = "replays" if self.state == "replay" else "ordinary calls"
            events = {}
            for m in self.members:
                events.update({f"{m.kind} {k}": n for k, n in m.pooled.events.items()})
            self._release(f"too few timed {what} of the {' and '.join(missing)} "
                          f"({dict(self.untimed)} untimed; events {events})")

    def _decide(self) -> None:
        run_s, replay_s = self.timings()
        pool = _pool_bytes(self.members[0].pooled.pool)  # one pool: the model's
        detail = (f"forward + backward {run_s * 1e3:.3f} ms ordinarily, "
                  f"{replay_s * 1e3:.3f} ms replayed; the pool holds {pool / 2**20:.0f} MiB, "
                  f"an ordinary forward left {self.held / 2**20:.0f} MiB for its backward")
        if replay_s < run_s * KEEP_IF_BELOW:
            self.state, self.reason = "kept", detail
            log.info("coil: training graphs replay CUDA graphs: %s", detail)
        else:
            self._release(f"ordinary calls are as fast ({detail})")

    def _release(self, reason: str) -> None:
        self.state, self.reason = "released", reason
        log.info("coil: training graphs run without CUDA graphs: %s", reason)
        for m in self.members:
            m.pooled.release(reason)


class MeasuredReplayer:
    """One training graph's calls under the model's StepChoice: ordinary calls, then the
    PooledReplayer's, timed while the choice is open; then whichever it chose."""

    def __init__(self, pooled: PooledReplayer, choice: StepChoice):
        self.pooled = pooled
        self.kind = pooled.kind
        self.choice = choice
        self.calls = 0
        choice.members.append(self)

    @property
    def name(self) -> str:
        return self.pooled.name

    @property
    def released(self) -> bool:
        return self.choice.state == "released"

    @property
    def last(self) -> bool:
        return self.pooled.last

    def saved_inputs(self, positions: Sequence[int]) -> dict[int, torch.Tensor]:
        return self.pooled.saved_inputs(positions)

    def __call__(self, inputs: Sequence[torch.Tensor], extra: tuple = ()) -> list:
        state = self.choice.state
        if state == "kept":
            return self.pooled(inputs, extra)
        if state == "released" or _capturing():
            return self.pooled.run(list(inputs))
        self.calls += 1
        ordinary = state == "ordinary"
        if ordinary and self.calls <= WARMUP_CALLS:
            return self.pooled.run(list(inputs))
        if ordinary:
            forward = self.kind == "forward"
            before = _allocated() if forward else 0
            seconds, outs = _timed(lambda: self.pooled.run(list(inputs)))
            if forward:
                self.choice.held = max(self.choice.held, _allocated() - before)
        else:
            before = (self.pooled.replays, self.pooled.num_captures)
            seconds, outs = _timed(lambda: self.pooled(inputs, extra))
            replays, captures = self.pooled.replays, self.pooled.num_captures
            if replays == before[0] or captures != before[1]:
                seconds = None  # an ordinary call or a capture (which replays once too)
        self.choice.record(self.kind, seconds)
        return outs


def _allocated() -> int:
    return torch.cuda.memory_allocated()


def _pool_bytes(pool) -> int:
    """What the pool reserves: the memory a replayed step needs, reported beside `held`."""
    return pool_bytes(pool)


def _capturing() -> bool:
    """Inside the caller's own capture (torch.cuda.graph around the compiled model): the
    ordinary call is what gets captured; a synchronize or a replay would break it."""
    return torch.cuda.is_current_stream_capturing()


def _timed(call: Callable[[], list]) -> tuple[float, list]:
    """Wall seconds of one call, GPU work included, and its result."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = call()
    torch.cuda.synchronize()
    return time.perf_counter() - t0, out
