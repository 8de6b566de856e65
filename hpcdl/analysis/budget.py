"""Where the efficiency goes: stragglers named, and the efficiency loss of each point split into
what the ranks' own phase timings measured.

Every rank of ``hpcdl train`` records its phases per timed step (``metrics.ranks``: input, the
step call, the bookkeeping after it; from the probes, compute alone, the exchange alone and the
wait for the slowest rank). Per point, with P the per-step time of the throughput (per-rank batch
/ per-rank throughput) and r the per-rank batch over the baseline's (the smallest run of the
axis), the measured efficiency loss 1 − E = (P − r·P₀)/P is split into, each over P:

- compute slowdown: the typical rank's compute alone − r × the baseline's (ranks sharing cores);
  the typical rank is the lower median over ranks (of two, the faster);
- stragglers: the slowest rank's compute + input − the typical rank's (what the others wait);
- input: the typical rank's input − r × the baseline's (a user's script only: hpcdl's own
  workloads hold their data in memory, and their next-batch slicing is counted as fixed);
- fixed: the bookkeeping per step beyond the baseline's (the loss and stop agreements);
- exchange not hidden: what the typical rank's step holds beyond its compute, the wait for
  stragglers and the baseline's update and overhead. It is the one part not timed apart, so it
  is bounded by the exchange timed alone: below 0 or above it, the difference goes to
- unexplained: the measured loss minus the parts above.

A straggler is a rank whose compute or input takes at least ``RATIO`` times the median of the
other ranks', costs them at least ``LOST_SHARE`` of the step, and is slower consistently: even its
fastest probe (or step's input) is slower than the other ranks' median, which a rank merely
unlucky in a few probes on a shared machine is not. Numpy-free: the standard library and the
record's one accessor.
"""
from __future__ import annotations

import math
import statistics
from array import array
from typing import Dict, Iterable, List, Optional

from ..records import lookup as _get
from .units import seconds

RATIO = 1.15          # a rank this much slower than the others' median in a phase ...
LOST_SHARE = 0.05     # ... that costs the others at least this share of the step is named
PARTS = ("compute", "stragglers", "input", "fixed", "exchange")
LABELS = {"compute": "compute slowdown", "stragglers": "waiting for stragglers",
          "input": "input pipeline", "fixed": "fixed per-step overhead",
          "exchange": "exchange not hidden", "unexplained": "unexplained"}


_SECONDS = {"compute": "compute_s", "exchange": "exchange_s", "wait": "wait_s"}


def _phase(r: dict, name: str) -> Optional[float]:
    if name in _SECONDS:
        return r.get(_SECONDS[name])
    timed = r.get(name)
    return timed.get("median") if isinstance(timed, dict) else None


def _fastest(r: dict, name: str) -> Optional[float]:
    """A rank's fastest probe (compute) or step (input): its best case."""
    return r.get("compute_min_s") if name == "compute" else _get(r, name, "min")


def per_step(rec: dict) -> Optional[float]:
    """P: the per-step time the record's throughput stands for (per-rank batch / per-rank rate)."""
    rate = _get(rec, "metrics", "throughput_per_rank", "mean")
    batch = _get(rec, "params", "batch_size")
    return batch / rate if rate and batch else None


_NAMES = ("input", "step", "book", "compute", "exchange", "wait")


def _values(ranks: List[dict]) -> Dict[str, list]:
    """Each phase's value on every rank (None where a rank has none)."""
    return {name: [_phase(r, name) for r in ranks] for name in _NAMES}


def phases(rec: dict, values: Optional[Dict[str, list]] = None) -> Optional[dict]:
    """The point's phases in one record: the typical rank's (the lower median over ranks, so
    that of two ranks it is the one not slowed by the other) and the slowest rank's.
    ``values``: :func:`_values` of its ranks, where already taken."""
    ranks = _get(rec, "metrics", "ranks")
    P = per_step(rec)
    if not ranks or P is None:
        return None
    values = values or _values(ranks)
    out = {"P": P}
    for name in _NAMES:
        vals = [v for v in values[name] if v is not None]
        out[name] = statistics.median_low(vals) if vals else None
    busy = [(c or 0.0) + (i or 0.0) for c, i in zip(values["compute"], values["input"])]
    out["busy_med"], out["busy_max"] = statistics.median_low(busy), max(busy)
    return out


