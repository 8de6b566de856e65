"""The yardsticks a prediction is held to: two baselines fitted to the same calibration points
(the naive one, efficiency stays; the one-parameter one, one β from the largest calibrated
point's excess over one node), the split-conformal quantile that makes a band from out-of-sample
errors, the scores of a set of held-out points, and the measurement's own error (how far the
repeats of one point lie apart). numpy only."""
from __future__ import annotations

import math
from typing import List, Optional, Sequence

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
            "covered": sum(inside), "banded": len(inside)}


def noise(out_axes: List[dict]) -> dict:
    """The measurement's own error: how far the repeats of one point lie apart (median and
    largest over the points with at least two repeats)."""
    sp = sorted(pt["repeat_spread"] for ax in out_axes for pt in ax["points"]
                if pt["repeat_spread"] is not None)
    return {"points": len(sp), "median": float(np.median(sp)) if sp else None,
            "max": sp[-1] if sp else None}
