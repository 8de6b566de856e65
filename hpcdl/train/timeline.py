"""Horovod's timeline, summarised: the time per step in each of its activities.

``hpcdl train --timeline PATH`` (a study's ``[run] timeline = true``) has Horovod record its
timeline (Chrome trace format, written by rank 0 only) over the timed steps. Each tensor has its
own row there, and a fused allreduce shows on the row of every tensor it carries, so an
activity's time is the union of its intervals over all rows: the wall-clock time during which
at least one tensor was in it. The summary gives, per activity (NEGOTIATE_ALLREDUCE: the ranks
agreeing on what is ready; ALLREDUCE and its parts: MEMCPY_IN_FUSION_BUFFER, the MPI or NCCL
allreduce, MEMCPY_OUT_FUSION_BUFFER), milliseconds per step; and, from the moments Horovod marks
each rank ready inside a negotiation, how far apart the ranks arrived and which arrived last
(Horovod's own view of a straggler). Standard library only.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Dict, List, Optional, Tuple

__all__ = ["read_events", "summarize"]


def read_events(path) -> List[dict]:
    """The trace's events. A timeline still being written (no closing bracket, a torn last
    event) is read up to its last whole event."""
    text = Path(path).read_text(errors="replace").strip()
    if not text:
        return []
    try:
        data = json.loads(text)
    except ValueError:
        body = text.rstrip(",\n ")
        cut = body.rfind("}")
        data = None
        while cut > 0 and data is None:
            try:
                data = json.loads(body[:cut + 1] + "]")
            except ValueError:
                cut = body.rfind("}", 0, cut)
        data = data or []
    return [e for e in data if isinstance(e, dict)]


def _is_ready_marker(e: dict) -> bool:
    """Horovod marks, inside a negotiation, the moment each rank was ready: a zero-length event
    named by the rank."""
    return e.get("ph") == "X" and str(e.get("name", "")).isdigit() and not e.get("dur")


def _intervals(events: List[dict]):
    """Per activity, its (start, end) intervals in µs, from B/E pairs on each row (pid, tid)
    and from complete (X) events; and per negotiation, its ranks' ready markers [(ts, rank)]."""
    open_: Dict[tuple, List[Tuple[str, float]]] = {}
    out: Dict[str, List[Tuple[float, float]]] = {}
    ready: Dict[tuple, List[Tuple[float, str]]] = {}
    negotiations: List[List[Tuple[float, str]]] = []
    for e in events:
        ph, ts = e.get("ph"), e.get("ts")
        if ts is None:
            continue
        row = (e.get("pid"), e.get("tid"))
        if _is_ready_marker(e):
            ready.setdefault(row, []).append((float(ts), str(e["name"])))
        elif ph == "B":
            open_.setdefault(row, []).append((e.get("name", "?"), float(ts)))
            ready[row] = []
        elif ph == "E" and open_.get(row):
            name, t0 = open_[row].pop()
            name = e.get("name") or name
            out.setdefault(name, []).append((t0, float(ts)))
            if name.startswith("NEGOTIATE") and len(ready.get(row, [])) > 1:
                negotiations.append(ready[row])
        elif ph == "X" and "dur" in e:
            out.setdefault(e.get("name", "?"), []).append((float(ts), float(ts) + float(e["dur"])))
    return out, negotiations


def _negotiation(negotiations) -> Optional[dict]:
    """How far apart the ranks became ready in each negotiation (the arrival skew as Horovod saw
    it), and which rank was ready last how often."""
    if not negotiations:
        return None
    spreads = sorted((max(m)[0] - min(m)[0]) / 1e3 for m in negotiations)
    last: Dict[str, int] = {}
    for m in negotiations:
        rank = max(m)[1]
        last[rank] = last.get(rank, 0) + 1
    return {"count": len(negotiations), "ready_spread_ms_median": spreads[len(spreads) // 2],
            "ready_spread_ms_max": spreads[-1], "last_ready": dict(sorted(last.items()))}


def _union(spans: List[Tuple[float, float]]) -> float:
    total, end = 0.0, None
    for a, b in sorted(spans):
        if end is None or a > end:
            total += b - a
            end = b
        elif b > end:
            total += b - end
            end = b
    return total


def summarize(path, steps: int) -> Optional[dict]:
    """{activity: ms per step} of the timeline at ``path`` over ``steps`` steps (None without
    a readable timeline)."""
    if not Path(path).is_file() or steps <= 0:
        return None
    spans, negotiations = _intervals(read_events(path))
    if not spans:
        return None
    return {"file": str(path), "steps": steps,
            "ms_per_step": {name: _union(s) / 1e3 / steps for name, s in sorted(spans.items())},
            "method": "union over tensor rows of each activity's intervals, per step",
            "negotiation": _negotiation(negotiations)}
