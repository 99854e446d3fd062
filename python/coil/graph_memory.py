"""Tensors over a captured CUDA graph's memory, handed out per replay (reduce_overhead.py,
cuda_graphs.py).

A replay writes the memory its capture allocated (the pool's). What the caller gets back are
new tensor objects over that memory, built per replay from metadata taken once at capture
(span_metas, build_tensor); outputs the caller sees are kept valid past the next replay by
moving them out of the pool only if they are still held then (KeptOutputs). The inputs a graph
reads in place are checked by address in one call (same_addresses).
"""

from __future__ import annotations

import weakref
from typing import Any, Sequence

import torch
from torch.multiprocessing.reductions import StorageWeakRef

__all__ = ["KeptOutputs", "build_tensor", "keep_until_dropped", "same_addresses", "span_metas"]

# Compares the addresses of many tensors in one call (CUDA builds of PyTorch; Inductor's
# CUDA graphs use it the same way).
_ptrs_equal = getattr(torch._C, "_tensors_data_ptrs_at_indices_equal", None)


def same_addresses(inputs: Sequence[torch.Tensor], addresses: list, positions: list[int]) -> bool:
    """Whether inputs[i] is at addresses[i] for every i in `positions`."""
    if _ptrs_equal is not None:
        return _ptrs_equal(inputs, addresses, positions)
    return all(inputs[i].data_ptr() == addresses[i] for i in positions)


