"""Common-subexpression elimination on an ATen FX graph (a pass before export).

AOTAutograd runs CSE on the joint graph, but the partitioner's recomputation can put identical
nodes back into a backward graph: two BatchNorms reading one gradient (a ResNet block's main
branch and its downsample) each sum it over N, H and W, and coil computed that sum twice. The
pass keeps the first of identical nodes (same target, same arguments after earlier merges); a
later graph output becomes a clone of the earlier node, so no output aliases another, and nodes
of nondeterministic ops (random numbers) are never merged, so no random draw is shared. torch's own `fx_graph_cse` does the same but
imports Inductor (2.7 s), too much for a compile step.
"""

from __future__ import annotations

import torch
import torch.fx as fx

__all__ = ["eliminate_common_subexpressions"]


def _mergeable(n: fx.Node) -> bool:
    if n.op != "call_function":
        return False
    return torch.Tag.nondeterministic_seeded not in getattr(n.target, "tags", ())


def _key(n: fx.Node):
    def norm(a):
        if isinstance(a, fx.Node):
            return ("node", a.name)
        if isinstance(a, (list, tuple)):
            return (type(a).__name__, tuple(norm(x) for x in a))
        if isinstance(a, dict):
            return ("dict", tuple(sorted((k, norm(v)) for k, v in a.items())))
        if isinstance(a, (torch.SymInt, torch.SymFloat, torch.SymBool)):
            return ("sym", str(a.node))
        return (type(a).__name__, repr(a))

    return (n.target, norm(n.args), norm(n.kwargs))


def eliminate_common_subexpressions(gm: fx.GraphModule) -> list[str]:
    """Merges identical nodes of `gm` in place; returns the targets of the removed ones."""
    out = next(n for n in gm.graph.nodes if n.op == "output")
    outputs = set(out.all_input_nodes)
    seen: dict = {}
    removed: list[str] = []
    for n in list(gm.graph.nodes):
        if not _mergeable(n):
            continue
        key = _key(n)  # strings and tuples of them: hashable
        first = seen.get(key)
        if first is None:
            seen[key] = n
            continue
        if n in outputs:
            # Two outputs must not share storage (two BatchNorms' bias gradients, the same
            # sum): the later one becomes a copy of the earlier, computed once.
            if not isinstance(n.meta.get("val"), torch.Tensor):
                continue
            with gm.graph.inserting_before(n):
                copy = gm.graph.call_function(torch.ops.aten.clone.default, (first,))
            copy.meta.update(n.meta)
            n.replace_all_uses_with(copy)
        else:
            n.replace_all_uses_with(first)
        gm.graph.erase_node(n)
        removed.append(str(n.target))
    if removed:
        gm.recompile()
    return removed
