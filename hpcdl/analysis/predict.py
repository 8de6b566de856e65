"""Held-out prediction: a study calibrated on its runs with at most N nodes predicts its larger
points part by part (compute, exchange, step), checked at every point it was not fitted to,
beside two baselines, with bands from its own out-of-sample error and their measured coverage.

The parts, for p ranks (one per node) at per-rank batch b, from the calibration runs only:

- **compute** of one rank is ``center(p, b) = c·b·(1 + k·[p > 1])``: c per sample from the
  1-node runs (compute proportional to the batch), k from the largest calibrated p: as soon as a
  rank has a peer, the exchange's background work (Horovod's cycle negotiating with the others,
  MPI's progress) takes a share of its node's CPU; on the box that share was measured not to
  grow from 2 to 8 nodes (1 + k·log2 p, the other form tried, over-predicted 8 nodes' compute by
  more than half). A step waits for its slowest rank,
  so the step's compute is ``center × E[max of p draws]`` of the ranks' probes relative to their
  run's center (the spread measured at the calibration points, first probe of each rank left out:
  it traces the graph), and the slowest rank's median probe, the figure records carry, is
  ``center × E[max of p draws]`` of the ranks' medians relative to their run's.
- **exchange** timed alone is the bytes the allreduce algorithm puts on each link: the algorithm
  the MPI library runs at that rank count and size (Open MPI's fixed decision, or the one the run
  pinned with ``coll_tuned_allreduce_algorithm``; hpcdl's own ring and parameter server as they
  are written; :mod:`.allreduce`), at the link's payload rate where the records carry it (the
  cluster box), plus what the calibration runs spent beyond that: where the algorithm sends and
  receives over one connection at once, a share of the other direction's bytes (on a shaped link
  each direction's data queues with the other's acknowledgements), else a fixed time per
  exchange. So a run at another rate is predicted from its rate alone. Without a link rate, one
  time per link byte is fitted. The latency term is left out: one multi-rank node count cannot
  tell it from bandwidth, and the box's links add none. A study that declares a bench fit as
  well (``[model] fit`` beside ``calibrate``) takes the exchange from the fit instead: α and β
  of ``hpcdl bench allreduce`` on the allocation, through the same path a training step calls,
  at any rank count (:func:`hpcdl.costmodel.predict_fit`).
- **step** = step compute + fixed + exchange − min(exchange, window × step compute): fixed is
  the 1-node step beyond its compute, window the share of the compute the exchange hid behind
  at the calibration points (0 for the parameter server, whose exchange follows the backward
  pass).

Baselines, on the same calibration points: *naive*, efficiency stays at its largest calibrated
point's; *one-parameter*, the 1-node step plus one β (α = 0) from the largest calibrated point's
excess over it, with the ring's (or the parameter server's) coefficient. The band is conformal:
the 90% quantile of the relative errors of predicting each calibration run left out of the
calibration (leave one repeat out, pooled over the study's axes; beyond ten repeats, one of ten
folds of them), applied to the prediction;
its coverage is then counted on the held-out points. :mod:`.floor` says how close these repeats
let the held-out points check a prediction at all.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import floor
from .allreduce import link_bytes, on_link, pairwise
from .baselines import conformal_quantile, naive, noise, one_parameter, scores
from .measured import Runs, median as _med, points as _points, spread, summary as _summary
from .. import costmodel

NOMINAL = 0.90                 # the band's nominal coverage


def expected_max(values: Sequence[float], p: int) -> float:
    """E[max of p independent draws] from the empirical distribution of ``values``."""
    x = np.sort(np.asarray(values, dtype=float))
    n = x.size
    if n == 0:
        return 1.0
    i = np.arange(1, n + 1)
    return float(np.sum(x * ((i / n) ** p - ((i - 1) / n) ** p)))


FOLDS = 10       # at most this many fits to leave repeats out: beyond it, folds of repeats


def folds(repeats) -> Dict[int, int]:
    """Each repeat's fold: its own up to :data:`FOLDS` repeats, else the repeats in order dealt
    into :data:`FOLDS` folds (so a study of thousands of repeats costs ten fits, not thousands)."""
    return {rep: i % FOLDS for i, rep in enumerate(sorted(repeats))}


# --- the model ----------------------------------------------------------------------------------

class PartModel:
    """compute, exchange and step of one axis, calibrated on its points with at most
    ``nodes_max`` nodes (see the module's docstring)."""

    def __init__(self, cal: Sequence[dict], backend: str, fit: Optional[dict] = None):
        self.fit = fit
        one = [c for c in cal if c["ranks"] == 1]
        if not one:
            raise ValueError("no 1-node run among the calibration points")
        self.per_sample = float(np.median([c["m"]["center"] / c["batch"] for c in one]))
        self.probe_dev = np.concatenate([np.asarray(c["m"]["probe_dev"], dtype=float)
                                         for c in cal])
        self.rank_dev = np.concatenate([np.asarray(c["m"]["rank_dev"], dtype=float)
                                        for c in cal])
        self._max: Dict[tuple, float] = {}
        multi = [c for c in cal if c["ranks"] > 1]
        self.p_cal = max((c["ranks"] for c in multi), default=1)
        top = [c for c in multi if c["ranks"] == self.p_cal]
        self.k = 0.0
        if top:
            ratio = float(np.median([c["m"]["center"] / (self.per_sample * c["batch"]) for c in top]))
            self.k = ratio - 1.0
        self.fixed = float(np.median([max(0.0, c["m"]["step"] - self.step_compute(1, c["batch"]))
                                      for c in one]))
        # the exchange: each link's bytes at the link's payload rate, plus what the calibration
        # runs spent beyond that: where the algorithm exchanges both ways over one connection, a
        # share ``duplex`` of the other direction's bytes (data one way queues with the other
        # way's acknowledgements on a shaped link); else a fixed time per exchange
        self.duplex = self.per_exchange = 0.0
        self.seconds_per_byte = None
        ex = [c for c in multi if c["m"]["exchange"]]
        rates = {c["rate"] for c in ex}
        self.rated = bool(ex) and all(rates)
        if ex and self.rated:
            pair = [c for c in ex if pairwise(c["algorithm"], c["ranks"])]
            if pair:
                self.duplex = float(np.median([
                    c["m"]["exchange"] / on_link(c["algorithm"], c["wire"], c["ranks"], c["rate"])
                    - 1.0 for c in pair]))
            else:
                self.per_exchange = max(0.0, float(np.median([
                    c["m"]["exchange"] - on_link(c["algorithm"], c["wire"], c["ranks"], c["rate"])
                    for c in ex])))
        elif ex:
            lb = np.array([link_bytes(c["algorithm"], c["wire"], c["ranks"]) for c in ex])
            t = np.array([c["m"]["exchange"] for c in ex])
            self.seconds_per_byte = float(np.dot(lb, t) / np.dot(lb, lb))
        # the window: the share of the step's compute the exchange hid behind
        self.window = 0.0
        if backend != "ps" and ex:
            shares = [(self.step_compute(c["ranks"], c["batch"]) + self.fixed + c["m"]["exchange"]
                       - c["m"]["step"]) / self.step_compute(c["ranks"], c["batch"]) for c in ex]
            share = float(np.median(shares))
            # over the whole compute is out of range (the exchange alone cost more than the step
            # paid for it): not carried, none taken as hidden
            self.window = max(0.0, share) if share <= 1.0 else 0.0

    def center(self, p: int, b: float) -> float:
        return self.per_sample * b * (1.0 + self.k * (p > 1))

    def _expected_max(self, which: str, p: int) -> float:
        """:func:`expected_max` of the probes' (or the ranks') spread, once per p."""
        if (which, p) not in self._max:
            self._max[(which, p)] = expected_max(getattr(self, which), p)
        return self._max[(which, p)]

    def step_compute(self, p: int, b: float) -> float:
        return self.center(p, b) * self._expected_max("probe_dev", p)

    def compute(self, p: int, b: float) -> float:
        """The slowest rank's median compute."""
        return self.center(p, b) * (self._expected_max("rank_dev", p) if p > 1 else 1.0)

    def exchange(self, p: int, algorithm: str, wire: float, rate: float) -> Optional[float]:
        if p <= 1:
            return 0.0
        if self.fit is not None:
            return float(costmodel.predict_fit(self.fit, wire, p))
        if self.rated and rate:
            both = self.duplex if pairwise(algorithm, p) else 0.0
            return on_link(algorithm, wire, p, rate) * (1.0 + both) + self.per_exchange
        if self.seconds_per_byte is not None:
            return link_bytes(algorithm, wire, p) * self.seconds_per_byte
        return None

    def step(self, p: int, b: float, algorithm: str, wire: float, rate: float) -> Optional[float]:
        e = self.exchange(p, algorithm, wire, rate)
        if e is None:
            return None
        c = self.step_compute(p, b)
        return c + self.fixed + e - min(e, self.window * c)

    @property
    def exchange_source(self) -> str:
        if self.fit is not None:
            return self.fit.get("_source", "bench fit")
        if self.rated:
            return "the link's payload rate and what the calibration runs spent beyond it"
        return "the time per link byte the calibration runs measured"

    def as_dict(self) -> dict:
        return {"exchange_source": self.exchange_source, "per_sample_s": self.per_sample,
                "k": self.k, "calibrated_p": self.p_cal,
                "fixed_s": self.fixed, "window": self.window, "rated": self.rated,
                "duplex": self.duplex, "per_exchange_s": self.per_exchange,
                "seconds_per_link_byte": self.seconds_per_byte,
                "probe_draws": len(self.probe_dev), "rank_draws": len(self.rank_dev),
                "step_max_factor_2": self._expected_max("probe_dev", 2)}


# --- the study ----------------------------------------------------------------------------------

def _fit(cal: Dict[int, List[dict]], backend: str, fit: Optional[dict] = None) -> PartModel:
    """The model from the calibration runs: each run's own figures, the medians where pooled."""
    pooled = []
    for p, runs in sorted(cal.items()):
        s = _summary(runs)
        m = {"center": _med(runs, "center"), "step": s["step"], "exchange": s["exchange"],
             "probe_dev": runs.devs("probe_dev"), "rank_dev": runs.devs("rank_dev")}
        pooled.append({**s, "m": m})
    return PartModel(pooled, backend, fit)


def _left_out(cal: Dict[int, Runs], backend: str, fit: Optional[dict]) -> List[float]:
    """Leave one repeat out (one fold of repeats beyond :data:`FOLDS` of them): the relative
    error of predicting each multi-node calibration run from the runs not in its fold."""
    fold = folds({rep for v in cal.values() for rep in v.repeat})
    out = []
    for k in sorted(set(fold.values())):
        kept = {p: v.take(lambda rep: fold[rep] != k) for p, v in cal.items()}
        if any(not len(v) for v in kept.values()):
            continue
        m = _fit(kept, backend, fit)
        for r in (r for p, v in cal.items() if p > 1 for r in v.take(lambda rep: fold[rep] == k)):
            pred = m.step(r["ranks"], r["batch"], r["algorithm"], r["wire"], r["rate"])
            if pred is not None:
                out.append((pred - r["m"]["step"]) / r["m"]["step"])
    return out


def analyse(recs: Sequence[dict], row_key, nodes_max: int, kind: str,
            remedied: Sequence[dict] = (),
            exchange_fit: Optional[Callable[[str, str], Optional[dict]]] = None) -> dict:
    """:func:`of_points` of records, grouped by ``row_key``."""
    return of_points(_points(recs, row_key), nodes_max, kind, _points(remedied, row_key),
                     exchange_fit)


def of_points(pts: Dict[tuple, Runs], nodes_max: int, kind: str,
              remedied: Optional[Dict[tuple, Runs]] = None,
              exchange_fit: Optional[Callable[[str, str], Optional[dict]]] = None) -> dict:
    """Per axis, the model's and the baselines' predictions of every point; the errors at the
    held-out points, the band and its coverage; the remedies' predicted gains, measured where
    the study (fp16) or ``remedied`` (the runs of the same workload with a remedy applied, e.g.
    twice the batch) ran them. ``pts`` and ``remedied``: each (axis, nodes, ranks) point's runs
    (:func:`.measured.points`). ``exchange_fit(backend, compression)``: the bench fit's entry that
    predicts an axis's exchange, where the study declared one. Empty when the study declares no
    calibration subset or its records carry no probes."""
    if not nodes_max:
        return {}
    axes = sorted({k[0] for k in pts})
    out_axes, loro = [], []
    for axis in axes:
        by_p = {k[1]: v for k, v in pts.items() if k[0] == axis}
        cal = {p: v for p, v in by_p.items() if p <= nodes_max}
        if 1 not in cal or len(cal) < 2 or len(by_p) == len(cal):
            continue
        first = next(iter(by_p.values()))[0]
        backend = first["backend"]
        fit = exchange_fit(backend, first["compression"]) if exchange_fit else None
        if fit is not None:
            fit = {"model": costmodel.algorithm_for(backend, first["compression"]),
                   "gamma_s_per_byte": 0.0, **fit}
        model = _fit(cal, backend, fit)
        cal_rows = [_summary(v) for _, v in sorted(cal.items())]
        loro += _left_out(cal, backend, fit)
        points = []
        for p, runs in sorted(by_p.items()):
            s = _summary(runs)
            pred = {"compute": model.compute(p, s["batch"]),
                    "exchange": model.exchange(p, s["algorithm"], s["wire"], s["rate"]),
                    "step": model.step(p, s["batch"], s["algorithm"], s["wire"], s["rate"])}
            points.append({"nodes": p, "ranks": p, "fitted": p <= nodes_max, "runs": len(runs),
                           "repeat_spread": spread(runs), "algorithm": s["algorithm"],
                           "measured": {k: s[k] for k in ("compute", "exchange", "step")},
                           "predicted": pred,
                           "error": {k: _err(pred[k], s[k]) for k in pred},
                           "naive": naive(cal_rows, p, s["batch"], kind),
                           "one_parameter": one_parameter(cal_rows, p, s["batch"], s["wire"],
                                                          backend)})
        out_axes.append({"axis": axis, "backend": backend, "model": model.as_dict(),
                         "points": points, "_model": model, "_by_p": by_p})
    if not out_axes:
        return {}
    q = conformal_quantile([abs(e) for e in loro], NOMINAL)
    held = []
    for ax in out_axes:
        for pt in ax["points"]:
            step = pt["predicted"]["step"]
            pt["band"] = ([step * (1 - q), step * (1 + q)]
                          if step is not None and q is not None else None)
            pt["naive_error"] = _err(pt["naive"], pt["measured"]["step"])
            pt["one_parameter_error"] = _err(pt["one_parameter"], pt["measured"]["step"])
            if not pt["fitted"]:
                pt["inside"] = (None if pt["band"] is None else
                                pt["band"][0] <= pt["measured"]["step"] <= pt["band"][1])
                held.append(pt)
    cross = cross_rate(out_axes, nodes_max)
    others = {}
    for key, runs in (remedied or {}).items():
        others.setdefault(key[0], {})[key[1]] = runs
    fixes = remedies(out_axes, kind, [{"axis": a, "_by_p": v} for a, v in others.items()])
    lowest = floor.of_axes(out_axes, nodes_max, folds, _fit)
    for ax in out_axes:
        del ax["_model"], ax["_by_p"]
    return {"nodes_max": nodes_max, "nominal": NOMINAL, "band_halfwidth": q,
            "band_residuals": len(loro), "axes": out_axes,
            "heldout": scores(held), "noise": noise(out_axes), "floor": lowest,
            "cross_rate": cross, "remedies": fixes}


REMEDIES = (("fp16 gradients", 1, 0.5), ("twice the batch per rank", 2, 1.0))
TUNED = " settings:tuned"       # an axis's name for the tuned points of a study's tuning axis
DEFAULT = " settings:default"   # ... and for its points at the defaults


def _parts(axis: str) -> Tuple[str, str, str]:
    """(configuration, link rate, the rest) of an axis name: "horovod/none@200mbit
    settings:default" is ("horovod/none", "200mbit", " settings:default")."""
    base, _, after = axis.partition("@")
    rate, space, rest = after.partition(" ")
    return base, rate, space + rest


def remedies(out_axes: List[dict], kind: str, others: Sequence[dict] = ()) -> List[dict]:
    """For the largest point of each axis (weak scaling): the efficiency the model predicts
    with each remedy beside the one it predicts as run, so the predicted gain, and the measured
    gain where the remedy was run. For an uncompressed axis: fp16 gradients (half the bytes;
    measured by the same study's fp16 axis at the same rate) and twice the batch per rank
    (measured by ``others``: a study of the same workload with another batch, its axes as
    :func:`analyse` returns them). For a study's default settings (a tuning axis): the tuned
    points' allreduce algorithm, the one part of the tuned settings the model has a term for
    (measured by the tuned points)."""
    if kind != "weak":
        return []
    out = []
    names = {a["axis"]: a for a in out_axes}
    for ax in out_axes:
        base, rate, rest = _parts(ax["axis"])
        model, by_p = ax["_model"], ax["_by_p"]
        p = max(by_p)
        if ax["backend"] == "ps" or p <= 1 or 1 not in by_p:
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
            if twin is not None and p in twin["_by_p"] and 1 in twin["_by_p"]:
                r1, rp = _summary(twin["_by_p"][1]), _summary(twin["_by_p"][p])
                if rp["batch"] == same_batch:
                    meas = r1["step"] / rp["step"]
            out.append({"axis": ax["axis"], "nodes": p, "remedy": name,
                        "model_efficiency": e, "model_efficiency_as_run": e0,
                        "model_gain": None if e is None or not e0 else e / e0,
                        "measured_efficiency": meas, "measured_efficiency_as_run": measured0,
                        "measured_gain": None if meas is None else meas / measured0})
        if base.endswith("/none") and not rest.endswith(TUNED):
            for name, bmul, wmul in REMEDIES:
                twin = (names.get(base.replace("/none", "/fp16") + (f"@{rate}" if rate else "")
                                  + rest) if wmul != 1 else
                        next((a for a in others if a["axis"] == ax["axis"]), None))
                add(name, efficiency(sp["batch"] * bmul, sp["wire"] * wmul), twin,
                    sp["batch"] * bmul)
        if rest.endswith(DEFAULT):
            tuned = names.get(ax["axis"][:-len(DEFAULT)] + TUNED)
            if tuned is not None and p in tuned["_by_p"]:
                alg = _summary(tuned["_by_p"][p])["algorithm"]
                add(f"the tuned settings' allreduce ({alg})",
                    efficiency(sp["batch"], sp["wire"], alg), tuned)
    for r in out:
        r["gain_error"] = (None if r["measured_gain"] is None or r["model_gain"] is None else
                           (r["model_gain"] - r["measured_gain"]) / r["measured_gain"])
    return out


def cross_rate(out_axes: List[dict], nodes_max: int) -> List[dict]:
    """Each axis's model, calibrated at its link rate, predicting the held-out points of the
    same configuration (and settings) at another rate, given only that rate."""
    out = []
    for a in out_axes:
        for b in out_axes:
            base_a, rate_a, rest_a = _parts(a["axis"])
            base_b, rate_b, rest_b = _parts(b["axis"])
            if (a is b or (base_a, rest_a) != (base_b, rest_b) or not rate_a or not rate_b
                    or rate_a == rate_b):
                continue
            if a["_model"].fit is not None:
                continue        # a bench fit is of one allocation's links: it has no rate to move
            for p, runs in sorted(b["_by_p"].items()):
                if p <= nodes_max:
                    continue
                s = _summary(runs)
                pred = a["_model"].step(p, s["batch"], s["algorithm"], s["wire"], s["rate"])
                ex = a["_model"].exchange(p, s["algorithm"], s["wire"], s["rate"])
                out.append({"calibrated": a["axis"], "predicted": b["axis"], "nodes": p,
                            "measured_step": s["step"], "model_step": pred,
                            "error": _err(pred, s["step"]),
                            "measured_exchange": s["exchange"], "model_exchange": ex,
                            "exchange_error": _err(ex, s["exchange"])})
    return out


def _err(pred, meas) -> Optional[float]:
    return None if pred is None or not meas else (pred - meas) / meas
