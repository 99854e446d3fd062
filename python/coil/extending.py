"""Extending coil from outside the tree: user decompositions and custom ops (docs/extending/).

User decompositions. `register_decomposition(op, fn)` adds `fn` to the table that
`decompositions.coil_decompositions()` hands AOTAutograd, which applies it while it traces the
ATen graph: `fn` receives the op's arguments (FakeTensors or proxies during tracing) and returns
what the op returns, built from ops coil lowers, or NotImplemented to leave that call as it is.
User entries take precedence over coil's built-in ones; registering again for an op replaces the
earlier entry. The registry is read once per compile, where the decomposition table is built
(glue, not a compiler pass); Dynamo caches compiled code, so a registration affects the graphs
compiled after it (call torch._dynamo.reset() to recompile functions compiled before).

Custom ops (torch.library.custom_op). A custom op coil has no lowering for is a node of the
graph like any other and runs through the per-op eager fallback (node_fallback.py; the report
names it with "no lowering"), while the ops around it are compiled. Its register_fake gives
Dynamo and AOTAutograd its output metadata, and its register_autograd formula is traced into
the backward graph. A custom op that mutates an argument (mutates_args) reaches coil as
AOTAutograd's functional form, the higher-order op auto_functionalized(_v2), which coil's graph
text cannot name; `functionalize_mutating_custom_ops` turns each such call into a call of a
functional op of coil's own (namespace `coil_functional`) that runs the higher-order op
eagerly, so that the graph compiles and only that call falls back.
"""

from __future__ import annotations

import contextlib
import functools
import json
import operator
import threading
from typing import Any, Callable, Iterator

import torch
import torch.fx as fx

__all__ = [
    "register_decomposition",
    "unregister_decomposition",
    "temporary_decomposition",
    "user_decompositions",
    "functionalize_mutating_custom_ops",
]

# ---------------------------------------------------------------------------------------------
# User decompositions

_lock = threading.Lock()
_user_table: dict[torch._ops.OpOverload, Callable] = {}


def _overloads(op) -> list[torch._ops.OpOverload]:
    """The OpOverloads an op names: itself, every overload of a packet, or the op of a
    torch.library.custom_op object."""
    if isinstance(op, torch._ops.OpOverload):
        return [op]
    if isinstance(op, torch._ops.OpOverloadPacket):
        return [getattr(op, name) for name in op.overloads()]
    inner = getattr(op, "_opoverload", None)  # torch._library.custom_ops.CustomOpDef
    if isinstance(inner, torch._ops.OpOverload):
        return [inner]
    raise TypeError(f"coil.register_decomposition: expected an ATen or custom op "
                    f"(OpOverload or OpOverloadPacket, e.g. torch.ops.aten.silu or "
                    f"torch.ops.mylib.myop.default), got {op!r}")


def register_decomposition(op, fn: Callable | None = None):
    """Registers `fn` as coil's decomposition of `op` (an OpOverload, an OpOverloadPacket for all
    its overloads, or a torch.library.custom_op object); usable as a decorator:

        @coil.register_decomposition(torch.ops.mylib.scaled_tanh.default)
        def _(x, scale):
            return torch.ops.aten.tanh.default(x) * scale

    AOTAutograd calls `fn` with the op's arguments while it traces a graph for coil; `fn`
    returns what the op returns (built from ops coil lowers: they fuse into coil's kernels), or
    NotImplemented to keep that call of the op. A user entry takes precedence over coil's
    built-in decomposition of the same op, and registering again for an op replaces the earlier
    entry (unregister_decomposition removes it; temporary_decomposition registers for a `with`
    block). Registrations affect graphs compiled afterwards: Dynamo caches compiled code, so a
    function compiled before keeps its graphs until torch._dynamo.reset(). Returns `fn`."""
    overloads = _overloads(op)

    def register(f: Callable) -> Callable:
        if not callable(f):
            raise TypeError(f"coil.register_decomposition: {f!r} is not callable")
        with _lock:
            for o in overloads:
                _user_table[o] = f
        return f

    return register if fn is None else register(fn)


