"""The band of a predicted step. Where a residuals file (:func:`collect`, ``hpcdl study
residuals``) holds enough held-out points of *other* studies on the same kind of machine, the band
is split-conformal over them: each point's score is how far, in log, its measured step lay
outside its predicted range [step as hidden as at the calibration, step with none hidden], and
the band is [low / f, high · f], f = exp(q), q the 90% conformal quantile of the scores.

It widens with the distance d = log2(nodes / calibrated nodes) only as far as the checks show: q
at d is the largest quantile over the residuals at distances of at least d' for every d' <= d,
up to the farthest distance at least :data:`MIN_POOLED` residuals reach (``checked_to``); beyond
it the band stays that of the farthest checks, and the report says so. A band edge is never 0 s.

Otherwise (no file, or too few residuals of this kind) the band is the study's own: the 90%
quantile of predicting each calibration run left out (:func:`.baselines.band_quantile`),
widened by sqrt(1 + d), its lower edge low / (1 + w)."""
from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

from ..machine import kind_label, kind_of as machine_kind   # residuals pool by machine kind

SCHEMA = "hpcdl.residuals/1"
NOMINAL = 0.90
# the fewest residuals a 90% conformal quantile can be taken from: ceil((n + 1) * 0.9) <= n
MIN_POOLED = 9


def score(measured: float, low: float, high: float) -> float:
    """How far, in log, a measured step lay outside [low, high] (negative: inside)."""
    return max(math.log(low / measured), math.log(measured / high))


def distance(nodes: int, p_cal: int) -> float:
    return round(math.log2(nodes / p_cal), 2) if nodes > p_cal >= 1 else 0.0


def _quantile(scores: Sequence[float], level: float = NOMINAL) -> Optional[float]:
    r = sorted(scores)
    k = math.ceil((len(r) + 1) * level)
    return r[k - 1] if r and k <= len(r) else None


class Pooled:
    """The held-out residuals of other studies on one kind of machine, from a residuals file:
    ``residuals`` [(distance, score)], ``studies`` their names, ``problem`` why none (or '')."""

    def __init__(self, path: str, kind: str, study: str):
        self.path, self.kind, self.study = path, kind, study
        self.residuals: List[Tuple[float, float]] = []
        self.studies: List[str] = []
        self.problem = ""
        try:
            doc = json.loads(Path(path).read_text())
        except FileNotFoundError:
            self.problem = f"{path}: no such file"
            return
        except (OSError, ValueError) as exc:
            self.problem = f"{path}: unreadable ({exc})"
            return
        if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
            self.problem = f"{path}: not a residuals file ({SCHEMA})"
            return
        if not kind:
            self.problem = "the records do not name one machine they all ran on"
            return
        for s in doc.get("studies") or []:
            if s.get("kind") != kind or s.get("study") == study:
                continue
            self.studies.append(s["study"])
            self.residuals += [(distance(p["nodes"], p["p_cal"]),
                                score(p["measured_s"], p["low_s"], p["high_s"]))
                               for p in s.get("points") or []]
        if len(self.residuals) < MIN_POOLED:
            self.problem = (f"{path}: {len(self.residuals)} held-out residual(s) of other studies "
                            f"on {kind_label(kind)}, "
                            f"under the {MIN_POOLED} a {NOMINAL * 100:.0f}% band needs")

    @property
    def usable(self) -> bool:
        return not self.problem

    @property
    def checked_to(self) -> float:
        """The farthest distance at least :data:`MIN_POOLED` residuals reach."""
        ds = sorted((d for d, _ in self.residuals), reverse=True)
        return ds[MIN_POOLED - 1] if len(ds) >= MIN_POOLED else 0.0

    def q(self, d: float) -> float:
        """The log half-width at distance ``d`` (>= 0): the largest conformal quantile over the
        residuals at distances of at least d', for every checked d' <= d."""
        reach = min(d, self.checked_to)
        cuts = sorted({0.0} | {x for x, _ in self.residuals if x <= reach})
        best = 0.0
        for cut in cuts:
            q = _quantile([s for x, s in self.residuals if x >= cut])
            if q is not None:
                best = max(best, q)
        return best


class Band:
    """How a study's step bands are drawn: from ``pooled`` where it is usable, else from the
    study's own out-of-sample half-width ``own`` (None: no band) with its ``own_basis``."""

    def __init__(self, own: Optional[float], own_basis: str, pooled: Optional[Pooled] = None):
        self.own, self.own_basis = own, own_basis
        self.pooled = pooled if pooled is not None and pooled.usable else None
        self.why_not_pooled = pooled.problem if pooled is not None else ""

    def edges(self, low: float, high: float, p: int, p_cal: int) -> Optional[List[float]]:
        """[lower, upper] of a step whose range is [low, high] at p nodes, calibrated to p_cal."""
        if self.pooled is not None:
            f = math.exp(self.pooled.q(distance(p, p_cal)))
            return [low / f, high * f]
        if self.own is None:
            return None
        w = self.own * math.sqrt(1.0 + distance(p, p_cal))
        return [low / (1.0 + w), high * (1.0 + w)]

    @property
    def halfwidth(self) -> Optional[float]:
        """At the calibrated node count, as a share of the step."""
        if self.pooled is not None:
            return math.exp(self.pooled.q(0.0)) - 1.0
        return self.own

    @property
    def basis(self) -> str:
        if self.pooled is None:
            return self.own_basis + (f" (pooled: {self.why_not_pooled})"
                                     if self.why_not_pooled else "")
        p = self.pooled
        return (f"conformal over {len(p.residuals)} held-out residuals of {len(p.studies)} other "
                f"studies on {kind_label(p.kind)} ({p.path})")

    def as_dict(self, distances: Iterable[float] = ()) -> dict:
        """What the report says of the band: its source, and where pooled, how far the checks
        reach and the half-width at each distance asked for."""
        if self.pooled is None:
            return {"source": "own"}
        p = self.pooled
        return {"source": "pooled", "file": p.path, "kind": p.kind, "studies": len(p.studies),
                "residuals": len(p.residuals), "checked_to": p.checked_to,
                "by_distance": [{"distance": d, "halfwidth": math.exp(p.q(d)) - 1.0}
                                for d in sorted(set(distances))]}


def collect(reports: Dict[str, dict]) -> dict:
    """The residuals file of these reports (folder -> report.json): every held-out point's
    measured step and predicted range, by study and kind of machine."""
    studies = []
    for folder, rep in sorted(reports.items()):
        pred = rep.get("prediction") or {}
        machines = {g.get("machine") for g in (rep.get("provenance") or {}).get("groups") or []}
        kinds = {machine_kind(m) for m in machines}
        if not pred.get("held_out") or len(kinds) != 1:
            continue
        points = []
        for ax in pred.get("axes") or []:
            p_cal = ax["model"]["calibrated_p"]
            for pt in ax["points"]:
                if pt["fitted"] or pt["predicted"]["step"] is None:
                    continue
                points.append({"axis": ax["axis"], "nodes": pt["nodes"], "p_cal": p_cal,
                               "measured_s": pt["measured"]["step"],
                               "predicted_s": pt["predicted"]["step"],
                               "low_s": pt["step_if_hidden"], "high_s": pt["step_if_none"]})
        if points:
            studies.append({"study": rep["study"], "folder": folder, "kind": kinds.pop(),
                            "points": points})
    return {"schema": SCHEMA, "studies": studies}
