"""How close these repeats let a prediction be checked: the error a model without any bias
would still show at the held-out points, from the two noises it cannot escape.

- **The calibration's noise.** The model (and the one-β baseline) is fitted again on each fold
  of repeats alone (each repeat, up to :data:`.parts.FOLDS` of them) and predicts every
  held-out point; how far those predictions lie apart, over √(folds), is how far the prediction
  from all repeats pooled moves with the repeats it happened to get.
- **The held-out measurement's noise.** How far a point's repeats lie apart, over √(repeats), is
  how far the median they are checked against lies from the point's true step.

With both normal, the expected absolute error of a model that is right on average is
√(2/π)·√(σ_cal² + σ_meas²) (each σ relative to the measured step): :func:`of_axes` gives its
mean over the held-out points as ``floor``. A target error below it cannot be shown by these
repeats; more repeats lower it as 1/√n. Beside it, each fold's own mean absolute error, the
model's and the one-β baseline's, which says whether the model beats the baseline calibration by
calibration rather than on the pooled medians alone. numpy only."""
from __future__ import annotations

import math
from typing import Dict, List, Optional

import numpy as np

from .baselines import one_parameter
from .axis import Calibrated
from .measured import Runs, summary
from .parts import calibrate, folds

SQRT_2_PI = math.sqrt(2.0 / math.pi)     # E|X| / σ of a normal X of mean 0


def _sd(values: List[float]) -> Optional[float]:
    return float(np.std(values, ddof=1)) if len(values) > 1 else None


def of_axes(axes: List[Calibrated], nodes_max: int) -> dict:
    """``axes``: :func:`.predict.of_points`'s calibrated axes (each node count's runs, the
    model, a benchmark's exchange by node count, which the folds share), each calibrated again
    on every fold of its repeats (:func:`.parts.folds`). Empty when no axis has two folds of
    repeats at its calibration points."""
    rows, mae_model, mae_one = [], {}, {}
    for ax in axes:
        by_p: Dict[int, Runs] = ax.by_p
        cal = {p: v for p, v in by_p.items() if p <= nodes_max}
        fold = folds({rep for v in cal.values() for rep in v.repeat})
        held = {p: summary(v) for p, v in by_p.items() if p > nodes_max}
        preds = {p: ([], []) for p in held}
        for k in sorted(set(fold.values())):
            kept = {p: v.take(lambda rep: fold[rep] == k) for p, v in cal.items()}
            if any(not len(v) for v in kept.values()):
                continue
            model = calibrate(kept, ax.backend, ax.model.fit, ax.model.loop,
                              ax.model.spreads, ax.model.crowd, ax.model.growth)
            cal_rows = [summary(v) for _, v in sorted(kept.items())]
            for p, s in held.items():
                m = model.step(p, s["batch"], s["algorithm"], s["wire"], s["rate"],
                               ax.bench.get(p))
                o = one_parameter(cal_rows, p, s["batch"], s["wire"], ax.backend)
                if m is None or not s["step"]:
                    continue
                preds[p][0].append(m)
                preds[p][1].append(o)
                mae_model.setdefault(k, []).append(abs(m - s["step"]) / s["step"])
                mae_one.setdefault(k, []).append(abs(o - s["step"]) / s["step"])
        for p, (m, o) in preds.items():
            steps = [x for x in by_p[p].step if not math.isnan(x)]
            sd_cal, sd_one, sd_meas = _sd(m), _sd(o), _sd(steps)
            if sd_cal is None or sd_meas is None:
                continue
            meas = held[p]["step"]
            cal_term = (sd_cal / meas) ** 2 / len(m)
            meas_term = (sd_meas / meas) ** 2 / len(steps)
            rows.append({"axis": ax.axis, "nodes": p, "folds": len(m),
                         "model_moves": sd_cal / meas, "one_parameter_moves": sd_one / meas,
                         "measured_moves": sd_meas / meas,
                         "floor": SQRT_2_PI * math.sqrt(cal_term + meas_term)})
    if not rows:
        return {}
    keep = sorted(mae_model)
    return {"points": len(rows), "folds": max(r["folds"] for r in rows),
            "floor": float(np.mean([r["floor"] for r in rows])),
            "model_moves": float(np.mean([r["model_moves"] for r in rows])),
            "one_parameter_moves": float(np.mean([r["one_parameter_moves"] for r in rows])),
            "measured_moves": float(np.mean([r["measured_moves"] for r in rows])),
            "mae_model_by_fold": [float(np.mean(mae_model[k])) for k in keep],
            "mae_one_parameter_by_fold": [float(np.mean(mae_one[k])) for k in keep],
            "rows": rows}