def span_metas(tensors: dict[Any, torch.Tensor]) -> tuple[int, int, dict[Any, dict]]:
    """(first address, bytes, metadata by key) to rebuild `tensors` on one storage object over
    the memory from the lowest of their storages to the end of the highest (the pool's
    memory and the capture's input buffers): what _construct_CUDA_Tensor_From_Storage_And_
    Metadata needs, each storage offset counted from that first address."""
    if not tensors:
        return 0, 0, {}
    starts = {k: t.untyped_storage().data_ptr() for k, t in tensors.items()}
    lo = min(starts.values())
    hi = max(starts[k] + t.untyped_storage().nbytes() for k, t in tensors.items())
    metas = {}
    for k, t in tensors.items():
        gap = starts[k] - lo
        if gap % t.element_size():  # never for the allocator's aligned blocks
            raise ValueError("a captured tensor is not aligned to its element size")
        metas[k] = {"nbytes": hi - lo, "data_ptr": lo, "size": t.shape, "stride": t.stride(),
                    "dtype": t.dtype, "device": t.device,
                    "storage_offset": gap // t.element_size() + t.storage_offset()}
    return lo, hi - lo, metas


def _tensor_on(meta: dict, storage: torch.UntypedStorage) -> torch.Tensor:
    """A tensor over `storage` from span_metas' metadata (the CUDA constructor's fields)."""
    return torch.empty(0, dtype=meta["dtype"], device=meta["device"]).set_(
        storage, meta["storage_offset"], meta["size"], meta["stride"])


# One call per tensor in CUDA builds of PyTorch (a CPU build has only `set_`, for the tests).
build_tensor = getattr(torch._C, "_construct_CUDA_Tensor_From_Storage_And_Metadata", _tensor_on)

# Swaps two storages' memory, so every tensor and view on either follows (PyTorch >= 2.12):
# how a kept output moves out of the pool (KeptOutputs).
_swap_storage = hasattr(torch.UntypedStorage, "_swap_data_ptr_")
# Older PyTorch: a storage's strong references (tensors, views, its Python object) are counted,
# and a tensor object can take another tensor's contents (TensorImpl) whole. Where the caller
# holds nothing on the storage but the outputs handed out, each takes a copy's contents.
_use_count = getattr(torch._C, "_storage_Use_Count", None)
_swap_impl = getattr(torch._C, "_swap_tensor_impl", None)
_swap_tensors = _use_count is not None and _swap_impl is not None


class KeptOutputs:
    """The outputs of one capture that its caller sees, handed out as the pool's memory and
    kept valid past the replays that overwrite it.

    Each pool block holding such outputs is handed out on a storage object of its own per
    replay. Before a replay that may overwrite the block (CapturePool.before_replay), a
    storage still alive is moved out of the pool: a new block gets a copy of its bytes and
    the storage's memory is swapped for it, so every tensor on the storage (the outputs and
    any view the caller took of them) keeps its values. An output dropped before that costs
    nothing, where a copy per call (the clone Inductor's mode avoids by letting the next
    replay overwrite it) cost GPT-2's inference 6% of its step.

    Where PyTorch cannot swap a storage's memory (before 2.12), the outputs handed out are
    set onto the copy instead (_move_tensors), which leaves out any view the caller took: a
    storage with more holders than those outputs cannot move (movable()), and the replay must
    not overwrite it. Outputs of memory that is not the pool's own (a static
    input's) and empty ones are returned as clones, and all of them where neither way is
    available."""

    def __init__(self, outputs: Sequence[torch.Tensor], seen: set[int],
                 static_inputs: Sequence[torch.Tensor]):
        self.by_storage = _swap_storage
        usable = _swap_storage or _swap_tensors
        foreign = {t.untyped_storage().data_ptr() for t in static_inputs}
        blocks: dict[int, dict[int, torch.Tensor]] = {}
        for j in sorted(seen) if usable else ():
            ptr = outputs[j].untyped_storage().data_ptr()
            if ptr and ptr not in foreign:
                blocks.setdefault(ptr, {})[j] = outputs[j]
        # Per block: (address, bytes, metadata by output position).
        self.blocks = [span_metas(ts) for ts in blocks.values()]
        self.device = outputs[0].device if outputs else None
        # The last replay's storages: (weak reference, the tensors handed out on it (weak),
        # the strong references it had besides them when handed out).
        self.live: list[tuple[StorageWeakRef, list[weakref.ref], int]] = []

    def hand_out(self) -> dict[int, torch.Tensor]:
        """The kept outputs of the replay just run, by output position."""
        build = build_tensor
        outs, self.live = {}, []
        for ptr, nbytes, metas in self.blocks:
            storage = torch._C._construct_storage_from_data_pointer(ptr, self.device, nbytes)
            block = [(j, build(m, storage)) for j, m in metas.items()]
            outs.update(block)
            ref = StorageWeakRef(storage)
            del storage
            extra = 0 if self.by_storage else _use_count(ref.cdata) - len(block)
            self.live.append((ref, [weakref.ref(t) for _, t in block], extra))
        return outs

    def movable(self) -> bool:
        """Whether every storage still held can move out of the pool (always, where PyTorch
        swaps a storage's memory)."""
        return all(self._movable(*block) for block in self.live)

    def _movable(self, ref: StorageWeakRef, tensors: list[weakref.ref], extra: int) -> bool:
        if self.by_storage or ref.expired():
            return True
        return _use_count(ref.cdata) == sum(r() is not None for r in tensors) + extra

    def retire(self, memory: Any) -> None:
        """The capture goes, and with it the pool's memory (held by `memory`): the storages
        still held move out of it, and where one cannot, `memory` stays until it is dropped."""
        stuck = [ref for ref, tensors, extra in self.live if not self._movable(ref, tensors, extra)]
        self.live = [block for block in self.live if block[0] not in stuck]
        self.move_out()
        if stuck:
            keep_until_dropped(stuck, memory)

    def move_out(self) -> int:
        """Before a replay that may overwrite the blocks (or before the capture is dropped):
        moves the storages still held out of the pool; returns how many it moved. (Without
        storage swaps, only when movable() said so.)"""
        moved = 0
        for ref, tensors, _ in self.live:
            if self.by_storage:
                moved += _move_storage(ref)
            elif not ref.expired():
                moved += _move_tensors(ref, [t for t in (r() for r in tensors) if t is not None])
        self.live = []
        return moved


# Pool memory kept for tensors the caller holds after their capture went: (weak references
# to the storages over it, what holds the memory), dropped once the storages are gone.
_kept_memory: list[tuple[list[StorageWeakRef], Any]] = []


def keep_until_dropped(refs: list[StorageWeakRef], memory: Any) -> None:
    """Keeps `memory` (tensors holding pool blocks) alive while a storage in `refs` is."""
    _kept_memory[:] = [(r, m) for r, m in _kept_memory if not all(x.expired() for x in r)]
    _kept_memory.append((refs, memory))


def _fresh_copy(ref: StorageWeakRef) -> tuple[torch.UntypedStorage, torch.UntypedStorage] | None:
    """(the storage `ref` names, a new storage holding a copy of its bytes), or None where it
    is gone."""
    storage = None if ref.expired() else torch.UntypedStorage._new_with_weak_ptr(ref.cdata)
    if storage is None:
        return None
    fresh = torch.empty(storage.nbytes(), dtype=torch.uint8, device=storage.device)
    fresh = fresh.untyped_storage()
    fresh.copy_(storage)
    return storage, fresh


def _move_storage(ref: StorageWeakRef) -> bool:
    """Moves the storage `ref` names, if still alive, out of the memory it is over: a new
    allocation gets a copy of its bytes and the storage's memory is swapped for it, so every
    tensor on it keeps its values (PyTorch >= 2.12). Returns whether it moved."""
    pair = _fresh_copy(ref)
    if pair is None:
        return False
    storage, fresh = pair
    storage._swap_data_ptr_(fresh)  # `fresh` now holds the old memory, and goes
    return True


def _move_tensors(ref: StorageWeakRef, tensors: list[torch.Tensor]) -> bool:
    """Each of `tensors` (all on the storage `ref` names) is set onto a copy of the storage,
    in its layout: tensors sharing the storage keep sharing it.

    A tensor in autograd's graph (a training forward's output: its grad_fn is coil's backward)
    takes the copy as its `.data`, which keeps its autograd data, its version counter and the
    object itself, so what autograd saved of it (a later op's input is saved as the tensor
    itself) reads the copy too. Another tensor takes a tensor over the copy whole
    (_swap_tensor_impl), as `.data` cannot be set on an inference tensor."""
    pair = _fresh_copy(ref)
    if pair is None or not tensors:
        return False
    fresh = pair[1]
    for t in tensors:
        moved = torch.empty(0, dtype=t.dtype, device=t.device).set_(
            fresh, t.storage_offset(), t.shape, t.stride())
        if t.requires_grad:
            t.data = moved
        else:
            _swap_impl(t, moved)
    return True
