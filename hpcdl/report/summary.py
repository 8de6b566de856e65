"""The report's answer, before any table: for each axis, how much faster its largest point ran
than its smallest and at what efficiency, where the rest of the step went there, and what the
model forecasts at the node counts planned, with its band."""
from __future__ import annotations

import math
from typing import Dict, List, Optional

from ..analysis.budget import LABELS

TOP_PARTS = 3          # the largest losses named
SHOWN_PART = 0.01      # a loss under 1% of the step is not named


def _layout(nodes: int, ranks: int, by_node: bool = False) -> str:
    """'8 nodes', '2 nodes × 4 ranks', '1 node' where the axis spans nodes, else '4 ranks'."""
    if nodes > 1 or by_node:
        per = ranks // nodes
        return (f"{nodes} node{'s' if nodes > 1 else ''}"
                + (f" × {per} ranks" if per > 1 else ""))
    return f"{ranks} rank{'s' if ranks > 1 else ''}"


def _losses(entry: Optional[dict]) -> str:
    """'of the 47% lost: exchange not hidden 26%, ...' from a point's efficiency budget."""
    if not entry or not entry.get("budget"):
        return ""
    b = entry["budget"]
    named = sorted(((v, k) for k, v in (b.get("shares") or {}).items()
                    if v is not None and v >= SHOWN_PART), reverse=True)[:TOP_PARTS]
    if not named or b.get("loss") is None:
        return ""
    return (f"; of the {b['loss']:.0%} lost, " +
            ", ".join(f"{LABELS.get(k, k)} {v:.0%}" for v, k in named))


def _seconds(s: float) -> str:
    ms = s * 1000
    return f"{ms:.2f} ms" if ms < 10 else f"{ms:.0f} ms" if ms < 1000 else f"{s:.2f} s"


def _forecast(f: Optional[dict], by_node: bool) -> str:
    """'Forecast (MODEL, calibrated on ≤ 2 nodes), efficiency: 16 nodes 45% (step 891 ms, 90%
    band 0 ms to 2.24 s); ...' on this allocation, else on the first named network shown."""
    if not f:
        return ""
    rows, where = f.get("here") or [], ""
    if not rows and f.get("networks"):
        net = f["networks"][0]
        rows, where = net["rows"], f" on {net['label']}"
    shown = [r for r in rows if r.get("step_s")]
    if not shown:
        return ""
    parts = []
    for r in shown:
        band = r.get("band_s")
        parts.append(f"{_layout(r['nodes'], r.get('ranks', r['nodes']), by_node)} "
                     f"{r['efficiency']:.0%} (step {_seconds(r['step_s'])}"
                     + (f", 90% band {_seconds(band[0])} to {_seconds(band[1])})" if band else ")"))
    cal = f["calibrated_nodes"]
    calibrated = _layout(cal if by_node else 1, cal, by_node)    # '2 nodes', or '2 ranks'
    return (f". Forecast{where} (MODEL, calibrated on ≤ {calibrated}), efficiency: "
            + "; ".join(parts))


def summary(res) -> List[str]:
    """The lines that open the report (none for a study of one point per axis)."""
    by_axis: Dict[str, list] = {}
    for row in res.rows:
        by_axis.setdefault(row.axis, []).append(row)
    budgets = {(b["axis"], b["nodes"], b["ranks"]): b for b in res.budget or []}
    forecasts = {f["axis"]: f for f in (res.prediction or {}).get("forecast") or []}
    lines = []
    for axis, rows in by_axis.items():
        top = max(rows, key=lambda r: (r.ranks, r.nodes))
        base = min(rows, key=lambda r: (r.ranks, r.nodes))
        if top is base or not math.isfinite(top.speedup):
            continue
        lines.append(f"- `{axis}`: {_layout(top.nodes, top.ranks)} ran {top.speedup:.2f}× "
                     f"as fast as {_layout(base.nodes, base.ranks, top.nodes > 1)}, efficiency "
                     f"{top.efficiency:.0%}"
                     + _losses(budgets.get((axis, top.nodes, top.ranks)))
                     + _forecast(forecasts.get(axis), top.nodes > 1) + ".")
    return ["**In short**", ""] + lines + [""] if lines else []
