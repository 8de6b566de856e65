"""What a study's records declare about its model: the calibration subset, a bench fit, the
tuning, loop and spread files."""
from __future__ import annotations

import re
from typing import Dict, Iterable, Optional, Tuple


from .reading import Digest
from ..records import lookup as _get


def declared_calibration(recs: Iterable[dict]) -> Tuple[Optional[str], int]:
    """(the bench fit's path, N) a study's records declare: ``[model] fit`` ("fit:PATH"),
    ``calibrate = {nodes_max = N}`` ("runs:nodes<=N"), or both ("runs:nodes<=N;fit:PATH");
    (None, 0) for neither."""
    return _calibration(_declared(recs))


def declared_bench(recs: Iterable[dict]) -> Optional[str]:
    """The path pattern of the tuning files a study's ``[model] calibrate = {exchange = ...}``
    names (declared as "...;bench:PATTERN"), else None."""
    return _parts(_declared(recs)).get("bench")


def declared_loop(recs: Iterable[dict]) -> Optional[str]:
    """The loop file a study's ``[model] calibrate = {loop = ...}`` names (declared as
    "...;loop:PATH"), else None."""
    return _parts(_declared(recs)).get("loop")


def declared_spread(recs: Iterable[dict]) -> Optional[str]:
    """The spread file a study's ``[model] calibrate = {spread = ...}`` names (declared as
    "...;spread:PATH"), else None."""
    return _parts(_declared(recs)).get("spread")


def declared_forecast(recs: Iterable[dict]) -> Tuple[int, ...]:
    """The node counts a study's ``[model] forecast`` names (declared as "...;forecast:16,64"),
    else ()."""
    text = _parts(_declared(recs)).get("forecast", "")
    return tuple(int(x) for x in text.split(",") if x.strip().isdigit())


def _declared(recs: Iterable[dict]) -> str:
    """The first calibration the records declare with any part (not the plain "runs"), else ""."""
    if isinstance(recs, Digest):
        return recs.calibration or ""
    for r in recs:
        cal = str(_get(r, "declared", "calibration") or "")
        if cal and cal != "runs":
            return cal
    return ""


def _parts(cal: str) -> Dict[str, str]:
    """A declared calibration's parts by name: "runs:nodes<=N;fit:PATH;bench:PATTERN;loop:PATH;
    spread:PATH" (each part optional) gives {"runs": "nodes<=N", "fit": PATH, ...}."""
    out = {}
    for part in re.split(r";(?=(?:runs|fit|bench|loop|spread|forecast):)", cal):       # a path may hold ";"
        name, sep, value = part.partition(":")
        if sep:
            out.setdefault(name, value)
    return out


def _calibration(cal: str) -> Tuple[Optional[str], int]:
    parts = _parts(cal)
    runs = parts.get("runs", "")
    return (parts.get("fit"),
            int(runs.split("<=", 1)[1]) if runs.startswith("nodes<=") else 0)


def declared_nodes_max(recs: Iterable[dict]) -> int:
    """N of a study's ``[model] calibrate = {nodes_max = N}``, else 0."""
    return declared_calibration(recs)[1]
