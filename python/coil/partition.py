"""How a training graph is split into forward and backward (AOTAutograd's partition_fn).

coil keeps AOTAutograd's default partition (docs/decisions.md: the min-cut one measured slower
and larger for GPT-2 training on the H100), with one joint-graph pass before it:

Views are taken again in the backward, not saved. The default partition saves every forward
value the backward reads, views included: a linear layer's transposed weight `permute(w)`
becomes a forward output of its own, although the backward could take the same view of `w`.
Each such output costs a forward a tensor handed across the runtime boundary plus a view
replayed on the input (fx_export.ExportedGraph._replay_view): 33 of them in a small BART's
forward, ~8 us each. So a view chain whose base the backward gets anyway (a forward input,
which the forward returns as it is, or a value the backward also reads directly) is cloned
into the backward for its backward readers, and the base is saved instead. In the backward the
view is free: coil lowers views to index arithmetic.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import torch
from torch import fx

log = logging.getLogger("coil")
aten = torch.ops.aten

# Ops that only re-address their first argument (no computation, no new storage).
_VIEW_OPS = frozenset({
    aten.permute.default, aten.t.default, aten.transpose.int, aten.view.default,
    aten.expand.default, aten.unsqueeze.default, aten.squeeze.dim, aten.squeeze.dims,
    aten.squeeze.default, aten.slice.Tensor, aten.select.int, aten.alias.default,
})


def _is_view(node: fx.Node) -> bool:
    return (node.op == "call_function" and node.target in _VIEW_OPS and bool(node.args)
            and isinstance(node.args[0], fx.Node))


def _is_primal(node: fx.Node) -> bool:
    return node.op == "placeholder" and str(node.target).startswith("primals")


def _forward_region(graph: fx.Graph) -> set[fx.Node]:
    """The nodes the default partition puts in the forward: every node but the tangents up to
    the last one tagged forward (or the last primal), as torch's default_partition finds it."""
    nodes = list(graph.nodes)
    last = -1
    for i, n in enumerate(nodes):
        if n.meta.get("partitioner_tag") == "is_forward" or _is_primal(n) or (
                n.op == "placeholder" and "fwd_seed" in str(n.target)):
            last = i
    return {n for n in nodes[:last + 1]
            if not (n.op == "placeholder" and "tangents" in str(n.target))}


def views_taken_in_backward(joint: fx.GraphModule) -> int:
    """Clones into the backward each forward view chain the backward reads whose base the
    backward gets anyway; returns how many chains moved. The forward keeps its own chain for
    its own readers (dead code if none)."""
    graph = joint.graph
    forward = _forward_region(graph)
    if not forward:
        return 0
    mutated = {n.args[0] for n in graph.nodes
               if n.op == "call_function" and n.target is aten.copy_.default}

    def backward_readers(n: fx.Node) -> list[fx.Node]:
        return [u for u in n.users if u not in forward and u.op != "output"]

    def root(n: fx.Node) -> fx.Node:
        while _is_view(n):
            n = n.args[0]
        return n

    def base_reaches_backward(r: fx.Node) -> bool:
        if r not in forward or r in mutated:
            return False
        # A forward input comes back as it is; any other value only if the backward reads it
        # directly (else saving the base instead of the view saves nothing).
        return _is_primal(r) or any(not _is_view(u) for u in backward_readers(r))

    candidates = [n for n in graph.nodes
                  if n in forward and _is_view(n) and backward_readers(n)
                  and base_reaches_backward(root(n))]
    if not candidates:
        return 0
    # Clones go right after the forward (the partition puts what follows in the backward),
    # after every placeholder.
    cursor = [n for n in graph.nodes if n in forward][-1]
    if cursor.op == "placeholder":
        cursor = [n for n in graph.nodes if n.op == "placeholder"][-1]
    clones: dict[fx.Node, fx.Node] = {}

    def clone(n: fx.Node) -> fx.Node:
        nonlocal cursor
        if not _is_view(n):
            return n  # the base itself
        if n not in clones:
            parent = clone(n.args[0])
            with graph.inserting_after(cursor):
                c = graph.node_copy(n, lambda a: parent if a is n.args[0] else a)
            c.meta.pop("partitioner_tag", None)
            c.meta.pop("recompute", None)
            clones[n] = cursor = c
        return clones[n]

    for n in candidates:
        readers = backward_readers(n)
        c = clone(n)
        for u in readers:
            u.replace_input_with(n, c)
    graph.lint()
    joint.recompile()
    return len(candidates)


def _default_partition_with_views_in_backward(joint: fx.GraphModule, joint_inputs: Any, **kw):
    from torch._functorch.partitioners import default_partition

    try:
        n = views_taken_in_backward(joint)
        if n:
            log.debug("coil: %d saved view(s) taken again in the backward", n)
    except Exception as e:  # an optimization: the plain partition is always right
        log.debug("coil: views kept saved (%s: %s)", type(e).__name__, e)
    return default_partition(joint, joint_inputs, **kw)


def partition_kwargs(recompute: bool, views_in_backward: bool = True) -> dict[str, Any]:
    """aot_module_simplified's partition_fn for coil's options.

    recompute on (and networkx, which it needs, installed): AOTAutograd's min-cut partitioner,
    which recomputes values cheap to recompute from what the backward saves anyway in the
    backward's fused kernels (views among them). Off (the default; measured slower and larger
    for GPT-2 training, docs/decisions.md): the default partition, with views taken again in
    the backward (views_taken_in_backward)."""
    if recompute:
        try:
            import networkx  # noqa: F401
            from torch._functorch.partitioners import min_cut_rematerialization_partition
        except ImportError as e:
            log.info("coil: min-cut partitioner unavailable (%s): saving every activation", e)
        else:
            return {"partition_fn": functools.partial(min_cut_rematerialization_partition,
                                                      compiler="inductor")}
    if not views_in_backward:
        return {}  # AOTAutograd's default partition as it is
    return {"partition_fn": _default_partition_with_views_in_backward}
