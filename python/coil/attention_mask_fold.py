"""Constant attention masks folded in the Dynamo graph, before AOTAutograd traces it.

Why: `scaled_dot_product_attention` picks its kernel when AOTAutograd traces it (flash, cuDNN,
memory-efficient, or the "math" composition), from the inputs' dtypes, shapes and strides. A
mask whose last dimension is broadcast (stride 0) rules the fused kernels out, and the math
composition then reaches coil as a float32 product, a [B, H, L, S] softmax and a second product:
on the H100, BERT-base at 8x512 tokens spends about half its inference step there. Models build
such masks from the sequence length alone when they are traced (Hugging Face's mask builders
cannot look at the values under Dynamo, so they materialise `arange(S) >= 0`-like masks that
keep every position, or a causal pattern), while eager skips the all-true mask and runs flash.

The rule: an `attn_mask` that depends on no graph input (only on constructors such as arange
and full, and deterministic ops on them) is evaluated once at compile time. If it keeps every
position (bool all true, float all zero) it is dropped; if it is exactly the causal pattern
SDPA's `is_causal=True` applies (`ones(L, S).tril()`, top-left aligned, in every broadcast
slice), it becomes `is_causal=True`. Both give SDPA the same math as the mask did; the
dispatcher is then free to choose a fused kernel. Any other mask stays as it was. The dead mask
computation is removed from the graph. On CUDA only 16-bit attention is folded (_fused_kernels_pay).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx as fx
import torch.nn.functional as F

_SDPA = {F.scaled_dot_product_attention, torch._C._nn.scaled_dot_product_attention}
# The positional order of scaled_dot_product_attention's arguments.
_SDPA_ARGS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale")
# A mask larger than this is left alone: evaluating it would cost compile-time memory.
_MAX_MASK_ELEMENTS = 1 << 26
# Ops whose results are not a function of their arguments: a mask built from them is not a
# constant.
_NONDETERMINISTIC = ("rand", "bernoulli", "dropout", "normal", "uniform", "multinomial",
                     "empty", "exponential", "geometric", "cauchy", "log_normal", "poisson")


def _arg(node: fx.Node, name: str, default: Any) -> Any:
    i = _SDPA_ARGS.index(name)
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name, default)


def _set_arg(node: fx.Node, name: str, value: Any) -> None:
    i = _SDPA_ARGS.index(name)
    if len(node.args) > i:
        args = list(node.args)
        args[i] = value
        node.args = tuple(args)
    else:
        node.kwargs = {**node.kwargs, name: value}


def _target_name(node: fx.Node) -> str:
    t = node.target
    return (t if isinstance(t, str) else getattr(t, "__name__", str(t))).lower()


def _mutates(node: fx.Node) -> bool:
    """Whether the node may write into one of its inputs (an in-place method or function,
    setitem)."""
    name = _target_name(node)
    if name in ("setitem", "copy_") or (node.op == "call_function" and name.startswith("i")
                                          and name[1:] in ("add", "sub", "mul", "truediv",
                                                           "floordiv", "mod", "pow", "and",
                                                           "or", "xor", "lshift", "rshift",
                                                           "matmul")):
        return True
    return name.endswith("_") and not name.endswith("__")


def _constant_ancestors(mask: fx.Node) -> list[fx.Node] | None:
    """The nodes `mask` is computed from, in graph order, or None when it depends on a graph
    input or on anything that is not a pure, deterministic function of constants."""
    seen: set[fx.Node] = set()
    stack = [mask]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        seen.add(n)
        if n.op != "call_function" and n.op != "call_method":
            return None  # a placeholder (input, parameter, buffer, size), attribute or module
        name = _target_name(n)
        if any(word in name for word in _NONDETERMINISTIC) or _mutates(n):
            return None
        stack.extend(n.all_input_nodes)
    # A later in-place op on one of them would make the value at the SDPA call differ from
    # what is evaluated here.
    for n in seen:
        if any(_mutates(u) for u in n.users if u not in seen):
            return None
    return [n for n in mask.graph.nodes if n in seen]


def _evaluate(nodes: list[fx.Node], mask: fx.Node) -> torch.Tensor | None:
    graph = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    for n in nodes:
        env[n] = graph.node_copy(n, lambda x: env[x])
    graph.output(env[mask])
    with torch.no_grad():
        value = fx.GraphModule(torch.nn.Module(), graph)()
    return value if isinstance(value, torch.Tensor) else None


def _static_size(node: Any, dim: int) -> int | None:
    v = node.meta.get("example_value") if isinstance(node, fx.Node) else None
    if not isinstance(v, torch.Tensor) or v.dim() < 2:
        return None
    size = v.shape[dim]
    return size if isinstance(size, int) else None


def _classify(mask: torch.Tensor, q_len: int | None, kv_len: int | None) -> str | None:
    """'all' when the mask keeps every position, 'causal' when it is SDPA's causal pattern."""
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        return None  # SDPA takes bool or float masks only: leave its error to it
    keep = mask if mask.dtype == torch.bool else mask == 0
    if mask.dtype != torch.bool and not torch.isin(mask, torch.tensor(
            [0.0, float("-inf")], dtype=mask.dtype, device=mask.device)).all():
        return None  # a float mask that adds anything but 0 or -inf
    if bool(keep.all()):
        return "all"
    if q_len is None or kv_len is None or keep.dim() < 2:
        return None
    try:
        keep = torch.broadcast_to(keep, keep.shape[:-2] + (q_len, kv_len))
    except RuntimeError:
        return None
    causal = torch.ones(q_len, kv_len, dtype=torch.bool, device=keep.device).tril()
    return "causal" if torch.equal(keep, causal.expand_as(keep)) else None


