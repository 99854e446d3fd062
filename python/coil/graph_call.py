"""What runs at each call of a graph coil compiled: the FX graph's runtime args in, its outputs out.

export_graph (fx_export.py) turns an ATen FX graph into coil's graph text and records, in an
`ExportedGraph`, how the call maps onto it: which runtime args are graph inputs (then the
graph's constants, then symbol carriers: sym_bind.py), and one entry per FX output saying where
it comes from (`output_spec`). Per call (backend.py: CoilGraphFn), this module
  * copies an input laid out otherwise than traced into the traced strides and retries
    (`relayout_inputs`);
  * rebuilds the FX outputs from coil's (`rebuild_outputs`): coil outputs, restrided to their
    FX strides where those have gaps (a saved select the backward reads); inputs returned as
    they are; views of inputs replayed on the runtime arg (`_replay_view`); sizes and constants;
  * rebuilds an FX node's arguments from runtime values (`_substitute`), which the per-op
    fallback (node_fallback.py) shares.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Sequence

import torch
import torch.fx as fx

from .sym_bind import SymBinder, SymValue

__all__ = ["ExportedGraph"]


@dataclasses.dataclass
class ExportedGraph:
    """A graph as export_graph (fx_export.py) wrote it, and what each call needs of it: which
    runtime args are graph inputs, how the FX outputs are rebuilt from coil's."""

    text: str
    # FX placeholder positions (indices into the runtime args) that are coil graph inputs.
    input_indices: list[int]
    # Tensors for get_attr nodes: extra graph inputs, appended after the placeholders.
    constants: list[torch.Tensor]
    # node_index (position among emitted nodes) -> FX node.
    nodes: list[fx.Node]
    # One entry per FX output: ("tensor", i) = coil output i; ("const", v); ("input", j) =
    # runtime arg j (a non-tensor placeholder returned as is); ("view", (i, j, nodes)) = the
    # view ops `nodes` replayed on runtime arg j (coil output i if they refuse it).
    output_spec: list[tuple[str, Any]]
    num_tensor_outputs: int
    # FX node -> constant value it was folded to (non-tensor values: ints, None).
    folded: dict[fx.Node, Any]
    # Names of the ops emitted (for reports).
    ops: list[str]
    # coil output i -> its FX strides, for outputs whose FX strides are not dense (a select or
    # slice of a bigger tensor). coil returns outputs densely; AOTAutograd compiled the graphs
    # that consume them (the backward reads saved activations) for the FX strides.
    gapped_outputs: dict[int, tuple[int, ...]] = dataclasses.field(default_factory=dict)
    # Symbolic sizes: how to bind them from the runtime args (None for a static graph).
    binder: SymBinder | None = None
    # SymFloat FX nodes passed as f64[] inputs (run_node_eagerly reads them back as floats).
    scalar_inputs: set = dataclasses.field(default_factory=set)
    # Per graph input (input_indices order): the traced strides (ints, or SymValue).
    input_strides: list = dataclasses.field(default_factory=list)
    # Graph inputs (positions in input_indices order) that the graph writes: copy_(input,
    # value) nodes, lowered to stores into the input (src/lower/mutation.cpp).
    mutated_inputs: list = dataclasses.field(default_factory=list)
    # The symbol values of the call in progress on this thread (for run_node_eagerly).
    call_env: threading.local = dataclasses.field(default_factory=threading.local)
    # node_index -> how run_node_eagerly rebuilds the node's arguments (built on first use).
    call_plans: dict = dataclasses.field(default_factory=dict)
    # node_index -> the layout its host convolution runs in (node_fallback.ConvLayoutChoice).
    conv_layouts: dict = dataclasses.field(default_factory=dict)
    # id(view chain) -> its ops with their arguments rebuilt once (_static_view_steps), or None
    # where an argument depends on the call (a symbolic size).
    view_plans: dict = dataclasses.field(default_factory=dict)
    # Per FX output: the coil output returned as it is, or None where rebuild_output builds it
    # (computed at the first call).
    plain_outputs: list | None = None

    def runtime_inputs(self, args: Sequence[Any]) -> tuple[list, dict[str, int] | None]:
        """One call's inputs of the compiled graph (the tensor args, the graph's constants and,
        with symbolic sizes, the carriers of the symbol values) and the symbol values, which
        are also left in call_env for the per-op fallback of this thread."""
        inputs = [args[i] for i in self.input_indices]
        inputs.extend(self.constants)
        if self.binder is None:
            return inputs, None
        env = self.binder.env(args)
        inputs.extend(self.binder.carrier_tensors(env))
        self.call_env.env = env
        return inputs, env

    def relayout_inputs(self, inputs: list, args: Sequence[Any],
                        env: dict[str, int] | None) -> list | None:
        """`inputs` with every graph input whose strides differ from the traced ones (size-1
        dims aside) copied into the traced strides; None if none differs."""
        fixed, changed = list(inputs), False
        for k, i in enumerate(self.input_indices):
            t = inputs[k]
            want = [s(env) if isinstance(s, SymValue) else s for s in self.input_strides[k]]
            if len(want) != t.dim():
                return None
            if all(n <= 1 or a == b for n, a, b in zip(t.shape, t.stride(), want)):
                continue
            fixed[k] = _restrided(t, want)
            changed = True
        return fixed if changed else None

    def rebuild_outputs(self, coil_outs: Sequence[torch.Tensor], args: Sequence[Any],
                        env: dict[str, int] | None = None) -> list:
        # Most outputs are coil outputs as they are: picked without a call each (a training
        # step's graphs return hundreds, and this runs at every call).
        plain = self.plain_outputs
        if plain is None:
            plain = [v if kind == "tensor" and v not in self.gapped_outputs else None
                     for kind, v in self.output_spec]
            self.plain_outputs = plain
        return [coil_outs[v] if v is not None else self.rebuild_output(p, coil_outs, args, env)
                for p, v in enumerate(plain)]

    def rebuild_output(self, p: int, coil_outs: Sequence[torch.Tensor], args: Sequence[Any],
                       env: dict[str, int] | None = None) -> Any:
        """FX output p, from the coil outputs and the runtime args."""
        kind, v = self.output_spec[p]
        if kind == "view":
            return self._replay_view(v, coil_outs, args, env)
        if kind == "tensor":
            t = coil_outs[v]
            want = self.gapped_outputs.get(v)
            if want is not None and not _same_strides(t, want):
                t = _restrided(t, want)
            return t
        if kind == "input":
            return args[v]
        if kind == "sym":
            return v(env)
        return v

    def _replay_view(self, v: tuple, coil_outs: Sequence[torch.Tensor], args: Sequence[Any],
                     env: dict[str, int] | None) -> torch.Tensor:
        """An output that is a chain of views of an input, rebuilt by running the same view ops
        on the runtime arg. AOTAutograd regenerates such an output from the input after the
        call: with symbolic sizes it cannot replay its recorded views and replays ours
        (`_view_func` of the output's `_base`), and for an output without a `_base` (coil's
        own tensor) it falls back to `as_strided`, whose backward on an input that overlaps
        itself (an expanded tensor) spreads the gradient over the aliased elements: a wrong
        input gradient. The coil output is the fallback when a view op refuses the arg
        (strides other than traced)."""
        out_index, pos, chain = v
        t = args[pos]
        key = id(chain)
        if key not in self.view_plans:
            self.view_plans[key] = _static_view_steps(chain, self.folded)
        steps = self.view_plans[key]
        try:
            if steps is not None:
                for target, rest, kwargs in steps:
                    t = target(t, *rest, **kwargs)
                return t
            for node in chain:
                kwargs = {k: _substitute(a, [], [0], self.folded, env)
                          for k, a in node.kwargs.items()}
                t = node.target(*_substitute(node.args, [t], [0], self.folded, env), **kwargs)
        except Exception:  # a view op refused the arg: coil computed the same values
            return coil_outs[out_index]
        return t