def stragglers(rec: dict, ratio: float = RATIO, lost_share: float = LOST_SHARE,
               values: Optional[Dict[str, list]] = None) -> List[dict]:
    """The ranks the others wait for, each with its host, the phase that makes it slow, how much
    slower than the other ranks' median, and the time per step the others lose."""
    ranks = _get(rec, "metrics", "ranks") or []
    P = per_step(rec)
    if len(ranks) < 2 or P is None:
        return []
    named = []
    values = values or _values(ranks)
    # the other ranks' median is at least this (one value left out moves it down a place at
    # most): a rank under ratio times it is no straggler, and its median need not be taken
    floor = {}
    for name in ("compute", "input"):
        known = sorted(v for v in values[name] if v is not None)
        floor[name] = known[(len(known) - 2) // 2] if len(known) >= 2 else None
    for i, r in enumerate(ranks):
        worst = None
        for name in ("compute", "input"):
            mine = values[name][i]
            if mine is None or floor[name] is None or mine < ratio * floor[name]:
                continue
            theirs = [v for j, v in enumerate(values[name]) if j != i and v is not None]
            med = statistics.median(theirs)
            lost = mine - med
            if med > 0 and mine >= ratio * med and lost >= lost_share * P:
                best = _fastest(r, name)
                if (best is None or best > med) and (worst is None or lost > worst["lost_s"]):
                    worst = {"rank": r.get("rank"), "host": r.get("host"), "phase": name,
                             "ratio": mine / med, "lost_s": lost, "lost_share": lost / P}
        if worst:
            named.append(worst)
    return sorted(named, key=lambda s: -s["lost_s"])


def describe(s: dict) -> str:
    return (f"rank {s['rank']} on {s['host']}: {s['phase']} {s['ratio']:.2f}× the other ranks' "
            f"median; they wait {seconds(s['lost_s'])} per step ({s['lost_share'] * 100:.0f}%)")


PHASES = ("P", "input", "step", "book", "compute", "exchange", "wait", "busy_med", "busy_max")


class Point:
    """What the budget keeps of one point's records, as they are read: each record's phases (a
    row of :data:`PHASES`, NaN where one is missing), the first record's per-rank batch and
    whether its input came through a pipeline, the stragglers named (the worst of each and how
    often), and Horovod's timeline per record where it ran."""

    def __init__(self):
        self.records = 0
        self.phases = array("d")            # len(PHASES) per record that has phases
        self.batch = None
        self.pipeline = False
        self.named: Dict[tuple, list] = {}  # (rank, host, phase) -> [worst, times named]
        self.timelines: List[dict] = []
        self.negotiations: List[dict] = []
        self.costs: List[float] = []        # each run's estimate of what its timeline cost

    def add(self, rec: dict) -> None:
        if not self.records:
            self.batch, self.pipeline = _get(rec, "params", "batch_size"), in_pipeline(rec)
        self.records += 1
        ranks = _get(rec, "metrics", "ranks")
        values = _values(ranks) if ranks else None
        ph = phases(rec, values)
        if ph is not None:
            self.phases.extend(float("nan") if ph[k] is None else ph[k] for k in PHASES)
        for st in stragglers(rec, values=values):
            seen = self.named.setdefault((st["rank"], st["host"], st["phase"]), [st, 0])
            seen[1] += 1
            if st["lost_s"] > seen[0]["lost_s"]:
                seen[0] = st
        tl = _get(rec, "metrics", "timeline", "ms_per_step")
        if tl:
            self.timelines.append(tl)
        neg = _get(rec, "metrics", "timeline", "negotiation")
        if neg:
            self.negotiations.append(neg)
        cost = _get(rec, "metrics", "timeline_cost", "cost")
        if cost is not None:
            self.costs.append(cost)

    def merge(self, other: "Point") -> None:
        if not self.records:
            self.batch, self.pipeline = other.batch, other.pipeline
        self.records += other.records
        self.phases.extend(other.phases)
        for key, (st, n) in other.named.items():
            seen = self.named.setdefault(key, [st, 0])
            seen[1] += n
            if st["lost_s"] > seen[0]["lost_s"]:
                seen[0] = st
        self.timelines += other.timelines
        self.negotiations += other.negotiations
        self.costs += other.costs

    def medians(self) -> Optional[dict]:
        """Each phase's median over the records that have phases (None where none has)."""
        n = len(PHASES)
        rows = len(self.phases) // n
        if not rows:
            return None
        out = {}
        for j, k in enumerate(PHASES):
            vals = [v for v in self.phases[j::n] if not math.isnan(v)]
            out[k] = statistics.median(vals) if vals else None
        return out

    @classmethod
    def of(cls, recs: Iterable[dict]) -> "Point":
        p = cls()
        for rec in recs:
            p.add(rec)
        return p


def point_budget(mine: Point, base: Point) -> Optional[dict]:
    """The budget of one point (its repeats' medians) against the baseline point's."""
    med, med0 = mine.medians(), base.medians()
    if med is None or med0 is None:
        return None
    if med["compute"] is None or med0["compute"] is None:
        return {"why": "compute not probed (probes = 0): the budget needs the compute alone"}
    r = mine.batch / base.batch
    P, P0 = med["P"], med0["P"]
    fixed0 = med0["step"] - med0["compute"]          # update and overhead of the baseline step
    secs = {"compute": med["compute"] - r * med0["compute"],
            "stragglers": med["busy_max"] - med["busy_med"],
            "input": (med["input"] or 0.0) - r * (med0["input"] or 0.0),
            "fixed": (med["book"] or 0.0) - (med0["book"] or 0.0)}
    note = None
    if not mine.pipeline:
        # hpcdl's own workloads hold their data in memory: the wait for the next batch is a
        # slice of an array, an overhead of the step, not an input pipeline
        secs["fixed"] += secs["input"]
        secs["input"] = 0.0
        note = ("the data is held in memory (no input pipeline): taking the next batch is "
                "counted in the fixed per-step overhead")
    exposed = med["step"] - med["compute"] - secs["stragglers"] - fixed0
    bound = med["exchange"] if med["exchange"] is not None else 0.0
    secs["exchange"] = min(max(exposed, 0.0), bound)
    loss = P - r * P0
    secs["unexplained"] = loss - sum(secs[k] for k in PARTS)
    return {"loss": loss / P, "shares": {k: v / P for k, v in secs.items()}, "seconds": secs,
            "per_step_s": P, "exchange_alone_s": med["exchange"], "exposed_s": exposed,
            "wait_s": med["wait"], "repeats": len(mine.phases) // len(PHASES),
            **({"note": note} if note else {})}


def in_pipeline(rec: dict) -> bool:
    """Whether a record's batches came through an input pipeline: a user's own script (its
    tf.data or generator) does, and so does a run whose input was slowed on purpose
    (``HPCDL_SLOW`` with ``phase=input`` stands for a slow pipeline); hpcdl's workloads slice
    arrays held in memory."""
    slow = str(_get(rec, "manifest", "env", "HPCDL_SLOW") or "")
    return bool(_get(rec, "params", "command")) or "phase=input" in slow


def of_points(by: Dict[tuple, Point], rows) -> List[dict]:
    """The budget and the stragglers of every row (a configuration), against the smallest run
    of its axis, from the records gathered into a :class:`Point` per (axis, nodes, ranks)."""
    out = []
    for row in rows:
        sel = [r for r in rows if r.axis == row.axis]
        base = min(sel, key=lambda r: r.ranks)
        mine = by.get((row.axis, row.nodes, row.ranks)) or Point()
        entry = {"axis": row.axis, "nodes": row.nodes, "ranks": row.ranks,
                 "efficiency": row.efficiency,
                 "stragglers": [{**st, "repeats": n, "of": mine.records}
                                for st, n in mine.named.values()]}
        if row is not base:
            entry["budget"] = point_budget(mine, by.get((base.axis, base.nodes, base.ranks))
                                           or Point())
        tl = timeline_medians(mine.timelines)
        if tl:
            entry["timeline_ms"] = tl
            if mine.costs:
                entry["timeline_cost"] = statistics.median(mine.costs)
            negs = mine.negotiations
            if negs:
                last: Dict[str, int] = {}
                for n in negs:
                    for rank, k in n["last_ready"].items():
                        last[rank] = last.get(rank, 0) + k
                entry["negotiation"] = {
                    "ready_spread_ms_median": statistics.median(
                        n["ready_spread_ms_median"] for n in negs), "last_ready": last}
        out.append(entry)
    return out


def timeline_medians(per: Iterable[Optional[dict]]) -> Dict[str, float]:
    """Horovod's timeline of a point (each repeat's ``metrics.timeline.ms_per_step``, ms per
    step per activity), the median over its repeats."""
    per = [p for p in per if p]
    names = sorted({n for p in per for n in p})
    return {n: statistics.median(p.get(n, 0.0) for p in per) for n in names}
