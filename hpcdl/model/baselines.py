"""The yardsticks a prediction is held to: two baselines fitted to the same calibration points
(the naive one, efficiency stays; the one-parameter one, one β from the largest calibrated
point's excess over one node), the split-conformal quantile that makes a band from out-of-sample
errors, the scores of a set of held-out points (with a sign test per node count: do its errors
lean one way), and the measurement's own error (how far the repeats of one point lie apart).
numpy only."""
from __future__ import annotations

import math
from typing import List, Optional, Sequence, Tuple

import numpy as np

from .. import costmodel


def naive(cal_rows: Sequence[dict], p: int, b: float, kind: str) -> float:
    """Efficiency stays at the largest calibrated point's: weak, the step stays; strong, it
    shrinks as 1/p."""
    top = max(cal_rows, key=lambda c: c["ranks"])
    return top["step"] if kind == "weak" else top["step"] * top["ranks"] / p


def one_parameter(cal_rows: Sequence[dict], p: int, b: float, wire: float, backend: str) -> float:
    """The 1-node step (scaled by the batch) plus one β from the largest calibrated point's
    excess over it, α = 0, with the ring's coefficient (the parameter server's for ps)."""
    algo = "ps" if backend == "ps" else "ring"
    one = min(cal_rows, key=lambda c: c["ranks"])
    top = max(cal_rows, key=lambda c: c["ranks"])
    base = one["step"] / one["batch"]
    coef = costmodel.coefficients(algo, top["wire"], top["ranks"])[1]
    beta = max(0.0, top["step"] - base * top["batch"]) / float(coef) if float(coef) > 0 else 0.0
    return base * b + beta * float(costmodel.coefficients(algo, wire, p)[1])


def relative_error(pred, meas) -> Optional[float]:
    """(prediction − measurement) / measurement; None without either."""
    return None if pred is None or not meas else (pred - meas) / meas


def conformal_quantile(residuals: Sequence[float], level: float) -> Optional[float]:
    """The split-conformal quantile: the ceil((n+1)·level)-th smallest of n residuals (None
    when there are too few for the level)."""
    r = sorted(residuals)
    k = math.ceil((len(r) + 1) * level)
    return r[k - 1] if r and k <= len(r) else None


# Student's t, two-sided 90% (0.95 quantile), by degrees of freedom: for fewer residuals than a
# 90% conformal quantile needs (9)
T95 = {1: 6.314, 2: 2.920, 3: 2.353, 4: 2.132, 5: 2.015, 6: 1.943, 7: 1.895, 8: 1.860}


def band_quantile(residuals: Sequence[float], level: float) -> Tuple[Optional[float], str]:
    """(half-width of the relative band, its basis): the conformal quantile where there are
    enough residuals; else, from 1 to 8 of them, a normal error of zero mean with its spread
    their root mean square, widened by Student's t (``level`` 0.90 only); else None."""
    q = conformal_quantile(residuals, level)
    if q is not None:
        return q, f"conformal, {len(residuals)} out-of-sample residuals"
    n = len(residuals)
    if not n or abs(level - 0.90) > 1e-9 or n not in T95:
        return None, f"{n} out-of-sample residual(s): no band"
    rms = math.sqrt(sum(r * r for r in residuals) / n)
    return (T95[n] * rms * math.sqrt(1.0 + 1.0 / n),
            f"normal from {n} out-of-sample residual(s) (t with {n} d.o.f.)")


def scores(held: List[dict]) -> dict:
    def mae(key):
        errs = [abs(e) for e in (key(p) for p in held) if e is not None]
        return float(np.mean(errs)) if errs else None
    inside = [p["inside"] for p in held if p.get("inside") is not None]
    return {"points": len(held),
            "mae_model": mae(lambda p: p["error"]["step"]),
            "mae_naive": mae(lambda p: p["naive_error"]),
            "mae_one_parameter": mae(lambda p: p["one_parameter_error"]),
            "mae_compute": mae(lambda p: p["error"]["compute"]),
            "mae_exchange": mae(lambda p: p["error"]["exchange"]),
            "within_10": sum(1 for p in held if p["error"]["step"] is not None
                             and abs(p["error"]["step"]) <= 0.10),
            "parts_within_15": sum(1 for p in held
                                   if all(p["error"][k] is not None and abs(p["error"][k]) <= 0.15
                                          for k in ("compute", "exchange"))),
            "coverage": (sum(inside) / len(inside)) if inside else None,
            "covered": sum(inside), "banded": len(inside),
            "by_nodes": bias_by_nodes(held)}


SIGN_LEVEL = 0.05        # a node count's errors all one way: the sign test's two-sided level


def sign_test(errors: Sequence[float]) -> float:
    """Two-sided sign test: how likely errors that are as often positive as negative would fall
    at least this unevenly (zeros left out); 1.0 without errors."""
    x = [e for e in errors if e]
    n = len(x)
    if not n:
        return 1.0
    k = min(sum(e > 0 for e in x), sum(e < 0 for e in x))
    return min(1.0, 2.0 * sum(math.comb(n, i) for i in range(k + 1)) / 2.0 ** n)


def bias_by_nodes(held: List[dict]) -> List[dict]:
    """Per node count of the held-out points: how many, the mean signed step, compute and
    exchange error, and the sign test of the step errors; ``biased`` where that test says the
    errors lean one way beyond what chance gives (:data:`SIGN_LEVEL`), a bias the model does not
    capture at that node count, which an extrapolation beyond it carries."""
    out = []
    for p in sorted({pt["nodes"] for pt in held}):
        pts = [pt for pt in held if pt["nodes"] == p and pt["error"]["step"] is not None]
        if not pts:
            continue

        def mean(key):
            v = [pt["error"][key] for pt in pts if pt["error"][key] is not None]
            return float(np.mean(v)) if v else None
        steps = [pt["error"]["step"] for pt in pts]
        test = sign_test(steps)
        out.append({"nodes": p, "points": len(pts), "step": mean("step"),
                    "compute": mean("compute"), "exchange": mean("exchange"),
                    "under": sum(e < 0 for e in steps), "over": sum(e > 0 for e in steps),
                    "sign_p": test, "biased": test < SIGN_LEVEL})
    return out


def noise(out_axes: list) -> dict:
    """The measurement's own error: how far the repeats of one point lie apart (median and
    largest over the points with at least two repeats)."""
    sp = sorted(pt["repeat_spread"] for ax in out_axes for pt in ax.points
                if pt["repeat_spread"] is not None)
    return {"points": len(sp), "median": float(np.median(sp)) if sp else None,
            "max": sp[-1] if sp else None}
