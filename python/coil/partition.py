"""How a training graph is split into forward and backward (AOTAutograd's partition_fn).

coil keeps AOTAutograd's default partition (docs/decisions.md: the min-cut one measured slower
and larger for GPT-2 training on the H100), with one joint-graph pass before it:

Views are taken again in the backward, not saved. The default partition saves every forward
value the backward reads, views included: a linear layer's transposed weight `permute(w)`
becomes a forward output of its own, although the backward could take the same view of `w`.
Each such output costs a forward a tensor handed across the runtime boundary plus a view
replayed on the input (graph_call.ExportedGraph._replay_view): 33 of them in a small BART's
forward, ~8 us each. So a view chain whose base the backward gets anyway (a forward input,
which the forward returns as it is, or a value the backward also reads directly) is cloned
into the backward for its backward readers, and the base is saved instead. In the backward the
view is free: coil lowers views to index arithmetic.

On the GPU, where a training step's peak memory is mostly saved activations, the same holds
for chains of cheap elementwise ops (option recompute_pointwise): a GELU's output is computed
again from its input, which the GELU's gradient saves anyway, and a LayerNorm's output from its
input and statistics. Each costs the backward one elementwise pass; each saves an activation
(GPT-2 at the GPU size: 12 x 48 MiB of GELU outputs alone). On the CPU the extra passes cost
time the dashboard measures, and memory is not the constraint, so they stay saved there.
Where such values come from a forward value the backward does not read (under autocast, a
GELU's float32 chain from a bfloat16 product), that smaller value is saved in their place
(option save_smaller_sources; _cheaper_sources).
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


# Views that only reshape (same elements in the same order where input and result are
# contiguous): the backward can take the inverse view.
_RESHAPE_OPS = frozenset({
    aten.view.default, aten.squeeze.dim, aten.squeeze.dims, aten.squeeze.default,
    aten.unsqueeze.default, aten._unsafe_view.default, aten.reshape.default,
})


def _static_contiguous(v: torch.Tensor) -> bool:
    try:
        return all(isinstance(d, int) for d in v.shape) and v.is_contiguous()
    except Exception:  # a symbolic size whose contiguity is not decidable
        return False


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


# Chains longer than this (nodes cloned into the backward for one saved value) stay saved.
MAX_RECOMPUTED_CHAIN = 12


def _is_cheap_pointwise(node: fx.Node) -> bool:
    """An elementwise op without randomness whose result is one tensor on the device of its
    inputs: recomputing it costs one pass over its operands."""
    if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
        return False
    if not isinstance(node.meta.get("val"), torch.Tensor):
        return False
    tags = node.target.tags
    if torch.Tag.nondeterministic_seeded in tags:
        return False
    if node.target is aten._to_copy.default:  # a cast, not a move to another device
        src = node.args[0].meta.get("val") if isinstance(node.args[0], fx.Node) else None
        return isinstance(src, torch.Tensor) and src.device == node.meta["val"].device
    return torch.Tag.pointwise in tags


def _static_bytes(n: fx.Node) -> int | None:
    v = n.meta.get("val")
    if not isinstance(v, torch.Tensor) or not all(isinstance(d, int) for d in v.shape):
        return None
    return v.numel() * v.element_size()


def _is_product(n: fx.Node) -> bool:
    """Matrix products, convolutions and attention: the ops that separate a network's layers."""
    if n.op != "call_function" or not isinstance(n.target, torch._ops.OpOverload):
        return False
    name = n.target._schema.name
    return (name in ("aten::mm", "aten::bmm", "aten::addmm", "aten::baddbmm")
            or "convolution" in name or "scaled_dot_product" in name)


def _backward_uses(graph: fx.Graph, forward: set[fx.Node]) -> dict[fx.Node, tuple[int, int]]:
    """Each forward value's first and last backward reader, each as the number of products
    (_is_product) the backward runs before it: readers with no product between them are in
    one place (a GELU's gradient), readers a layer apart are not."""
    uses: dict[fx.Node, tuple[int, int]] = {}
    products = 0
    for u in graph.nodes:
        if u in forward or u.op == "output":
            continue
        for a in u.all_input_nodes:
            if a in forward:
                first, last = uses.get(a, (products, products))
                uses[a] = (min(first, products), max(last, products))
        products += _is_product(u)
    return uses


