"""FX GraphModule (ATen level, from AOTAutograd) -> coil graph text.

The text format is specified in include/coil/graph/graph.h; this module emits exactly what the
C++ printer prints, so `_coil.parse_and_print(text) == text`:

  graph(%0: f32[8, 16], %1: f32[32, 16]):
    %2: f32[16, 32]{1, 16} = aten.permute.default(%1, [1, 0])
    %3: f32[8], %4: i64[8] = aten.max.dim(%2, 1)
    return (%2, %3)

Mapping:
  * tensor placeholders -> graph inputs, in order; get_attr tensors -> extra graph inputs after
    them (their tensors are passed at run time: `ExportedGraph.constants`);
  * non-tensor placeholders (ints / SymInts) are not graph inputs; a plain int is folded as a
    constant where it is used, a SymInt is printed as its expression (`sym(s0*4)`) where it is
    used; symbols are bound at run time as sym_bind.py describes (carrier inputs come last);
  * every call_function on an OpOverload -> one node; multi-output ops declare all their tensor
    outputs (None entries of an op's result, e.g. convolution_backward with an output mask,
    are not outputs); operator.getitem is not emitted, it names one of those outputs;
  * nodes producing a non-tensor value (sym_size, operator.mul on SymInts, ...) fold to their
    value: an int, or a SymInt printed as its expression;
  * output -> `return (...)` of the tensor outputs; `ExportedGraph.output_spec` says how to
    rebuild the full FX output list (tensors, None, ints) from the coil outputs.

Values are numbered by definition order (inputs first), as the C++ printer does. What runs at
each call with the `ExportedGraph` this returns is graph_call.py.
"""

from __future__ import annotations

import functools
import math
import operator
from decimal import Decimal
from typing import Any

import torch
import torch.fx as fx

# ExportedGraph is what the serializer returns; the others are imported from here by
# node_fallback.py and tests, from before the per-call side had a module of its own.
from .graph_call import ExportedGraph, _concrete, _restrided, _substitute  # noqa: F401
from .sym_bind import SymBinder, SymValue, symbol_multiple, symbol_range

__all__ = ["ExportError", "ExportedGraph", "export_graph", "format_float", "DTYPE_NAMES"]


class ExportError(Exception):
    """The FX graph cannot be expressed in coil's graph text (the graph falls back to eager)."""


DTYPE_NAMES: dict[torch.dtype, str] = {
    torch.float32: "f32",
    torch.bfloat16: "bf16",
    torch.float16: "f16",
    torch.float64: "f64",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.int16: "i16",
    torch.int8: "i8",
    torch.uint8: "u8",
    torch.bool: "b8",
}

# Ops with no result whose only effect is a check; they are dropped from the coil graph.
_DROPPED_OPS = {
    "aten._assert_async.msg",
    "aten._assert_async.default",
    "aten._assert_scalar.default",
    "aten.sym_constrain_range.default",
    "aten.sym_constrain_range_for_size.default",
}


# ---------------------------------------------------------------------------------------------
# Scalars


def format_float(v: float) -> str:
    """A float exactly as coil's C++ printer writes it (std::to_chars shortest round trip:
    fixed or scientific, whichever is shorter, fixed on a tie; '.0' appended when the text
    would read as an int)."""
    v = float(v)
    if math.isnan(v):
        return "nan"
    if math.isinf(v):
        return "inf" if v > 0 else "-inf"
    sign = "-" if math.copysign(1.0, v) < 0 else ""
    if v == 0.0:
        return sign + "0.0"
    # repr gives the shortest round-trip digits (the same digits to_chars picks).
    _, digits_t, exp = Decimal(repr(abs(v))).as_tuple()
    digits = "".join(map(str, digits_t)).lstrip("0")
    # Normalize: strip trailing zeros into the exponent.
    stripped = digits.rstrip("0")
    exp += len(digits) - len(stripped)
    digits = stripped
    sci_exp = exp + len(digits) - 1
    sci = digits[0] + ("." + digits[1:] if len(digits) > 1 else "")
    sci += "e" + ("-" if sci_exp < 0 else "+") + f"{abs(sci_exp):02d}"
    if exp >= 0:
        fixed = digits + "0" * exp
    else:
        point = len(digits) + exp
        if point > 0:
            fixed = digits[:point] + "." + digits[point:]
        else:
            fixed = "0." + "0" * (-point) + digits
    s = fixed if len(fixed) <= len(sci) else sci
    if "." not in s and "e" not in s:
        s += ".0"
    return sign + s


