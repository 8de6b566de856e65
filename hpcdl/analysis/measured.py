"""What a training record measured, as the held-out prediction (:mod:`.predict`) reads it: the
slowest rank's compute (median probe, first probe left out: it traces the graph), the exchange
timed alone, the step, and the ranks' spread around their run's center; grouped into points
(one rank per node) and summarised over a point's repeats."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np

from .allreduce import algorithm_of
from .. import costmodel
from ..records import lookup as _get


def _probes(rank: dict, key: str) -> List[float]:
    """A rank's probes without the first (it traces the graph), else its median."""
    probes = rank.get(f"{key}_probes_s") or []
    if len(probes) >= 2:
        return [float(v) for v in probes[1:]]
    return [float(rank[f"{key}_s"])] if rank.get(f"{key}_s") is not None else []


def measured(rec: dict) -> Optional[dict]:
    """compute (slowest rank's median probe), exchange (slowest rank's median probe, timed
    alone), the step and the ranks' probes relative to their run's center; None without probes."""
    ranks = _get(rec, "metrics", "ranks") or []
    comp = [_probes(r, "compute") for r in ranks]
    comp = [c for c in comp if c]
    step = _get(rec, "metrics", "step_time", "median")
    split = _get(rec, "metrics", "split") or {}
    if not comp and split.get("method") == "timed" and split.get("compute_s") and step:
        # a flat backend's phases timed around its calls on rank 0, no probes to spread
        return {"compute": float(split["compute_s"]), "center": float(split["compute_s"]),
                "step": float(step), "exchange": split.get("exchange_s"),
                "probe_dev": [], "rank_dev": []}
    if not comp or step is None:
        return None
    center = float(np.median([v for c in comp for v in c]))
    medians = [float(np.median(c)) for c in comp]
    exch = [float(np.median(e)) for e in (_probes(r, "exchange") for r in ranks) if e]
    return {"compute": max(medians), "center": center, "step": float(step),
            "exchange": max(exch) if exch else None,
            "probe_dev": [v / center for c in comp for v in c],
            "rank_dev": [m / center for m in medians] if len(medians) > 1 else []}


def points(recs: Sequence[dict], row_key) -> Dict[tuple, List[dict]]:
    """The ok train records with probes and one rank per node, by ``row_key``: each run's
    measured figures, rank count, batch, wire bytes, link rate, allreduce algorithm and repeat."""
    out: Dict[tuple, List[dict]] = {}
    for rec in recs:
        if rec.get("kind", "train") != "train" or rec.get("status", "ok") != "ok":
            continue
        m = measured(rec)
        if m is None:
            continue
        p = int(_get(rec, "layout", "size") or 1)
        if int(_get(rec, "layout", "nodes") or 1) != p:
            continue                                # the model is one rank per node
        params = rec.get("params") or {}
        grad = int(rec.get("gradient_bytes") or 0)
        wire = float(costmodel.wire_bytes(grad // 4, params.get("compression", "none")))
        out.setdefault(row_key(rec), []).append({
            "m": m, "ranks": p, "batch": int(params.get("batch_size") or 0), "wire": wire,
            "rate": float(_get(rec, "box", "link_bits_per_s") or 0.0),
            "algorithm": algorithm_of(rec, p, wire), "backend": params.get("backend", "horovod"),
            "compression": params.get("compression", "none"),
            "repeat": int(_get(rec, "point", "repeat", default=0))})
    return out


def median(runs: List[dict], key: str) -> Optional[float]:
    """The median of one measured figure over the runs that have it."""
    vals = [r["m"][key] for r in runs if r["m"][key] is not None]
    return float(np.median(vals)) if vals else None


def summary(runs: List[dict]) -> dict:
    """A point's medians over its repeats, with what is the same in every repeat."""
    r0 = runs[0]
    return {"ranks": r0["ranks"], "batch": r0["batch"], "wire": r0["wire"], "rate": r0["rate"],
            "algorithm": r0["algorithm"], "step": median(runs, "step"),
            "compute": median(runs, "compute"), "exchange": median(runs, "exchange")}
