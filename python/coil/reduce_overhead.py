"""mode="reduce-overhead": every CUDA graph coil compiles replays a captured CUDA graph.

The default mode captures inference graphs only, and keeps a capture only where replays measured
faster (cuda_graphs.py). This mode captures inference graphs and both graphs of a training step,
keeps them, and shares one memory pool between the graphs of one compiled model (one Dynamo
graph's forward and backward), so the backward's temporaries reuse the forward's.

What keeps a replay equal to an ordinary call:
  * Inputs. Parameters and buffers (AOTAutograd's static inputs), the backward's saved values
    and constants are read where they are: their addresses key the capture. Other inputs are
    copied into buffers of the capture's own before each replay, and where the graph writes
    them (input mutation) copied back after it.
  * Outputs a caller sees (an inference graph's, the forward's user outputs) are returned as
    copies: they stay valid after the next call. (Inductor's mode returns the pool's tensors
    and raises when one is read after the next replay overwrote it.) The forward's saved
    activations and the backward's gradients stay in the pool, returned as aliases.
  * A replay overwrites the pool memory its capture used. So before a replay, the values it
    would overwrite must be dead: the aliases it handed out last time, and those of every
    capture made after it in the same pool (which may sit in memory this one used for
    temporaries). A storage's use count says whether anyone still holds one. If some are
    alive (a second forward before the first one's backward, a gradient kept by the
    optimizer), another capture is made, which the allocator keeps clear of them.
  * Sizes. Each distinct set of input sizes (and symbol values) gets its own capture, the
    first call of each running ordinarily (it tunes the launches); past
    `cuda_graph_max_captures` captures per graph, calls run ordinarily.
  * Random ops. A capture repeats its launch arguments, so random kernels also read a seed
    drawn on the device by torch.randint inside the capture, which PyTorch's generator
    advances at each replay (the same mechanism keeps eager dropout inside torch.cuda.graph
    fresh).
"""

from __future__ import annotations

import collections
import logging
from typing import Callable, Sequence

import torch
import torch.fx as fx

log = logging.getLogger("coil")

__all__ = ["CapturePool", "PooledReplayer", "static_inputs_of", "user_outputs_of"]

# Keys seen once (an ordinary call) remembered per graph: a backward whose saved values move
# every call (its forward ran ordinarily) must not grow this without bound.
_SEEN_KEYS = 64


def _use_count(cdata: int) -> int:
    return torch._C._storage_Use_Count(cdata)


class _Capture:
    """One captured call: its CUDA graph, its input buffers and its outputs in the pool."""

    def __init__(self, graph, static_inputs, outputs, copied, order):
        self.graph = graph
        self.static_inputs = static_inputs
        self.outputs = outputs  # the pool's tensors (never handed out themselves)
        self.copied = copied  # input positions copied in before each replay
        self.order = order  # position in the pool's capture order
        # Each distinct output storage with its use count when only this object holds it: a
        # higher count means someone holds an alias handed out by the last replay.
        storages = {}
        for t in outputs:
            s = t.untyped_storage()
            storages.setdefault(s._cdata, s)
        self._storages = list(storages.values())  # keeps the cdata valid
        self.baseline = [(s._cdata, _use_count(s._cdata)) for s in self._storages]

    def busy(self) -> bool:
        return any(_use_count(c) > n for c, n in self.baseline)


class CapturePool:
    """The CUDA memory pool one compiled model's graphs capture into, and the order of the
    captures made in it (a replay may overwrite what a later capture keeps)."""

    def __init__(self):
        self._handle = None
        self.captures: list[_Capture] = []

    def handle(self):
        if self._handle is None:
            self._handle = torch.cuda.graph_pool_handle()
        return self._handle

    def add(self, graph, static_inputs, outputs, copied) -> _Capture:
        c = _Capture(graph, static_inputs, outputs, copied, len(self.captures))
        self.captures.append(c)
        return c

    def may_replay(self, c: _Capture) -> bool:
        return not any(d.busy() for d in self.captures[c.order:])