def quote_string(s: str) -> str:
    """C-escaped string literal, as the C++ printer writes it (bytes of the UTF-8 encoding)."""
    out = ['"']
    for b in s.encode("utf-8"):
        c = chr(b)
        if c == "\\":
            out.append("\\\\")
        elif c == '"':
            out.append('\\"')
        elif c == "\n":
            out.append("\\n")
        elif c == "\t":
            out.append("\\t")
        elif c == "\r":
            out.append("\\r")
        elif b < 0x20 or b >= 0x7F:
            out.append(f"\\x{b:02x}")
        else:
            out.append(c)
    out.append('"')
    return "".join(out)


# ---------------------------------------------------------------------------------------------
# Symbolic integers


def _sym_expr_text(expr) -> str:
    """A sympy expression in coil's sym syntax (s0*4, a//b, a % b, min/max); ExportError if it
    uses anything else. Memoized: a graph repeats the same few size expressions in every
    meta (sizes and strides, printed twice: once to bind the symbols, once for the text), and
    sympy's printing (the term order below) made the export of resnet18_eval with a symbolic
    image side 0.11-0.14 s against the static 0.003 s."""
    return _sym_expr_text_cached(expr)


@functools.lru_cache(maxsize=4096)
def _sym_expr_text_cached(expr) -> str:
    import sympy

    try:
        from torch.utils._sympy.functions import FloorDiv, Mod as TorchMod, PythonMod
    except ImportError:  # pragma: no cover - older torch
        FloorDiv = TorchMod = PythonMod = ()
    try:  # torch has its own Min/Max (not sympy subclasses)
        from torch.utils._sympy.functions import Max as TorchMax, Min as TorchMin
    except ImportError:  # pragma: no cover - older torch
        TorchMax = TorchMin = sympy.Max

    def rec(e, parent_prec: int) -> str:
        # precedence: 1 = sum, 2 = product / div / mod, 3 = atom
        if isinstance(e, sympy.Integer):
            s, prec = str(int(e)), (3 if int(e) >= 0 else 1)
        elif isinstance(e, sympy.Symbol):
            s, prec = e.name, 3
        elif isinstance(e, sympy.Add):
            terms = sorted(e.args, key=lambda a: (a.is_number, str(a)))
            parts = []
            for i, t in enumerate(terms):
                if i and t.could_extract_minus_sign():
                    parts.append(" - " + rec(-t, 2))
                elif i:
                    parts.append(" + " + rec(t, 2))
                else:
                    parts.append(rec(t, 1))
            s, prec = "".join(parts), 1
        elif isinstance(e, sympy.Mul):
            coeff, rest = e.as_coeff_Mul()
            if not coeff.is_Integer:
                raise ExportError(f"non-integer coefficient in symbolic size {e}")
            factors = [rec(f, 2) for f in sympy.Mul.make_args(rest)]
            if coeff == -1:
                s, prec = "-" + "*".join(factors), 1
            elif coeff != 1:
                s, prec = "*".join(factors) + "*" + str(int(coeff)), 2
            else:
                s, prec = "*".join(factors), 2
        elif isinstance(e, sympy.Pow) and e.exp.is_Integer and 1 < int(e.exp) <= 8:
            s, prec = "*".join([rec(e.base, 3)] * int(e.exp)), 2
        elif FloorDiv and isinstance(e, FloorDiv):
            s, prec = f"{rec(e.args[0], 2)}//{rec(e.args[1], 3)}", 2
        elif FloorDiv and isinstance(e, (TorchMod, PythonMod)):
            s, prec = f"{rec(e.args[0], 2)} % {rec(e.args[1], 3)}", 2
        elif isinstance(e, (sympy.Min, sympy.Max, TorchMin, TorchMax)) and len(e.args) == 2:
            name = "min" if isinstance(e, (sympy.Min, TorchMin)) else "max"
            s, prec = f"{name}({rec(e.args[0], 0)}, {rec(e.args[1], 0)})", 3
        else:
            raise ExportError(f"symbolic expression {e} ({type(e).__name__}) is not expressible")
        return f"({s})" if prec < parent_prec else s

    return rec(sympy.sympify(expr), 0)