def unregister_decomposition(op) -> None:
    """Removes the user decompositions of `op` (all overloads of a packet); coil's built-in
    decomposition, if any, applies again to graphs compiled afterwards. Missing entries are
    ignored."""
    overloads = _overloads(op)
    with _lock:
        for o in overloads:
            _user_table.pop(o, None)


@contextlib.contextmanager
def temporary_decomposition(op, fn: Callable) -> Iterator[Callable]:
    """Registers `fn` for `op` inside a `with` block and restores the previous user entries
    (or none) at its end; for tests. Graphs compiled inside the block keep the decomposition."""
    overloads = _overloads(op)
    with _lock:
        saved = {o: _user_table.get(o) for o in overloads}
    register_decomposition(op, fn)
    try:
        yield fn
    finally:
        with _lock:
            for o, prev in saved.items():
                if prev is None:
                    _user_table.pop(o, None)
                else:
                    _user_table[o] = prev


def user_decompositions() -> dict[torch._ops.OpOverload, Callable]:
    """A snapshot of the registered user decompositions (op -> function)."""
    with _lock:
        return dict(_user_table)


# ---------------------------------------------------------------------------------------------
# Mutating custom ops: auto_functionalized(_v2) -> a functional op of coil's own


@functools.lru_cache(maxsize=1)
def _functionalizing_hops() -> dict[str, Any]:
    try:
        from torch._higher_order_ops.auto_functionalize import (
            auto_functionalized, auto_functionalized_v2)
    except ImportError:  # pragma: no cover - older torch
        return {}
    return {"auto_functionalized": auto_functionalized,
            "auto_functionalized_v2": auto_functionalized_v2}


class _Unsupported(Exception):
    pass


def _encode(v, tensors: list, sizes: list):
    """A JSON-able template of one keyword argument of the higher-order op: tensors and sizes
    become slots of the `tensors` / `sizes` lists, the rest stays a constant."""
    if isinstance(v, fx.Node):
        val = v.meta.get("val")
        if isinstance(val, torch.Tensor):
            tensors.append(v)
            return {"t": len(tensors) - 1}
        if isinstance(val, (int, torch.SymInt)) and not isinstance(val, bool):
            sizes.append(v)
            return {"s": len(sizes) - 1}
        raise _Unsupported(f"argument {v.name} holds a {type(val).__name__}")
    if isinstance(v, torch.SymInt):
        sizes.append(v)
        return {"s": len(sizes) - 1}
    if isinstance(v, list):
        return [_encode(x, tensors, sizes) for x in v]
    if isinstance(v, tuple):
        return {"tuple": [_encode(x, tensors, sizes) for x in v]}
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, torch.dtype):
        return {"dtype": str(v).removeprefix("torch.")}
    if isinstance(v, torch.device):
        return {"device": str(v)}
    if isinstance(v, (torch.layout, torch.memory_format)):
        return {"attr": str(v).removeprefix("torch.")}
    raise _Unsupported(f"argument of type {type(v).__name__}")


def _decode(v, tensors, sizes):
    if isinstance(v, list):
        return [_decode(x, tensors, sizes) for x in v]
    if isinstance(v, dict):
        if "t" in v:
            return tensors[v["t"]]
        if "s" in v:
            return sizes[v["s"]]
        if "tuple" in v:
            return tuple(_decode(x, tensors, sizes) for x in v["tuple"])
        if "dtype" in v:
            return getattr(torch, v["dtype"])
        if "device" in v:
            return torch.device(v["device"])
        if "attr" in v:
            return getattr(torch, v["attr"])
    return v


@functools.lru_cache(maxsize=256)
def _parse_spec(spec: str):
    d = json.loads(spec)
    return d["hop"], d["kwargs"]


_library: torch.library.Library | None = None
_functional_ops: dict[torch._ops.OpOverload, torch._ops.OpOverload] = {}


