"""What the model is calibrated and checked with, as one object (:class:`Inputs`): the study
declares it (``[model]``), every record carries it as JSON (``declared.model``), the command line
overrides its fields, and the analysis takes it whole."""
from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields, replace
from typing import Dict, Iterable, Optional, Tuple

from ..records import lookup as _get

FORECAST = (16, 64, 256)     # node counts forecast where neither the study nor the user names any


@dataclass(frozen=True)
class Inputs:
    """The model's settings. None (0 for ``nodes_max``) is "not given": the declared or default
    value then holds (:meth:`over`)."""

    nodes_max: int = 0                       # calibrate on runs with at most this many nodes
    fit: Optional[str] = None                # a bench fit (hpcdl bench fit) for the exchange
    exchange: Optional[str] = None           # tuning files (a path pattern, {nodes} ...) timed
    loop: Optional[str] = None               # a loop file (hpcdl bench allocation)
    spread: Optional[str] = None             # a spread file (hpcdl bench allocation)
    forecast: Optional[Tuple[int, ...]] = None   # node counts to forecast; () for none
    networks: Optional[Tuple[str, ...]] = None   # named networks (costmodel.PRESETS), else all
    residuals: Optional[str] = None          # other studies' held-out errors (the band's)

    def over(self, base: "Inputs") -> "Inputs":
        """``base`` with every field given here put over it."""
        return replace(base, **{f.name: getattr(self, f.name) for f in fields(self)
                                if getattr(self, f.name) not in (None, 0)})

    @property
    def counts(self) -> Tuple[int, ...]:
        """The node counts to forecast: as given, else :data:`FORECAST`."""
        return FORECAST if self.forecast is None else tuple(self.forecast)

    def as_json(self) -> Dict:
        """The given fields, as the record carries them."""
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in asdict(self).items()
                if v not in (None, 0)}

    @classmethod
    def of_json(cls, doc: Dict) -> "Inputs":
        known = {f.name for f in fields(cls)}
        doc = {k: v for k, v in (doc or {}).items() if k in known}
        if "forecast" in doc:
            doc["forecast"] = tuple(int(x) for x in doc["forecast"])
        if "networks" in doc:
            doc["networks"] = tuple(str(x) for x in doc["networks"])
        return cls(**{**doc, "nodes_max": int(doc.get("nodes_max") or 0)})

    @classmethod
    def of_text(cls, text: str) -> "Inputs":
        """The ``;``-joined form records made before the JSON one carried:
        "runs:nodes<=N;fit:PATH;bench:PATTERN;loop:PATH;spread:PATH;forecast:16,64"."""
        parts = {}
        for part in re.split(r";(?=(?:runs|fit|bench|loop|spread|forecast):)", text or ""):
            name, sep, value = part.partition(":")      # a path may hold ";" or ":"
            if sep:
                parts.setdefault(name, value)
        runs = parts.get("runs", "")
        counts = tuple(int(x) for x in parts.get("forecast", "").split(",") if x.strip().isdigit())
        return cls(nodes_max=int(runs.split("<=", 1)[1]) if runs.startswith("nodes<=") else 0,
                   fit=parts.get("fit"), exchange=parts.get("bench"), loop=parts.get("loop"),
                   spread=parts.get("spread"), forecast=counts or None)

    @classmethod
    def of_record(cls, rec: dict) -> Optional["Inputs"]:
        """What one record declares, None where it declares nothing beyond its runs."""
        doc = _get(rec, "declared", "model")
        if isinstance(doc, dict):
            return cls.of_json(doc) if doc else None
        text = str(_get(rec, "declared", "calibration") or "")
        return cls.of_text(text) if text and text != "runs" else None

    @classmethod
    def declared(cls, recs: Iterable[dict]) -> "Inputs":
        """The first declaration of a study's records (or what a Digest kept of them)."""
        kept = getattr(recs, "model", False)
        if kept is not False:
            return kept or cls()
        for r in recs:
            found = cls.of_record(r)
            if found is not None:
                return found
        return cls()