def _static_view_steps(chain: list, folded: dict) -> list | None:
    """[(op, args after the tensor, kwargs)] for a view chain whose arguments, the viewed
    tensor aside, do not depend on the call: rebuilt once instead of on every call (15 views
    of a DistilBERT forward cost ~0.1 ms a call through _substitute). None where an argument
    is symbolic."""

    def static(a) -> bool:
        if isinstance(a, fx.Node):
            return a in folded and not isinstance(folded[a], torch.SymInt)
        if isinstance(a, (list, tuple)):
            return all(static(x) for x in a)
        return not isinstance(a, (torch.SymInt, torch.SymFloat))

    steps = []
    for node in chain:
        if not node.args or not isinstance(node.args[0], fx.Node):
            return None
        rest, kwargs = node.args[1:], dict(node.kwargs)
        if not static(rest) or not static(list(kwargs.values())):
            return None
        rest = _substitute(rest, [], [0], folded)
        kwargs = {k: _substitute(a, [], [0], folded) for k, a in kwargs.items()}
        steps.append((node.target, tuple(rest), kwargs))
    return steps


# ---------------------------------------------------------------------------------------------
# Strides


def _restrided(t: torch.Tensor, strides: Sequence[int]) -> torch.Tensor:
    """A copy of t with the given strides. Strides may be 0 (an expanded tensor, as a graph
    returns or reads it): t holds one value along such a dim, so only its first index is written
    (copy_ refuses a destination whose elements overlap; fuzz seed 3010). Other overlapping
    strides (an as_strided output) are filled element by element: elements sharing a location
    hold the same value, as they alias in eager too."""
    dims = sorted((st, n) for n, st in zip(t.shape, strides) if n > 1 and st != 0)
    extent, overlap = 0, False
    for st, n in dims:
        overlap |= st <= extent
        extent += (n - 1) * st
    if not overlap or t.numel() == 0:
        out = torch.empty_strided(t.shape, strides, dtype=t.dtype, device=t.device)
        dst, src = out, t
        for d, (n, st) in enumerate(zip(t.shape, strides)):
            if st == 0 and n > 1:
                dst, src = dst.narrow(d, 0, 1), src.narrow(d, 0, 1)
        dst.copy_(src)
        return out
    flat = torch.empty(extent + 1, dtype=t.dtype, device=t.device)
    offset = torch.zeros((), dtype=torch.long, device=t.device)
    for d, (n, st) in enumerate(zip(t.shape, strides)):
        shape = [1] * t.dim()
        shape[d] = n
        offset = offset + (torch.arange(n, device=t.device) * st).view(shape)
    flat[offset.expand(t.shape).reshape(-1)] = t.reshape(-1)
    return flat.as_strided(t.shape, strides)


