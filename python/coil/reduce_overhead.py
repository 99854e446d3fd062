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
  * Outputs a caller sees (an inference graph's, the forward's user outputs) stay valid after
    the next call: they are handed out as the pool's memory, and those still held when a
    replay would overwrite them are first moved out of the pool to a copy (KeptOutputs), so a
    caller who drops them in time pays no copy.
    (Inductor's mode returns the pool's tensors and raises when one is read after the next
    replay overwrote it; option `cuda_graph_output_copies` off does that for inference
    graphs: their outputs count as dead at the next replay of any capture that may overwrite
    them, which marks them stale.) The forward's saved activations and the backward's
    gradients stay in the pool, returned as aliases.
  * A replay overwrites the pool memory its capture used. So before a replay, the values it
    would overwrite must be dead: the tensors it handed out last time, and those of every
    capture made after it in the same pool (which may sit in memory this one used for
    temporaries). Each replay hands its outputs out on one new storage object over the
    pool's memory, and a weak reference to it says whether anyone still holds one. A
    forward's saved values count as dead once its backward ran (the spent autograd context
    may still reference them until the loss is dropped; they are then marked so that reading
    them raises). Where some are alive (a second forward before the first one's backward, a
    gradient the optimizer kept), another capture is made, which the allocator keeps clear of
    them.
  * Host work. A training step passes hundreds of parameters and saved values and hands out
    as many outputs; where kernels are short the host's work per replay sets the step time.
    In-place inputs are matched by address in one call, the other inputs by size and layout,
    and each output costs one tensor construction.
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
import itertools
import logging
import weakref
from typing import Callable, Sequence

import torch
import torch.fx as fx
from torch.multiprocessing.reductions import StorageWeakRef

from .graph_memory import KeptOutputs, build_tensor, keep_until_dropped, same_addresses, span_metas

log = logging.getLogger("coil")

__all__ = ["CapturePool", "PooledReplayer", "capture_traffic", "pool_bytes", "replay_events",
           "static_inputs_of", "user_outputs_of"]

# Keys seen once (an ordinary call) remembered per graph: a backward whose saved values move
# every call (its forward ran ordinarily) must not grow this without bound.
_SEEN_KEYS = 64

# Every PooledReplayer alive, for replay_events (weak: a replayer lives as long as its graph).
_REPLAYERS: "weakref.WeakSet[PooledReplayer]" = weakref.WeakSet()

STALE = ("coil: this tensor was saved by a compiled forward (mode=\"reduce-overhead\") whose "
         "CUDA graph ran again after its backward; its memory now holds the newer call's values. "
         "Run the backward before calling the forward again, or compile without that mode.")
OVERWRITTEN = ("coil: this tensor is an output of a compiled graph (mode=\"reduce-overhead\", "
               "option cuda_graph_output_copies off) whose CUDA graph ran again; its memory now "
               "holds a newer call's values. Clone an output to keep it past the next call.")


