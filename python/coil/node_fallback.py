"""The per-op fallback: the C++ runtime runs an exported graph node that coil has no lowering
for (or that runs faster in ATen) through this callable, by the node's position, with the
node's tensor inputs (backend.py hands `functools.partial(run_node_eagerly, exported)` to
`_coil.compile`). The arguments are rebuilt from the FX node: constants in place, runtime
tensors in the order coil passes them, symbolic sizes from the call's symbol values."""

from __future__ import annotations

import operator
import time
from typing import Sequence

import torch
import torch.fx as fx

from .fx_export import ExportedGraph, _concrete, _substitute

__all__ = ["run_node_eagerly"]

# How one argument is rebuilt: taken as is, the next runtime tensor, or _substitute'd.
_AS_IS, _TENSOR, _REBUILD = 0, 1, 2


def _arg_kind(a, exported: ExportedGraph) -> int:
    if isinstance(a, fx.Node):
        plain = a not in exported.scalar_inputs and a not in exported.folded
        return _TENSOR if plain else _REBUILD
    if isinstance(a, (list, tuple)):
        return _REBUILD if any(_arg_kind(x, exported) != _AS_IS for x in a) else _AS_IS
    return _REBUILD if isinstance(a, torch.SymInt) else _AS_IS


def _call_plan(exported: ExportedGraph, node: fx.Node):
    """The node's arguments with the constant ones in place, and the (position, kind) of the
    others. The host fallback runs once per call for every convolution of a CNN, so the walk
    over constant arguments (stride and padding lists) is done once here, not on every call."""
    args = list(node.args)
    arg_slots = [(i, k) for i, a in enumerate(args) if (k := _arg_kind(a, exported)) != _AS_IS]
    kwargs = dict(node.kwargs)
    kw_slots = [(n, k) for n, v in kwargs.items() if (k := _arg_kind(v, exported)) != _AS_IS]
    # The outputs of a multi-output node the graph reads (by getitem).
    used = frozenset(u.args[1] for u in node.users if u.target is operator.getitem)
    return args, arg_slots, kwargs, kw_slots, used


def run_node_eagerly(exported: ExportedGraph, node_index: int, tensors: Sequence[torch.Tensor]):
    """Runs exported node `node_index` with its tensor inputs; returns its tensor outputs."""
    node = exported.nodes[node_index]
    plan = exported.call_plans.get(node_index)
    if plan is None:
        plan = exported.call_plans[node_index] = _call_plan(exported, node)
    base_args, arg_slots, base_kwargs, kw_slots, used = plan
    tensors = _with_zero_bias(node, arg_slots, tensors)
    pos = [0]
    env = getattr(exported.call_env, "env", None)

    def rebuild(kind, a):
        if kind == _TENSOR:
            if pos[0] >= len(tensors):
                raise RuntimeError(f"coil fallback: too few tensor inputs ({len(tensors)})")
            pos[0] += 1
            return tensors[pos[0] - 1]
        return _substitute(a, tensors, pos, exported.folded, env, exported.scalar_inputs)

    args = list(base_args)
    for i, kind in arg_slots:
        args[i] = rebuild(kind, args[i])
    kwargs = base_kwargs
    if kw_slots:
        kwargs = dict(base_kwargs)
        for k, kind in kw_slots:
            kwargs[k] = rebuild(kind, kwargs[k])
    if pos[0] != len(tensors):
        raise RuntimeError(
            f"coil fallback for node {node_index} ({node.target}): got {len(tensors)} tensor "
            f"inputs, the node has {pos[0]}"
        )
    if node.target in _CONV_OPS and not kwargs and _channels_last_cpu(args[0]):
        choice = exported.conv_layouts.get(node_index)
        if choice is None:
            choice = exported.conv_layouts[node_index] = ConvLayoutChoice()
        out = choice.run(node.target, args)
    else:
        out = node.target(*args, **kwargs)
    if isinstance(out, torch.Tensor):
        return [_materialize(out)]
    # One tensor per output the export declared (a tensor in meta['val']). An output the graph
    # never reads gets an empty stand-in of its traced shape: it may be undefined at run time
    # though its meta function allocates it (cuDNN attention's logsumexp without grad), or
    # have a data-dependent size other than the traced one (embedding_bag's offset2bag and
    # bag_size); the runtime only needs its position.
    results = []
    for k, (o, m) in enumerate(zip(out, node.meta["val"])):
        if not isinstance(m, torch.Tensor):
            continue
        if o is None or k not in used:
            sizes = [s if isinstance(s, int) else _concrete(s, env) for s in m.shape]
            if o is None or tuple(o.shape) != tuple(sizes):
                o = torch.empty(sizes, dtype=m.dtype, device=m.device)
        results.append(_materialize(o))
    return results