def _symint_value(x, seen: dict | None = None) -> int | str:
    """A SymInt (or int) as an int when constant, else coil sym text. The free symbols of a
    symbolic value are added to `seen` (sympy symbol -> its SymNode)."""
    if isinstance(x, int):
        return int(x)
    if isinstance(x, torch.SymInt):
        node = x.node
        if node.is_nested_int():
            raise ExportError("nested-int sizes are not supported")
        expr = node.expr
        if getattr(expr, "is_number", False):
            return int(expr)
        if seen is not None:
            for sym in expr.free_symbols:
                seen.setdefault(sym, node)
        return _sym_expr_text(expr)
    raise ExportError(f"expected an int or SymInt, got {type(x).__name__}")


def _folded_size(val):
    """How a size-valued node folds: its int when constant, else the SymInt itself (evaluated
    per call where an op uses it)."""
    v = _symint_value(val)
    return v if isinstance(v, int) else val


# ---------------------------------------------------------------------------------------------
# Tensor meta


def dtype_name(dtype: torch.dtype) -> str:
    try:
        return DTYPE_NAMES[dtype]
    except KeyError:
        raise ExportError(f"dtype {dtype} is not supported by coil") from None


def device_name(device: torch.device) -> str:
    if device.type not in ("cpu", "cuda"):
        raise ExportError(f"device {device} is not supported by coil")
    return device.type


def meta_text(t: torch.Tensor, seen: dict | None = None) -> str:
    """dtype[sizes]{strides}+offset@device, as the C++ printer writes a TensorMeta."""
    if t.layout != torch.strided:
        raise ExportError(f"layout {t.layout} is not supported")
    if t.is_sparse or getattr(t, "is_nested", False):
        raise ExportError("sparse / nested tensors are not supported")
    sizes = [_symint_value(s, seen) for s in t.size()]
    strides = [_symint_value(s, seen) for s in t.stride()]
    out = dtype_name(t.dtype) + "[" + ", ".join(map(str, sizes)) + "]"
    # Row-major strides of the sizes, computed exactly as coil's contiguous_strides does
    # (size-1 and size-0 dims included), so the text round-trips.
    if all(isinstance(s, int) for s in sizes) and all(isinstance(s, int) for s in strides):
        expected, acc = [0] * len(sizes), 1
        for i in range(len(sizes) - 1, -1, -1):
            expected[i] = acc
            acc *= sizes[i]
        default = strides == expected
    else:
        default = False
        if len(sizes) == len(strides):
            # Symbolic: compare textually against the obvious row-major product.
            default = _symbolic_rowmajor(t)
    if not default:
        out += "{" + ", ".join(map(str, strides)) + "}"
    off = _symint_value(t.storage_offset(), seen)
    if off != 0:
        if isinstance(off, int) or off.isidentifier():
            out += f"+{off}"
        else:
            out += f"+({off})"
    dev = device_name(t.device)
    if dev != "cpu":
        out += "@" + dev
    return out


def _symbolic_rowmajor(t: torch.Tensor) -> bool:
    """Whether symbolic strides are exactly the row-major product of the sizes."""
    import sympy

    def expr(x):
        return x.node.expr if isinstance(x, torch.SymInt) else sympy.Integer(int(x))

    try:
        want = _rowmajor_exprs(list(t.size()))
        # Structural equality first (sympy's products are canonical); expand, never simplify
        # (simplify costs milliseconds per call: seconds on a transformer graph).
        return all(expr(s) == e or sympy.expand(expr(s) - e) == 0
                   for s, e in zip(t.stride(), want))
    except Exception:
        return False


def _rowmajor_exprs(sizes):
    import sympy

    out, acc = [None] * len(sizes), sympy.Integer(1)
    for i in range(len(sizes) - 1, -1, -1):
        out[i] = acc
        s = sizes[i]
        acc = acc * (s.node.expr if isinstance(s, torch.SymInt) else sympy.Integer(s))
    return out


