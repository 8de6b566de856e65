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

from array import array
from collections import OrderedDict
from typing import Dict, List, Optional, Sequence

import numpy as np

from ..records import lookup as _get

MLPERF_MIN_SEEDS = 5


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


METRICS = ("test_accuracy", "test_loss")


class Curves:
    """What time to accuracy keeps of each record, gathered as records are read: per
    configuration its seeds' targets and evaluations (step, samples, seconds, the metrics)."""

    def __init__(self):
        self.target_metric: Optional[str] = None   # the first target's metric
        self.evaluated = False                      # some record carries evaluations
        self.accuracy = False                       # some evaluation has test_accuracy
        self.groups: "OrderedDict[tuple, dict]" = OrderedDict()

    def add(self, r: dict, axis: str) -> None:
        t = _get(r, "metrics", "target")
        if t and self.target_metric is None:
            self.target_metric = "test_accuracy" if t["metric"] == "accuracy" else "test_loss"
        evals = _get(r, "metrics", "evals") or []
        self.evaluated = self.evaluated or bool(evals)
        self.accuracy = self.accuracy or any("test_accuracy" in e for e in evals)
        if r.get("status", "ok") != "ok" or not evals:
            return
        lay, params = r.get("layout") or {}, r.get("params") or {}
        key = (axis, int(lay.get("size") or 1))
        g = self.groups.get(key)
        if g is None:
            g = self.groups[key] = {
                "nodes": int(lay.get("nodes") or 1),
                "global_batch": int(params.get("global_batch") or 0),
                "lr": {"lr": params.get("lr"), "rule": params.get("lr_scaling") or "linear",
                       "warmup_steps": int(params.get("lr_warmup_steps") or 0)},
                "seeds": 0, "seed_values": set(), "target": None,
                "reached": {k: array("d") for k in ("steps", "samples", "time_s")},
                "max_steps": 0,
                "steps": {m: {} for m in METRICS}}
        g["seeds"] += 1
        g["seed_values"].add(int(params.get("seed", 0)))
        if t:
            g["target"] = g["target"] or {"metric": t["metric"], "value": t["value"]}
            if t.get("reached"):
                for k in ("steps", "samples", "time_s"):
                    g["reached"][k].append(float(t[k]))
        g["max_steps"] = max(g["max_steps"], int(params.get("steps", 0) or 0))
        for e in evals:
            for m in METRICS:
                if m in e:
                    _Step.add(g["steps"][m], e, m)

    def merge(self, other: "Curves") -> None:
        self.target_metric = self.target_metric or other.target_metric
        self.evaluated = self.evaluated or other.evaluated
        self.accuracy = self.accuracy or other.accuracy
        for key, g in other.groups.items():
            mine = self.groups.get(key)
            if mine is None:
                self.groups[key] = g
                continue
            mine["seeds"] += g["seeds"]
            mine["seed_values"] |= g["seed_values"]
            mine["target"] = mine["target"] or g["target"]
            for k, v in g["reached"].items():
                mine["reached"][k].extend(v)
            mine["max_steps"] = max(mine["max_steps"], g["max_steps"])
            for m in METRICS:
                for step, acc in g["steps"][m].items():
                    if step in mine["steps"][m]:
                        mine["steps"][m][step].merge(acc)
                    else:
                        mine["steps"][m][step] = acc

    def metric(self) -> Optional[str]:
        """The metric the curves show: the target's, else accuracy where evaluated, else loss."""
        if self.target_metric:
            return self.target_metric
        if not self.evaluated:
            return None
        return "test_accuracy" if self.accuracy else "test_loss"

    def result(self, throughput_speedup: Optional[Dict[tuple, float]] = None) -> List[dict]:
        metric = self.metric()
        if metric is None:
            return []
        out = [_config(axis, ranks, g, metric) for (axis, ranks), g in
               sorted(self.groups.items(), key=lambda kv: (kv[0][0], kv[0][1]))]
        _relative(out, throughput_speedup or {})
        return out


class _Step:
    """One evaluated step of a configuration, over its seeds: how many, the metric's sum,
    least and greatest, the seconds' sum, and the samples seen (the first seed's)."""

    __slots__ = ("n", "total", "lo", "hi", "seconds", "samples")

    @staticmethod
    def add(steps: dict, e: dict, metric: str) -> None:
        step, v = int(e["step"]), float(e[metric])
        acc = steps.get(step)
        if acc is None:
            acc = steps[step] = _Step()
            acc.n, acc.total, acc.lo, acc.hi = 0, 0.0, v, v
            acc.seconds, acc.samples = 0.0, int(e["samples"])
        acc.n += 1
        acc.total += v
        acc.lo, acc.hi = min(acc.lo, v), max(acc.hi, v)
        acc.seconds += e["time_s"]

    def merge(self, other: "_Step") -> None:
        self.n += other.n
        self.total += other.total
        self.lo, self.hi = min(self.lo, other.lo), max(self.hi, other.hi)
        self.seconds += other.seconds


def _config(axis: str, ranks: int, g: dict, metric: str) -> dict:
    entry = {"axis": axis, "ranks": ranks, "nodes": g["nodes"],
             "global_batch": g["global_batch"], "seeds": g["seeds"],
             "seed_values": sorted(g["seed_values"]),
             "metric": metric, "curve": _curve(g["steps"][metric]), "lr": g["lr"]}
    if g["target"]:
        reached = g["reached"]
        entry.update(target=dict(g["target"]), max_steps=g["max_steps"],
                     reached=len(reached["steps"]),
                     steps=summarise(reached["steps"]), samples=summarise(reached["samples"]),
                     time_s=summarise(reached["time_s"]))
    return entry


def _curve(by_step: Dict[int, _Step]) -> dict:
    """The mean over seeds (and their range) at every evaluated step some seed reached."""
    steps = [by_step[s] for s in sorted(by_step)]
    return {"step": sorted(by_step), "samples": [a.samples for a in steps],
            "time_s": [float(a.seconds / a.n) for a in steps],
            "mean": [float(a.total / a.n) for a in steps], "lo": [a.lo for a in steps],
            "hi": [a.hi for a in steps], "seeds": [a.n for a in steps]}


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
