"""What a training record measured, as the held-out prediction (:mod:`.predict`) reads it: the
slowest rank's compute (median probe, first probe left out: it traces the graph), the exchange
timed alone, the step, and the ranks' spread around their run's center; grouped into points
(one rank per node) and summarised over a point's repeats."""
from __future__ import annotations

import math
import statistics
from array import array
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

from .allreduce import algorithm_of
from .. import costmodel, machine
from ..records import lookup as _get, ok_train


def _probes(rank: dict, key: str) -> List[float]:
    """A rank's probes without the first (it traces the graph), else its median."""
    probes = rank.get(f"{key}_probes_s") or []
    if len(probes) >= 2:
        return [float(v) for v in probes[1:]]
    return [float(rank[f"{key}_s"])] if rank.get(f"{key}_s") is not None else []



def probe_slack(probes: Sequence[float], step: dict) -> float:
    """How far a one-rank run's median probe may exceed its median step by sampling alone: two
    standard errors of the probes' spread and of the steps' (``step``: a record's
    ``step_time``, with its ``std``) over as many probes."""
    return 2 * ((statistics.variance(probes) + step["std"] ** 2) / len(probes)) ** 0.5
class _Slots:
    """A few named figures read by key like the dict they stand for, in a fraction of its
    memory (a report keeps one per record)."""

    __slots__ = ()

    def __getitem__(self, key: str):
        return getattr(self, key)


class Figures(_Slots):
    """What one run measured: see :func:`measured`."""

    __slots__ = ("compute", "center", "step", "exchange", "rank_dev")

    def __init__(self, compute, center, step, exchange, rank_dev):
        self.compute, self.center, self.step, self.exchange = compute, center, step, exchange
        self.rank_dev = rank_dev


class Entry(_Slots):
    """One run of a point: its figures and what is the same for every repeat of the point."""

    __slots__ = ("m", "ranks", "batch", "wire", "rate", "algorithm", "setting", "backend",
                 "compression", "repeat")

    def __init__(self, **kw):
        for k in self.__slots__:
            setattr(self, k, kw[k])


