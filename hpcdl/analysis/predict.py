"""Held-out prediction: a study calibrated on its runs with at most N nodes predicts its larger
points part by part (compute, exchange, step), checked at every point it was not fitted to,
beside two baselines, with bands from its own out-of-sample error and their measured coverage.

The parts, for p ranks (one per node) at per-rank batch b, from the calibration runs only
(why each has its form, with the measurements behind it: docs/decisions.md):

- **compute** of one rank is ``center(p, b) = c·b·(1 + k·[p > 1])``: c per sample from the
  1-node runs, k the share of a node's CPU the exchange's background work takes as soon as a
  rank has a peer, from the largest calibrated p. Beyond the calibration, a loop file
  (:mod:`.loop_share`) scales it by the share at p, and a spread file's crowd (how much longer
  a node computes while p compute at once) by crowd(p) / crowd(p_cal), neither factor under 1
  (more peers take no less of a node). The step pays the slowest rank: ``center × E[max of p
  draws]`` of the ranks' medians about their run's center, drawn from the calibration's spread
  or, beyond it, from a spread file (:mod:`.host_spread`).
- **exchange** timed alone is the bytes the allreduce algorithm the MPI library runs puts on
  each link (:mod:`.allreduce`) at the link's payload rate where the records carry it, plus what
  the calibration runs spent beyond that (a share of the other direction's bytes where one
  connection carries both, else a fixed time per exchange); without a link rate, one time per
  link byte. A bench fit (``[model] fit``) or an exchange measured by ``hpcdl tune`` on the
  held-out point's allocation (:mod:`.exchange_bench`) takes its place where the study names it.
- **step** = compute + fixed + exchange − hidden, hidden = min(exchange, window × compute) up to
  the calibrated node count: fixed is the 1-node step beyond its compute, window the share of
  the compute the exchange hid behind at the calibration points (0 for the parameter server,
  whose step pays the ranks' center). Beyond it the share that hides is not known: between none
  and as at the calibration, the point takes the middle (:data:`BEYOND`), the band both ends.

Baselines, on the same calibration points: *naive*, efficiency stays at its largest calibrated
point's; *one-parameter*, the 1-node step plus one β from the largest calibrated point's excess.
The band is conformal: the 90% quantile of the relative errors of predicting each calibration
run left out, applied to the prediction; beyond the calibration its lower edge takes the
exchange as hidden as at the calibration, its upper edge none hidden. Its coverage is counted on
the held-out points; :mod:`.floor` says how close these repeats let them check.
"""
from __future__ import annotations

from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import floor, host_spread, loop_share, transfer
from .exchange_bench import Bench
from .host_spread import HostSpread
from .loop_share import LoopShare
from .allreduce import duplex_of, on_link
from ..costmodel import link_bytes, pairwise
from . import forecast as _forecast
from .baselines import band_quantile, naive, noise, one_parameter, scores
from .baselines import relative_error as _err
from .measured import Runs, median as _med, points as _points, spread, summary as _summary
from .. import costmodel

