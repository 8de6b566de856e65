"""The report's answer, before any table: for each axis, how much faster its largest point ran
than its smallest and at what efficiency, where the rest of the step went there, and what the
model forecasts at the node counts planned, with its band."""
from __future__ import annotations

import math
from typing import Dict, List, Optional

from ..analysis.budget import LABELS
from ..analysis.units import seconds

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


def _forecast_rows(f: Optional[dict], by_node: bool, drawn: Optional[dict] = None) -> List[str]:
    """The forecast at the planned counts as a table (this allocation, else the first named
    network it shows), with the step's band; ``drawn``: how it was drawn (a pooled band is
    checked only as far as other studies' held-out points reach, which is said)."""
    if not f:
        return []
    rows, where = f.get("here") or [], "on this allocation"
    if not rows and f.get("networks"):
        net = f["networks"][0]
        rows = net["rows"]
        where = ("of the compute alone: the ranks shared one host, no network was measured"
                 if net["network"] == "compute" else f"on {net['label']}")
    shown = [r for r in rows if r.get("step_s")]
    if not shown:
        return []
    cal = f["calibrated_nodes"]
    calibrated = _layout(cal if by_node else 1, cal, by_node)    # '2 nodes', or '2 ranks'
    reach = (drawn or {}).get("checked_to")
    past = reach is not None and any(r["nodes"] > cal * 2 ** reach for r in shown)
    # a pooled band beyond the farthest held-out distance keeps that width: said in the heading
    unchecked = (f"; bands checked up to {cal * 2 ** reach:.3g} nodes ({2 ** reach:.3g}× the "
                 "calibration) by other studies' held-out points, not beyond" if past else "")
    out = [f"- Forecast (MODEL, calibrated on ≤ {calibrated}; {where}{unchecked}):", "",
           "  | at | efficiency | step | 90% band of the step |", "  |---|---:|---:|---|"]
    for r in shown:
        band = r.get("band_s")
        out.append(f"  | {_layout(r['nodes'], r.get('ranks', r['nodes']), by_node)} "
                   f"| {r['efficiency']:.0%}{' †' if r.get('above_measured') else ''} "
                   f"| {seconds(r['step_s'])} | "
                   + (f"{seconds(band[0])} – {seconds(band[1])}" if band else "-") + " |")
    # one reason, its largest node count's: the rows' differ only in their shares' last digit
    why = [r["above_measured"] for r in shown if r.get("above_measured")][-1:]
    return out + [""] + [f"  † {w}." for w in why] + ([""] if why else [])


def _best_exchange(pred: dict, axis: str, study_file: str, root: str) -> Optional[tuple]:
    """Where the axis ran the MPI library's allreduce and the model gives another more at its
    largest point: (that remedy, the line saying what it would give, the one command that runs
    the study with the allocation's pick: its tune jobs first; recorded points are kept, so into
    another root)."""
    best = next((r for r in pred.get("remedies") or []
                 if r["axis"] == axis and r["remedy"].startswith("allreduce ")), None)
    if best is None:
        return None
    algo = best["remedy"].split(" (", 1)[0][len("allreduce "):]
    how = (f"`hpcdl study submit {study_file} --tune --results-root {root}-tuned`" if study_file
           else "`hpcdl tune` on the allocation, then `[run] tuning` in the study")
    return best, (f"- The allocation's best exchange (MODEL): the points ran the MPI library's "
                  f"allreduce; {algo} gives {best['model_efficiency']:.0%} at {best['nodes']} "
                  f"nodes against {best['model_efficiency_as_run']:.0%} as run. Get it: "
                  f"{how}."), how


def _remedy(pred: dict, axis: str, exchange: Optional[tuple] = None) -> List[str]:
    """The remedy the model predicts gains the most at the axis's largest point, measured
    beside it where the study ran it; where that is the allocation's best exchange
    (``exchange``, :func:`_best_exchange`), with the command that gets it, else that line too."""
    best = max((r for r in pred.get("remedies") or []
                if r["axis"] == axis and (r.get("model_gain") or 0) > 1.01),
               key=lambda r: r["model_gain"], default=None)
    if best is None:
        return [exchange[1]] if exchange else []
    meas = best.get("measured_efficiency")
    line = (f"- Most useful remedy (MODEL): {best['remedy']}: efficiency "
            f"{best['model_efficiency_as_run']:.0%} → {best['model_efficiency']:.0%} at "
            f"{best['nodes']} nodes"
            + (f" (measured {meas:.0%})" if meas is not None else "") + ".")
    if exchange and exchange[0] is best:
        return [line + f" The points ran the MPI library's allreduce; get it: {exchange[2]}."]
    return [line] + ([exchange[1]] if exchange else [])


def summary(res, study_file: str = "", root: str = "results") -> List[str]:
    """The answer that opens the report (none for a study of one point per axis): the first
    axis's measured speedup and efficiency at its largest point and where the rest went, the
    forecast at the planned counts with bands, the most useful remedy; one line for the others."""
    by_axis: Dict[str, list] = {}
    for row in res.rows:
        by_axis.setdefault(row.axis, []).append(row)
    budgets = {(b["axis"], b["nodes"], b["ranks"]): b for b in res.budget or []}
    pred = res.prediction or {}
    forecasts = {f["axis"]: f for f in pred.get("forecast") or []}
    lines, others = [], []
    for axis, rows in by_axis.items():
        top = max(rows, key=lambda r: (r.ranks, r.nodes))
        base = min(rows, key=lambda r: (r.ranks, r.nodes))
        if top is base or not math.isfinite(top.speedup):
            continue
        if lines:
            others.append(f"`{axis}` {_layout(top.nodes, top.ranks)} {top.speedup:.2f}×, "
                          f"{top.efficiency:.0%}")
            continue
        lines += [f"**Answer** for `{axis}`:", "",
                  f"- Measured: {_layout(top.nodes, top.ranks)} ran {top.speedup:.2f}× as fast "
                  f"as {_layout(base.nodes, base.ranks, top.nodes > 1)}, efficiency "
                  f"{top.efficiency:.0%}" + _losses(budgets.get((axis, top.nodes, top.ranks)))
                  + ("" if top.over_bound is None else
                     "; its step is {:.2f}× its physical bound (the measured compute beside a "
                     "line-rate ring, overlapped; {:.2f}× one after the other)".format(
                         *top.over_bound)) + "."]
        lines += _forecast_rows(forecasts.get(axis), top.nodes > 1, pred.get("band_drawn")) or [""]
        lines += _remedy(pred, axis, _best_exchange(pred, axis, study_file, root))
    if others:
        lines.append("- The other axes at their largest point (speedup, efficiency): "
                     + "; ".join(others) + ".")
    return lines + [""] if lines else []
