"""View and shape op families: reshape/view, permute/transpose, slice/select/narrow, expand,
unsqueeze/squeeze, flatten/unflatten, diagonal, cat/stack, and layout-only ops (tril, flip,
pad). All are exact: they move values without arithmetic."""

from __future__ import annotations

import math


def _dims(g, x):
    return list(g.t(x).shape)


def reshape(g, x):
    r = g.rng
    s = _dims(g, x)
    new = list(s)
    choice = r.randrange(6)
    if choice == 0 and len(s) >= 2:  # merge two adjacent dims
        i = r.randrange(len(s) - 1)
        new = s[:i] + [s[i] * s[i + 1]] + s[i + 2:]
    elif choice == 1 and s:  # split a dim
        i = r.randrange(len(s))
        fs = [f for f in range(2, s[i]) if s[i] % f == 0]
        if not fs:
            return None
        f = r.choice(fs)
        new = s[:i] + [f, s[i] // f] + s[i + 1:]
    elif choice == 2:  # insert a 1
        i = r.randint(0, len(s))
        new = s[:i] + [1] + s[i:]
    elif choice == 3 and 1 in s:  # remove a 1
        new = list(s)
        new.remove(1)
    elif choice == 4:
        new = [-1]
    elif s:  # the same with a -1
        i = r.randrange(len(s))
        new = list(s)
        new[i] = -1
    meth = r.choice(["reshape", "view", "reshape"])
    return g.emit(f"{x}.{meth}({tuple(new)!r})", (x,), True)


def permute(g, x):
    r = g.rng
    n = g.t(x).dim()
    if n < 2:
        return None
    c = r.randrange(4)
    if c == 0:
        p = list(range(n))
        r.shuffle(p)
        expr = f"{x}.permute({tuple(p)!r})"
    elif c == 1:
        i, j = r.sample(range(n), 2)
        expr = f"{x}.transpose({i}, {j - n if r.random() < 0.5 else j})"
    elif c == 2:
        expr = f"{x}.mT" if n > 2 or r.random() < 0.5 else f"{x}.t()"
    else:
        expr = f"torch.movedim({x}, {r.randrange(n)}, {r.randrange(n)})"
    return g.emit(expr, (x,), True)


def slicing(g, x):
    r = g.rng
    s = _dims(g, x)
    if not s:
        return None
    d = r.randrange(len(s))
    n = s[d]
    c = r.randrange(5)
    if c == 0:  # basic slice with step
        start = r.randint(-n, n - 1) if n > 1 else 0
        stop = r.choice([None, n, r.randint(0, n)])
        step = r.choice([1, 1, 2, 3])
        sl = f"{start}:{'' if stop is None else stop}:{step}"
        idx = ", ".join([":"] * d + [sl])
        expr = f"{x}[{idx}]"
    elif c == 1:  # select
        k = r.randint(-n, n - 1) if n else 0
        expr = f"{x}.select({d}, {k})" if r.random() < 0.5 else f"{x}[{', '.join([':'] * d + [str(k)])}]"
    elif c == 2:
        start = r.randrange(n) if n else 0
        expr = f"{x}.narrow({d}, {start}, {r.randint(0, n - start)})"
    elif c == 3:  # ellipsis and None
        expr = f"{x}[..., {r.choice(['None', '::2', '1:', '-1', ':'])}]"
    else:
        expr = f"torch.diagonal({x}, {r.randint(-1, 1)}, {d}, {r.randrange(len(s))})"
    return g.emit(expr, (x,), True)


def expand(g, x):
    r = g.rng
    s = _dims(g, x)
    ones = [i for i, v in enumerate(s) if v == 1]
    new = list(s)
    if ones and r.random() < 0.7:
        for i in ones:
            if r.random() < 0.7:
                new[i] = r.choice([2, 3, 5, 8])
    else:
        new = [r.choice([2, 3])] + new
    if math.prod(new) > 4096:
        return None
    if r.random() < 0.3:
        new = [-1 if (j >= len(new) - len(s) and new[j] == s[j - (len(new) - len(s))]) else v
               for j, v in enumerate(new)]
    return g.emit(f"{x}.expand({tuple(new)!r})", (x,), True)


def squeeze(g, x):
    r = g.rng
    n = g.t(x).dim()
    c = r.randrange(5)
    if c == 0:
        expr = f"{x}.unsqueeze({r.randint(-n - 1, n)})"
    elif c == 1 and n:
        expr = f"{x}.squeeze({r.randrange(n)})"
    elif c == 2:
        expr = f"{x}.squeeze()"
    elif c == 3 and n:
        a = r.randrange(n)
        expr = f"{x}.flatten({a}, {r.randint(a, n - 1)})"
    else:
        expr = f"{x}.contiguous()" if r.random() < 0.5 else f"{x}.clone()"
    return g.emit(expr, (x,), True)


def cat(g, x):
    r = g.rng
    s = _dims(g, x)
    if not s:
        return None
    d = r.randrange(len(s))
    stack = r.random() < 0.3
    parts = [x]
    for _ in range(r.choice([1, 1, 2])):
        c = r.random()
        if c < 0.25:
            parts.append(x)
            continue
        shape = list(s)
        if not stack:
            shape[d] = r.choice([1, 2, 3, 5, s[d]])
        same = [v for v in g.values() if list(g.t(v).shape) == shape and v != x]
        if same and c < 0.6:
            parts.append(r.choice(same))
        else:
            kind = g.kind(x) if r.random() < 0.85 else r.choice(["float", "int"])
            parts.append(g.new_input(tuple(shape), g.pick_dtype(kind)))
    r.shuffle(parts)
    fn = "stack" if stack else r.choice(["cat", "cat", "concat"])
    dd = d - len(s) if r.random() < 0.3 else d
    return g.emit(f"torch.{fn}([{', '.join(parts)}], {dd})", tuple(parts), True)


def layout_ops(g, x):
    r = g.rng
    t = g.t(x)
    n = t.dim()
    c = r.randrange(4)
    if c == 0 and n >= 2:
        expr = f"torch.{r.choice(['tril', 'triu'])}({x}, {r.randint(-1, 1)})"
    elif c == 1 and n >= 1:
        dims = sorted(r.sample(range(n), r.randint(1, n)))
        expr = f"torch.flip({x}, {tuple(dims)!r})"
    elif c == 2 and n >= 1:
        pads = [r.randint(0, 2) for _ in range(2 * r.randint(1, min(n, 2)))]
        val = "0.0" if t.is_floating_point() else "0"
        expr = f"F.pad({x}, {tuple(pads)!r}, value={r.choice([val, '1'])})"
    else:
        expr = f"torch.{r.choice(['zeros_like', 'ones_like'])}({x}) + {x}"
        return g.emit(expr, (x,), False)
    return g.emit(expr, (x,), True)
