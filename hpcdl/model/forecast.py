"""The forecast: what N nodes will give, from the part-by-part model (:mod:`.predict`) calibrated
on the study's smallest node counts, on this allocation's network and on named ones.

Per node count: compute (the slowest of N ranks, :meth:`.parts.PartModel.compute`), the
exchange of the allreduce algorithm that runs there (the MPI library's decision at N ranks and
that many bytes, or the algorithm the runs pinned), the fixed cost, and, beyond the calibration,
half the exchange hidden there (:data:`.parts.BEYOND`; the band spans none to all). On a named
network the exchange is the algorithm's messages at SimGrid SMPI's prices for a fat tree of that
network (:mod:`.networks`; the declared α + bytes·β where the table has none); compute and fixed
cost stay as measured. A network whose exchange stays under :data:`NETWORK_EFFECT`
of every step is left out: its column would only repeat the compute's ratio.

The band is the held-out points' (:class:`.bands.Band`) at the distance from the largest
calibrated node count d = log2(N / p_cal): other studies' residuals on the same kind of machine
where a residuals file holds enough, wide only as far as their checks reach, else the study's
own. Its coverage is counted on the held-out points by distance (:func:`coverage_by_distance`)."""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Sequence

from .. import costmodel
from .allreduce import OMPI_ALLREDUCE, exchange_time, ompi_allreduce
from .axis import Calibrated
from . import networks as _named
from .bands import Band
from .inputs import FORECAST  # noqa: F401  (node counts forecast where none are named)
from .measured import summary as _summary

NETWORK_EFFECT = 0.01        # a network whose exchange is under 1% of every step shows no effect


def algorithm_at(summary: dict, pinned: bool, p: int) -> str:
    """The allreduce the axis's runs would run at p ranks: its own where hpcdl's (ring of its
    own, parameter server, allgather) or pinned, else Open MPI's decision at p and its bytes."""
    algo = summary["algorithm"]
    if pinned or algo in ("ps", "allgather") or summary.get("backend") not in ("horovod", "mpi"):
        return algo
    return OMPI_ALLREDUCE[ompi_allreduce(p, summary["wire"])]


def pinned(sums: Dict[int, dict]) -> bool:
    """Whether an axis's runs ran another algorithm than Open MPI's decision at some node count
    (pinned by the run's settings, or hpcdl's own): then it runs that one at every count."""
    return any(s["algorithm"] != OMPI_ALLREDUCE[ompi_allreduce(s["ranks"], s["wire"])]
               for s in sums.values() if s["ranks"] > 1)


def anchored(model, anchors: Dict[int, Dict[str, tuple]], p: int, algo: str, s: dict):
    """(exchange at p on this allocation, where from): the model's, scaled by what the
    allocation measured over what the model gives at the largest node count <= p where it was
    measured (:func:`.predict._anchors`): for ``algo`` itself where that count timed it, else
    for the algorithm that count ran. The allocation's own efficiency carries on, the model says
    how the messages grow. At that count, the measured time itself. A fold with more steps after
    it than the count's that folds: :func:`_fold_and_steps`. (None, "") where the model has no
    exchange or nothing was measured."""
    e = model.exchange(p, algo, s["wire"], s["rate"])
    at = [q for q, algos in anchors.items() if q <= p and algo in algos]
    if e is None or not (at or any(q <= p for q in anchors)):
        return e, ""
    q = _anchor_count(at, p, algo) if at else max(q for q in anchors if q <= p)
    took = algo if at else next(iter(anchors[q]))
    t, source = anchors[q][took]
    m = model.exchange(q, took, s["wire"], s["rate"])
    if not m:
        return e, ""
    folded = _fold_and_steps(model, anchors, at, p, q, algo, t, source, s) if at else None
    if folded:
        return folded
    return e * t / m, (source if q == p and took == algo else
                       f"{source}, x{t / m:.3g} the model's at {q} nodes"
                       + (f" ({took})" if took != algo else ""))


# the algorithms Open MPI runs with a fold beyond a power of two (coll_base_allreduce.c): the
# extra ranks' first and last transfers, one way each, which a power-of-two count never pays
FOLDING = ("rabenseifner", "recursive doubling")


def _fold(n: int) -> bool:
    return n & (n - 1) != 0


def _anchor_count(at: List[int], p: int, algo: str) -> int:
    """Of the node counts that timed ``algo``, the one p's exchange is scaled from: the largest,
    but for a folding algorithm the largest that folds as p does (or not), where one was timed:
    how efficiently the fold ran on this allocation carries to p only from a count that paid it."""
    if algo in FOLDING:
        alike = [q for q in at if _fold(q) == _fold(p)]
        if alike:
            return max(alike)
    return max(at)


def _fold_and_steps(model, anchors, at: List[int], p: int, q: int, algo: str, t: float,
                    source: str, s: dict) -> Optional[tuple]:
    """A fold at p priced from a folding count q with fewer steps after its fold (3 for 10-14):
    q's time whole (its fold costs what p's does, the same bytes one way), plus the steps p's
    power of two adds beyond q's, at what the largest timed power of two c <= p took over the
    model. None where p adds no step or no power of two was timed (the growth rule then)."""
    if algo not in FOLDING or not (_fold(p) and _fold(q)) or q >= p:
        return None
    low, high = costmodel.power_of_two_below(q), costmodel.power_of_two_below(p)
    c = max((c for c in at if not _fold(c)), default=None)
    if high <= low or c is None:
        return None
    tc, source_c = anchors[c][algo]
    m_c = model.exchange(c, algo, s["wire"], s["rate"])
    steps = model.exchange(high, algo, s["wire"], s["rate"]) - model.exchange(
        low, algo, s["wire"], s["rate"])
    if not m_c or steps <= 0:
        return None
    return t + steps * tc / m_c, (f"{source} (its fold), plus the steps from {low} to {high} "
                                  f"ranks at x{tc / m_c:.3g} the model's at {c} nodes "
                                  f"({source_c})")


