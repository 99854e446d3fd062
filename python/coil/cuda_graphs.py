"""CUDA graphs for coil's inference graphs: one captured replay instead of a launch per kernel.

A CNN's call is host-bound on the GPU: ResNet-50 at batch 64 in bf16 issues 83 kernels and 53
cuDNN convolutions (each one a call into ATen, 30-50 us of host time) for 3.5 ms of GPU work,
and the host needed 5.7 ms to issue them (H100). After `WARMUP_CALLS` ordinary calls (NVRTC
and launch tuning done), the next call runs coil's graph once under stream capture
(torch.cuda.graph: kernels, cuBLASLt and the convolutions through ATen, allocations from a
private pool) and every later call replays it.

What keeps a replay equal to an ordinary call:
  * inputs: a replay reads the addresses it was captured with. An input whose address is the
    same on every call so far (parameters, buffers, a tensor the caller reuses) is read in
    place; the others are copied into buffers of our own before each replay. A call whose
    in-place input moved runs without the graph, marks that input as copied, and the next
    call captures again (at most `MAX_CAPTURES` times per graph).
  * outputs: the replay writes into the pool's buffers, which the next replay overwrites. The
    outputs are handed out as those buffers, and the ones still held when the next replay
    would overwrite them are first moved out to a copy (graph_memory.KeptOutputs), so outputs
    stay valid and a caller who drops them in time pays no copy (Inductor's "reduce-overhead"
    mode leaves that to the caller).
  * a capture is kept only where replays (each moving the last one's outputs out) beat
    ordinary calls, timed side by side right after the capture: a graph of few large
    kernels gains nothing from saving launches and would pay for the copies.
  * host work: once captured, the inputs read in place are checked by address in one call
    (their sizes and strides are Dynamo's guards).
  * only graphs whose every call is the same: static shapes, all inputs on the GPU, no random
    ops (their seed and offset are per-call arguments a replay would repeat) and no
    host-synchronizing fallback (a capture that fails turns the graph off for good, with the
    reason logged).
Training graphs are not captured here (their many saved activations would all be copied out):
with option cuda_graphs_training, training_graphs.py captures a model's forward and backward in
one pool, as mode="reduce-overhead" does, and keeps them where that measured faster.
"""

from __future__ import annotations

import logging
import time
from typing import Callable, Sequence

import torch
import torch.fx as fx

from .graph_memory import KeptOutputs, same_addresses

log = logging.getLogger("coil")

WARMUP_CALLS = 2
MAX_CAPTURES = 3
# The capture is kept when a replay (outputs copied) takes less than this share of an ordinary
# call's time, each the best of TIMING_ROUNDS rounds of a few calls.
KEEP_IF_BELOW = 0.95
TIMING_ROUNDS = 2

__all__ = ["GraphReplayer", "capture_blocker", "random_op"]


def random_op(gm: fx.GraphModule) -> fx.Node | None:
    """The first node of gm that draws random numbers, or None."""
    for n in gm.graph.nodes:
        if (n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload)
                and torch.Tag.nondeterministic_seeded in n.target.tags):
            return n
    return None


def capture_blocker(gm: fx.GraphModule) -> str:
    """Why this FX graph must not be captured, or '' when it may be."""
    rand = random_op(gm)
    if rand is not None:
        return f"random op {rand.target}"
    for n in gm.graph.nodes:
        if n.op == "call_function" and isinstance(n.target, torch._ops.OpOverload):
            if n.target is torch.ops.aten.copy_.default:
                return "input mutation"  # a replay would write the captured copy
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        v = n.meta.get("val")
        if isinstance(v, (torch.SymInt, torch.SymFloat)):
            return "symbolic sizes"
        if isinstance(v, torch.Tensor):
            if any(not isinstance(s, int) for s in (*v.shape, *v.stride())):
                return "symbolic sizes"
            if v.device.type != "cuda":
                return f"input {n.name} is on {v.device.type}"
    return ""


