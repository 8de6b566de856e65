"""The words and tables of the report's section on the asynchronous parameter server and the
pipeline (:mod:`.sections` registers it): their runs' own figures, and the timeline of a
pipeline's stages."""
from __future__ import annotations

from typing import Dict, List

from .table import _f, _pct, Table


def _systems_table(res) -> Table:
    """The asynchronous parameter server's and the pipeline's own figures per configuration."""
    t = Table("async-and-pipeline", "Asynchronous updates and pipelines",
              ["axis", "ranks", "runs", "updates/s", "staleness mean / p95 / max",
               "staleness histogram (staleness: updates)", "largest lead", "held (s)",
               "bubble", "GPipe (K-1)/(M+K-1)", "for the timed stages", "activation bytes/step",
               "ring bytes/rank"],
              meta={"staleness": "updates the server applied between a worker's pull and its "
                                 "push, over every applied update of every repeat",
                    "largest lead": "the most pushes a worker was ahead of the slowest running "
                                    "one when answered (at most the bound S)",
                    "bubble": "each stage's time not computing over the step, averaged over "
                              "stages (median over repeats)"})
    for r in res.systems:
        a, p = r.get("kind") == "async", r.get("kind") == "pipeline"
        hist = ", ".join(f"{k}: {n}" for k, n in (r.get("staleness_hist") or {}).items())
        t.add([r["axis"], r["ranks"], r["runs"],
               _f(r.get("updates_per_s"), 1) if a else "-",
               (f"{r['staleness_mean']:.2f} / {r['staleness_p95']} / {r['staleness_max']}"
                if a and r.get("staleness_mean") is not None else "-"),
               hist if a else "-", r.get("lead_max", "-") if a else "-",
               _f(r.get("held_s"), 2) if a else "-",
               _pct(r.get("bubble")) if p else "-", _pct(r.get("bubble_theory")) if p else "-",
               _pct(r.get("bubble_expected")) if p else "-",
               f"{r['bytes_per_step']:,}" if p else "-",
               f"{r['ring_bytes_per_rank']:,.0f}" if p else "-"],
              {k: (hist if k == "staleness_hist" else r.get(k)) for k in _SYSTEMS_KEYS})
    return t


_SYSTEMS_KEYS = ("axis", "ranks", "runs", "kind", "workers", "staleness_bound", "updates_per_s",
                 "staleness_mean", "staleness_p95", "staleness_max", "staleness_hist",
                 "lead_max", "held_s", "stages", "micro_batches", "bubble", "bubble_theory",
                 "bubble_expected", "bytes_per_step", "ring_bytes_per_rank")


COST_COLUMN = "timeline's cost a step (median of the runs)"


def _timeline_table(res) -> Table:
    """Horovod's own view of each point beside the budget's exchange not hidden."""
    shown = [b for b in res.budget if b.get("timeline_ms")]
    totals: Dict[str, float] = {}
    for b in shown:
        for name, ms in b["timeline_ms"].items():
            totals[name] = totals.get(name, 0.0) + ms
    names = sorted(totals, key=lambda n: -totals[n])[:8]
    has_cost = any(b.get("timeline_cost") is not None for b in shown)   # runs measured it
    t = Table("horovod-timeline", "Horovod's timeline, ms per step",
              ["axis", "nodes", "ranks"] + names + ["budget: exchange not hidden (ms)",
                                                    "ranks ready apart (ms, median)",
                                                    "ready last (rank: negotiations)"]
              + ([COST_COLUMN] if has_cost else []),
              meta={"method": "per activity, the union of its intervals over the tensors' rows, "
                              "per timed step; median over repeats"})
    for b in shown:
        secs = (b.get("budget") or {}).get("seconds") or {}
        ex = secs.get("exchange")
        neg = b.get("negotiation") or {}
        last = ", ".join(f"{r}: {n}" for r, n in sorted((neg.get("last_ready") or {}).items(),
                                                         key=lambda kv: -kv[1])[:3]) or "-"
        cost = b.get("timeline_cost")
        t.add([b["axis"], b["nodes"], b["ranks"]]
              + [_f(b["timeline_ms"].get(n), 3) for n in names]
              + [_f(None if ex is None else ex * 1e3, 3), _f(neg.get("ready_spread_ms_median"), 3),
                 last] + (["-" if cost is None else f"{cost * 100:+.1f}%"] if has_cost else []),
              {"axis": b["axis"], "nodes": b["nodes"], "ranks": b["ranks"],
               **{n: b["timeline_ms"].get(n) for n in sorted(totals)},
               "budget_exchange_ms": None if ex is None else ex * 1e3,
               "ready_spread_ms_median": neg.get("ready_spread_ms_median"),
               "last_ready": last, **({"timeline_cost": cost} if has_cost else {})})
    return t


def _systems_markdown(by_name) -> List[str]:
    t = by_name.get("async-and-pipeline")
    if t is None:
        return []
    return ["## Asynchronous updates and pipelines", "",
            "The asynchronous parameter server's and the pipeline's own figures. Staleness: the "
            "updates the server applied between a worker's pull and its push; the largest lead: "
            "the most pushes a worker was ahead of the slowest running one when answered (a "
            "bound S keeps it at S or below). The bubble: each stage's time not computing over "
            "the step, averaged over stages, beside GPipe's (K−1)/(M+K−1) for equal stages and "
            "the figure that schedule gives for the stages as the cut timed them. Activation "
            "bytes: what a pipeline step sends across all cuts, forward and back; ring bytes: "
            "what each rank sends in a ring allreduce of the same model's gradients when data "
            "parallel. These runs have no allreduce model: the step is not one.", "",
            t.markdown(), "", f"CSV: `{t.name}.csv`", ""]