# How many products earlier than its first backward reader a value computed again may be
# computed because another one's computation needs it: a GELU's tanh is read by its gradient
# one product (the next layer's input gradient) after the weight gradient that reads the GELU's
# output; a transformer layer's backward runs 6-10 products, so a residual stream's values are
# several products apart per layer.
EARLY_PRODUCTS = 3


def _computes_early(n: fx.Node, others: set[fx.Node], uses: dict[fx.Node, tuple[int, int]]) -> bool:
    """Whether computing n again, when its backward readers first need it, would compute one of
    `others` (values computed again themselves) more than EARLY_PRODUCTS products before the
    backward first needs that one. A float32 residual stream computed again layer by layer
    from its branches' outputs builds every earlier layer's value for the last layer's, the
    backward's first: all alive at once, the memory of saving them plus the work (GPT-2's
    bf16-autocast backward began with one kernel writing twelve layers' residuals)."""
    first = uses.get(n, (0, 0))[0]
    return any(m is not n and uses.get(m, (0, -1))[0] - first > EARLY_PRODUCTS for m in others)


def _chain_boundary(n: fx.Node, boundary, mutated: set[fx.Node],
                    recomputable, cloned: set[fx.Node] | None = None) -> set[fx.Node] | None:
    """Walks back from n through the nodes a recomputation of n would clone (n included, at
    most MAX_RECOMPUTED_CHAIN, each recomputable and not mutated). `boundary(m)` says, for every
    other node reached: ("walk", None) to clone it too, ("stop", x) to read it as it is
    (recording x where not None), ("fail", None) to give up. Returns the recorded values, or
    None where the chain cannot be computed again. `cloned`, where given, receives the nodes the
    recomputation would clone."""
    need: set[fx.Node] = set() if cloned is None else cloned
    recorded: set[fx.Node] = set()
    stack = [n]
    while stack:
        m = stack.pop()
        if m in need:
            continue
        if m is not n:
            kind, x = boundary(m)
            if kind == "fail":
                return None
            if kind == "stop":
                if x is not None:
                    recorded.add(x)
                continue
        if m in mutated or not recomputable(m):
            return None
        need.add(m)
        if len(need) > MAX_RECOMPUTED_CHAIN:
            return None
        stack.extend(a for a in m.all_input_nodes if isinstance(a.meta.get("val"), torch.Tensor))
    return recorded


def _cheaper_sources(graph: fx.Graph, forward: set[fx.Node], read: set[fx.Node],
                     mutated: set[fx.Node], free, recomputable,
                     uses: dict[fx.Node, tuple[int, int]]) -> set[fx.Node]:
    """Forward values worth saving in place of the larger values the backward reads that they
    compute through cheap elementwise chains. Under autocast a GELU written out in ops (GPT-2's)
    reads a bfloat16 product, casts it to float32 and saves float32 tanh, cube and scaled
    copies for its gradient: the product itself (one bfloat16 tensor) is not read by the
    backward, so nothing could be computed again from it, and each layer saved 125 MB where
    25 MB give the same values. Read values that cannot be computed again from what is
    available are grouped by the unavailable forward values ("sources") their chains would
    need; a group's sources are saved when they are smaller than the group's values. `free`:
    what the backward has without saving more (available values and views of them)."""

    groups: dict[frozenset[fx.Node], int] = {}
    for n in graph.nodes:
        if n not in read or not recomputable(n) or _is_view(n):
            continue
        if any(u.op == "output" for u in n.users):
            continue  # a graph output is kept whatever the backward does: nothing to gain
        size = _static_bytes(n)
        stops: set[fx.Node] = set()

        def source(m: fx.Node, stops=stops) -> tuple[str, fx.Node | None]:
            if free(m):  # available, or a view of an available value
                stops.add(m)
                return "stop", None
            if recomputable(m):
                return "walk", None
            if m not in forward or m in mutated or _static_bytes(m) is None:
                return "fail", None
            return "stop", m  # computed otherwise: a source to save

        leaves = _chain_boundary(n, source, mutated, recomputable)
        if size is None or not leaves:  # not computable again, or already from available
            continue
        if _computes_early(n, {m for m in stops if m in read and recomputable(m)}, uses):
            continue
        groups[frozenset(leaves)] = groups.get(frozenset(leaves), 0) + size
    added: set[fx.Node] = set()
    for leaves, gain in sorted(groups.items(), key=lambda kv: -kv[1]):
        cost = sum(_static_bytes(x) for x in leaves if x not in added)
        if cost < gain:
            added |= leaves
    return added


