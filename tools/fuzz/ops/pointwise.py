"""Pointwise op families: unary, binary (broadcasting, type promotion), comparisons, where,
casts, ternary. Each family is fn(g, x) -> value name or None (see ../generator.py)."""

from __future__ import annotations

import torch

# (template, domain, exact, discrete): domain restricts the input ("pos": > 0.1, "unit":
# |x| < 0.9, "gt1": > 1.1, "small": |x| < 1.2); discrete = offset for a frac check
# (floor-like ops), "sign" for a gap check against 0.
UNARY_FLOAT = [
    ("-{x}", None, True, None), ("torch.abs({x})", None, True, None),
    ("torch.relu({x})", None, True, None), ("torch.exp({x})", None, False, None),
    ("torch.exp2({x})", None, False, None), ("torch.expm1({x})", None, False, None),
    ("torch.log({x})", "pos", False, None), ("torch.log2({x})", "pos", False, None),
    ("torch.log10({x})", "pos", False, None), ("torch.log1p({x})", "pos", False, None),
    ("torch.sqrt({x})", "pos", False, None), ("torch.rsqrt({x})", "pos", False, None),
    ("torch.reciprocal({x})", "pos", False, None), ("torch.sin({x})", None, False, None),
    ("torch.cos({x})", None, False, None), ("torch.tan({x})", "small", False, None),
    ("torch.asin({x})", "unit", False, None), ("torch.acos({x})", "unit", False, None),
    ("torch.atan({x})", None, False, None), ("torch.sinh({x})", "small", False, None),
    ("torch.cosh({x})", "small", False, None), ("torch.asinh({x})", None, False, None),
    ("torch.acosh({x})", "gt1", False, None), ("torch.atanh({x})", "unit", False, None),
    ("torch.tanh({x})", None, False, None), ("torch.sigmoid({x})", None, False, None),
    ("torch.erf({x})", None, False, None), ("torch.erfc({x})", None, False, None),
    ("torch.erfinv({x})", "unit", False, None), ("torch.lgamma({x})", "pos", False, None),
    ("torch.floor({x})", None, True, 0.0), ("torch.ceil({x})", None, True, 0.0),
    ("torch.trunc({x})", None, True, 0.0), ("torch.round({x})", None, True, 0.5),
    ("torch.sign({x})", None, True, "sign"), ("torch.square({x})", None, False, None),
    ("{x} * {x}", None, False, None), ("torch.pow({x}, 2)", None, False, None),
    ("{x} ** 3", None, False, None), ("torch.pow({x}, 0.5)", "pos", False, None),
    ("{x} ** -1.5", "pos", False, None), ("F.gelu({x})", None, False, None),
    ("F.gelu({x}, approximate='tanh')", None, False, None), ("F.silu({x})", None, False, None),
    ("F.leaky_relu({x}, 0.1)", None, False, None), ("F.hardtanh({x}, -0.5, 0.5)", None, True, None),
    ("F.softplus({x})", None, False, None), ("F.elu({x})", None, False, None),
    ("F.relu6({x} * 4)", None, False, None), ("F.hardswish({x})", None, False, None),
    ("F.hardsigmoid({x})", None, False, None), ("F.mish({x})", None, False, None),
    ("F.logsigmoid({x})", None, False, None), ("torch.clamp({x}, -0.5, 0.7)", None, True, None),
    ("torch.clamp_min({x}, 0.2)", None, True, None), ("torch.clamp({x}, max=0.3)", None, True, None),
    ("torch.isnan({x})", None, True, None), ("torch.isinf({x} * 2)", None, True, None),
    ("{x} * 0.5 + 1", None, False, None), ("2 - {x}", None, False, None), ("{x} / 3", None, False, None),
]
UNARY_INT = [
    "-{x}", "torch.abs({x})", "{x} * 3", "{x} + 2", "{x} - 7", "{x} // 2", "{x} % 3",
    "torch.remainder({x}, 5)", "torch.fmod({x}, 3)", "torch.bitwise_not({x})", "{x} & 6",
    "{x} | 1", "{x} ^ 5", "{x} << 1", "{x} >> 1", "torch.clamp({x}, -2, 3)", "torch.sign({x})",
    "torch.div({x}, 2, rounding_mode='trunc')", "torch.div({x}, 2, rounding_mode='floor')",
    "torch.div({x}, 2)", "{x} * 0.5", "torch.maximum({x}, torch.zeros_like({x}))",
]
UNARY_BOOL = ["~{x}", "torch.logical_not({x})", "{x}.to(F32)", "{x} * 2", "{x}.int()",
              "torch.where({x}, 1.5, -0.5)"]