class _Capture:
    """One captured call: its CUDA graph, its input buffers and its outputs in the pool.

    Outputs that are not copied are handed out at each replay (a generation) as new tensors
    over the pool's memory, all on one new storage object: a weak reference to it says
    whether anyone still holds any of them (a generation is alive while one of its tensors
    is), and an overwritten generation can be marked stale. One storage rather than one per
    tensor keeps a replay's host work to one tensor construction per output: a training step
    hands out hundreds (saved activations, gradients), and that host work decides the step
    time of a model whose kernels are short."""

    def __init__(self, graph, static_inputs, outputs, copied, order, clone, kind, saved_args,
                 overwrite=False):
        self.graph = graph
        self.static_inputs = static_inputs
        self.outputs = outputs  # the pool's tensors (never handed out themselves)
        self.copied = copied  # input positions copied in before each replay
        self.copied_list = sorted(copied)
        self.order = order  # position in the pool's capture order
        # A forward's outputs past the user's are consumed by its backward: once it ran, the
        # autograd context that still references them is spent.
        self.kind = kind
        self.forward = kind == "forward"
        # Handed out as aliases: outputs not cloned ("o", j) and the input copies a forward
        # hands its backward (inputs it saves for it, ("i", i)).
        seen = set(range(len(outputs))) if clone is None else set(clone)
        aliased = {("o", j): t for j, t in enumerate(outputs) if j not in seen}
        aliased.update({("i", i): static_inputs[i] for i in sorted(copied & set(saved_args))})
        # Tensors without memory (no elements: the allocator's address 0) stay out of the span,
        # which they would stretch to address 0; they are handed out as clones (no kernel).
        empty = {k for k, t in aliased.items() if t.untyped_storage().data_ptr() == 0}
        self.empty_inputs = [k[1] for k in empty if k[0] == "i"]
        aliased = {k: t for k, t in aliased.items() if k not in empty}
        self.span_ptr, self.span_bytes, metas = span_metas(aliased)
        self.device = next(iter(aliased.values())).device if aliased else None
        # Per output: its metadata on the generation's storage, or None (returned as a clone
        # or kept, below).
        self.out_meta = [metas.get(("o", j)) for j in range(len(outputs))]
        self.in_meta = {k[1]: m for k, m in metas.items() if k[0] == "i"}
        # The outputs the caller sees, kept valid past the next replay (KeptOutputs), where
        # they may be; the others among them are returned as clones.
        self.kept = KeptOutputs(outputs, seen, static_inputs)
        self.addresses: list[int | None] = []  # in-place inputs' addresses at capture
        self.live: StorageWeakRef | None = None  # the last generation's storage
        self.handed: list[weakref.ref] = []  # its tensors, to mark them stale
        self.consumed = False
        # Outputs handed out as the pool's memory that a replay may overwrite (option
        # cuda_graph_output_copies off): never busy; the tensors handed out are marked stale
        # instead (as Inductor marks its own: the mark is on each tensor, not on its memory).
        self.overwrite = overwrite

    def __del__(self):
        # The pool's memory goes with the capture: the outputs the caller still holds move
        # out first; gradients and saved values (one storage over pool blocks and input
        # buffers, which may lie far apart: not one range to copy) keep the memory instead.
        try:
            memory = (self.outputs, self.static_inputs)
            self.kept.retire(memory)
            if self.live is not None and not self.live.expired():
                keep_until_dropped([self.live], memory)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def same_addresses(self, inputs: Sequence[torch.Tensor], positions: list[int]) -> bool:
        """Whether the inputs read in place (`positions`) are where they were at capture."""
        return same_addresses(inputs, self.addresses, positions)

    def busy(self) -> bool:
        if not self.kept.movable():  # the caller holds a view that cannot move (KeptOutputs)
            return True
        if self.consumed or self.overwrite or self.live is None:
            return False
        return not self.live.expired()

    def _mark_handed(self, msg: str) -> None:
        # The mark is on each tensor (its TensorImpl lets go of the storage), not on the
        # storage the generation's tensors share: every live one is marked.
        for r in self.handed:
            t = r()
            if t is not None:
                torch._C._set_storage_access_error_msg(t, msg)
        self.handed = []

    def before_overwrite(self) -> int:
        """Before a replay that may overwrite this capture's outputs: outputs handed out as
        overwritable become stale (reading them raises), kept ones still held move out of the
        pool (returns how many storages moved)."""
        if self.overwrite:
            self._mark_handed(OVERWRITTEN)
        return self.kept.move_out()

    def new_generation(self) -> tuple[list, dict[int, torch.Tensor], StorageWeakRef | None]:
        """(outputs, input copies by position, the generation's storage) for the replay just
        run."""
        if self.live is not None and not self.live.expired() and not self.overwrite:
            # Held only by spent autograd contexts (busy() said so): reading them again would
            # give the newer call's numbers, so make it an error instead.
            self._mark_handed(STALE)
        kept = self.kept.hand_out()
        if not self.span_bytes:
            self.live, self.handed = None, []
            outs = [kept[j] if j in kept else t.clone() for j, t in enumerate(self.outputs)]
            return outs, {i: self.static_inputs[i].clone() for i in self.empty_inputs}, None
        storage = torch._C._construct_storage_from_data_pointer(self.span_ptr, self.device,
                                                               self.span_bytes)
        build = build_tensor
        outs = [kept[j] if j in kept else t.clone() if m is None else build(m, storage)
                for j, (t, m) in enumerate(zip(self.outputs, self.out_meta))]
        inputs = {i: build(m, storage) for i, m in self.in_meta.items()}
        inputs.update({i: self.static_inputs[i].clone() for i in self.empty_inputs})
        self.live = StorageWeakRef(storage)
        self.handed = [weakref.ref(t) for t, m in zip(outs, self.out_meta) if m is not None]
        self.handed.extend(weakref.ref(t) for t in inputs.values())
        self.consumed = False
        return outs, inputs, self.live


