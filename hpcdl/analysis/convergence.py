"""Time to accuracy: what a study's evaluations during training say, per configuration.

Each record of a run with evaluations (``hpcdl train --eval-every`` / ``--target``, a study's
``[target]``) carries the held-out metric at steps, samples seen and seconds of training, and,
with a target, the steps, samples and time it took or that it was not reached. Per
configuration (axis and node/rank count) over its seeds:

- steps, samples and time to target, MLPerf-style: with at least 5 seeds the fastest and the
  slowest are dropped and the rest averaged; with fewer, the mean of all (and it says so);
  a configuration where some seed did not reach the target says how many did;
- statistical efficiency: samples to target at the smallest count over samples at N (below 1
  when a larger global batch needs more samples);
- time-to-target speedup T(N0)/T(N), to stand beside the throughput speedup;
- the curve: the metric against samples seen and against training time, the mean over seeds
  with their range, at every evaluated step that some seed reached.

Computes only (numpy); the report renders it.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Dict, List, Optional, Sequence

import numpy as np

from ..records import lookup as _get

MLPERF_MIN_SEEDS = 5


def metric_of(recs: Sequence[dict]) -> Optional[str]:
    """The metric the curves show: the target's, else accuracy where evaluated, else loss."""
    for r in recs:
        t = _get(r, "metrics", "target")
        if t:
            return "test_accuracy" if t["metric"] == "accuracy" else "test_loss"
    evals = [e for r in recs for e in (_get(r, "metrics", "evals") or [])]
    if not evals:
        return None
    return "test_accuracy" if any("test_accuracy" in e for e in evals) else "test_loss"


def summarise(values: Sequence[float]) -> dict:
    """MLPerf-style: drop the fastest and slowest of at least 5, average the rest."""
    vals = sorted(float(v) for v in values)
    if not vals:
        return {"mean": None, "kept": 0, "method": "none reached"}
    if len(vals) >= MLPERF_MIN_SEEDS:
        kept = vals[1:-1]
        method = f"mean of {len(kept)} after dropping the fastest and slowest of {len(vals)}"
    else:
        kept = vals
        method = f"mean of all {len(vals)} (fewer than {MLPERF_MIN_SEEDS} seeds)"
    return {"mean": float(np.mean(kept)), "min": kept[0], "max": kept[-1], "kept": len(kept),
            "method": method}


def analyse(recs: Sequence[dict], axis_of: Callable[[dict], str],
            throughput_speedup: Optional[Dict[tuple, float]] = None) -> List[dict]:
    """One entry per configuration with evaluations, ordered by axis then ranks; [] if none.
    ``axis_of`` names a record's axis as the scaling analysis does; ``throughput_speedup`` maps
    (axis, ranks) to the scaling table's speedup."""
    metric = metric_of(recs)
    if metric is None:
        return []
    groups: "OrderedDict[tuple, List[dict]]" = OrderedDict()
    for r in recs:
        if r.get("status", "ok") != "ok" or not _get(r, "metrics", "evals"):
            continue
        lay = r.get("layout") or {}
        groups.setdefault((axis_of(r), int(lay.get("size") or 1)), []).append(r)
    out = [_config(axis, ranks, rs, metric) for (axis, ranks), rs in
           sorted(groups.items(), key=lambda kv: (kv[0][0], kv[0][1]))]
    _relative(out, throughput_speedup or {})
    return out


def _config(axis: str, ranks: int, rs: List[dict], metric: str) -> dict:
    targets = [_get(r, "metrics", "target") for r in rs]
    reached = [t for t in targets if t and t.get("reached")]
    t0 = next((t for t in targets if t), None)
    lay, params = rs[0].get("layout") or {}, rs[0].get("params") or {}
    entry = {"axis": axis, "ranks": ranks, "nodes": int(lay.get("nodes") or 1),
             "global_batch": int(params.get("global_batch") or 0), "seeds": len(rs),
             "seed_values": sorted({int(params.get("seed", 0)) for params in
                                    (r.get("params") or {} for r in rs)}),
             "metric": metric, "curve": _curve(rs, metric),
             "lr": {"lr": params.get("lr"), "rule": params.get("lr_scaling") or "linear",
                    "warmup_steps": int(params.get("lr_warmup_steps") or 0)}}
    if t0:
        entry.update(target={"metric": t0["metric"], "value": t0["value"]},
                     max_steps=max(int(_get(r, "params", "steps", default=0) or 0) for r in rs),
                     reached=len(reached),
                     steps=summarise([t["steps"] for t in reached]),
                     samples=summarise([t["samples"] for t in reached]),
                     time_s=summarise([t["time_s"] for t in reached]))
    return entry


def _curve(rs: List[dict], metric: str) -> dict:
    """The mean over seeds (and their range) at every evaluated step some seed reached."""
    by_step: "Dict[int, List[dict]]" = {}
    for r in rs:
        for e in _get(r, "metrics", "evals") or []:
            if metric in e:
                by_step.setdefault(int(e["step"]), []).append(e)
    steps = sorted(by_step)
    vals = [[float(e[metric]) for e in by_step[s]] for s in steps]
    return {"step": steps, "samples": [int(by_step[s][0]["samples"]) for s in steps],
            "time_s": [float(np.mean([e["time_s"] for e in by_step[s]])) for s in steps],
            "mean": [float(np.mean(v)) for v in vals], "lo": [min(v) for v in vals],
            "hi": [max(v) for v in vals], "seeds": [len(v) for v in vals]}


def _relative(out: List[dict], xs: Dict[tuple, float]) -> None:
    """Statistical efficiency and time-to-target speedup against each axis's smallest count."""
    for e in out:
        base = min((o for o in out if o["axis"] == e["axis"]), key=lambda o: o["ranks"])
        e["throughput_speedup"] = xs.get((e["axis"], e["ranks"]))
        ok = (e.get("samples", {}).get("mean") and base.get("samples", {}).get("mean")
              and e.get("reached") == e["seeds"] and base.get("reached") == base["seeds"])
        e["statistical_efficiency"] = (base["samples"]["mean"] / e["samples"]["mean"]
                                       if ok else None)
        e["ttt_speedup"] = base["time_s"]["mean"] / e["time_s"]["mean"] if ok else None