NOMINAL = 0.90                 # the band's nominal coverage
BEYOND = 0.5     # of the calibration's hidden exchange, beyond it: the middle (docs/decisions.md)
FORECAST = _forecast.FORECAST


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

    def __init__(self, cal: Sequence[dict], backend: str, fit: Optional[dict] = None,
                 loop: Optional[Dict[int, float]] = None,
                 spreads: Optional[Dict[int, np.ndarray]] = None,
                 crowd: Optional[Dict[int, float]] = None):
        self.fit = fit
        self.crowd = crowd
        self.loop = loop
        self.spreads = spreads
        self.backend = backend
        one = [c for c in cal if c["ranks"] == 1]
        if not one:
            raise ValueError("no 1-node run among the calibration points")
        self.per_sample = float(np.median([c["m"]["center"] / c["batch"] for c in one]))
        self.rank_dev = np.concatenate([np.asarray(c["m"]["rank_dev"], dtype=float)
                                        for c in cal])
        self._max: Dict[int, float] = {}
        multi = [c for c in cal if c["ranks"] > 1]
        self.p_cal = max((c["ranks"] for c in multi), default=1)
        top = [c for c in multi if c["ranks"] == self.p_cal]
        self.k = 0.0
        if top:
            ratio = float(np.median([c["m"]["center"] / (self.per_sample * c["batch"]) for c in top]))
            self.k = ratio - 1.0
        self.fixed = float(np.median([max(0.0, c["m"]["step"] - self.compute(1, c["batch"]))
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
                self.duplex = float(np.median([duplex_of(
                    c["m"]["exchange"], c["algorithm"], c["wire"], c["ranks"], c["rate"])
                    for c in pair]))
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
            shares = [(self.compute(c["ranks"], c["batch"]) + self.fixed + c["m"]["exchange"]
                       - c["m"]["step"]) / self.compute(c["ranks"], c["batch"]) for c in ex]
            # at most all of it: a share over 1 (the exchange timed alone longer than the step
            # paid for it beyond the whole compute) says all of the compute hid exchange
            self.window = min(1.0, max(0.0, float(np.median(shares))))

    def center(self, p: int, b: float) -> float:
        return (self.per_sample * b * (1.0 + self.k * (p > 1))
                * loop_share.factor(self.loop, p, self.p_cal)
                * host_spread.crowd_factor(self.crowd, p, self.p_cal))

    def _draws(self, p: int) -> np.ndarray:
        """The spread p ranks are drawn from: the spread file's at the largest node count <= p
        beyond the calibration, where one measured it; else the calibration runs'."""
        measured = host_spread.at(self.spreads, p) if p > self.p_cal else None
        return self.rank_dev if measured is None else measured

    def _expected_max(self, p: int) -> float:
        """:func:`expected_max` of the ranks' spread, once per p."""
        if p not in self._max:
            self._max[p] = expected_max(self._draws(p), p)
        return self._max[p]

    def compute(self, p: int, b: float) -> float:
        """The slowest rank's median compute."""
        return self.center(p, b) * (self._expected_max(p) if p > 1 else 1.0)

    def exchange(self, p: int, algorithm: str, wire: float, rate: float) -> Optional[float]:
        if p <= 1:
            return 0.0
        if self.fit is not None:
            return float(costmodel.predict_fit(self.fit, wire, p))
        if self.rated and rate:
            return on_link(algorithm, wire, p, rate, self.duplex) + self.per_exchange
        if self.seconds_per_byte is not None:
            return link_bytes(algorithm, wire, p) * self.seconds_per_byte
        return None

    def step(self, p: int, b: float, algorithm: str, wire: float, rate: float,
             exchange: Optional[float] = None, share: Optional[float] = None
             ) -> Optional[float]:
        """The step, its exchange from the model or ``exchange`` where given (a bench's);
        ``share``: beyond the calibration, of the calibration's hidden exchange (1: as much
        hid, the band's lower edge; 0: none, its upper edge; default :data:`BEYOND`)."""
        e = self.exchange(p, algorithm, wire, rate) if exchange is None else exchange
        if e is None:
            return None
        c = self.center(p, b) if self.backend == "ps" else self.compute(p, b)
        return c + self.fixed + e - self.hidden(p, e, c, share)

    def hidden(self, p: int, e: float, c: float, share: Optional[float] = None) -> float:
        """The exchange hidden behind compute: as at the calibration up to its node count,
        ``share`` of that beyond it."""
        full = min(e, self.window * c)
        return full if p <= self.p_cal else full * (BEYOND if share is None else share)

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
                "rank_draws": len(self.rank_dev),
                "rank_max_factor_2": self._expected_max(2),
                "loop_shares": self.loop,
                **({"crowd": {str(k): {"measured": v, "factor": host_spread.crowd_factor(
                    self.crowd, k, self.p_cal)} for k, v in sorted(self.crowd.items())
                    if k > self.p_cal}} if self.crowd else {}),
                "host_spread": None if not self.spreads else {
                    str(k): {"draws": len(v), "max_factor": self._expected_max(k)}
                    for k, v in sorted(self.spreads.items()) if k > self.p_cal}}


# --- the study ----------------------------------------------------------------------------------

def _fit(cal: Dict[int, List[dict]], backend: str, fit: Optional[dict] = None,
         loop: Optional[Dict[int, float]] = None,
         spreads: Optional[Dict[int, np.ndarray]] = None,
         crowd: Optional[Dict[int, float]] = None) -> PartModel:
    """The model from the calibration runs: each run's own figures, the medians where pooled."""
    pooled = []
    for p, runs in sorted(cal.items()):
        s = _summary(runs)
        m = {"center": _med(runs, "center"), "step": s["step"], "exchange": s["exchange"],
             "rank_dev": runs.devs()}
        pooled.append({**s, "m": m})
    return PartModel(pooled, backend, fit, loop, spreads, crowd)


def _left_out(cal: Dict[int, Runs], backend: str, fit: Optional[dict],
              loop: Optional[Dict[int, float]] = None,
              spreads: Optional[Dict[int, np.ndarray]] = None,
              crowd: Optional[Dict[int, float]] = None) -> List[float]:
    """Leave one repeat out (one fold of repeats beyond :data:`FOLDS` of them): the relative
    error of predicting each multi-node calibration run from the runs not in its fold."""
    fold = folds({rep for v in cal.values() for rep in v.repeat})
    out = []
    for k in sorted(set(fold.values())):
        kept = {p: v.take(lambda rep: fold[rep] != k) for p, v in cal.items()}
        if any(not len(v) for v in kept.values()):
            continue
        m = _fit(kept, backend, fit, loop, spreads, crowd)
        for r in (r for p, v in cal.items() if p > 1 for r in v.take(lambda rep: fold[rep] == k)):
            pred = m.step(r["ranks"], r["batch"], r["algorithm"], r["wire"], r["rate"])
            if pred is not None:
                out.append((pred - r["m"]["step"]) / r["m"]["step"])
    return out


def of_records(recs: Sequence[dict], row_key, nodes_max: int, kind: str,
            remedied: Sequence[dict] = (),
            exchange_fit: Optional[Callable[[str, str], Optional[dict]]] = None,
            bench: Optional[Bench] = None, loop: Optional[LoopShare] = None,
            spread: Optional[HostSpread] = None,
            forecast: Sequence[int] = _forecast.FORECAST) -> dict:
    """:func:`of_points` of records, grouped by ``row_key``."""
    return of_points(_points(recs, row_key), nodes_max, kind, _points(remedied, row_key),
                     exchange_fit, bench, loop, spread, forecast)


def _benched(axis: str, backend: str, by_p: Dict[int, Runs], nodes_max: int,
             bench: Optional[Bench]) -> Dict[int, tuple]:
    """(seconds, source) of each held-out node count whose exchange ``bench`` measured: Horovod's
    (the path ``hpcdl tune`` times), at the axis's link rate, in the setting its runs ran."""
    if bench is None or backend != "horovod":
        return {}
    rate = transfer.parts(axis)[1]
    out = {}
    for p, runs in by_p.items():
        if p <= nodes_max:
            continue
        s = _summary(runs)
        got = bench.exchange(p, rate, s["compression"], s["setting"], s["wire"])
        if got is not None:
            out[p] = got
    return out


def _anchors(axis: str, backend: str, by_p: Dict[int, Runs], nodes_max: int, held_out: bool,
             bench: Optional[Bench]) -> Dict[int, Dict[str, Tuple[float, str]]]:
    """Per node count, the exchange each allreduce algorithm took on this allocation, (seconds,
    where from), that the forecast beyond it starts from (:func:`.forecast.anchored`): what
    ``bench``'s file for that count timed (beyond the calibration, or without held-out points
    at the largest count), and, where no point is held out, the largest count's own runs for
    the algorithm they ran (all calibration then)."""
    out: Dict[int, Dict[str, Tuple[float, str]]] = {}
    top = max(by_p)
    if bench is not None and backend == "horovod":
        rate = transfer.parts(axis)[1]
        for p, runs in by_p.items():
            if p > 1 and (p > nodes_max or p == top):
                s = _summary(runs)
                got = bench.algorithms(p, rate, s["compression"], s["setting"], s["wire"])
                own = bench.exchange(p, rate, s["compression"], s["setting"], s["wire"])
                if own is not None:       # the setting the runs ran: as the held-out point takes
                    got[s["algorithm"]] = own
                if got:
                    out[p] = got
    s = _summary(by_p[top])
    if not held_out and top > 1 and s["exchange"]:
        out.setdefault(top, {})[s["algorithm"]] = (
            s["exchange"], f"the {top}-node runs' own exchange ({len(by_p[top])} run(s))")
    return out


def _point(model: PartModel, p: int, runs: Runs, fitted: bool, benched: tuple,
           cal_rows: List[dict], kind: str, backend: str) -> dict:
    """One point's prediction (its exchange ``benched`` (seconds, source) where a benchmark
    measured it, the model's beside it) and the baselines', against its runs' medians."""
    s = _summary(runs)
    own = model.exchange(p, s["algorithm"], s["wire"], s["rate"])
    ex, source = benched
    pred = {"compute": model.compute(p, s["batch"]),
            "exchange": own if ex is None else ex,
            "step": model.step(p, s["batch"], s["algorithm"], s["wire"], s["rate"], ex)}
    return {"nodes": p, "ranks": p, "fitted": fitted, "runs": len(runs),
            "exchange_from": source, "model_exchange": own,
            "model_exchange_error": _err(own, s["exchange"]),
            "repeat_spread": spread(runs), "algorithm": s["algorithm"],
            "measured": {k: s[k] for k in ("compute", "exchange", "step")},
            "predicted": pred, "step_if_hidden": model.step(
                p, s["batch"], s["algorithm"], s["wire"], s["rate"], ex, share=1.0),
            "step_if_none": model.step(
                p, s["batch"], s["algorithm"], s["wire"], s["rate"], ex, share=0.0),
            "error": {k: _err(pred[k], s[k]) for k in pred},
            "naive": naive(cal_rows, p, s["batch"], kind),
            "one_parameter": one_parameter(cal_rows, p, s["batch"], s["wire"], backend)}


def of_points(pts: Dict[tuple, Runs], nodes_max: int, kind: str,
              remedied: Optional[Dict[tuple, Runs]] = None,
              exchange_fit: Optional[Callable[[str, str], Optional[dict]]] = None,
              bench: Optional[Bench] = None, loop: Optional[LoopShare] = None,
              spread: Optional[HostSpread] = None,
              forecast: Sequence[int] = _forecast.FORECAST) -> dict:
    """Per axis, the model's and the baselines' predictions of every point; the errors at the
    held-out points, the band and its coverage; the remedies' predicted gains, measured where
    the study (fp16) or ``remedied`` (the runs of the same workload with a remedy applied, e.g.
    twice the batch) ran them. ``pts`` and ``remedied``: each (axis, nodes, ranks) point's runs
    (:func:`.measured.points`). ``exchange_fit(backend, compression)``: the bench fit's entry that
    predicts an axis's exchange, where the study declared one. ``bench``: the held-out points'
    exchange measured by a short benchmark at their node count (:mod:`.exchange_bench`), where
    one did; the model's own exchange stays beside it. ``loop``: what Horovod's loop takes from
    compute by node count (:mod:`.loop_share`), which a Horovod axis's compute then follows
    beyond its calibration. ``spread``: how far the allocation's nodes lie apart computing at
    once, by node count (:mod:`.host_spread`), which every axis's slowest rank beyond its
    calibration is drawn from. ``forecast``: the node counts to forecast (:mod:`.forecast`).
    ``nodes_max`` 0: no calibration subset declared, so every point calibrates the model, none
    is held out, and it only forecasts. Points are keyed by rank count: one rank per node, or
    every rank on one node (a workstation). Empty when the records carry no probes."""
    held_out = bool(nodes_max)
    if not held_out:
        nodes_max = max((k[2] for k in pts), default=0)
    one_node = all(k[1] == 1 for k in pts)
    axes = sorted({k[0] for k in pts})
    out_axes, loro = [], []
    spreads = spread.spreads() if spread is not None else None
    crowd = spread.crowds() if spreads is not None else None
    for axis in axes:
        by_p = {k[2]: v for k, v in pts.items() if k[0] == axis}
        cal = {p: v for p, v in by_p.items() if p <= nodes_max}
        if 1 not in cal or len(cal) < 2 or (held_out and len(by_p) == len(cal)):
            continue
        first = next(iter(by_p.values()))[0]
        backend = first["backend"]
        fit = exchange_fit(backend, first["compression"]) if exchange_fit else None
        if fit is not None:
            fit = {"model": costmodel.algorithm_for(backend, first["compression"]),
                   "gamma_s_per_byte": 0.0, **fit}
        shares = (loop.shares(first["setting"])
                  if loop is not None and backend == "horovod" else None)
        model = _fit(cal, backend, fit, shares, spreads, crowd)
        cal_rows = [_summary(v) for _, v in sorted(cal.items())]
        loro += _left_out(cal, backend, fit, shares, spreads, crowd)
        benched = _benched(axis, backend, by_p, nodes_max, bench)
        points = [_point(model, p, runs, p <= nodes_max, benched.get(p, (None, None)),
                         cal_rows, kind, backend) for p, runs in sorted(by_p.items())]
        out_axes.append({"axis": axis, "backend": backend, "model": model.as_dict(),
                         "points": points, "_model": model, "_by_p": by_p,
                         "_bench": {p: v[0] for p, v in benched.items()},
                         "_anchors": _anchors(axis, backend, by_p, nodes_max, held_out, bench)})
    if not out_axes:
        return {}
    q, basis = band_quantile([abs(e) for e in loro], NOMINAL)
    held, reach = _banded(out_axes, q)
    cross = transfer.cross_rate(out_axes, nodes_max)
    others = {}
    for key, runs in (remedied or {}).items():
        others.setdefault(key[0], {})[key[2]] = runs
    fixes = transfer.remedies(out_axes, kind,
                              [{"axis": a, "_by_p": v} for a, v in others.items()])
    lowest = floor.of_axes(out_axes, nodes_max, folds, _fit)
    ahead = ([_forecast.of_axis(ax, kind, sorted(forecast), q, not one_node)
              for ax in out_axes] if forecast else [])
    for ax, f in zip(out_axes, ahead):
        f["inputs"] = _input_effects(ax, f)
    for ax in out_axes:
        del ax["_model"], ax["_by_p"], ax["_bench"], ax["_anchors"]
    return {"nodes_max": nodes_max, "held_out": held_out, "one_node": one_node,
            "nominal": NOMINAL, "band_halfwidth": q,
            "band_basis": basis, "forecast": ahead,
            "coverage_by_distance": _forecast.coverage_by_distance(reach),
            **_benches(bench, loop, spread, out_axes, held),
            "band_residuals": len(loro), "axes": out_axes,
            "heldout": scores(held), "noise": noise(out_axes), "floor": lowest,
            "cross_rate": cross, "remedies": fixes}


def input_costs(done: dict, pts: Dict[tuple, Runs], nodes_max: int, kind: str,
                exchange_fit, bench: Optional[Bench], loop: Optional[LoopShare],
                spread: Optional[HostSpread]) -> List[dict]:
    """What each allocation input the held-out points drew on is worth, by leaving it out and
    predicting them again (``done``: :func:`of_points` with all of them): their mean absolute
    step error and the band half-width that would have held 90% of them (the :data:`NOMINAL`
    quantile of their absolute errors) with every input, and without each."""
    def row(name: str, held: List[dict]) -> dict:
        errs = sorted(abs(p["error"]["step"]) for p in held if p["error"]["step"] is not None)
        need = (float(np.quantile(errs, NOMINAL, method="inverted_cdf")) if errs else None)
        return {"input": name, "points": len(errs),
                "mae": float(np.mean(errs)) if errs else None, "needed_halfwidth": need}
    held = [pt for ax in done["axes"] for pt in ax["points"] if not pt["fitted"]]
    out = [row("all", held)]
    used = {"exchange": bool(bench is not None and (done.get("exchange_bench") or {})
                             .get("points")),
            "loop": bool((done.get("loop_bench") or {}).get("axes")),
            "spread": bool((done.get("spread_bench") or {}).get("axes"))}
    for name in (n for n, u in used.items() if u):
        kw = {"bench": bench, "loop": loop, "spread": spread}
        kw[{"exchange": "bench"}.get(name, name)] = None
        again = of_points(pts, nodes_max, kind, exchange_fit=exchange_fit, forecast=(), **kw)
        out.append(row(name, [pt for ax in again["axes"] for pt in ax["points"]
                              if not pt["fitted"]]))
    return out


def _input_effects(ax: dict, f: dict) -> Dict[str, Optional[float]]:
    """What each allocation input moved the forecast's largest node count's step by, relative
    (the loop file, the spread file; None where the axis did not draw on it): the model
    calibrated again without it, the rest alike."""
    m, cal = ax["_model"], {p: v for p, v in ax["_by_p"].items() if p <= ax["_model"].p_cal}
    rows = [r for r in (f["here"] or (f["networks"][0]["rows"] if f["networks"] else []))
            if r.get("step_s")]
    if not rows:
        return {"loop": None, "spread": None}
    last = rows[-1]
    out = {}
    for name, kw in (("loop", {"loop": None}), ("spread", {"spreads": None, "crowd": None})):
        used = m.loop if name == "loop" else m.spreads
        if not used:
            out[name] = None
            continue
        args = {"loop": m.loop, "spreads": m.spreads, "crowd": m.crowd, **kw}
        bare = _fit(cal, ax["backend"], m.fit, args["loop"], args["spreads"], args["crowd"])
        b = last["batch_per_rank"]
        e, algo = last["exchange_s"], last["algorithm"]
        s = _summary(ax["_by_p"][max(ax["_by_p"])])
        step = bare.step(last["nodes"], b, algo, s["wire"], s["rate"], e)
        out[name] = None if not step else last["step_s"] / step - 1.0
    return out


def _banded(out_axes: List[dict], q: Optional[float]):
    """Each point's band and the baselines' errors; (the held-out points, each with its axis's
    largest calibrated node count)."""
    held, reach = [], []
    for ax in out_axes:
        p_cal = ax["_model"].p_cal
        for pt in ax["points"]:
            step = pt["predicted"]["step"]
            # the step's two ends: as much hidden as at the calibration, and none
            low, high = pt["step_if_hidden"], pt["step_if_none"]
            pt["band"] = (None if step is None else
                          _forecast.band(high, low, q, pt["nodes"], p_cal))
            pt["naive_error"] = _err(pt["naive"], pt["measured"]["step"])
            pt["one_parameter_error"] = _err(pt["one_parameter"], pt["measured"]["step"])
            if not pt["fitted"]:
                pt["inside"] = (None if pt["band"] is None else
                                pt["band"][0] <= pt["measured"]["step"] <= pt["band"][1])
                held.append(pt)
                reach.append((pt, p_cal))
    return held, reach


def _benches(bench: Optional[Bench], loop: Optional[LoopShare], spread: Optional[HostSpread],
             out_axes: List[dict], held: List[dict]) -> dict:
    """What each short benchmark on the allocation gave the prediction, and why not more."""
    return {"exchange_bench": None if bench is None else {
                "pattern": bench.pattern, **bench.notes(),
                "points": sum(1 for pt in held if pt["exchange_from"])},
            "loop_bench": None if loop is None else {
                "source": loop.source, **loop.notes(),
                "axes": [ax["axis"] for ax in out_axes if ax["model"]["loop_shares"]]},
            "spread_bench": None if spread is None else {
                "source": spread.source, **spread.notes(), "coupled": spread.coupled,
                **({"crowd": {str(k): v for k, v in sorted(crowd.items())}}
                   if (crowd := spread.crowds()) else {}),
                "rounds": spread.round_factors(expected_max),
                "axes": [ax["axis"] for ax in out_axes if ax["model"]["host_spread"]]}}
