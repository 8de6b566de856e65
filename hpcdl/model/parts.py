"""The part-by-part model of one axis's step (:class:`PartModel`), calibrated from its runs
with at most N nodes (:func:`calibrate`): compute, exchange, fixed cost, the share of the exchange
hidden behind compute, and the slowest of p ranks. Why each part has its form:
:mod:`.predict`'s docstring and docs/decisions.md."""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np

from . import host_spread, loop_share
from .allreduce import duplex_of, on_link
from ..costmodel import SMALL, link_bytes, pairwise
from .files import small_allocation
from .measured import median as _med, summary as _summary
from .. import costmodel

BEYOND = 0.5     # of the calibration's hidden exchange, beyond it: the middle (docs/decisions.md)


def folds_alike(p: int, q: int) -> bool:
    """Whether p and q nodes are both powers of two or both not: an algorithm of halving and
    doubling (Rabenseifner, recursive doubling) folds the ranks beyond a power of two onto it
    first, its steps then wait on one link while the others idle."""
    return (p & (p - 1) == 0) == (q & (q - 1) == 0)


def window_at(windows: Optional[Dict[int, float]], p: int, p_cal: int) -> Optional[float]:
    """The share of the compute the exchange hid at ``p`` nodes beyond the calibration, as a
    small allocation's training steps measured it (:mod:`hpcdl.bench.allocation`): its largest
    count above the calibration that folds as p does (:func:`folds_alike`), else its largest
    above the calibration; None where it measured none. Shown beside each point, not taken
    (docs/decisions.md)."""
    small = {n: w for n, w in small_allocation(windows, p, p_cal).items() if n > p_cal}
    if not small:
        return None
    alike = [n for n in small if folds_alike(n, p)]
    return small[max(alike or small)]


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
                 crowd: Optional[Dict[int, float]] = None,
                 growth: Optional[Dict[int, float]] = None,
                 windows: Optional[Dict[int, float]] = None):
        self.fit = fit
        self.windows = windows
        self.crowd = crowd
        self.growth = growth
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
        if self.k < 0:
            # a rank with peers computes no faster than alone: where the calibrated p's compute
            # reads shorter, the 1-node probe read long (it often does at one rank), and the
            # compute per sample is the calibrated p's; the fixed cost stays what the step left
            # beside the probe (docs/decisions.md)
            self.per_sample *= 1.0 + self.k
            self.k = 0.0
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
        return self.per_sample * b * (1.0 + self.k * (p > 1)) * self.grown(p)

    def grown(self, p: int) -> float:
        """How much longer a rank computes at p nodes than at the calibration: the growth of
        the workload's pass beside a live exchange where a loop file measured it (it holds the
        loop's share and the crowd both), else the loop's share and the crowd; each from a small
        allocation's counts below p, held beyond them, at least 1."""
        if self.growth:
            return host_spread.crowd_factor(self.growth, p, self.p_cal)
        return (loop_share.factor(self.loop, p, self.p_cal)
                * host_spread.crowd_factor(self.crowd, p, self.p_cal))

    def _draws(self, p: int) -> np.ndarray:
        """The spread p ranks are drawn from: the spread file's at the largest node count <= p
        beyond the calibration, where one measured it; else the calibration runs'."""
        measured = (host_spread.at(self.spreads, p, self.p_cal)
                    if p > self.p_cal else None)
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
             exchange: Optional[float] = None, share: Optional[float] = None,
             window: Optional[float] = None) -> Optional[float]:
        """The step, its exchange from the model or ``exchange`` where given (a bench's);
        ``share``: beyond the calibration, of the calibration's hidden exchange (1: as much
        hid, the band's lower edge; 0: none, its upper edge; default :data:`BEYOND`);
        ``window``: beyond it, that share of the compute hides exchange instead (the step a
        small allocation's window would give: shown beside, not the model's)."""
        e = self.exchange(p, algorithm, wire, rate) if exchange is None else exchange
        if e is None:
            return None
        c = self.center(p, b) if self.backend == "ps" else self.compute(p, b)
        return c + self.fixed + e - self.hidden(p, e, c, share, window)

    def hidden(self, p: int, e: float, c: float, share: Optional[float] = None,
               window: Optional[float] = None) -> float:
        """The exchange hidden behind compute: as at the calibration up to its node count;
        beyond it, ``share`` of that (the band's reading ends), else :data:`BEYOND` of it
        (docs/decisions.md: why not the allocation's window, which ``window`` takes)."""
        full = min(e, self.window * c)
        if p <= self.p_cal:
            return full
        if window is not None:
            return min(e, window * c)
        return full * (BEYOND if share is None else share)

    @property
    def exchange_source(self) -> str:
        if self.fit is not None:
            return self.fit.get("source", "bench fit")
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
                **({"windows": {str(k): v for k, v in sorted(self.windows.items())
                                if self.p_cal < k <= SMALL}} if self.windows else {}),
                # the entries a prediction beyond the calibration draws on (a small allocation's),
                # each with what the points above it take from it
                **({"growth": {str(k): {"measured": v, "factor": host_spread.crowd_factor(
                    self.growth, k + 1, self.p_cal)} for k, v in sorted(self.growth.items())
                    if self.p_cal < k <= SMALL}} if self.growth else {}),
                **({"crowd": {str(k): {"measured": v, "factor": host_spread.crowd_factor(
                    self.crowd, k + 1, self.p_cal)} for k, v in sorted(self.crowd.items())
                    if self.p_cal < k <= SMALL}} if self.crowd and not self.growth else {}),
                "host_spread": None if not self.spreads else {
                    str(k): {"draws": len(v), "max_factor": expected_max(v, k)}
                    for k, v in sorted(self.spreads.items()) if self.p_cal < k <= SMALL}}


def calibrate(cal: Dict[int, List[dict]], backend: str, fit: Optional[dict] = None,
         loop: Optional[Dict[int, float]] = None,
         spreads: Optional[Dict[int, np.ndarray]] = None,
         crowd: Optional[Dict[int, float]] = None,
         growth: Optional[Dict[int, float]] = None,
         windows: Optional[Dict[int, float]] = None) -> PartModel:
    """The model from the calibration runs: each run's own figures, the medians where pooled;
    ``windows``: the share of the compute a small allocation's steps hid, by node count."""
    pooled = []
    for p, runs in sorted(cal.items()):
        s = _summary(runs)
        m = {"center": _med(runs, "center"), "step": s["step"], "exchange": s["exchange"],
             "rank_dev": runs.devs()}
        pooled.append({**s, "m": m})
    return PartModel(pooled, backend, fit, loop, spreads, crowd, growth, windows)
