"""log_softmax in training graphs as `x - logsumexp(x)`: the backward saves the logits and one
value per row instead of the log-probabilities.

Why: autograd's formula for `_log_softmax` differentiates through its *result*, so AOTAutograd's
default partition makes the forward write the full log-probabilities only to save them. A
language model's loss is `cross_entropy(logits)`: for GPT-2 at 8x512 tokens that is a
[4088, 50257] float32 tensor (822 MB) written by the forward (1.18 ms of the H100's time, three
passes over rows too long for L2) and read back once by nll_loss, at the targets only.
`logsumexp`'s formula needs its input and its [rows, 1] result, so with `x - logsumexp(x)` the
forward reads the logits once and writes one value per row, nll_loss reads the difference at the
targets, and the backward computes `grad - exp(x - lse) * sum(grad)` from the saved logits: the
same math as `_log_softmax_backward_data`, from the same amount of saved data. Inductor reaches
this through its min-cut partitioner, which recomputes the log-probabilities in the backward;
coil keeps AOTAutograd's default partition (docs/decisions.md) and rewrites this one pattern in
the Dynamo graph, before AOTAutograd traces it.

Only float32 inputs without a `dtype` argument: in bfloat16 or float16 the row's log-sum would
be rounded to 8 or 11 bits before the subtraction, where log_softmax computes it in float32.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch
import torch.fx as fx
import torch.nn.functional as F


def _log_softmax_via_logsumexp(x: torch.Tensor, dim: int) -> torch.Tensor:
    return x - torch.logsumexp(x, dim, keepdim=True)


def _cross_entropy_via_logsumexp(x: torch.Tensor, target: torch.Tensor, ignore_index: int,
                                 reduction: str) -> torch.Tensor:
    # The class dim is 1 (0 for an unbatched input), as cross_entropy's.
    dim = 0 if x.dim() == 1 else 1
    return F.nll_loss(_log_softmax_via_logsumexp(x, dim), target, ignore_index=ignore_index,
                      reduction=reduction)


_LOG_SOFTMAX_FUNCTIONS = {F.log_softmax, torch.log_softmax, torch.special.log_softmax}
_LOG_SOFTMAX_METHODS = {"log_softmax"}


def _value(node: Any) -> Any:
    return node.meta.get("example_value") if isinstance(node, fx.Node) else None


def _float32(node: Any) -> bool:
    v = _value(node)
    return isinstance(v, torch.Tensor) and v.dtype == torch.float32


def _arg(node: fx.Node, index: int, name: str, default: Any) -> Any:
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _rewrite_log_softmax(node: fx.Node) -> bool:
    x = _arg(node, 0, "input", None)
    dim = _arg(node, 1, "dim", None)
    dtype_index = 3 if node.target is F.log_softmax else 2  # after F.log_softmax's _stacklevel
    if not _float32(x) or not isinstance(dim, int) or _arg(node, dtype_index, "dtype", None):
        return False
    node.op = "call_function"
    node.target = _log_softmax_via_logsumexp
    node.args = (x, dim)
    node.kwargs = {}
    return True


def _rewrite_cross_entropy(node: fx.Node) -> bool:
    x, target = _arg(node, 0, "input", None), _arg(node, 1, "target", None)
    names = ["weight", "size_average", "ignore_index", "reduce", "reduction", "label_smoothing"]
    defaults = [None, None, -100, None, "mean", 0.0]
    a = {n: _arg(node, 2 + i, n, d) for i, (n, d) in enumerate(zip(names, defaults))}
    t = _value(target)
    plain = (a["weight"] is None and a["size_average"] is None and a["reduce"] is None
             and a["label_smoothing"] == 0.0 and isinstance(a["ignore_index"], int)
             and a["reduction"] in ("mean", "sum", "none"))
    # Class-index targets only (probabilities as targets take another formula).
    if not (plain and _float32(x) and isinstance(t, torch.Tensor)
            and not t.dtype.is_floating_point):
        return False
    node.target = _cross_entropy_via_logsumexp
    node.args = (x, target, a["ignore_index"], a["reduction"])
    node.kwargs = {}
    return True


def is_training(gm: fx.GraphModule, example_inputs: Sequence[Any]) -> bool:
    """Whether AOTAutograd will trace a backward for this Dynamo graph."""
    if not torch.is_grad_enabled():
        return False
    return any(isinstance(t, torch.Tensor) and t.requires_grad for t in example_inputs) or any(
        p.requires_grad for p in gm.parameters())


def rewrite_log_softmax(gm: fx.GraphModule) -> int:
    """Rewrites the graph's float32 log_softmax and cross_entropy calls in place; returns how
    many it rewrote."""
    count = 0
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is F.cross_entropy:
            count += _rewrite_cross_entropy(node)
        elif ((node.op == "call_function" and node.target in _LOG_SOFTMAX_FUNCTIONS)
              or (node.op == "call_method" and node.target in _LOG_SOFTMAX_METHODS)):
            count += _rewrite_log_softmax(node)
    if count:
        gm.recompile()
    return count