def _median(values: List[float]) -> float:
    """numpy's median of a few floats (the same figure, without numpy's per-call cost)."""
    x = sorted(values)
    n = len(x)
    return float(x[n // 2]) if n % 2 else float((x[n // 2 - 1] + x[n // 2]) / 2)


def measured(rec: dict) -> Optional[Figures]:
    """compute (slowest rank's median probe), exchange (slowest rank's median probe, timed
    alone), the step and the ranks' median probes relative to their run's center; None without
    probes."""
    ranks = _get(rec, "metrics", "ranks") or []
    comp = [_probes(r, "compute") for r in ranks]
    comp = [c for c in comp if c]
    step = _get(rec, "metrics", "step_time", "median")
    split = _get(rec, "metrics", "split") or {}
    if not comp and split.get("method") in ("timed", "probe") and split.get("compute_s") and step:
        # a flat backend's phases timed around its calls on rank 0, or a record that kept only
        # rank 0's median probes: no ranks' spread
        return Figures(float(split["compute_s"]), float(split["compute_s"]), float(step),
                       split.get("exchange_s", split.get("exchange_alone_s")), [])
    if not comp or step is None:
        return None
    center, medians = centred(comp)
    exch = [_median(e) for e in (_probes(r, "exchange") for r in ranks) if e]
    return Figures(max(medians), center, float(step), max(exch) if exch else None,
                   [m / center for m in medians] if len(medians) > 1 else [])


def centred(comp: Sequence[Sequence[float]]) -> Tuple[float, List[float]]:
    """(center, the ranks' medians) of the ranks' compute probes: the center is the median of
    every rank's probes together."""
    return _median([v for c in comp for v in c]), [_median(c) for c in comp]


_ALGORITHMS: Dict[str, str] = {}    # each algorithm's and setting's name, kept once


def entry(rec: dict) -> Optional[Entry]:
    """An ok train record with probes, one rank per node or all on one node, as a run of its
    point: its measured
    figures, rank count, batch, wire bytes, link rate, allreduce algorithm, the exchange's
    settings (as ``hpcdl tune`` names them) and repeat; else None."""
    if not ok_train(rec):
        return None
    m = measured(rec)
    if m is None:
        return None
    p = int(_get(rec, "layout", "size") or 1)
    if int(_get(rec, "layout", "nodes") or 1) not in (1, p):
        return None             # the model is one rank per node, or every rank on one node
    params = rec.get("params") or {}
    grad = int(rec.get("gradient_bytes") or 0)
    wire = float(costmodel.wire_bytes(grad // 4, params.get("compression", "none")))
    algo = algorithm_of(rec, p, wire)
    setting = costmodel.setting_name(_get(rec, "manifest", "env") or {})
    return Entry(m=m, ranks=p, batch=int(params.get("batch_size") or 0), wire=wire,
                 rate=machine.link_bits(rec),
                 algorithm=_ALGORITHMS.setdefault(algo, algo),
                 setting=_ALGORITHMS.setdefault(setting, setting),
                 backend=params.get("backend", "horovod"),
                 compression=params.get("compression", "none"),
                 repeat=int(_get(rec, "point", "repeat", default=0)))


_NAN = float("nan")


def _none(x: float) -> Optional[float]:
    return None if math.isnan(x) else x


class Runs:
    """A point's runs as they are read, a column each (NaN where a run has no exchange), its
    ranks' spread in one array (with where each run's begins). Indexing or iterating gives each
    run as an :class:`Entry`, made when asked."""

    _COLS = ("compute", "center", "step", "exchange", "batch", "wire", "rate")

    def __init__(self):
        for k in self._COLS:
            setattr(self, k, array("d"))
        self.repeat = array("q")
        self.algorithm: List[str] = []
        self.setting: List[str] = []
        self.rank_dev, self.rank_at = array("d"), array("q")
        self.ranks = 0
        self.backend = self.compression = ""

    def add(self, e: Entry) -> None:
        if not len(self):
            self.ranks, self.backend, self.compression = e.ranks, e.backend, e.compression
        m = e.m
        for k in ("compute", "center", "step"):
            getattr(self, k).append(getattr(m, k))
        self.exchange.append(_NAN if m.exchange is None else float(m.exchange))
        self.batch.append(e.batch)
        self.wire.append(e.wire)
        self.rate.append(e.rate)
        self.repeat.append(e.repeat)
        self.algorithm.append(e.algorithm)
        self.setting.append(e.setting)
        self.rank_at.append(len(self.rank_dev))
        self.rank_dev.extend(m.rank_dev)

    def __len__(self) -> int:
        return len(self.step)

    def _devs(self, i: int) -> array:
        """Run ``i``'s ranks' spread."""
        at = self.rank_at
        return self.rank_dev[at[i]:at[i + 1] if i + 1 < len(at) else len(self.rank_dev)]

    def __getitem__(self, i: int) -> Entry:
        m = Figures(self.compute[i], self.center[i], self.step[i], _none(self.exchange[i]),
                    self._devs(i))
        return Entry(m=m, ranks=self.ranks, batch=int(self.batch[i]), wire=self.wire[i],
                     rate=self.rate[i], algorithm=self.algorithm[i], setting=self.setting[i],
                     backend=self.backend,
                     compression=self.compression, repeat=self.repeat[i])

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def take(self, keep) -> "Runs":
        """The runs whose repeat ``keep(repeat)`` is true."""
        idx = [i for i, rep in enumerate(self.repeat) if keep(rep)]
        out = Runs()
        out.ranks, out.backend, out.compression = self.ranks, self.backend, self.compression
        for k in self._COLS:
            col = getattr(self, k)
            setattr(out, k, array("d", [col[i] for i in idx]))
        out.repeat = array("q", [self.repeat[i] for i in idx])
        out.algorithm = [self.algorithm[i] for i in idx]
        out.setting = [self.setting[i] for i in idx]
        for i in idx:
            out.rank_at.append(len(out.rank_dev))
            out.rank_dev.extend(self._devs(i))
        return out

    def merge(self, other: "Runs") -> None:
        if not len(self):
            self.ranks, self.backend, self.compression = (other.ranks, other.backend,
                                                          other.compression)
        for k in self._COLS:
            getattr(self, k).extend(getattr(other, k))
        self.repeat.extend(other.repeat)
        self.algorithm += other.algorithm
        self.setting += other.setting
        self.rank_at.extend(len(self.rank_dev) + a for a in other.rank_at)
        self.rank_dev.extend(other.rank_dev)

    def devs(self) -> np.ndarray:
        """Every run's ranks' spread (``rank_dev``) together."""
        return np.frombuffer(self.rank_dev, dtype=float) if len(self.rank_dev) else np.zeros(0)


def points(recs: Sequence[dict], row_key) -> Dict[tuple, Runs]:
    """The ok train records with probes, one rank per node or all on one node, by ``row_key``:
    each run's
    :func:`entry`."""
    out: Dict[tuple, Runs] = {}
    for rec in recs:
        e = entry(rec)
        if e is not None:
            out.setdefault(row_key(rec), Runs()).add(e)
    return out


def median(runs: Runs, key: str) -> Optional[float]:
    """The median of one measured figure over the runs that have it."""
    vals = [v for v in getattr(runs, key) if not math.isnan(v)]
    return float(np.median(vals)) if vals else None


def summary(runs: Runs) -> dict:
    """A point's medians over its repeats, with what is the same in every repeat."""
    r0 = runs[0]
    return {"ranks": r0["ranks"], "batch": r0["batch"], "wire": r0["wire"], "rate": r0["rate"],
            "algorithm": r0["algorithm"], "setting": r0["setting"],
            "compression": r0["compression"], "step": median(runs, "step"),
            "compute": median(runs, "compute"), "exchange": median(runs, "exchange")}


def spread(runs: Runs) -> Optional[float]:
    """How far a point's repeats lie apart: (slowest − fastest step) / their median; None with
    fewer than two repeats. The measurement's own error, which no prediction is checked closer
    than."""
    steps = [v for v in runs.step if not math.isnan(v)]
    if len(steps) < 2:
        return None
    return float((max(steps) - min(steps)) / np.median(steps))