def _functional_op(op: torch._ops.OpOverload) -> torch._ops.OpOverload:
    """coil_functional::<ns>__<name>[__<overload>](Tensor[] tensors, SymInt[] sizes, str spec)
    -> Tensor[]: runs the higher-order op named in `spec` on `op` with the keyword arguments
    `spec` describes (their tensors and sizes taken from the lists) and returns its tensor
    results (the op's own, then the new values of the mutated arguments). Defined once per op."""
    global _library
    with _lock:
        done = _functional_ops.get(op)
        if done is not None:
            return done
        if _library is None:
            _library = torch.library.Library("coil_functional", "FRAGMENT")
        ns, name = op._schema.name.split("::", 1)
        qual = f"{ns}__{name}"
        if op._overloadname != "default":
            qual += f"__{op._overloadname}"
        qual = "".join(c if c.isalnum() or c == "_" else "_" for c in qual)
        taken = {o._schema.name.split("::", 1)[1] for o in _functional_ops.values()}
        base, n = qual, 1
        while qual in taken:  # a::b__c and a__b::c
            qual, n = f"{base}_{n}", n + 1
        _library.define(f"{qual}(Tensor[] tensors, SymInt[] sizes, str spec) -> Tensor[]")

        def run(tensors, sizes, spec):
            hop_name, kwargs = _parse_spec(spec)
            hop = _functionalizing_hops()[hop_name]
            out = hop(op, **{k: _decode(v, tensors, sizes) for k, v in kwargs.items()})
            return [t for t in out if isinstance(t, torch.Tensor)]

        _library.impl(qual, run, "CompositeExplicitAutograd")
        # The same function on FakeTensors (the higher-order op has a FakeTensorMode rule).
        torch.library.register_fake(f"coil_functional::{qual}", run, lib=_library)
        result = getattr(torch.ops.coil_functional, qual).default
        _functional_ops[op] = result
        return result


def functionalize_mutating_custom_ops(gm: fx.GraphModule) -> list[str]:
    """Replaces every auto_functionalized / auto_functionalized_v2 call of `gm` (a custom op that
    mutates its arguments, as AOTAutograd leaves it) by a call of the op's coil_functional twin,
    which computes the same values (so the graph runs eagerly too) and is an op coil's graph
    text can name; the per-op fallback runs it. A call whose arguments or results the twin cannot
    carry (symbolic floats, non-tensor results) is left as it is (the graph then runs eagerly,
    as before). Returns the names of the ops rewritten."""
    hops = _functionalizing_hops()
    names = {id(h): n for n, h in hops.items()}
    done: list[str] = []
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or id(node.target) not in names:
            continue
        op = node.args[0] if node.args else None
        val = node.meta.get("val")
        if not isinstance(op, torch._ops.OpOverload) or not isinstance(val, (tuple, list)):
            continue
        if any(not (v is None or isinstance(v, torch.Tensor)) for v in val):
            continue
        users = list(node.users)
        if any(u.target is not operator.getitem or not isinstance(val[u.args[1]], torch.Tensor)
               for u in users):
            continue
        tensors: list = []
        sizes: list = []
        try:
            kwargs = {k: _encode(v, tensors, sizes) for k, v in node.kwargs.items()}
        except _Unsupported:
            continue
        spec = json.dumps({"hop": names[id(node.target)], "kwargs": kwargs}, sort_keys=True)
        twin = _functional_op(op)
        position = {}
        for k, v in enumerate(val):
            if isinstance(v, torch.Tensor):
                position[k] = len(position)
        with gm.graph.inserting_before(node):
            new = gm.graph.call_function(twin, (tensors, sizes, spec))
        new.meta.update(node.meta)
        new.meta["val"] = [v for v in val if isinstance(v, torch.Tensor)]
        for u in users:
            u.args = (new, position[u.args[1]])
        gm.graph.erase_node(node)
        done.append(str(op))
    if done:
        gm.recompile()
    return done
