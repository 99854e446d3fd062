"""Channels-last activations for convolution graphs (a graph pass before export).

cuDNN runs bf16, fp16 and TF32 convolutions in NHWC. Handed NCHW tensors it transposes the
input in and the result back on every call: on the H100 these transposes took 1.1 ms of
ResNet-50's 5.3 ms (batch 64, bf16), and NCHW's narrow rows (W = 7..56) also kept coil's
BatchNorm/ReLU kernels off their vector entry points. Inductor's layout optimization makes the
same choice on the GPU. On the CPU, oneDNN's convolutions also prefer NHWC: ResNet-18 inference
(batch 8, 224x224, f32, 2 threads) took 180-188 ms against 193-202 ms in NCHW.

The pass copies each 4-d convolution input that is not channels-last into channels-last (in
practice only the image: every later activation inherits the layout), then recomputes every
node's FakeTensor with PyTorch's own meta functions, so the strides coil compiles for are the
ones ATen's convolutions and eager fallbacks really return. Pointwise ops keep their inputs'
layout (TensorIterator's rule) and coil realizes every value in its graph layout
(LoweringContext::realize), so activations stay NHWC end to end. Graph outputs keep the strides
the caller was promised: an output whose layout changed is copied back.

Training: a forward graph's saved activations are outputs nobody outside AOTAutograd sees, so
they stay channels-last (`keep_outputs` names the outputs the caller sees) and their strides are
reported to AOTAutograd (`report_output_strides`), which restrides the backward graph's example
inputs to them, as it does for Inductor's layout optimization. The backward graph's pass starts
from those strides (`input_strides`) and also makes convolution_backward's grad_output and input
channels-last. Should the backward graph's recomputation fail with the new input strides, its
restrided inputs are copied back to the strides it was traced with, once, at its start.

Only graphs with static shapes; a graph whose recomputation fails (a view that NHWC strides do
not allow, say) is left as it was.
"""

from __future__ import annotations

from typing import Sequence

import torch
import torch.fx as fx

aten = torch.ops.aten

__all__ = ["channels_last_convolutions", "report_output_strides", "forward_outputs_seen"]


def _val(n) -> torch.Tensor | None:
    v = n.meta.get("val") if isinstance(n, fx.Node) else None
    return v if isinstance(v, torch.Tensor) else None


def _static(v: torch.Tensor) -> bool:
    return all(isinstance(s, int) for s in (*v.shape, *v.stride()))


def _is_channels_last(v: torch.Tensor) -> bool:
    return v.is_contiguous(memory_format=torch.channels_last)


def _format_of(v: torch.Tensor) -> torch.memory_format | None:
    """The memory format that reproduces v's strides with a clone, or None."""
    if v.is_contiguous():
        return torch.contiguous_format
    if v.dim() == 4 and _is_channels_last(v):
        return torch.channels_last
    return None


def _fake_mode(gm: fx.GraphModule):
    for n in gm.graph.nodes:
        v = _val(n)
        if v is not None and hasattr(v, "fake_mode"):
            return v.fake_mode
    return None


def _propagate(gm: fx.GraphModule, mode) -> None:
    from torch.fx.passes.fake_tensor_prop import FakeTensorProp

    args = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    FakeTensorProp(gm, mode=mode).propagate_dont_convert_inputs(*args)


def _output_args(gm: fx.GraphModule) -> tuple[fx.Node, list]:
    out = next(n for n in gm.graph.nodes if n.op == "output")
    a = out.args[0]
    return out, (list(a) if isinstance(a, (list, tuple)) else [a])


def _set_output_args(out: fx.Node, args: list) -> None:
    a = out.args[0]
    out.args = (type(a)(args) if isinstance(a, (list, tuple)) else args[0],)