def _fused_kernels_pay(query: Any) -> bool:
    """Whether handing SDPA to the fused kernels is a gain. On CUDA in float32 it is not: with
    TF32 the math composition's products run on tensor cores, while the memory-efficient kernel
    computes in full float32 (H100, DistilBERT training at 8x512 tokens: its forward and
    backward took 8.4 ms per step where the math composition's products and softmaxes took
    about 4.5; the step went from 0.97x to 0.90x Inductor)."""
    v = query.meta.get("example_value") if isinstance(query, fx.Node) else None
    if not isinstance(v, torch.Tensor):
        return False
    return v.device.type != "cuda" or v.dtype in (torch.float16, torch.bfloat16)


def _fold(node: fx.Node, dead: set[fx.Node]) -> str | None:
    mask = _arg(node, "attn_mask", None)
    if not isinstance(mask, fx.Node) or _arg(node, "is_causal", False) is not False:
        return None
    q = _arg(node, "query", None)
    if not _fused_kernels_pay(q):
        return None
    example = mask.meta.get("example_value")
    if isinstance(example, torch.Tensor) and (
            not isinstance(example.numel(), int) or example.numel() > _MAX_MASK_ELEMENTS):
        return None
    nodes = _constant_ancestors(mask)
    if nodes is None:
        return None
    k = _arg(node, "key", None)
    try:
        value = _evaluate(nodes, mask)
        kind = None if value is None else _classify(value, _static_size(q, -2),
                                                     _static_size(k, -2))
    except Exception:  # noqa: BLE001 -- anything unexpected (a fake-tensor context whose
        return None    # values cannot be read, say): leave the mask as it is
    if kind is None:
        return None
    _set_arg(node, "attn_mask", None)
    if kind == "causal":
        _set_arg(node, "is_causal", True)
    dead.update(nodes)
    return kind


def fold_attention_masks(gm: fx.GraphModule) -> dict[str, int]:
    """Folds the constant attention masks of a Dynamo graph in place; returns how many were
    dropped ('all') and how many became is_causal ('causal')."""
    counts = {"all": 0, "causal": 0}
    candidates: set[fx.Node] = set()
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target in _SDPA:
            kind = _fold(node, candidates)
            if kind:
                counts[kind] += 1
    if any(counts.values()):
        # The pure nodes the folded masks were built from, where nothing else reads them
        # (users come after their inputs, so one pass in reverse order finds chains).
        for n in reversed(list(gm.graph.nodes)):
            if n in candidates and not n.users:
                gm.graph.erase_node(n)
        gm.recompile()
    return counts
