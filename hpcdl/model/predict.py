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
  link byte. A bench fit (``[model] fit``) takes its place where the study names one; where it
  names tuning files (:mod:`.exchange_bench`), the exchange ``hpcdl tune`` timed alone on at
  most :data:`SMALL` nodes below the point's own count prices it, grown to p by the model.
  Nothing measured at p enters the prediction of p; what was stands beside it.
- **step** = compute + fixed + exchange − hidden, hidden = min(exchange, window × compute) up to
  the calibrated node count: fixed is the 1-node step beyond its compute, window the share of
  the compute the exchange hid behind at the calibration points (0 for the parameter server,
  whose step pays the ranks' center). Beyond it, between none and as at the calibration: the
  middle (:data:`.parts.BEYOND`); the band's reading ends are those two. Where a loop file
  measured the share a small allocation's training steps hid (:func:`.parts.window_at`), the
  step it would give stands beside the point (``step_if_window``), not taken.

Baselines, on the same calibration points: *naive*, efficiency stays at its largest calibrated
point's; *one-parameter*, the 1-node step plus one β from the largest calibrated point's excess.
The band is conformal: the 90% quantile of the relative errors of predicting each calibration
run left out, applied to the prediction; beyond the calibration its lower edge takes the
exchange as hidden as at the calibration, its upper edge none hidden. Its coverage is counted on
the held-out points; :mod:`.floor` says how close these repeats let them check.
"""
from __future__ import annotations

from dataclasses import replace
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from . import allreduce, bands, floor, transfer
from .axis import AxisRuns, Calibrated, Files
from .bands import Band
from .exchange_bench import Bench
from .host_spread import HostSpread
from .loop_share import LoopShare
from . import forecast as _forecast
from .baselines import band_quantile, naive, noise, one_parameter, scores
from .baselines import relative_error as _err
from .measured import Runs, points as _points, spread, summary as _summary
from .parts import PartModel, calibrate, expected_max, folds, window_at
from .. import costmodel

NOMINAL = 0.90                 # the band's nominal coverage
FORECAST = _forecast.FORECAST

# --- the study ----------------------------------------------------------------------------------

def _left_out(cal: Dict[int, Runs], backend: str, fit: Optional[dict],
              loop: Optional[Dict[int, float]] = None,
              spreads: Optional[Dict[int, np.ndarray]] = None,
              crowd: Optional[Dict[int, float]] = None,
              growth: Optional[Dict[int, float]] = None) -> List[float]:
    """Leave one repeat out (one fold of repeats beyond :data:`.parts.FOLDS` of them): the relative
    error of predicting each multi-node calibration run from the runs not in its fold."""
    fold = folds({rep for v in cal.values() for rep in v.repeat})
    out = []
    for k in sorted(set(fold.values())):
        kept = {p: v.take(lambda rep: fold[rep] != k) for p, v in cal.items()}
        if any(not len(v) for v in kept.values()):
            continue
        m = calibrate(kept, backend, fit, loop, spreads, crowd, growth)
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
                     exchange_fit, Files(bench, loop, spread), forecast)


SMALL = costmodel.SMALL   # exchange-only runs on at most this many nodes price larger points


def _small(axis: str, backend: str, by_p: Dict[int, Runs],
           bench: Optional[Bench]) -> Dict[int, Dict[str, Tuple[float, str]]]:
    """Per node count q, what a small allocation measured of the exchange alone, (seconds,
    where from) by allreduce algorithm: the tuning files ``bench`` names at 2..:data:`SMALL`
    nodes (each algorithm ``hpcdl tune`` timed, and the setting each of the axis's node counts
    ran: a study that tunes at each count runs another setting at each)."""
    out: Dict[int, Dict[str, Tuple[float, str]]] = {}
    if bench is None or backend != "horovod":
        return out
    rate = transfer.parts(axis)[1]
    # the largest count's first; one node exchanges nothing, so its setting times nothing
    sums = [_summary(by_p[p]) for p in sorted(by_p, reverse=True) if p > 1 or p == max(by_p)]
    for q in range(2, SMALL + 1):
        if not bench.path(q, rate).exists():
            continue
        for s in sums:
            # the setting the runs ran, with the library's choice at q
            got = bench.small(q, rate, s["compression"], s["setting"], s["wire"],
                              _algorithm_at(s, q))
            for name, timed in got.items():
                out.setdefault(q, {}).setdefault(name, timed)
    return out


def _algorithm_at(s: dict, q: int) -> str:
    """The allreduce a point's setting runs at q ranks: the one it pinned, else Open MPI's
    decision at q for its bytes."""
    decided = allreduce.OMPI_ALLREDUCE[allreduce.ompi_allreduce(s["ranks"], s["wire"])]
    if s["algorithm"] != decided:
        return s["algorithm"]
    return allreduce.OMPI_ALLREDUCE[allreduce.ompi_allreduce(q, s["wire"])]


def _benched(model: PartModel, axis: str, backend: str, by_p: Dict[int, Runs],
             nodes_max: int, bench: Optional[Bench]) -> Tuple[Dict[int, tuple], Dict[int, float]]:
    """Each held-out node count's exchange priced from what the allocation measured below it
    on at most :data:`SMALL` nodes (:func:`_small`, grown to p by the link model,
    :func:`.forecast.anchored`), (seconds, where from); beside it, what a tuning file measured
    at p itself, which never enters the prediction of p."""
    small = _small(axis, backend, by_p, bench)
    priced, here = {}, {}
    rate = transfer.parts(axis)[1]
    for p, runs in by_p.items():
        if p <= nodes_max:
            continue
        s = _summary(runs)
        below = {q: v for q, v in small.items() if q < p}
        e, source = _forecast.anchored(model, below, p, s["algorithm"], s)
        if source:
            priced[p] = (e, source)
        if bench is not None and backend == "horovod" and bench.path(p, rate).exists():
            got = bench.exchange(p, rate, s["compression"], s["setting"], s["wire"])
            if got is not None:
                here[p] = got[0]
    return priced, here


def _anchors(axis: str, backend: str, by_p: Dict[int, Runs], nodes_max: int, held_out: bool,
             bench: Optional[Bench]) -> Dict[int, Dict[str, Tuple[float, str]]]:
    """Per node count, the exchange each allreduce algorithm took on this allocation, (seconds,
    where from), that the forecast starts from (:func:`.forecast.anchored`): what a small
    allocation measured (:func:`_small`), as the held-out points take it; where no point is held
    out, the largest count's own runs too (all calibration then)."""
    out = _small(axis, backend, by_p, bench)
    top = max(by_p)
    s = _summary(by_p[top])
    if not held_out and top > 1 and s["exchange"]:
        out.setdefault(top, {})[s["algorithm"]] = (
            s["exchange"], f"the {top}-node runs' own exchange ({len(by_p[top])} run(s))")
    return out


def _point(model: PartModel, p: int, runs: Runs, fitted: bool, benched: tuple,
           cal_rows: List[dict], kind: str, backend: str, here: Optional[float] = None) -> dict:
    """One point's prediction (its exchange ``benched`` (seconds, source) where a benchmark
    measured it, the model's beside it) and the baselines', against its runs' medians."""
    s = _summary(runs)
    own = model.exchange(p, s["algorithm"], s["wire"], s["rate"])
    ex, source = benched
    w = window_at(model.windows, p, model.p_cal)
    pred = {"compute": model.compute(p, s["batch"]),
            "exchange": own if ex is None else ex,
            "step": model.step(p, s["batch"], s["algorithm"], s["wire"], s["rate"], ex)}
    return {"nodes": p, "ranks": p, "fitted": fitted, "runs": len(runs),
            "exchange_from": source, "model_exchange": own,
            "exchange_measured_here": here,
            "model_exchange_error": _err(own, s["exchange"]),
            "repeat_spread": spread(runs), "algorithm": s["algorithm"],
            "measured": {k: s[k] for k in ("compute", "exchange", "step")},
            "predicted": pred, "step_if_hidden": model.step(
                p, s["batch"], s["algorithm"], s["wire"], s["rate"], ex, share=1.0),
            "step_if_none": model.step(
                p, s["batch"], s["algorithm"], s["wire"], s["rate"], ex, share=0.0),
            **({} if w is None else {"step_if_window": model.step(
                p, s["batch"], s["algorithm"], s["wire"], s["rate"], ex, window=w)}),
            "error": {k: _err(pred[k], s[k]) for k in pred},
            "naive": naive(cal_rows, p, s["batch"], kind),
            "one_parameter": one_parameter(cal_rows, p, s["batch"], s["wire"], backend)}


def of_points(pts: Dict[tuple, Runs], nodes_max: int, kind: str,
              remedied: Optional[Dict[tuple, Runs]] = None,
              exchange_fit: Optional[Callable[[str, str], Optional[dict]]] = None,
              files: Files = Files(),
              forecast: Sequence[int] = _forecast.FORECAST,
              networks: Optional[Sequence[str]] = None) -> dict:
    """Per axis, the model's and the baselines' predictions of every point; the errors at the
    held-out points, the band and its coverage; the remedies' predicted gains, measured where
    the study (fp16) or ``remedied`` (the runs of the same workload with a remedy applied, e.g.
    twice the batch) ran them. ``pts`` and ``remedied``: each (axis, nodes, ranks) point's runs
    (:func:`.measured.points`). ``exchange_fit(backend, compression)``: the bench fit's entry that
    predicts an axis's exchange, where the study declared one. ``files``: the allocation's
    files (:class:`.axis.Files`): ``bench``, the held-out points' exchange measured by a short
    benchmark at their node count (:mod:`.exchange_bench`; the model's own exchange stays beside
    it); ``loop``, what Horovod's loop takes from compute by node count (:mod:`.loop_share`),
    which a Horovod axis's compute follows beyond its calibration; ``spread``, how far the
    allocation's nodes lie apart computing at once (:mod:`.host_spread`), which every axis's
    slowest rank beyond its calibration is drawn from. ``forecast``: the node counts to
    forecast (:mod:`.forecast`), on ``networks`` (keys of :data:`hpcdl.costmodel.PRESETS`;
    None: all). ``nodes_max`` 0: no calibration subset declared, so every
    point calibrates the model, none is held out, and it only forecasts. Points are keyed by
    rank count: one rank per node, or every rank on one node (a workstation). Empty when the
    records carry no probes."""
    bench, loop, spread = files.bench, files.loop, files.spread
    held_out = bool(nodes_max)
    if not held_out:
        nodes_max = max((k[2] for k in pts), default=0)
    one_node = all(k[1] == 1 for k in pts)
    out_axes: List[Calibrated] = []
    loro = []
    spreads = spread.spreads() if spread is not None else None
    crowd = spread.crowds() if spreads is not None else None
    for axis in sorted({k[0] for k in pts}):
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
        shares = growth = windows = None
        if loop is not None and backend == "horovod":
            growth, windows = loop.growth(first["setting"]), loop.windows(first["setting"])
            shares = None if growth else loop.shares(first["setting"])
        model = calibrate(cal, backend, fit, shares, spreads, crowd, growth, windows)
        cal_rows = [_summary(v) for _, v in sorted(cal.items())]
        loro += _left_out(cal, backend, fit, shares, spreads, crowd, growth)
        benched, here = _benched(model, axis, backend, by_p, nodes_max, bench)
        points = [_point(model, p, runs, p <= nodes_max, benched.get(p, (None, None)),
                         cal_rows, kind, backend, here.get(p)) for p, runs in sorted(by_p.items())]
        out_axes.append(Calibrated(
            axis, by_p, backend, model, points, {p: v[0] for p, v in benched.items()},
            _anchors(axis, backend, by_p, nodes_max, held_out, bench)))
    if not out_axes:
        return {}
    q, basis = band_quantile([abs(e) for e in loro], NOMINAL)
    banding = Band(q, basis, files.residuals)
    held, reach = _banded(out_axes, banding)
    others: Dict[str, Dict[int, Runs]] = {}
    for key, runs in (remedied or {}).items():
        others.setdefault(key[0], {})[key[2]] = runs
    ahead = ([_forecast.of_axis(ax, kind, sorted(forecast), banding, not one_node, networks)
              for ax in out_axes] if forecast else [])
    for ax, f in zip(out_axes, ahead):
        f["inputs"] = _input_effects(ax, f)
    return {"nodes_max": nodes_max, "held_out": held_out, "one_node": one_node,
            "nominal": NOMINAL, "band_halfwidth": banding.halfwidth,
            "band_basis": banding.basis, "forecast": ahead, "band_drawn": banding.as_dict(
                [r["distance"] for r in _forecast.coverage_by_distance(reach)]
                + [bands.distance(p, ax.model.p_cal) for ax in out_axes for p in forecast]),
            "coverage_by_distance": _forecast.coverage_by_distance(reach),
            **_benches(files, out_axes, held),
            "band_residuals": len(loro), "axes": [ax.as_dict() for ax in out_axes],
            "heldout": scores(held), "noise": noise(out_axes), "floor":
            floor.of_axes(out_axes, nodes_max), "cross_rate": transfer.cross_rate(
                out_axes, nodes_max), "remedies": transfer.remedies(
                out_axes, kind, [AxisRuns(a, v) for a, v in others.items()])}


def input_costs(done: dict, pts: Dict[tuple, Runs], nodes_max: int, kind: str,
                exchange_fit, files: Files) -> List[dict]:
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
    used = {"bench": bool(files.bench is not None and (done.get("exchange_bench") or {})
                          .get("points")),
            "loop": bool((done.get("loop_bench") or {}).get("axes")),
            "spread": bool((done.get("spread_bench") or {}).get("axes"))}
    for name in (n for n, u in used.items() if u):
        again = of_points(pts, nodes_max, kind, exchange_fit=exchange_fit,
                          files=replace(files, **{name: None}), forecast=())
        out.append(row({"bench": "exchange"}.get(name, name),
                       [pt for ax in again["axes"] for pt in ax["points"] if not pt["fitted"]]))
    return out


def _input_effects(ax: Calibrated, f: dict) -> Dict[str, Optional[float]]:
    """What each allocation input moved the forecast's largest node count's step by, relative
    (the loop file, the spread file; None where the axis did not draw on it): the model
    calibrated again without it, the rest alike."""
    m = ax.model
    cal = {p: v for p, v in ax.by_p.items() if p <= m.p_cal}
    rows = [r for r in (f["here"] or (f["networks"][0]["rows"] if f["networks"] else []))
            if r.get("step_s")]
    if not rows:
        return {"loop": None, "spread": None}
    last = rows[-1]
    out = {}
    for name, kw in (("loop", {"loop": None, "growth": None}),
                     ("spread", {"spreads": None, "crowd": None})):
        used = (m.loop or m.growth) if name == "loop" else m.spreads
        if not used:
            out[name] = None
            continue
        args = {"loop": m.loop, "spreads": m.spreads, "crowd": m.crowd, "growth": m.growth, **kw}
        bare = calibrate(cal, ax.backend, m.fit, **args)
        b = last["batch_per_rank"]
        e, algo = last["exchange_s"], last["algorithm"]
        s = _summary(ax.by_p[max(ax.by_p)])
        step = bare.step(last["nodes"], b, algo, s["wire"], s["rate"], e)
        out[name] = None if not step else last["step_s"] / step - 1.0
    return out


def _banded(out_axes: List[Calibrated], banding: Band):
    """Each point's band and the baselines' errors; (the held-out points, each with its axis's
    largest calibrated node count)."""
    held, reach = [], []
    for ax in out_axes:
        p_cal = ax.model.p_cal
        for pt in ax.points:
            step = pt["predicted"]["step"]
            # the step's two ends: as much hidden as at the calibration, and none
            low, high = pt["step_if_hidden"], pt["step_if_none"]
            pt["band"] = None if step is None else banding.edges(low, high, pt["nodes"], p_cal)
            pt["naive_error"] = _err(pt["naive"], pt["measured"]["step"])
            pt["one_parameter_error"] = _err(pt["one_parameter"], pt["measured"]["step"])
            if not pt["fitted"]:
                pt["inside"] = (None if pt["band"] is None else
                                pt["band"][0] <= pt["measured"]["step"] <= pt["band"][1])
                held.append(pt)
                reach.append((pt, p_cal))
    return held, reach


def _benches(files: Files, out_axes: List[Calibrated], held: List[dict]) -> dict:
    """What each short benchmark on the allocation gave the prediction, and why not more."""
    bench, loop, spread = files.bench, files.loop, files.spread
    return {"exchange_bench": None if bench is None else {
                "pattern": bench.pattern, **bench.notes(),
                "points": sum(1 for pt in held if pt["exchange_from"])},
            "loop_bench": None if loop is None else {
                "source": loop.source, **loop.notes(),
                "axes": [ax.axis for ax in out_axes if ax.model.loop or ax.model.growth],
                "growth": [ax.axis for ax in out_axes if ax.model.growth]},
            "spread_bench": None if spread is None else {
                "source": spread.source, **spread.notes(), "coupled": spread.coupled,
                **({"crowd": {str(k): v for k, v in sorted(crowd.items())}}
                   if (crowd := spread.crowds()) else {}),
                "rounds": spread.round_factors(expected_max),
                "axes": [ax.axis for ax in out_axes if ax.model.as_dict()["host_spread"]]}}