_CONV_OPS = (torch.ops.aten.convolution.default, torch.ops.aten.convolution_backward.default)


def _with_zero_bias(node: fx.Node, arg_slots, tensors: Sequence[torch.Tensor]):
    """A GPU convolution whose bias coil adds itself (LoweringPolicy::convolution_bias_pointwise:
    cuDNN through coil takes none) comes here without its bias tensor when cuDNN refused it at
    run time: ATen computes it with a zero bias, and coil's own add follows."""
    if node.target is not torch.ops.aten.convolution.default:
        return tensors
    tensor_positions = [i for i, kind in arg_slots if kind == _TENSOR]
    if 2 not in tensor_positions or len(tensors) != len(tensor_positions) - 1:
        return tensors
    at = tensor_positions.index(2)
    if 1 in tensor_positions:
        weight = tensors[tensor_positions.index(1)]
    else:  # a folded weight
        weight = node.args[1].meta["val"]
    zero = torch.zeros(weight.shape[0], dtype=weight.dtype, device=tensors[0].device)
    return [*tensors[:at], zero, *tensors[at:]]


def _channels_last_cpu(t) -> bool:
    return (isinstance(t, torch.Tensor) and t.device.type == "cpu" and t.dim() == 4
            and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last))


class ConvLayoutChoice:
    """Which layout a host convolution (or convolution_backward) of channels-last activations
    runs in, chosen by measurement on its first calls. oneDNN's CPU convolutions are not
    uniformly faster in either layout: on the 2-core CPU a 3x3 convolution over 2 x 64 x 24 x 24
    took 0.84 ms on NCHW data and 1.15 ms on NHWC (with the OIHW weight ATen then reorders per
    call), while over 8 x 64 x 56 x 56 NHWC took 11.7 ms and NCHW 24.6 ms (docs/decisions.md).
    The candidates: the activations as they are, or made contiguous (NCHW) for the call (the
    runtime copies an NCHW result into the graph's NHWC buffer). Each runs `_SAMPLES` times,
    alternating; the faster (by its best time) is kept for the graph's life."""

    _SAMPLES = 2

    def __init__(self):
        self.times: list[list[float]] = [[], []]
        self.chosen: int | None = None

    def run(self, op, args: list):
        k = self.chosen
        if k is None:
            k = 0 if len(self.times[0]) <= len(self.times[1]) else 1
            t0 = time.perf_counter()
            out = op(*self._args(k, op, args))
            self.times[k].append(time.perf_counter() - t0)
            if all(len(t) >= self._SAMPLES for t in self.times):
                self.chosen = 0 if min(self.times[0]) <= min(self.times[1]) else 1
            return out
        return op(*self._args(k, op, args))

    @staticmethod
    def _args(k: int, op, args: list) -> list:
        if k == 0:
            return args
        args = list(args)
        # convolution(input, ...); convolution_backward(grad_output, input, ...)
        activations = (0,) if op is torch.ops.aten.convolution.default else (0, 1)
        for i in activations:
            if isinstance(args[i], torch.Tensor):
                args[i] = args[i].contiguous()
        return args


def _materialize(t: torch.Tensor) -> torch.Tensor:
    # A ZeroTensor (aten._efficientzerotensor, autograd's zero gradients) has no storage: the
    # runtime would read its null data pointer.
    if t._is_zerotensor():
        return torch.zeros(t.shape, dtype=t.dtype, device=t.device)
    return t
