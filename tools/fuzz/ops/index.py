"""Matmul and index op families: mm/bmm/matmul/linear, gather, index_select, embedding,
advanced indexing, scatter_add, index_add."""

from __future__ import annotations


def matmul(g, x):
    r = g.rng
    t = g.t(x)
    if not t.is_floating_point() or t.dim() == 0:
        return None
    s = tuple(t.shape)
    dt = g.dtype_code(t)
    m = r.choice([1, 2, 3, 5, 8, 16])
    k = s[-1]
    n = t.dim()
    c = r.random()
    if n == 1:
        y = g.new_input(r.choice([(k,), (k, m)]), dt)
        return g.emit(f"{x} @ {y}", (x, y), False)
    if n == 2 and c < 0.3:
        w = g.new_input((m, k), dt)
        b = g.new_input((m,), dt) if r.random() < 0.5 else "None"
        return g.emit(f"F.linear({x}, {w}, {b})", (x, w, b), False)
    if n == 2:
        y = _existing(g, x, lambda u: u.dim() == 2 and u.shape[0] == k) or g.new_input((k, m), dt)
        fn = r.choice(["torch.mm({a}, {b})", "{a} @ {b}", "torch.matmul({a}, {b})"])
        return g.emit(fn.format(a=x, b=y), (x, y), False)
    if n == 3 and c < 0.5:
        y = (_existing(g, x, lambda u: u.dim() == 3 and u.shape[0] == s[0] and u.shape[1] == k)
             or g.new_input((s[0], k, m), dt))
        return g.emit(f"torch.bmm({x}, {y})", (x, y), False)
    batch = s[:-2]
    yshape = r.choice([(k, m), batch + (k, m), (1,) * len(batch) + (k, m)])
    y = g.new_input(yshape, dt)
    return g.emit(f"torch.matmul({x}, {y})", (x, y), False)


def _existing(g, x, pred):
    vs = [v for v in g.values("float") if v != x and g.t(v).dtype == g.t(x).dtype and pred(g.t(v))]
    return g.rng.choice(vs) if vs and g.rng.random() < 0.5 else None


def _index(g, shape, hi: int, lo: int = 0) -> str:
    """An int64 index tensor in [lo, hi): an existing one that fits, or a new input."""
    r = g.rng
    for v in g.values("int"):
        t = g.t(v)
        if (tuple(t.shape) == tuple(shape) and t.numel() and int(t.min()) >= lo
                and int(t.max()) < hi and t.dtype.itemsize == 8 and r.random() < 0.5):
            return v
    return g.new_input(shape, r.choice(["i64", "i64", "i32"]) if lo >= 0 else "i64",
                       dist=f"int:{lo}:{hi}")


def indexing(g, x):
    r = g.rng
    t = g.t(x)
    s = tuple(t.shape)
    if t.dim() == 0 or 0 in s:
        return None
    d = r.randrange(len(s))
    c = r.randrange(6)
    if c == 0:  # gather: index no larger than x in the other dims
        ishape = tuple(r.randint(1, v) if i != d else r.randint(1, 6) for i, v in enumerate(s))
        idx = _index(g, ishape, s[d])
        return g.emit(f"torch.gather({x}, {d}, {idx})", (x, idx), True)
    if c == 1:
        idx = _index(g, (r.randint(1, 8),), s[d])
        return g.emit(f"torch.index_select({x}, {d}, {idx})", (x, idx), True)
    if c == 2 and t.dim() == 2 and t.is_floating_point():
        idx = _index(g, g.random_shape(r.randint(1, 2)), s[0])
        return g.emit(f"F.embedding({idx}, {x})", (x, idx), True)
    if c == 3:  # advanced indexing, negative indices too
        idx = _index(g, g.random_shape(r.randint(1, 2)), s[d], -s[d])
        pre = ", ".join([":"] * d + [idx])
        return g.emit(f"{x}[{pre}]", (x, idx), True)
    if c == 4 and t.is_floating_point():
        ishape = tuple(r.randint(1, v) for v in s)
        idx = _index(g, ishape, s[d])
        src = g.new_input(ishape, g.dtype_code(t))
        return g.emit(f"torch.scatter_add({x}, {d}, {idx}, {src})", (x, idx, src), False)
    if t.is_floating_point():
        idx = _index(g, (r.randint(1, 5),), s[d])
        src_shape = s[:d] + (g.t(idx).shape[0],) + s[d + 1:]
        src = g.new_input(src_shape, g.dtype_code(t))
        return g.emit(f"{x}.index_add({d}, {idx}, {src})", (x, idx, src), False)
    return None
