"""Reductions (sum/mean/amax/amin/max/min/argmax/argmin/prod/var/std/any/all/logsumexp, one or
several dims, keepdim, dtype=), softmax / log_softmax and the normalizations."""

from __future__ import annotations


def _dims_arg(g, n: int, multi: bool = True):
    """(dims expression, dims for checks): None, an int, or a tuple of ints."""
    r = g.rng
    if n == 0:
        return None, None
    c = r.random()
    if c < 0.2:
        return None, None
    if c < 0.65 or not multi or n == 1:
        d = r.randrange(n)
        return (d - n if r.random() < 0.3 else d), d
    ds = sorted(r.sample(range(n), r.randint(2, n)))
    return tuple(ds), tuple(ds)


def reduction(g, x):
    r = g.rng
    t = g.t(x)
    n = t.dim()
    kind = g.kind(x)
    keep = r.random() < 0.4
    ops = ["sum", "amax", "amin", "max", "min", "argmax", "argmin", "prod", "any", "all"]
    if kind == "float":
        ops += ["sum", "mean", "mean", "var", "std", "logsumexp", "amax", "var_mean"]
    op = r.choice(ops)
    multi = op in ("sum", "mean", "amax", "amin", "var", "std", "logsumexp", "any", "all", "var_mean")
    dims, _ = _dims_arg(g, n, multi)
    kd = f", keepdim={keep}"
    chk = ()
    exact = op in ("amax", "amin", "max", "min", "argmax", "argmin", "any", "all")
    if op in ("sum", "mean", "prod") and dims is None and r.random() < 0.5:
        expr = f"torch.{op}({x})"
    elif op in ("sum", "mean") and r.random() < 0.3:
        dt = "F32" if kind == "float" or op == "mean" else "I64"
        expr = f"torch.{op}({x}, {dims if dims is not None else tuple(range(n))!r}{kd}, dtype={dt})"
    elif op in ("max", "min"):
        if dims is None:
            expr = f"torch.{op}({x})"
        else:
            part = r.choice(["[0]", ".values", ".indices", "[1]"])
            expr = f"torch.{op}({x}, {dims}{kd}){part}"
            if part in ("[1]", ".indices") and not g.is_exact(x):
                chk = (("top2", x, dims),)
    elif op in ("argmax", "argmin"):
        if dims is None:
            expr = f"torch.{op}({x})"
        else:
            expr = f"torch.{op}({x}, {dims}{kd})"
        if not g.is_exact(x):
            chk = (("top2", x, dims),)
    elif op == "prod":
        if dims is None:
            expr = f"torch.prod({x})"
        else:
            expr = f"torch.prod({x}, {dims}{kd})"
    elif op in ("var", "std", "var_mean"):
        corr = r.choice([0, 1])
        part = r.choice(["[0]", "[1]"]) if op == "var_mean" else ""
        expr = f"torch.{op}({x}, {dims!r}, correction={corr}{kd}){part}"
    elif op in ("any", "all"):
        if kind == "float" and not g.is_exact(x):
            return None
        expr = f"torch.{op}({x})" if dims is None else f"torch.{op}({x}, {dims!r}{kd})"
    elif dims is None:
        if op == "logsumexp":
            return None
        expr = f"torch.{op}({x})"
    else:
        expr = f"torch.{op}({x}, {dims!r}{kd})"
    return g.emit(expr, (x,), exact, chk)


def softmax(g, x):
    r = g.rng
    t = g.t(x)
    if not t.is_floating_point() or t.dim() == 0:
        return None
    d = r.randrange(t.dim()) - (t.dim() if r.random() < 0.5 else 0)
    fn = r.choice(["torch.softmax", "F.log_softmax", "F.softmax", "torch.log_softmax"])
    dt = ", dtype=F32" if r.random() < 0.2 else ""
    return g.emit(f"{fn}({x}, {d}{dt})", (x,), False)


def norm(g, x):
    r = g.rng
    t = g.t(x)
    if not t.is_floating_point() or t.dim() == 0:
        return None
    s = tuple(t.shape)
    c = r.randrange(4)
    if c <= 1:
        k = r.randint(1, min(2, len(s)))
        ns = s[-k:]
        w = g.new_input(ns, g.dtype_code(t)) if r.random() < 0.6 else "None"
        b = g.new_input(ns, g.dtype_code(t)) if r.random() < 0.5 else "None"
        if c == 1:
            return g.emit(f"F.rms_norm({x}, {ns!r}, {w}, eps=1e-5)", (x, w), False)
        return g.emit(f"F.layer_norm({x}, {ns!r}, {w}, {b}, eps=1e-5)", (x, w, b), False)
    if len(s) < 2:
        return None
    if c == 2:  # batch norm in inference mode: statistics are inputs
        C = s[1]
        rm = g.new_input((C,), g.dtype_code(t))
        rv = g.new_input((C,), g.dtype_code(t), dist="pos")
        w = g.new_input((C,), g.dtype_code(t))
        return g.emit(f"F.batch_norm({x}, {rm}, {rv}, {w}, None, training=False)", (x,), False)
    groups = [d for d in (1, 2, 3, 4) if s[1] % d == 0]
    return g.emit(f"F.group_norm({x}, {r.choice(groups)})", (x,), False)