# ---------------------------------------------------------------------------------------------
# Export


def _graph_device(placeholders: list[fx.Node]) -> torch.device:
    """The device of the graph's tensor inputs (the first CUDA one, else the CPU)."""
    for node in placeholders:
        val = _val_or_none(node)
        if isinstance(val, torch.Tensor) and val.device.type == "cuda":
            return val.device
    return torch.device("cpu")


def _view_chain(node: fx.Node, placeholders: dict[fx.Node, int]):
    """(placeholder position, [view nodes from it to `node`]) when the FX value `node` is a
    chain of single-output view ops (view, expand, slice, permute, ...) of a tensor
    placeholder; else None."""
    chain: list[fx.Node] = []
    while node not in placeholders:
        target = node.target
        if (node.op != "call_function" or not isinstance(target, torch._ops.OpOverload)
                or not target.is_view or not node.args or not isinstance(node.args[0], fx.Node)
                or not isinstance(_val_or_none(node), torch.Tensor)):
            return None
        rest: list = []
        fx.node.map_arg((node.args[1:], node.kwargs), rest.append)
        if any(isinstance(_val_or_none(a), torch.Tensor) for a in rest):
            return None
        chain.append(node)
        node = node.args[0]
    return (placeholders[node], chain[::-1]) if chain else None


def _gapped_strides(t: torch.Tensor) -> tuple[int, ...] | None:
    """t's strides when they are static and not dense (not a permutation of row-major)."""
    if not isinstance(t, torch.Tensor) or not all(
        isinstance(x, int) for x in (*t.shape, *t.stride())
    ):
        return None
    dims = sorted((st, n) for n, st in zip(t.shape, t.stride()) if n > 1)
    acc = 1
    for st, n in dims:
        if st != acc:
            return tuple(t.stride())
        acc *= n
    return None


def _is_tensor(x) -> bool:
    return isinstance(x, torch.Tensor)


def _val_or_none(node):
    if not isinstance(node, fx.Node):
        return None
    return node.meta.get("val", node.meta.get("example_value"))


# Ops whose second argument is the target size list of a reshape of their input.
_RESHAPE_OPS = {"aten.view.default", "aten._unsafe_view.default", "aten.reshape.default"}


def _reshape_sizes(size_arg, out: torch.Tensor):
    """The size list of a view/reshape as coil gets it. With symbolic input sizes the list
    written in the program can hold literals that equal an expression of the input's sizes only
    under a relational guard of Dynamo (`x.reshape(4, 153)` of an input of sizes
    (4, s0, s1) holds when s0*s1 == 153), which does not reach coil: its meta function cannot
    prove that the literal sizes match the input's numel, nor find the view's strides (the
    chunks of a non-contiguous input: fuzz seeds 3143, 4523), and the output is declared with
    the symbolic sizes anyway. The output's sizes (from the FakeTensor) are the same list in
    terms of the input's symbols; they replace it when they differ from it symbolically."""
    sizes = list(out.size())
    if not any(isinstance(s, torch.SymInt) and not isinstance(_symint_value(s), int)
               for s in sizes):
        return size_arg  # static output sizes: the list as written (-1 resolved by coil)
    if not isinstance(size_arg, (list, tuple)) or len(size_arg) != len(sizes):
        return sizes
    # Keep each entry that already is the output's size (the same SymInt or int, or a node
    # folding to it); write the output's size where a literal (or -1) stands for it.
    return [a if (isinstance(a, (fx.Node, torch.SymInt)) or
                  (isinstance(a, int) and not isinstance(s, torch.SymInt) and a == s))
            else s
            for a, s in zip(size_arg, sizes)]


def _val(node: fx.Node):
    if "val" in node.meta:
        return node.meta["val"]
    if "example_value" in node.meta:
        return node.meta["example_value"]
    raise ExportError(f"node {node.name} has no meta['val']")