class CapturePool:
    """The CUDA memory pool one compiled model's graphs capture into, and the order of the
    captures made in it (a replay may overwrite what a later capture keeps)."""

    def __init__(self):
        self._handle = None
        self.captures: list[_Capture] = []
        # Storage (cdata) of a forward's last generation -> its capture: a backward that reads
        # one marks the forward's saved values consumed.
        self.saved: dict[int, _Capture] = {}
        # The default mode's measured choice of keeping the captures (training_graphs.py).
        self.choice = None

    def handle(self):
        if self._handle is None:
            self._handle = torch.cuda.graph_pool_handle()
        return self._handle

    def add(self, graph, static_inputs, outputs, copied, clone, kind, saved_args,
            overwrite=False) -> _Capture:
        c = _Capture(graph, static_inputs, outputs, copied, len(self.captures), clone, kind,
                     saved_args, overwrite)
        self.captures.append(c)
        return c

    def blocker(self, c: _Capture) -> str | None:
        """Why c must not replay now (a capture from it on holds live values), or None."""
        for d in self.captures[c.order:]:
            if d.busy():
                who = "itself" if d is c else f"capture {d.order} ({d.kind})"
                return f"{who} has live outputs"
        return None

    def before_replay(self, c: _Capture) -> int:
        """c replays now: the outputs handed out by captures from c on (which may lie in memory
        c uses) become stale or move out of the pool; returns how many storages moved."""
        return sum(d.before_overwrite() for d in self.captures[c.order:])

    def handed_out(self, c: _Capture, ref: StorageWeakRef | None) -> None:
        if not c.forward:
            return
        for cdata in [k for k, v in self.saved.items() if v is c]:
            del self.saved[cdata]
        if ref is not None:
            self.saved[ref.cdata] = c

    def consume(self, inputs: Sequence[torch.Tensor], first: Sequence[int] = ()) -> list[int]:
        """A backward is running on `inputs`: the forward generations they come from are
        spent once it has (their contexts are freed, or hold values nobody reads again).
        Input positions in `first` are looked at before the others, and the search stops once
        every saved generation was found; returns the positions where one was (a backward
        finds its forward's values at the same positions each call)."""
        # Generations already consumed are not looked for again (another graph's backward ran).
        left = {cdata for cdata, c in self.saved.items() if not c.consumed}
        if not left:
            return []
        found = []
        for i in itertools.chain(first, range(len(inputs))):
            cdata = inputs[i].untyped_storage()._cdata
            if cdata in left:
                self.saved[cdata].consumed = True
                left.discard(cdata)
                found.append(i)
                if not left:
                    break
        return found


def capture_traffic() -> list[tuple[str, list[str]]]:
    """Per live replayer and capture: the bytes each replay copies in (inputs copied into the
    capture's buffers) and hands out as kept outputs or as clones. bench/dashboard_kernels.py
    prints these: in a kernel profile the copies are device-to-device memcpys."""
    def mb(ts) -> str:
        return f"{sum(t.nbytes for t in ts) / 2**20:.1f} MB"

    out = []
    for r in sorted(list(_REPLAYERS), key=lambda r: r.name):
        lines = []
        for c in (c for cs in r.captures.values() for c in cs):
            kept = {j for _, _, metas in c.kept.blocks for j in metas}
            cloned = [t for j, (t, m) in enumerate(zip(c.outputs, c.out_meta))
                      if m is None and j not in kept]
            ins = c.static_inputs
            lines.append(
                f"capture {c.order}: copied in {len(c.copied)} ({mb(ins[i] for i in c.copied)}), "
                f"kept out {len(kept)} ({mb(c.outputs[j] for j in kept)}), "
                f"cloned out {len(cloned)} ({mb(cloned)})")
        out.append((r.name, lines))
    return out