def taken_again_in_backward(joint: fx.GraphModule, pointwise: bool = False,
                            smaller_sources: bool = True) -> int:
    """Clones into the backward the forward values the backward reads that it can compute again
    from what it gets anyway (forward inputs, and forward values it reads directly): views,
    and with `pointwise` chains of cheap elementwise ops (a GELU's output next to its saved
    input, a LayerNorm's output next to its saved input and statistics). Returns how many
    saved values are taken again. The forward keeps its own nodes for its own readers (dead
    code if none)."""
    graph = joint.graph
    forward = _forward_region(graph)
    if not forward:
        return 0
    mutated = {n.args[0] for n in graph.nodes
               if n.op == "call_function" and n.target is aten.copy_.default}

    def backward_readers(n: fx.Node) -> list[fx.Node]:
        return [u for u in n.users if u not in forward and u.op != "output"]

    # What the backward gets anyway: forward inputs, and the values it reads (saved today;
    # those taken again below are still there, through their clones).
    read = {n for n in graph.nodes if n in forward and backward_readers(n)}

    def available(n: fx.Node) -> bool:
        return n in forward and n not in mutated and (_is_primal(n) or n in read)

    def saved_view_of(n: fx.Node, exclude=frozenset()) -> fx.Node | None:
        """An available reshaping view of n (same elements, both contiguous), from which the
        backward gets n back as a view: BatchNorm's keepdim mean and inverse std, whose
        squeezed copies the backward reads anyway, where a chain needs the keepdim ones."""
        v = n.meta.get("val")
        if n not in forward or n in mutated or not isinstance(v, torch.Tensor):
            return None
        if not _static_contiguous(v):
            return None
        for u in n.users:
            w = u.meta.get("val")
            if (u.op == "call_function" and u.target in _RESHAPE_OPS and u.args[0] is n
                    and u not in exclude and available(u) and isinstance(w, torch.Tensor)
                    and _static_contiguous(w) and w.numel() == v.numel()):
                return u
        return None

    def recomputable(n: fx.Node) -> bool:
        return _is_view(n) or (pointwise and _is_cheap_pointwise(n))

    uses = _backward_uses(graph, forward)
    if pointwise and smaller_sources:
        read |= _cheaper_sources(
            graph, forward, read, mutated,
            lambda m: available(m) or saved_view_of(m) is not None, recomputable, uses)

    def can_take_again(n: fx.Node, taken_views=frozenset()) -> set[fx.Node] | None:
        """The saved views n's chain reads (saved_view_of) where n can be computed again from
        available values by cloning at most MAX_RECOMPUTED_CHAIN recomputable nodes (n
        included); None where it cannot."""

        def boundary(m: fx.Node) -> tuple[str, fx.Node | None]:
            if available(m):
                return "stop", None
            if (u := saved_view_of(m, exclude={n} | taken_views)) is not None:
                return "stop", u
            return "walk", None

        return _chain_boundary(n, boundary, mutated, recomputable)

    reads_views = {n: v for n in graph.nodes
                   if n in read and recomputable(n) and (v := can_take_again(n)) is not None}
    # A chain that reads a saved view only works if that view stays saved: two reshaped
    # views of one value (attention's probabilities, viewed for the softmax's gradient and
    # for the batched product) would otherwise each be taken again through the other.
    # Such a chain is tried again without those views (computing through them instead, from
    # what else is available: an autocast GELU's `tanh + 1` from the saved bfloat16 product
    # once `tanh` itself is taken again).
    changed = True
    while changed:
        changed = False
        for n, views in list(reads_views.items()):
            if views & reads_views.keys():
                again = can_take_again(n, frozenset(views & reads_views.keys()))
                if again is not None and not again & reads_views.keys():
                    reads_views[n] = again
                else:
                    del reads_views[n]
                changed = True
    # In forward order, a value whose recomputation would compute another one taken again
    # well before the backward needs that one stays saved (_computes_early); the next can then
    # be computed from it. `needs`: what each value taken again computes with it, transitively
    # (clone() clones the taken values its chain reads).
    needs: dict[fx.Node, set[fx.Node]] = {}
    for n in [n for n in graph.nodes if n in reads_views]:
        stops: set[fx.Node] = set()

        def stop_at(m: fx.Node, stops=stops) -> tuple[str, fx.Node | None]:
            if available(m):
                stops.add(m)
                return "stop", None
            return "walk", None

        cloned: set[fx.Node] = set()
        _chain_boundary(n, stop_at, mutated, recomputable, cloned)
        direct = (stops | cloned) & needs.keys()
        computed = set(direct).union(*(needs[m] for m in direct))
        if _computes_early(n, computed, uses):
            del reads_views[n]
        else:
            needs[n] = computed
    candidates = [n for n in graph.nodes if n in reads_views]
    if not candidates:
        return 0
    taken = set(candidates)
    # Clones go right after the forward (the partition puts what follows in the backward),
    # after every placeholder.
    cursor = [n for n in graph.nodes if n in forward][-1]
    if cursor.op == "placeholder":
        cursor = [n for n in graph.nodes if n.op == "placeholder"][-1]
    clones: dict[fx.Node, fx.Node] = {}

    def clone(n: fx.Node) -> fx.Node:
        nonlocal cursor
        if n in clones:
            return clones[n]
        if available(n) and n not in taken:
            return n  # saved, as it is
        if n not in taken and (u := saved_view_of(n, exclude=taken)) is not None:
            # n again, as a view of its saved reshaped copy.
            with graph.inserting_after(cursor):
                c = graph.call_function(aten.view.default, (u, list(n.meta["val"].shape)))
            c.meta["val"] = n.meta["val"]
            clones[n] = cursor = c
            return c
        args = {a: clone(a) for a in n.all_input_nodes
                if isinstance(a.meta.get("val"), torch.Tensor)}
        with graph.inserting_after(cursor):
            c = graph.node_copy(n, lambda a: args.get(a, a))
        c.meta.pop("partitioner_tag", None)
        c.meta.pop("recompute", None)
        clones[n] = cursor = c
        return c

    for n in candidates:
        readers = backward_readers(n)
        c = clone(n)
        for u in readers:
            u.replace_input_with(n, c)
    graph.lint()
    joint.recompile()
    return len(candidates)