DOMAIN = {"pos": ("({x}.abs() + 0.5)", lambda t: float(t.min()) > 0.1),
          "unit": ("torch.clamp({x}, -0.9, 0.9)", lambda t: float(t.abs().max()) < 0.9),
          "gt1": ("({x}.abs() + 1.1)", lambda t: float(t.min()) > 1.1),
          "small": ("torch.clamp({x}, -1.2, 1.2)", lambda t: float(t.abs().max()) < 1.2)}


def _in_domain(g, x: str, domain) -> str:
    if domain is None:
        return x
    wrap, ok = DOMAIN[domain]
    t = g.t(x)
    return x if t.numel() and ok(t) else wrap.format(x=x)


def unary(g, x):
    k = g.kind(x)
    if k == "int":
        return g.emit(g.rng.choice(UNARY_INT).format(x=x), (x,), True)
    if k == "bool":
        return g.emit(g.rng.choice(UNARY_BOOL).format(x=x), (x,), True)
    tmpl, domain, exact, discrete = g.rng.choice(UNARY_FLOAT)
    arg = _in_domain(g, x, domain)
    chk = ()
    if discrete is not None and not g.is_exact(x):
        chk = (("gap", arg, 0.0),) if discrete == "sign" else (("frac", arg, discrete),)
    return g.emit(tmpl.format(x=arg), (x,), exact and arg == x, chk)


BINARY = ["{a} + {b}", "{a} - {b}", "{a} * {b}", "torch.add({a}, {b}, alpha=2)",
          "torch.sub({a}, {b}, alpha=0.5)", "torch.mul({a}, {b})", "{a} / {b}", "torch.maximum({a}, {b})",
          "torch.minimum({a}, {b})", "torch.pow({a}, {b})", "torch.atan2({a}, {b})",
          "torch.hypot({a}, {b})", "torch.copysign({a}, {b})", "{a} // {b}", "{a} % {b}",
          "torch.fmod({a}, {b})", "{a} & {b}", "{a} | {b}", "{a} ^ {b}",
          "torch.logical_and({a}, {b})", "torch.logical_or({a}, {b})", "torch.logical_xor({a}, {b})"]
EXACT_BINARY = {"torch.maximum({a}, {b})", "torch.minimum({a}, {b})", "{a} & {b}", "{a} | {b}",
                "{a} ^ {b}", "torch.logical_and({a}, {b})", "torch.logical_or({a}, {b})",
                "torch.logical_xor({a}, {b})", "torch.copysign({a}, {b})"}


def _float_or_int(g, name) -> str:
    return "float" if (not isinstance(name, str) or name not in g.env) else g.kind(name)


def binary(g, x):
    r = g.rng
    tmpl = r.choice(BINARY)
    kind = g.kind(x)
    if tmpl in ("{a} & {b}", "{a} | {b}", "{a} ^ {b}") and kind == "float":
        return None
    b = g.partner(x, kind if r.random() < 0.8 else r.choice(["float", "int", "bool"]))
    a = x
    if r.random() < 0.3:
        a, b = b, a
    chk = []
    ints = all(_float_or_int(g, v) != "float" for v in (a, b))
    if tmpl in ("{a} / {b}", "{a} // {b}", "{a} % {b}", "torch.fmod({a}, {b})"):
        b = _nonzero(g, b, ints)
        if not ints and tmpl != "{a} / {b}":
            # floor-like on floats: the quotient must stay away from integers.
            chk.append(("frac", f"{a} / {b}", 0.0))
    if tmpl == "torch.pow({a}, {b})":
        a = _in_domain(g, a, "pos") if a in g.env and not ints else a
        if b in g.env:
            b = f"torch.clamp({b}, -2, 2)"
    if tmpl == "torch.atan2({a}, {b})" and b in g.env:
        b = f"({b}.abs() + 0.5)"
    if tmpl == "torch.copysign({a}, {b})" and b in g.env and not g.is_exact(b):
        chk.append(("gap", b, 0.0))
    exact = tmpl in EXACT_BINARY or (ints and tmpl not in ("{a} / {b}", "torch.pow({a}, {b})"))
    return g.emit(tmpl.format(a=a, b=b), (a, b), exact, tuple(chk))