def _row(model, kind: str, p: int, b1: float, s: dict, algo: str, banding: Band, exchange=None,
         anchors: Optional[Dict[int, Dict[str, tuple]]] = None) -> dict:
    b = b1 if kind == "weak" else b1 / p
    source = ""
    if exchange is None:
        exchange, source = anchored(model, anchors or {}, p, algo, s)
    e = exchange
    if e is None:
        return {"nodes": p, "algorithm": algo, "step_s": None}
    step = model.step(p, b, algo, s["wire"], s["rate"], e)
    low = model.step(p, b, algo, s["wire"], s["rate"], e, share=1.0)
    high = model.step(p, b, algo, s["wire"], s["rate"], e, share=0.0)
    t1 = model.step(1, b1, algo, s["wire"], s["rate"], 0.0)
    throughput = p * b / step
    return {"nodes": p, "ranks": p, "batch_per_rank": b, "algorithm": algo,
            "compute_s": model.center(p, b) if model.backend == "ps" else model.compute(p, b),
            "fixed_s": model.fixed, "exchange_s": e,
            "step_s": step, "throughput": throughput,
            "efficiency": throughput / (b1 / t1) / p,
            "band_s": banding.edges(low, high, p, model.p_cal), "exchange_from": source}


def of_axis(ax: Calibrated, kind: str, nodes: Sequence[int], q: Band,
            here: bool = True, named: Optional[Sequence[str]] = None) -> dict:
    """The forecast of one calibrated axis of :func:`.predict.of_points` at ``nodes``, on this
    allocation and on the ``named`` networks (keys of :data:`hpcdl.costmodel.PRESETS`, None for
    all). ``here`` False: every rank ran on one host, whose shared memory says nothing of a
    network, so the forecast is of the compute alone (no exchange), labelled so."""
    model = ax.model
    sums = {p: {**_summary(r), "backend": ax.backend} for p, r in ax.by_p.items()}
    s = sums[max(sums)]
    b1 = s["batch"] if kind == "weak" else s["batch"] * s["ranks"]
    fixed_algo = pinned(sums)
    rows_here = [_row(model, kind, p, b1, s, algorithm_at(s, fixed_algo, p), q,
                      anchors=ax.anchors) for p in nodes] if here else []
    networks, flat, slowest = [], [], None
    if not here:
        networks.append({"network": "compute", "label": COMPUTE_ALONE, "alpha_s": None,
                         "beta_s_per_byte": None, "rows": [
                             _row(model, kind, p, b1, s, algorithm_at(s, fixed_algo, p), q,
                                  exchange=0.0) for p in nodes]})
    for key in (named if named is not None else costmodel.PRESETS) if here else ():
        net = costmodel.PRESETS[key]
        rows = []
        for p in nodes:
            algo = algorithm_at(s, fixed_algo, p)
            e = _named.exchange(key, algo, s["wire"], p)
            if e is None:
                e = exchange_time(algo, s["wire"], p, lambda m, n=net: n.alpha + m * n.beta)
            rows.append(_row(model, kind, p, b1, s, algo, q, exchange=e))
        if all(r["step_s"] and r["exchange_s"] / r["step_s"] < NETWORK_EFFECT for r in rows):
            flat.append(net.name)
            if slowest is None or net.beta > slowest[1].beta:
                slowest = (key, net, rows)
            continue
        networks.append({"network": key, "label": net.name, "alpha_s": net.alpha,
                         "beta_s_per_byte": net.beta, "rows": rows})
    if not any(n["network"] == "compute" for n in networks) and not networks and slowest:
        # one column for them all: what the compute gives wherever the exchange does not show
        key, net, rows = slowest
        networks.append({"network": "any", "label": f"{net.name} or faster (exchange under "
                         f"{NETWORK_EFFECT * 100:.0f}% of the step)", "alpha_s": net.alpha,
                         "beta_s_per_byte": net.beta, "rows": rows})
    return {"axis": ax.axis, "scaling": kind, "batch": b1, "gradient_bytes": s["wire"],
            "calibrated_nodes": model.p_cal, "here": rows_here, "networks": networks,
            "left_out": flat, "exchange_here": model.exchange_source}


COMPUTE_ALONE = "compute alone (ranks on one host: no network measured)"


def coverage_by_distance(held: Sequence[tuple]) -> List[dict]:
    """Of the held-out points (each with its axis's largest calibrated node count), by
    log2(nodes / that count): how many the band held (the check of the widening)."""
    by: Dict[float, List[bool]] = {}
    for pt, p_cal in held:
        if pt.get("inside") is None:
            continue
        by.setdefault(round(math.log2(pt["nodes"] / p_cal), 2), []).append(bool(pt["inside"]))
    return [{"distance": d, "points": len(v), "inside": sum(v)} for d, v in sorted(by.items())]