def _on_cuda(joint: fx.GraphModule) -> bool:
    for n in joint.graph.nodes:
        v = n.meta.get("val") if n.op == "placeholder" else None
        if isinstance(v, torch.Tensor) and v.device.type == "cuda":
            return True
    return False


def _default_partition_taking_values_again(joint: fx.GraphModule, joint_inputs: Any, *,
                                           recompute_pointwise: bool = False,
                                           smaller_sources: bool = True, **kw):
    from torch._functorch.partitioners import default_partition

    try:
        n = taken_again_in_backward(joint, pointwise=recompute_pointwise and _on_cuda(joint),
                                    smaller_sources=smaller_sources)
        if n:
            log.debug("coil: %d saved value(s) taken again in the backward", n)
    except Exception as e:  # an optimization: the plain partition is always right
        log.debug("coil: saved values kept as the default partition has them (%s: %s)",
                  type(e).__name__, e)
    return default_partition(joint, joint_inputs, **kw)


def partition_kwargs(recompute: bool, views_in_backward: bool = True,
                     recompute_pointwise: bool = True,
                     smaller_sources: bool = True) -> dict[str, Any]:
    """aot_module_simplified's partition_fn for coil's options.

    recompute on (and networkx, which it needs, installed): AOTAutograd's min-cut partitioner,
    which recomputes values cheap to recompute from what the backward saves anyway in the
    backward's fused kernels (views among them). Off (the default; measured slower and larger
    for GPT-2 training, docs/decisions.md): the default partition, with views taken again in
    the backward, and on the GPU (recompute_pointwise) cheap elementwise values too
    (taken_again_in_backward), from smaller values saved in their place where that pays
    (smaller_sources: _cheaper_sources)."""
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
    return {"partition_fn": functools.partial(_default_partition_taking_values_again,
                                              recompute_pointwise=recompute_pointwise,
                                              smaller_sources=smaller_sources)}
