"""The accuracy rule of PyTorch's benchmark runner, applied to coil.

A compiled result passes when it is close to eager's, or, failing that, when its error against a
float64 reference is at most `multiplier` times eager's own error against that reference (plus a
small absolute slack). The second test is what makes low-precision comparisons fair: a bfloat16
model differs from eager by rounding noise that says nothing about correctness, while a real bug
makes coil's error much larger than eager's.

    compare(coil_out, eager_out, fp64_out) -> Verdict

Outputs may be tensors or nested lists/tuples/dicts of them; integer and bool tensors must match
exactly; NaN and inf must sit at the same places as in eager.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

# Default tolerances per dtype (rtol = atol), as the benchmark runner and OpInfo tests use them.
TOLERANCE = {
    torch.float64: 1e-7,
    torch.float32: 1e-4,
    torch.float16: 1e-2,
    torch.bfloat16: 1.6e-2,
}
# coil's error may be this many times eager's error against the float64 reference.
MULTIPLIER = {torch.float16: 3.0, torch.bfloat16: 3.0}
DEFAULT_MULTIPLIER = 2.0


@dataclass
class Verdict:
    ok: bool
    detail: str = ""

    def __bool__(self) -> bool:
        return self.ok


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    d = (a.double() - b.double())
    finite = torch.isfinite(d)
    if not finite.any():
        return 0.0
    return float(torch.sqrt(torch.mean(d[finite] ** 2)))


def _flatten(x: Any, path: str = "out") -> list[tuple[str, Any]]:
    if isinstance(x, (list, tuple)):
        out = []
        for i, v in enumerate(x):
            out += _flatten(v, f"{path}[{i}]")
        return out
    if isinstance(x, dict):
        out = []
        for k in sorted(x, key=str):
            out += _flatten(x[k], f"{path}[{k!r}]")
        return out
    return [(path, x)]


def compare_tensor(res: torch.Tensor, ref: torch.Tensor, fp64: torch.Tensor | None,
                   tol: float | None = None, multiplier: float | None = None) -> Verdict:
    """One tensor: coil's `res` against eager's `ref` (and the float64 reference `fp64`)."""
    if res.shape != ref.shape:
        return Verdict(False, f"shape {tuple(res.shape)} != eager {tuple(ref.shape)}")
    if res.dtype != ref.dtype:
        return Verdict(False, f"dtype {res.dtype} != eager {ref.dtype}")
    res, ref = res.detach().cpu(), ref.detach().cpu()
    if not (res.is_floating_point() or res.is_complex()):
        if torch.equal(res, ref):
            return Verdict(True)
        n = int((res != ref).sum())
        return Verdict(False, f"{n} of {res.numel()} elements differ (exact dtype {res.dtype})")
    # Non-finite values must agree in place and kind.
    rn, en = torch.isnan(res), torch.isnan(ref)
    if not torch.equal(rn, en):
        return Verdict(False, f"NaN at {int((rn != en).sum())} places where eager differs")
    ri, ei = torch.isinf(res), torch.isinf(ref)
    if not torch.equal(ri, ei) or not torch.equal(res[ri], ref[ei]):
        return Verdict(False, "inf values differ from eager")
    tol = TOLERANCE.get(res.dtype, 1e-4) if tol is None else tol
    finite = torch.isfinite(ref)
    if torch.allclose(res[finite].double(), ref[finite].double(), rtol=tol, atol=tol):
        return Verdict(True)
    max_diff = float((res[finite].double() - ref[finite].double()).abs().max())
    if fp64 is None:
        return Verdict(False, f"max |coil - eager| = {max_diff:.3g} > tol {tol:g}")
    fp64 = fp64.detach().cpu()
    mult = MULTIPLIER.get(res.dtype, DEFAULT_MULTIPLIER) if multiplier is None else multiplier
    res_err, ref_err = _rmse(res, fp64), _rmse(ref, fp64)
    if res_err <= mult * ref_err + tol / 10.0:
        return Verdict(True)
    return Verdict(False, f"rmse vs fp64: coil {res_err:.3g} > {mult:g} x eager {ref_err:.3g} "
                          f"+ {tol / 10:g} (max |coil - eager| = {max_diff:.3g})")


def compare(res: Any, ref: Any, fp64: Any = None, tol: float | None = None,
            multiplier: float | None = None) -> Verdict:
    """Outputs of one run (nested containers of tensors and Python scalars)."""
    rs, es = _flatten(res), _flatten(ref)
    fs = _flatten(fp64) if fp64 is not None else [(p, None) for p, _ in es]
    if len(rs) != len(es) or len(fs) != len(es):
        return Verdict(False, f"{len(rs)} outputs, eager has {len(es)}")
    for (path, r), (_, e), (_, f) in zip(rs, es, fs):
        if isinstance(e, torch.Tensor):
            if not isinstance(r, torch.Tensor):
                return Verdict(False, f"{path}: {type(r).__name__} where eager has a tensor")
            v = compare_tensor(r, e, f if isinstance(f, torch.Tensor) else None, tol, multiplier)
            if not v:
                return Verdict(False, f"{path}: {v.detail}")
        elif r != e and not (isinstance(e, float) and e != e and r != r):
            return Verdict(False, f"{path}: {r!r} != eager {e!r}")
    return Verdict(True)


def to_fp64(x: Any) -> Any:
    """Floating tensors (and modules' parameters, via .double()) in float64, for the reference run."""
    if isinstance(x, torch.Tensor):
        return x.detach().double().requires_grad_(x.requires_grad) if x.is_floating_point() else x
    if isinstance(x, (list, tuple)):
        return type(x)(to_fp64(v) for v in x)
    if isinstance(x, dict):
        return {k: to_fp64(v) for k, v in x.items()}
    return x