def _same_strides(t: torch.Tensor, strides: tuple[int, ...]) -> bool:
    # Strides of size-0/1 dims do not matter (coil's input check skips them too).
    return all(n <= 1 or a == b for n, a, b in zip(t.shape, t.stride(), strides))


# ---------------------------------------------------------------------------------------------
# Rebuilding FX arguments with runtime values (the replayed views of rebuild_outputs here, the
# per-op fallback in node_fallback.py).


def _concrete(v: torch.SymInt, env: dict[str, int] | None) -> int:
    if env is None:
        raise RuntimeError("coil fallback: a symbolic argument without the call's sizes")
    # The serializer's sym text (imported here: fx_export imports this module).
    from .fx_export import _symint_value

    return SymValue(_symint_value(v))(env)


def _substitute(a, tensors, pos: list[int], folded, env=None, scalars=frozenset()):
    """Rebuilds an FX argument with runtime tensors, consuming `tensors` in the order coil
    passes them (positional args, then kwargs, lists depth-first)."""
    if isinstance(a, fx.Node):
        if a in scalars:
            pos[0] += 1
            return float(tensors[pos[0] - 1].item())
        if a in folded:
            v = folded[a]
            return _concrete(v, env) if isinstance(v, torch.SymInt) else v
        if pos[0] >= len(tensors):
            raise RuntimeError(f"coil fallback: too few tensor inputs ({len(tensors)})")
        t = tensors[pos[0]]
        pos[0] += 1
        return t
    if isinstance(a, (list, tuple)):
        return type(a)(_substitute(x, tensors, pos, folded, env, scalars) for x in a)
    if isinstance(a, torch.SymInt):
        return _concrete(a, env)
    return a
