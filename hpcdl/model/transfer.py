"""The part-by-part model (:mod:`.predict`) carried to what it was not calibrated on: the same
configuration at another link rate, given only that rate, and the remedies the report advises
(fp16 gradients, twice the batch, the tuned settings' allreduce), with the gain measured where
a study ran them."""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

from .axis import AxisRuns, Calibrated
from .baselines import relative_error as _err
from .measured import summary as _summary

REMEDIES = (("fp16 gradients", 1, 0.5), ("twice the batch per rank", 2, 1.0))
TUNED = " settings:tuned"       # an axis's name for the tuned points of a study's tuning axis
DEFAULT = " settings:default"   # ... and for its points at the defaults


def parts(axis: str) -> Tuple[str, str, str]:
    """(configuration, link rate, the rest) of an axis name: "horovod/none@200mbit
    settings:default" is ("horovod/none", "200mbit", " settings:default")."""
    base, _, after = axis.partition("@")
    rate, space, rest = after.partition(" ")
    return base, rate, space + rest


def remedies(out_axes: List[Calibrated], kind: str, others: Sequence[AxisRuns] = ()) -> List[dict]:
    """For the largest point of each axis (weak scaling): the efficiency the model predicts
    with each remedy beside the one it predicts as run, so the predicted gain, and the measured
    gain where the remedy was run. For an uncompressed axis: fp16 gradients (half the bytes;
    measured by the same study's fp16 axis at the same rate) and twice the batch per rank
    (measured by ``others``: a study of the same workload with another batch, its axes as
    :func:`.predict.of_records` returns them). For a study's default settings (a tuning axis): the tuned
    points' allreduce algorithm, the one part of the tuned settings the model has a term for
    (measured by the tuned points). For an axis the MPI library exchanges: the algorithm the
    model predicts fastest there, where the library ran another (measured where a tuned axis
    ran it)."""
    if kind != "weak":
        return []
    out = []
    names = {a.axis: a for a in out_axes}
    for ax in out_axes:
        base, rate, rest = parts(ax.axis)
        model, by_p = ax.model, ax.by_p
        p = max(by_p)
        if ax.backend == "ps" or p <= 1 or 1 not in by_p:
            continue
        s1, sp = _summary(by_p[1]), _summary(by_p[p])

        def efficiency(batch, wire, algorithm=sp["algorithm"]):
            t1 = model.step(1, batch, algorithm, wire, sp["rate"])
            tp = model.step(p, batch, algorithm, wire, sp["rate"])
            return None if t1 is None or tp is None else t1 / tp
        e0 = efficiency(sp["batch"], sp["wire"])
        measured0 = s1["step"] / sp["step"]

        def add(name, e, twin, same_batch=sp["batch"]):
            meas = None
            if twin is not None and p in twin.by_p and 1 in twin.by_p:
                r1, rp = _summary(twin.by_p[1]), _summary(twin.by_p[p])
                if rp["batch"] == same_batch:
                    meas = r1["step"] / rp["step"]
            out.append({"axis": ax.axis, "nodes": p, "remedy": name,
                        "model_efficiency": e, "model_efficiency_as_run": e0,
                        "model_gain": None if e is None or not e0 else e / e0,
                        "measured_efficiency": meas, "measured_efficiency_as_run": measured0,
                        "measured_gain": None if meas is None else meas / measured0})
        if base.endswith("/none") and not rest.endswith(TUNED):
            for name, bmul, wmul in REMEDIES:
                twin = (names.get(base.replace("/none", "/fp16") + (f"@{rate}" if rate else "")
                                  + rest) if wmul != 1 else
                        next((a for a in others if a.axis == ax.axis), None))
                add(name, efficiency(sp["batch"] * bmul, sp["wire"] * wmul), twin,
                    sp["batch"] * bmul)
        tuned_alg = None
        if rest.endswith(DEFAULT):
            tuned = names.get(ax.axis[:-len(DEFAULT)] + TUNED)
            if tuned is not None and p in tuned.by_p:
                tuned_alg = _summary(tuned.by_p[p])["algorithm"]
                add(f"the tuned settings' allreduce ({tuned_alg})",
                    efficiency(sp["batch"], sp["wire"], tuned_alg), tuned)
        best = _best_algorithm(ax, sp, efficiency, e0)
        if best is not None and best != tuned_alg and not rest.endswith(TUNED):
            add(f"allreduce {best} (Open MPI's coll_tuned_allreduce_algorithm "
                f"{PINS[best]}; hpcdl tune finds it)", efficiency(sp["batch"], sp["wire"], best),
                None)
    for r in out:
        r["gain_error"] = (None if r["measured_gain"] is None or r["model_gain"] is None else
                           (r["model_gain"] - r["measured_gain"]) / r["measured_gain"])
    return out


# Open MPI's allreduce algorithms the model can put in place of the library's choice, by the
# number that pins one (coll_tuned_allreduce_algorithm)
PINS = {"ring": 4, "segmented ring": 5, "rabenseifner": 6, "recursive doubling": 3}
GAIN = 0.01      # an algorithm is advised where the model gives it at least 1% more efficiency


def _best_algorithm(ax: Calibrated, sp: dict, efficiency, e0) -> Optional[str]:
    """The allreduce the model predicts fastest at the axis's largest point, where the MPI
    library's runs (Horovod over MPI, the mpi backend) ran another and it gains more than
    :data:`GAIN`; else None."""
    if ax.backend not in ("horovod", "mpi") or sp["algorithm"] not in PINS or not e0:
        return None
    effs = {a: efficiency(sp["batch"], sp["wire"], a) or 0.0 for a in PINS}
    best = max(effs, key=effs.get)
    return best if best != sp["algorithm"] and effs[best] > e0 * (1 + GAIN) else None


def cross_rate(out_axes: List[Calibrated], nodes_max: int) -> List[dict]:
    """Each axis's model, calibrated at its link rate, predicting the held-out points of the
    same configuration (and settings) at another rate, given only that rate."""
    out = []
    for a in out_axes:
        for b in out_axes:
            base_a, rate_a, rest_a = parts(a.axis)
            base_b, rate_b, rest_b = parts(b.axis)
            if (a is b or (base_a, rest_a) != (base_b, rest_b) or not rate_a or not rate_b
                    or rate_a == rate_b):
                continue
            if a.model.fit is not None:
                continue        # a bench fit is of one allocation's links: it has no rate to move
            for p, runs in sorted(b.by_p.items()):
                if p <= nodes_max:
                    continue
                s = _summary(runs)
                pred = a.model.step(p, s["batch"], s["algorithm"], s["wire"], s["rate"])
                ex = a.model.exchange(p, s["algorithm"], s["wire"], s["rate"])
                out.append({"calibrated": a.axis, "predicted": b.axis, "nodes": p,
                            "measured_step": s["step"], "model_step": pred,
                            "error": _err(pred, s["step"]),
                            "measured_exchange": s["exchange"], "model_exchange": ex,
                            "exchange_error": _err(ex, s["exchange"])})
    return out