def pool_bytes(pool: CapturePool | None = None) -> int:
    """Bytes the CUDA caching allocator reserves for the pools of live replayers with captures
    (or for `pool` alone): the memory of replayed steps, which allocate nothing while they run
    (bench/dashboard.py's peak, training_graphs.py's report)."""
    if pool is not None:
        ids = {pool._handle} if pool._handle is not None else set()
    else:
        ids = {r.pool._handle for r in list(_REPLAYERS)
               if r.pool._handle is not None and r.captures}
    if not ids:
        return 0
    return sum(seg["total_size"] for seg in torch.cuda.memory_snapshot()
               if tuple(seg.get("segment_pool_id", ())) in ids)


def replay_events() -> list[tuple[str, dict[str, int]]]:
    """What each live replayer's calls did, by graph name: a step that should replay but
    captures anew or runs ordinarily ("busy: ...", "cap reached") is launch-bound, and its time
    exceeds its kernels' (bench/dashboard_kernels.py prints these)."""
    return sorted((r.name, dict(r.events)) for r in list(_REPLAYERS))


class PooledReplayer:
    """Runs `run(inputs, rng_device) -> outputs` (one coil graph on the current stream) as a
    captured CUDA graph in `pool`, per distinct key of sizes and in-place addresses."""

    def __init__(self, name: str, run: Callable[..., list], pool: CapturePool, kind: str,
                 in_place: frozenset[int], clone_outputs: frozenset[int] | None,
                 mutated: Sequence[int], random: bool, max_captures: int,
                 saved_args: Sequence[int] = (), overwrite_outputs: bool = False):
        self.name = name
        self.run = run
        self.pool = pool
        self.kind = kind
        self.in_place = in_place  # input positions read where they are
        self.in_place_list = sorted(in_place)
        self._others: list[int] | None = None  # the other positions (known at the first call)
        # Backward graphs: the input positions where the last call found its forward's saved
        # values (CapturePool.consume looks there first).
        self._saved_at: list[int] = []
        self.clone_outputs = clone_outputs  # output positions returned as copies (None: all)
        self.mutated = tuple(mutated)
        self.random = random
        self.max_captures = max_captures
        # Input positions a forward saves for its backward (handed out as the copies).
        self.saved_args = tuple(saved_args)
        # Outputs handed out as the pool's memory, overwritten by a later replay
        # (cuda_graph_output_copies off): clone_outputs is then empty.
        self.overwrite_outputs = overwrite_outputs
        # Captures by key (sizes and layouts of the inputs that are not read in place); each
        # capture also records the in-place inputs' addresses it was made with.
        self.captures: dict[tuple, list[_Capture]] = {}
        self.num_captures = 0
        # Full keys (with the in-place addresses) captured, and seen once (an ordinary call).
        self.captured: set[tuple] = set()
        self.seen: collections.OrderedDict[tuple, None] = collections.OrderedDict()
        self.disabled = ""
        self.replays = 0
        self._seed: torch.Tensor | None = None
        self._saved: dict[int, torch.Tensor] = {}  # the last replay's input copies, handed out
        # What each call did ("replay", "capture", "first call of a key", "busy: ...",
        # "cap reached"): for the debug dump and tests.
        self.events: collections.Counter[str] = collections.Counter()
        _REPLAYERS.add(self)

    def __call__(self, inputs: Sequence[torch.Tensor], extra: tuple = ()) -> list:
        self._saved = {}
        outs = self._call(inputs, extra)
        if self.kind == "backward":  # after the run: its inputs were still needed in it
            self._saved_at = self.pool.consume(inputs, self._saved_at)
        return outs

    def _call(self, inputs: Sequence[torch.Tensor], extra: tuple) -> list:
        if self.disabled or torch.cuda.is_current_stream_capturing():
            return self.run(list(inputs))
        key = self._key(inputs, extra)
        for c in self.captures.get(key, ()):
            if not c.same_addresses(inputs, self.in_place_list):
                continue
            blocker = self.pool.blocker(c)
            if blocker is None:
                self.events["replay"] += 1
                return self._replay(c, inputs)
            self.events[f"busy: {blocker}"] += 1
        full = (key, tuple(inputs[i].data_ptr() for i in self.in_place_list))
        if full not in self.captured and full not in self.seen:
            self.events["first call of a key"] += 1
            # The first call of these sizes and addresses runs ordinarily: it tunes the
            # kernels' launches, which a capture cannot time. (A backward whose saved values
            # move at every call, its forward having run ordinarily, never captures.)
            self.seen[full] = None
            if len(self.seen) > _SEEN_KEYS:
                self.seen.popitem(last=False)
            return self.run(list(inputs))
        if self.num_captures >= self.max_captures:
            self.events["cap reached"] += 1
            return self.run(list(inputs))
        self.events["capture"] += 1
        c = self._capture(inputs)
        if c is None:
            return self.run(list(inputs))
        self.captures.setdefault(key, []).append(c)
        self.captured.add(full)
        return self._replay(c, inputs)

    def release(self, reason: str) -> None:
        """Runs ordinarily from now on and lets go of its captures, and of the pool's memory
        they hold (outputs the caller still holds move out first, or keep their memory until
        dropped: _Capture.__del__). The default mode's measured choice (training_graphs.py)."""
        self.disabled = reason
        mine = {id(c) for cs in self.captures.values() for c in cs}
        self.pool.captures = [c for c in self.pool.captures if id(c) not in mine]
        for i, c in enumerate(self.pool.captures):
            c.order = i
        self.pool.saved = {k: c for k, c in self.pool.saved.items() if id(c) not in mine}
        self.captures.clear()
        self._saved = {}

    def saved_inputs(self, positions: Sequence[int]) -> dict[int, torch.Tensor]:
        """After a replay: the input copies at these input positions. A forward saves some
        inputs for its backward (a linear layer's input); handing the backward the copy, whose
        address stays put, lets the backward's capture be replayed too."""
        saved, self._saved = self._saved, {}  # held only by whoever takes them
        return {i: saved[i] for i in positions if i in saved}

    @property
    def last(self) -> bool:
        return bool(self._saved)

    def _key(self, inputs: Sequence[torch.Tensor], extra: tuple) -> tuple:
        """The sizes, strides and dtypes of the inputs not read in place (and the address of
        one that overlaps itself, which is read in place too), with the symbol values. The
        in-place inputs (parameters, a backward's saved values) are matched by address alone
        (_Capture.same_addresses): Dynamo's guards fix their sizes and layouts, and a step
        passes hundreds of them, so a per-input look in Python would cost more than the
        replay it selects."""
        if self._others is None:
            self._others = [i for i in range(len(inputs)) if i not in self.in_place]
        return (extra, *((t.shape, t.stride(), t.dtype, t.data_ptr() if _overlaps(t) else None)
                         for t in map(inputs.__getitem__, self._others)))

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
            self._seed = torch.zeros(1, dtype=torch.int64, device=torch.cuda.current_device())
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
        c = self.pool.add(graph, static, list(outs), copied, self.clone_outputs, self.kind,
                          self.saved_args, self.overwrite_outputs)
        c.addresses = [None] * len(inputs)
        for i in self.in_place_list:
            c.addresses[i] = inputs[i].data_ptr()
        del outs
        log.debug("coil: %s captured (capture %d of the graph, %d in the pool)", self.name,
                  self.num_captures, len(self.pool.captures))
        return c

    def _replay(self, c: _Capture, inputs: Sequence[torch.Tensor]) -> list:
        for i in c.copied_list:
            c.static_inputs[i].copy_(inputs[i])
        moved = self.pool.before_replay(c)
        if moved:
            self.events["outputs moved out of the pool"] += moved
        c.graph.replay()
        self.replays += 1
        for i in self.mutated:
            if i in c.copied:
                inputs[i].copy_(c.static_inputs[i])
        outs, self._saved, refs = c.new_generation()
        self.pool.handed_out(c, refs)
        return outs


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