def _conv_operands(g: fx.Graph) -> list[tuple[fx.Node, int]]:
    """(node, argument index) of every 4-d activation a convolution reads: convolution's input,
    convolution_backward's grad_output and input."""
    found = []
    for n in g.nodes:
        if n.op != "call_function":
            continue
        if n.target is aten.convolution.default:
            slots = (0,)
        elif n.target is aten.convolution_backward.default:
            slots = (0, 1)
        else:
            continue
        for i in slots:
            v = _val(n.args[i])
            if v is not None and v.dim() == 4:
                found.append((n, i))
    return found


def _conv_weights(g: fx.Graph) -> list[tuple[fx.Node, int]]:
    """(node, 1) for every CUDA convolution whose 4-d weight cuDNN would transpose: one with
    several input channels per group and a kernel wider than 1x1, not channels-last. Next to an
    NHWC input cuDNN transposes such a weight inside the call, every call (ResNet-50 inference:
    17 transposes, 94 us of a 2.0 ms step on the H200); as a copy in the graph it is one of
    coil's own kernels instead (Inductor copies its weights likewise): 0.054 ms in that step
    (option channels_last_weights, on; docs/decisions.md). 1x1 and depthwise
    weights are the same bytes in either layout; the CPU's oneDNN reorders weights to its own
    blocked layout in any case."""
    found = []
    for n in g.nodes:
        if n.op != "call_function" or n.target is not aten.convolution.default:
            continue
        w = _val(n.args[1])
        if (w is not None and w.dim() == 4 and w.device.type == "cuda" and w.shape[1] > 1
                and w.shape[2] * w.shape[3] > 1 and not _is_channels_last(w)):
            found.append((n, 1))
    return found


def _restride_inputs(gm: fx.GraphModule, input_strides: Sequence) -> dict[fx.Node, torch.Tensor]:
    """Gives each placeholder the strides its example input really has; returns the changed
    placeholders with the values they were traced with."""
    changed = {}
    phs = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for n, ex in zip(phs, input_strides):
        v = _val(n)
        if v is None or not isinstance(ex, torch.Tensor) or tuple(ex.stride()) == v.stride():
            continue
        if tuple(ex.shape) != tuple(v.shape):
            continue
        changed[n] = v
        n.meta["val"] = v.as_strided(v.shape, tuple(ex.stride()), v.storage_offset())
    return changed