class PooledReplayer:
    """Runs `run(inputs, rng_device) -> outputs` (one coil graph on the current stream) as a
    captured CUDA graph in `pool`, per distinct key of sizes and in-place addresses."""

    def __init__(self, name: str, run: Callable[..., list], pool: CapturePool,
                 in_place: frozenset[int], clone_outputs: frozenset[int] | None,
                 mutated: Sequence[int], random: bool, max_captures: int):
        self.name = name
        self.run = run
        self.pool = pool
        self.in_place = in_place  # input positions read where they are
        self.clone_outputs = clone_outputs  # output positions returned as copies (None: all)
        self.mutated = tuple(mutated)
        self.random = random
        self.max_captures = max_captures
        self.captures: dict[tuple, list[_Capture]] = {}
        self.num_captures = 0
        self.seen: collections.OrderedDict[tuple, None] = collections.OrderedDict()
        self.disabled = ""
        self.replays = 0
        self._seed: torch.Tensor | None = None

    def _key(self, inputs: Sequence[torch.Tensor], extra: tuple) -> tuple:
        key = [extra]
        for i, t in enumerate(inputs):
            key.append((tuple(t.shape), t.stride(), t.dtype,
                        t.data_ptr() if i in self.in_place or _overlaps(t) else None))
        return tuple(key)

    def __call__(self, inputs: Sequence[torch.Tensor], extra: tuple = ()) -> list:
        if self.disabled or torch.cuda.is_current_stream_capturing():
            return self.run(list(inputs))
        key = self._key(inputs, extra)
        for c in self.captures.get(key, ()):
            if self.pool.may_replay(c):
                return self._replay(c, inputs)
        if key not in self.captures and key not in self.seen:
            # The first call of these sizes runs ordinarily: it tunes the kernels' launches,
            # which a capture cannot time.
            self.seen[key] = None
            if len(self.seen) > _SEEN_KEYS:
                self.seen.popitem(last=False)
            return self.run(list(inputs))
        if self.num_captures >= self.max_captures:
            return self.run(list(inputs))
        c = self._capture(inputs)
        if c is None:
            return self.run(list(inputs))
        self.captures.setdefault(key, []).append(c)
        return self._replay(c, inputs)

    def _capture(self, inputs: Sequence[torch.Tensor]) -> _Capture | None:
        self.num_captures += 1
        copied = frozenset(i for i, t in enumerate(inputs)
                           if i not in self.in_place and not _overlaps(t))
        static = []
        for i, t in enumerate(inputs):
            if i in copied:
                s = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
                s.copy_(t)
                static.append(s)
            else:
                static.append(t)
        if self.random and self._seed is None:
            self._seed = torch.zeros(1, dtype=torch.int64, device=inputs[0].device
                                     if inputs else "cuda")
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph, pool=self.pool.handle(),
                                  capture_error_mode="thread_local"):
                rng = 0
                if self.random:
                    torch.randint(0, 2**62, (1,), out=self._seed)
                    rng = self._seed.data_ptr()
                outs = self.run(static, rng)
        except Exception as e:  # noqa: BLE001 - the ordinary call still works
            lines = str(e).strip().splitlines()
            self.disabled = f"{type(e).__name__}: {lines[0] if lines else ''}"
            log.info("coil: %s runs without a CUDA graph: %s", self.name, self.disabled)
            torch.cuda.synchronize()
            return None
        c = self.pool.add(graph, static, list(outs), copied)
        del outs
        log.debug("coil: %s captured (capture %d of the graph, %d in the pool)", self.name,
                  self.num_captures, len(self.pool.captures))
        return c

    def _replay(self, c: _Capture, inputs: Sequence[torch.Tensor]) -> list:
        for i in c.copied:
            c.static_inputs[i].copy_(inputs[i])
        c.graph.replay()
        self.replays += 1
        for i in self.mutated:
            if i in c.copied:
                inputs[i].copy_(c.static_inputs[i])
        clone = self.clone_outputs
        return [o.clone() if clone is None or j in clone else o.detach()
                for j, o in enumerate(c.outputs)]


def _overlaps(t: torch.Tensor) -> bool:
    """Whether elements share memory (an expanded size carrier): read in place, as a copy could
    not be written."""
    return any(s == 0 and n > 1 for s, n in zip(t.stride(), t.shape))


def static_inputs_of(gm: fx.GraphModule, kind: str) -> frozenset[int]:
    """Placeholder positions of an AOTAutograd graph whose addresses stay put between calls:
    for a forward or inference graph AOTAutograd's static inputs (parameters and buffers), for
    a backward graph every input but the tangents (the saved values, which a replayed forward
    keeps in the pool)."""
    names = [n.name for n in gm.graph.nodes if n.op == "placeholder"]
    if kind == "backward":
        return frozenset(i for i, n in enumerate(names) if "tangents" not in n)
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    indices = getattr(meta, "static_input_indices", None)
    if indices is None:
        return frozenset()
    return frozenset(indices)


def user_outputs_of(kind: str) -> int | None:
    """How many leading outputs of a forward graph the caller sees (the rest are saved for the
    backward); None: all of them (an inference graph), 0 for a backward graph."""
    if kind == "inference":
        return None
    if kind == "backward":
        return 0
    ctx = torch._guards.TracingContext.try_get()
    meta = getattr(ctx, "fw_metadata", None) if ctx is not None else None
    n = getattr(meta, "num_forward_returns", None)
    return None if n is None else int(n)