class GraphReplayer:
    """Runs `run(inputs) -> outputs` (one coil graph on the current stream) ordinarily for the
    first calls, then as a captured CUDA graph."""

    def __init__(self, name: str, run: Callable[[list], list]):
        self.name = name
        self.run = run
        self.calls = 0
        self.captures = 0
        self.disabled = ""
        self.copied: set[int] = set()  # input positions seen at another address or layout
        self.copied_at_capture: frozenset[int] = frozenset()  # those the graph copies in
        self.graph: torch.cuda.CUDAGraph | None = None
        self.static_inputs: list[torch.Tensor] = []
        self.static_outputs: list[torch.Tensor] = []
        self.kept = KeptOutputs([], set(), [])  # the outputs handed out as the pool's memory
        # The addresses the graph reads its in-place inputs at (positions `in_place`), and
        # (data_ptr, strides) of every input at the last call that did not replay.
        self.addresses: list[int] = []
        self.in_place: list[int] = []
        self.seen: list[tuple] | None = None
        self.timings: tuple[float, float] | None = None  # (ordinary, replayed) seconds

    def __call__(self, inputs: Sequence[torch.Tensor], extra: tuple = ()) -> list:
        self.calls += 1
        if self.disabled or torch.cuda.is_current_stream_capturing():
            # Inside the caller's own capture (torch.cuda.graph around the compiled model) the
            # ordinary call is what gets captured; a synchronize or a replay would break it.
            return self.run(list(inputs))
        if self.graph is not None:
            if same_addresses(inputs, self.addresses, self.in_place):
                if not self.kept.movable():
                    # A view the caller holds of the last outputs could not move out of the
                    # memory a replay overwrites (KeptOutputs): this call runs ordinarily.
                    return self.run(list(inputs))
                return self._replay(inputs)
            # An in-place input moved: capture again with it copied (the outputs still held
            # move out of the memory that goes with the graph; ones that cannot keep the graph
            # and its memory until they are gone).
            if not self.kept.movable():
                return self.run(list(inputs))
            self.kept.move_out()
            self.graph = None
        addresses = [(t.data_ptr(), t.stride()) for t in inputs]
        if self.seen is not None:
            self.copied.update(i for i, (a, b) in enumerate(zip(addresses, self.seen)) if a != b)
        self.seen = addresses
        if self.calls <= WARMUP_CALLS or self.captures >= MAX_CAPTURES:
            return self.run(list(inputs))
        return self._capture(inputs)

    def __del__(self):
        try:
            self.kept.retire(self.static_outputs)  # the pool's memory goes with the graph
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def _replay(self, inputs: Sequence[torch.Tensor]) -> list:
        for i in self.copied_at_capture:
            self.static_inputs[i].copy_(inputs[i])
        self.kept.move_out()
        self.graph.replay()
        kept = self.kept.hand_out()
        return [kept[j] if j in kept else o.clone() for j, o in enumerate(self.static_outputs)]

    def _capture(self, inputs: Sequence[torch.Tensor]) -> list:
        self.captures += 1
        self.copied_at_capture = frozenset(self.copied)
        static = [t.clone() if i in self.copied_at_capture else t for i, t in enumerate(inputs)]
        graph = torch.cuda.CUDAGraph()
        try:
            torch.cuda.synchronize()
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                outs = self.run(static)
        except Exception as e:  # noqa: BLE001 - the ordinary call still works
            lines = str(e).strip().splitlines()
            self.disabled = f"{type(e).__name__}: {lines[0] if lines else ''}"
            log.info("coil: %s runs without a CUDA graph: %s", self.name, self.disabled)
            torch.cuda.synchronize()
            return self.run(list(inputs))
        self.graph, self.static_inputs, self.static_outputs = graph, static, list(outs)
        self.kept = KeptOutputs(self.static_outputs, set(range(len(outs))), static)
        self.addresses = [t.data_ptr() for t in static]
        self.in_place = [i for i in range(len(static)) if i not in self.copied_at_capture]
        self.seen = [(t.data_ptr(), t.stride()) for t in static]
        # A replay saves host time but may copy the outputs out: keep it only where it is the
        # faster of the two here, measured side by side (the best of a few calls each), with
        # each replay's outputs held until the next one (which then moves them out).
        held: list = []

        def replay_holding_outputs() -> None:
            held[:] = self._replay(inputs)

        replay_s = run_s = float("inf")
        for _ in range(TIMING_ROUNDS):
            replay_s = min(replay_s, _seconds(replay_holding_outputs))
            run_s = min(run_s, _seconds(lambda: self.run(list(inputs))))
        held.clear()
        self.timings = (run_s, replay_s)
        if replay_s > run_s * KEEP_IF_BELOW:
            self.disabled = (f"ordinary calls are as fast ({run_s * 1e3:.3f} ms against "
                             f"{replay_s * 1e3:.3f} ms replayed with output copies)")
            log.info("coil: %s runs without a CUDA graph: %s", self.name, self.disabled)
            self.graph, self.static_inputs, self.static_outputs = None, [], []
            self.kept = KeptOutputs([], set(), [])
            return self.run(list(inputs))
        return self._replay(inputs)


def _seconds(call: Callable[[], object], n: int = 3) -> float:
    """Wall seconds per call of `call`, GPU work included."""
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        call()
    torch.cuda.synchronize()
    return (time.perf_counter() - t0) / n