class _Exporter:
    def __init__(self, gm: fx.GraphModule):
        self.gm = gm
        self.next_id = 0
        # FX node -> value id (tensor-valued nodes) or tuple of (output index -> id or None).
        self.ids: dict[fx.Node, Any] = {}
        self.folded: dict[fx.Node, Any] = {}
        self.nonterm_inputs: dict[fx.Node, int] = {}
        self.lines: list[str] = []
        self.nodes: list[fx.Node] = []
        self.ops: list[str] = []
        self.mutated: list[fx.Node] = []  # placeholders written by copy_ nodes
        # SymFloat-valued FX nodes passed to coil as f64[] inputs -> their value id.
        self.scalar_inputs: dict[fx.Node, int | None] = {}
        # Free symbols met while printing (sympy symbol -> a SymNode naming it).
        self.seen: dict = {}

    def new_id(self) -> int:
        i = self.next_id
        self.next_id += 1
        return i

    # -- arguments
    def arg(self, a) -> str:
        if isinstance(a, fx.Node):
            if a in self.ids:
                v = self.ids[a]
                if isinstance(v, int):
                    return f"%{v}"
                raise ExportError(f"{a.name}: a multi-output value used directly as an argument")
            if a in self.folded:
                return self.arg(self.folded[a])
            raise ExportError(f"argument {a.name} is not defined")
        if a is None:
            return "None"
        if isinstance(a, bool):
            return "true" if a else "false"
        if isinstance(a, int):
            return str(a)
        if isinstance(a, float):
            return format_float(a)
        if isinstance(a, str):
            return quote_string(a)
        if isinstance(a, torch.dtype):
            return f"dtype({dtype_name(a)})"
        if isinstance(a, torch.device):
            return f"device({device_name(a)})"
        if isinstance(a, (torch.layout, torch.memory_format)):
            return quote_string(str(a))
        if isinstance(a, (list, tuple)):
            return "[" + ", ".join(self.arg(x) for x in a) + "]"
        if isinstance(a, torch.SymInt):
            v = _symint_value(a, self.seen)
            return str(v) if isinstance(v, int) else f"sym({v})"
        if isinstance(a, (torch.SymFloat, torch.SymBool)):
            raise ExportError(f"symbolic {type(a).__name__} arguments are not supported")
        if isinstance(a, torch.Tensor):
            raise ExportError("tensor literal in node arguments")
        raise ExportError(f"unsupported argument type {type(a).__name__}: {a!r}")

    # -- nodes
    def placeholder_like(self, node: fx.Node, t: torch.Tensor) -> str:
        i = self.new_id()
        self.ids[node] = i
        return f"%{i}: {meta_text(t, self.seen)}"

    def call_function(self, node: fx.Node) -> None:
        target = node.target
        if target is operator.getitem:
            src, idx = node.args
            if src in self.ids and isinstance(self.ids[src], tuple):
                v = self.ids[src][idx]
                if v is None:
                    # Not a tensor: None, or a size the op returns beside its tensors (the fused
                    # attention ops' max_q / max_k), folded to its value.
                    val = node.meta.get("val")
                    scalar = isinstance(val, (int, torch.SymInt)) and not isinstance(val, bool)
                    self.folded[node] = _folded_size(val) if scalar else None
                else:
                    self.ids[node] = v
                return
            if src in self.folded and isinstance(self.folded[src], (list, tuple)):
                self.folded[node] = self.folded[src][idx]
                return
            raise ExportError(f"getitem on {src.name} which is not a multi-output op")
        if node in self.scalar_inputs:
            return  # a SymFloat passed as an f64[] input (bind_symbols)
        if not isinstance(target, torch._ops.OpOverload):
            # Python-level scalar arithmetic on static sizes folds to its value.
            val = _val(node)
            if isinstance(val, (int, float, bool)) and not isinstance(val, torch.SymInt):
                self.folded[node] = val
                return
            if isinstance(val, torch.SymInt):
                # Symbolic size arithmetic (operator.mul, floordiv, sym_size...): the node is its
                # expression wherever it is used.
                self.folded[node] = _folded_size(val)
                return
            if isinstance(val, torch.SymFloat):
                # Float arithmetic on sizes: evaluated per call where an op uses it.
                self.folded[node] = val
                return
            raise ExportError(f"unsupported call target {getattr(target, '__name__', target)}")
        name = str(target)
        # Checked before _val: these nodes have no result, hence no meta['val'].
        if name in _DROPPED_OPS:
            self.folded[node] = None
            return
        if target is torch.ops.aten.copy_.default:
            self.input_mutation(node)
            return
        val = _val(node)
        if isinstance(val, torch.Tensor):
            outs: list = [val]
            single = True
        elif isinstance(val, (list, tuple)):
            outs = list(val)
            single = False
        elif val is None:
            raise ExportError(f"{name}: op without a result is not supported")
        else:
            # A scalar-valued op (sym_size, _local_scalar_dense...).
            if isinstance(val, (int, torch.SymInt)) and not isinstance(val, bool):
                self.folded[node] = _folded_size(val)
                return
            raise ExportError(f"{name}: non-tensor result {type(val).__name__} not supported")
        for k, o in enumerate(outs):
            if isinstance(o, (int, torch.SymInt)) and not isinstance(o, bool) and not single:
                outs[k] = None  # a size beside the tensors: not an output of the graph node
            elif o is not None and not _is_tensor(o):
                raise ExportError(f"{name}: result holds a {type(o).__name__}")
        node_args = list(node.args)
        if name in _RESHAPE_OPS and single and len(node_args) >= 2:
            node_args[1] = _reshape_sizes(node_args[1], val)
        args = [self.arg(a) for a in node_args]
        args += [f"{k}={self.arg(v)}" for k, v in node.kwargs.items()]
        decls, ids = [], []
        for o in outs:
            if o is None:
                ids.append(None)
                continue
            i = self.new_id()
            ids.append(i)
            decls.append(f"%{i}: {meta_text(o, self.seen)}")
        if not decls:
            raise ExportError(f"{name}: no tensor outputs")
        self.ids[node] = ids[0] if single else tuple(ids)
        self.lines.append(f"  {', '.join(decls)} = {name}({', '.join(args)})")
        self.nodes.append(node)
        self.ops.append(name)

    def input_mutation(self, node: fx.Node) -> None:
        """copy_(input, value), which AOTAutograd leaves at the end of a graph for an input
        it mutates: a call without outputs, lowered to a store into the input."""
        dst = node.args[0]
        if node.users or not isinstance(dst, fx.Node) or dst.op != "placeholder" \
                or not isinstance(self.ids.get(dst), int):
            raise ExportError("aten.copy_.default: only copies into graph inputs, whose result "
                              "is unused, are supported")
        args = [self.arg(a) for a in node.args]
        args += [f"{k}={self.arg(v)}" for k, v in node.kwargs.items()]
        self.lines.append(f"  aten.copy_.default({', '.join(args)})")
        self.nodes.append(node)
        self.ops.append("aten.copy_.default")
        self.mutated.append(dst)

    def run(self) -> ExportedGraph:
        graph = self.gm.graph
        header: list[str] = []
        input_indices: list[int] = []
        placeholders = [n for n in graph.nodes if n.op == "placeholder"]
        for pos, node in enumerate(placeholders):
            val = _val(node) if ("val" in node.meta or "example_value" in node.meta) else None
            if isinstance(val, torch.Tensor):
                header.append(self.placeholder_like(node, val))
                input_indices.append(pos)
            elif isinstance(val, bool) or val is None:
                self.folded[node] = val
            elif isinstance(val, int):
                # A static int input: Dynamo specializes (and guards) plain ints.
                self.folded[node] = int(val)
            elif isinstance(val, torch.SymInt):
                self.folded[node] = _folded_size(val)
                if not isinstance(self.folded[node], int):
                    self.nonterm_inputs[node] = pos
            else:
                raise ExportError(f"placeholder {node.name}: unsupported {type(val).__name__}")
        constants: list[torch.Tensor] = []
        for node in graph.nodes:
            if node.op == "get_attr":
                t = _fetch_attr(self.gm, node.target)
                if not isinstance(t, torch.Tensor):
                    raise ExportError(f"get_attr {node.target}: not a tensor")
                header.append(self.placeholder_like(node, t))
                constants.append(t)
        binder = self.bind_symbols(placeholders)
        if binder is not None:
            # Carriers and scalars live where the graph runs: a graph's inputs share a device.
            binder.device = _graph_device(placeholders)
            at = "@cuda" if binder.device.type == "cuda" else ""
            for name in binder.carriers:
                i = self.new_id()
                header.append(f"%{i}: u8[{name}]{{0}}{at}")
            for n in self.scalar_inputs:
                self.scalar_inputs[n] = self.ids[n] = self.new_id()
                header.append(f"%{self.ids[n]}: f64[]{at}")
        tensor_placeholders = {placeholders[i]: i for i in input_indices}
        output_spec: list[tuple[str, Any]] = []
        gapped_outputs: dict[int, tuple[int, ...]] = {}
        ret: list[str] = []
        for node in graph.nodes:
            if node.op in ("placeholder", "get_attr"):
                continue
            if node.op == "call_function":
                self.call_function(node)
            elif node.op == "output":
                (outs,) = node.args
                flat = list(outs) if isinstance(outs, (list, tuple)) else [outs]
                for o in flat:
                    if isinstance(o, fx.Node) and o in tensor_placeholders:
                        # An input returned as it is: the caller's own tensor, never an alias
                        # the runtime makes of its memory. (AOTAutograd saves such outputs for
                        # the backward; FSDP2 frees an unsharded parameter's memory after the
                        # forward and gathers it again before the backward into the same
                        # storage, which an alias of the old memory does not see.)
                        output_spec.append(("input", tensor_placeholders[o]))
                    elif isinstance(o, fx.Node) and o in self.ids and isinstance(self.ids[o], int):
                        chain = _view_chain(o, tensor_placeholders)
                        gapped = _gapped_strides(_val(o))
                        if chain is not None:
                            output_spec.append(("view", (len(ret), *chain)))
                        elif gapped is not None:
                            gapped_outputs[len(ret)] = gapped
                            output_spec.append(("tensor", len(ret)))
                        else:
                            output_spec.append(("tensor", len(ret)))
                        ret.append(f"%{self.ids[o]}")
                    elif isinstance(o, fx.Node) and o in self.nonterm_inputs:
                        output_spec.append(("input", self.nonterm_inputs[o]))
                    elif isinstance(o, fx.Node) and isinstance(self.folded.get(o), torch.SymInt):
                        output_spec.append(("sym", SymValue(_symint_value(self.folded[o]))))
                    elif isinstance(o, fx.Node) and o in self.folded:
                        output_spec.append(("const", self.folded[o]))
                    elif isinstance(o, fx.Node):
                        raise ExportError(f"output {o.name} cannot be expressed")
                    else:
                        output_spec.append(("const", o))
            else:
                raise ExportError(f"unsupported FX node kind {node.op} ({node.name})")
        text = "graph(" + ", ".join(header) + "):\n"
        text += "".join(line + "\n" for line in self.lines)
        text += "  return (" + ", ".join(ret) + ")\n"
        return ExportedGraph(
            text=text,
            input_indices=input_indices,
            constants=constants,
            nodes=self.nodes,
            output_spec=output_spec,
            num_tensor_outputs=len(ret),
            folded=self.folded,
            ops=self.ops,
            gapped_outputs=gapped_outputs,

            binder=binder,
            scalar_inputs=set(self.scalar_inputs),
            input_strides=[[v if isinstance(v, int) else SymValue(v)
                            for v in map(_symint_value, _val(placeholders[i]).stride())]
                           for i in input_indices],
            mutated_inputs=[input_indices.index(placeholders.index(n)) for n in self.mutated],
        )

    def bind_symbols(self, placeholders: list[fx.Node]) -> SymBinder | None:
        """Where each symbol of the graph comes from at run time (sym_bind.py); checks that
        the ShapeEnv knows every symbol to be >= 2. Runs before the nodes are printed, so that
        carrier inputs are numbered with the other inputs."""
        used: dict = {}
        for node in self.gm.graph.nodes:
            if node.op == "output":
                continue
            v = node.meta.get("val", node.meta.get("example_value"))
            for x in v if isinstance(v, (list, tuple)) else [v]:
                if isinstance(x, torch.Tensor):
                    meta_text(x, used)
                elif isinstance(x, torch.SymInt):
                    _symint_value(x, used)
                elif isinstance(x, torch.SymFloat):
                    for sym in x.node.expr.free_symbols:
                        used.setdefault(sym, x.node)
        if not used:
            return None
        sources: dict[str, tuple] = {}
        bare: set[str] = set()  # symbols the C++ runtime binds from a tensor input's dim
        for pos, node in enumerate(placeholders):
            v = node.meta.get("val", node.meta.get("example_value"))
            if isinstance(v, torch.Tensor):
                for kind, dims in (("size", v.size()), ("stride", v.stride())):
                    for d, x in enumerate(dims):
                        if isinstance(x, torch.SymInt) and x.node.expr.is_Symbol:
                            name = x.node.expr.name
                            bare.add(name)
                            sources.setdefault(name, (kind, pos, d))
            elif isinstance(v, torch.SymInt) and v.node.expr.is_Symbol:
                sources.setdefault(v.node.expr.name, ("int", pos))
        hints: dict[str, int] = {}
        ranges: dict[str, tuple[int, int | None]] = {}
        multiples: dict[str, int] = {}
        carriers: list[str] = []
        for sym, symnode in sorted(used.items(), key=lambda kv: kv[0].name):
            name = sym.name
            lo, hi = symbol_range(sym, symnode)
            if lo is None or lo < 2:
                raise ExportError(f"size symbol {name} may be {lo if lo is not None else '< 2'} "
                                  "(coil assumes symbolic sizes >= 2)")
            ranges[name] = (lo, hi)
            if (m := symbol_multiple(sym, symnode)) > 1:
                multiples[name] = m
            if name not in sources:
                raise ExportError(f"size symbol {name} is not an input size or SymInt input")
            if name not in bare:
                carriers.append(name)
            shape_env = symnode.shape_env
            vals = getattr(shape_env, "backed_var_to_val", None)
            hint = (vals if vals is not None else shape_env.var_to_val).get(sym)
            if hint is not None:
                hints[name] = int(hint)
        # Only the sources of the symbols used are looked up per call.
        sources = {k: v for k, v in sources.items() if k in {s.name for s in used}}
        # SymFloat arguments of ops (BatchNorm's n / (n - 1)): f64[] inputs computed per call.
        scalars: list[fx.Node] = []
        for node in self.gm.graph.nodes:
            if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
                flat: list = []
                fx.node.map_arg((node.args, node.kwargs), flat.append)
                for a in flat:
                    if isinstance(_val_or_none(a), torch.SymFloat) and a not in scalars:
                        scalars.append(a)
        scalar_fns = [self.scalar_fn(n, placeholders) for n in scalars]
        for n in scalars:
            self.scalar_inputs[n] = None
        return SymBinder(sources=sources, carriers=carriers, hints=hints,
                         scalars=scalar_fns, ranges=ranges, multiples=multiples)

    def scalar_fn(self, node: fx.Node, placeholders: list[fx.Node]):
        """A function env -> value of the scalar FX node `node` (Python arithmetic on sizes),
        re-evaluated per call from the symbol values."""
        v = _val_or_none(node)
        if isinstance(v, torch.SymInt):
            val = _symint_value(v)
            if isinstance(val, int):
                return lambda env, c=val: c
            return SymValue(val)
        if isinstance(v, (int, float, bool)):
            return lambda env, c=v: c
        if node.op != "call_function" or isinstance(node.target, torch._ops.OpOverload):
            raise ExportError(f"symbolic float {node.name} from {node.op} {node.target}")
        if node.kwargs:
            raise ExportError(f"symbolic float {node.name}: keyword arguments")
        fns = [self.scalar_fn(a, placeholders) if isinstance(a, fx.Node)
               else (lambda env, c=a: c) for a in node.args]
        target = node.target
        return lambda env: target(*[f(env) for f in fns])


def _fetch_attr(gm: fx.GraphModule, target: str):
    obj: Any = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def export_graph(gm: fx.GraphModule) -> ExportedGraph:
    """Exports an ATen-level FX graph (with meta['val'] on every node) to coil's graph text."""
    return _Exporter(gm).run()