def channels_last_convolutions(gm: fx.GraphModule, *, keep_outputs: int | None = None,
                               input_strides: Sequence | None = None,
                               weights: bool = False) -> str:
    """Rewrites `gm` (an ATen graph with FakeTensor metas) in place; returns a one-line note of
    what it did, '' when it changed nothing.

    keep_outputs: outputs [0, keep_outputs) keep the strides they were traced with, the others
      keep whatever layout the pass gives them (a forward graph's saved activations); None: all
      outputs keep their strides.
    input_strides: the example inputs the graph will really be called with (a backward graph
      whose saved activations a forward graph's pass made channels-last); None: as traced.
    weights: also copy CUDA weights cuDNN would transpose (_conv_weights; option
      channels_last_weights, on by default).
    """
    g = gm.graph
    if any(_val(n) is not None and not _static(_val(n)) for n in g.nodes):
        return ""
    mode = _fake_mode(gm)
    if mode is None:
        return ""
    out_node, out_args = _output_args(gm)
    keep = len(out_args) if keep_outputs is None else min(keep_outputs, len(out_args))
    for o in out_args[:keep]:
        if _val(o) is not None and _format_of(_val(o)) is None:
            return ""  # an output layout a clone could not restore
    saved = {n: (n.meta.get("val"), n.meta.get("tensor_meta")) for n in g.nodes}
    restrided = _restride_inputs(gm, input_strides) if input_strides is not None else {}
    operands = _conv_operands(g)
    if not operands and not restrided:
        return ""
    weights = _conv_weights(g) if weights else []

    # 1. Every 4-d activation a convolution reads that is not channels-last gets a
    #    channels-last copy, and so does a CUDA weight cuDNN would transpose (_conv_weights).
    copies: dict[fx.Node, fx.Node] = {}
    for c, i in operands + weights:
        x = c.args[i]
        if _is_channels_last(_val(x)):
            continue
        if x not in copies:
            with g.inserting_after(x):
                copies[x] = g.call_function(aten.clone.default, (x,),
                                            {"memory_format": torch.channels_last})
        c.replace_input_with(x, copies[x])
    if not copies and not restrided:
        return ""
    try:
        _propagate(gm, mode)
    except Exception:  # noqa: BLE001 - any failure leaves the graph as it was
        for x, y in copies.items():
            y.replace_all_uses_with(x)
            g.erase_node(y)
        for n, (v, tm) in saved.items():
            if n not in restrided:
                n.meta["val"], n.meta["tensor_meta"] = v, tm
        if not restrided:
            gm.recompile()
            return ""
        # The inputs arrive in other strides all the same: copy them back to the traced ones.
        for p, old in restrided.items():
            fmt = _format_of(old)
            if fmt is None:
                raise RuntimeError(f"channels-last: input {p.name} arrives in strides "
                                   f"{tuple(_val(p).stride())} that its graph cannot take")
            with g.inserting_after(p):
                back = g.call_function(aten.clone.default, (p,), {"memory_format": fmt})
            p.replace_all_uses_with(back, delete_user_cb=lambda u, b=back: u is not b)
            back.meta["val"] = old
        gm.recompile()
        return (f"channels-last: {len(restrided)} input(s) arrive channels-last; copied back to "
                f"their traced strides (the graph does not recompute with them)")

    # 2. Copies of values that turned channels-last upstream copy nothing: drop them.
    kept = 0
    for x, y in copies.items():
        if _is_channels_last(_val(x)):
            y.replace_all_uses_with(x)
            g.erase_node(y)
        else:
            kept += 1

    # 3. Outputs the caller sees whose strides changed are copied back into the promised layout.
    restored = 0
    changed_saved = 0
    for idx, o in enumerate(out_args):
        old = saved.get(o, (None, None))[0]
        new = _val(o)
        if not isinstance(old, torch.Tensor) or new is None or new.stride() == old.stride():
            continue
        if idx >= keep:
            changed_saved += 1
            continue
        with g.inserting_before(out_node):
            back = g.call_function(aten.clone.default, (o,), {"memory_format": _format_of(old)})
        back.meta["val"] = old
        out_args[idx] = back
        restored += 1
    _set_output_args(out_node, out_args)
    gm.recompile()
    parts = [f"channels-last activations for {len(operands)} convolution operand(s): {kept} "
             f"cop{'y' if kept == 1 else 'ies'} in, {restored} output(s) copied back"]
    if weights:
        parts.append(f"{len({c.args[1] for c, _ in weights})} weight(s) copied channels-last")
    if restrided:
        parts.append(f"{len(restrided)} input(s) arrive restrided")
    if changed_saved:
        parts.append(f"{changed_saved} saved activation(s) stay in their new layout")
    return "; ".join(parts)


def forward_outputs_seen() -> int | None:
    """How many leading outputs of the forward graph being compiled reach the caller (mutated
    inputs, user outputs, intermediate bases); the rest are saved for the backward graph. None
    outside an AOTAutograd compile that collects output strides."""
    from torch._guards import TracingContext

    tc = TracingContext.try_get()
    if tc is None or getattr(tc, "output_strides", None) is None:
        return None  # nobody would hear which strides the saved activations have
    n = getattr(getattr(tc, "fw_metadata", None), "num_forward", None)
    return n if isinstance(n, int) else None


def report_output_strides(gm: fx.GraphModule) -> bool:
    """Tells AOTAutograd the strides of every output (it restrides the backward graph's example
    inputs with them); False where no compile is listening."""
    from torch._guards import TracingContext

    tc = TracingContext.try_get()
    strides = getattr(tc, "output_strides", None) if tc is not None else None
    if strides is None:
        return False
    _, out_args = _output_args(gm)
    strides.extend(tuple(_val(o).stride()) if _val(o) is not None else None for o in out_args)
    return True