def _nonzero(g, b, ints: bool) -> str:
    if b not in g.env:
        return "2" if ints else "1.5"
    t = g.t(b)
    if t.dtype.is_floating_point and t.numel() and float(t.abs().min()) > 0.1:
        return b
    return f"({b}.abs() + 1)" if ints else f"({b}.abs() + 0.5)"


CMP = ["<", "<=", ">", ">=", "==", "!="]


def compare(g, x):
    r = g.rng
    op = r.choice(CMP)
    kind = g.kind(x)
    t = g.t(x)
    if kind == "float" and r.random() < 0.5 and t.numel() > 1:
        # A threshold in the widest gap of the middle values: robust by construction.
        s = t.double().flatten().sort().values
        n = len(s)
        lo, hi = max(0, n // 4), max(1, (3 * n) // 4)
        k = max(range(lo, min(hi, n - 1)), key=lambda i: float(s[i + 1] - s[i]), default=0)
        b = f"{float((s[k] + s[min(k + 1, n - 1)]) / 2):.4g}"
    else:
        b = g.partner(x, kind)
    exact = g.is_exact(x, b)
    chk = ()
    if not exact:
        if op in ("==", "!="):
            return None
        chk = (("gap", x, b),)
    a, b2 = (x, b) if r.random() < 0.7 else (b, x)
    if a in g.env and r.random() < 0.3:
        expr = f"torch.{_CMP_FN[op]}({a}, {b2})"
    else:
        expr = f"({a} {op} {b2})"
    return g.emit(expr, (x, b), True, chk)


_CMP_FN = {"<": "lt", "<=": "le", ">": "gt", ">=": "ge", "==": "eq", "!=": "ne"}


def where(g, x):
    r = g.rng
    shape = tuple(g.t(x).shape)
    conds = [v for v in g.values("bool") if _broadcasts(g, v, shape)]
    c = r.choice(conds) if conds and r.random() < 0.7 else g.new_input(g.broadcast_shape(shape), "b8")
    kind = g.kind(x)
    b = g.partner(x, kind)
    a = x
    if r.random() < 0.5:
        a, b = b, a
    if r.random() < 0.2 and kind == "float":
        return g.emit(f"{x}.masked_fill({c}, {g.scalar('float')})", (x, c), True)
    return g.emit(f"torch.where({c}, {a}, {b})", (a, b, c), True)


def _broadcasts(g, v, shape) -> bool:
    try:
        return len(torch.broadcast_shapes(tuple(g.t(v).shape), shape)) <= 5
    except RuntimeError:
        return False


CAST_TO = ["F32", "BF16", "F16", "I64", "I32", "B8"]


def cast(g, x):
    r = g.rng
    to = r.choice(CAST_TO)
    kind = g.kind(x)
    chk = ()
    if kind == "float" and not g.is_exact(x):
        if to in ("I64", "I32"):
            chk = (("frac", x, 0.0),)
        elif to == "B8":
            chk = (("gap", x, 0.0),)
    expr = f"{x}.to({to})"
    return g.emit(expr, (x,), True, chk)


TERNARY = ["torch.addcmul({a}, {b}, {c}, value=0.5)", "torch.addcdiv({a}, {b}, {c}, value=0.3)",
           "torch.lerp({a}, {b}, 0.3)", "torch.clamp({a}, min={b})", "torch.clamp({a}, {b}, {c})",
           "{a} * {b} + {c}"]


def ternary(g, x):
    r = g.rng
    if g.kind(x) != "float":
        return None
    tmpl = r.choice(TERNARY)
    b = g.partner(x, "float", scalar_ok=False)
    c = g.partner(x, "float", scalar_ok=False)
    if "addcdiv" in tmpl:
        c = _nonzero(g, c, False)
    if tmpl == "torch.clamp({a}, {b}, {c})":
        c = f"({b} + {c}.abs() + 0.1)"
    return g.emit(tmpl.format(a=x, b=b, c=c), (x, b, c), "clamp" in tmpl)
