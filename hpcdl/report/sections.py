"""The report's sections, registered once: each is one function that makes its tables and its
Markdown (and, where the analysis holds none, its entry in ``report.json``) from the analysis.

The order sections are registered in is the order of the Markdown; ``files_at`` places a
section's tables in the report's list of files (and so in its closing "Files:" line). Adding a
section is one function with :func:`section` above it; nothing else changes.
"""
from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from .table import _axis_slug, _f, _ms, _pct, Table
from .. import analysis, costmodel
from ..analysis.budget import describe, LABELS, LOST_SHARE, PARTS, RATIO
from ..analysis.reading import Runs


@dataclass
class Context:
    """What a section may draw on: the analysis, what was gathered of the runs themselves
    (:class:`analysis.reading.Runs`), where the records came from, the plots."""

    res: analysis.StudyAnalysis
    about: Runs
    runs: Path
    pngs: List[Path] = field(default_factory=list)


@dataclass
class Part:
    """A section's contribution: its tables (one CSV each), its Markdown lines, and its own
    ``report.json`` entry when the analysis object does not already hold it."""

    tables: List[Table] = field(default_factory=list)
    markdown: List[str] = field(default_factory=list)
    json: Any = None


@dataclass
class Section:
    name: str
    make: Callable[[Context], Part]
    files_at: int
    json_key: Optional[str] = None


SECTIONS: List[Section] = []


def section(files_at: int = 99, json_key: Optional[str] = None):
    """Register the decorated ``make(ctx) -> Part`` as the next section of the report."""
    def register(make):
        SECTIONS.append(Section(make.__name__.lstrip("_"), make, files_at, json_key))
        return make
    return register


def render(ctx: Context):
    """(tables in file order, Markdown lines in section order, extra report.json entries)."""
    parts = [(s, s.make(ctx)) for s in SECTIONS]
    tables = [t for s, p in sorted(parts, key=lambda sp: sp[0].files_at) for t in p.tables]
    lines = [ln for _, p in parts for ln in p.markdown]
    extra = {s.json_key: p.json for s, p in parts if s.json_key and p.json is not None}
    return tables, lines, extra


def _by_name(tables) -> dict:
    return {t.name: t for t in tables}


# --- the sections, in the Markdown's order ------------------------------------------------------------

@section(files_at=0)
def scaling(ctx: Context) -> Part:
    """One table per axis: speedup, efficiency, Karp–Flatt, the split; the notes they cite."""
    res = ctx.res
    notes = _notes(res)
    tables = [_scaling_table(res, axis, notes) for axis in res.axes]
    lines = []
    for t in tables:
        lines += [f"## {t.title}", "", t.markdown(), "", f"CSV: `{t.name}.csv`", ""]
    if any(r.hidden_share is not None for r in res.rows):
        lines += ["Exchange hidden: the share of the exchange (timed alone) that the step hid "
                  "behind the backward pass, (compute + exchange − step) / exchange, a lower "
                  "bound (the step also holds the update); only for Horovod's per-tensor "
                  "allreduce, the one exchange that can overlap.", ""]
    if notes:
        lines += ["**Notes** (what these figures cannot support):", ""]
        lines += [f"{i}. {n}" for i, n in enumerate(notes, 1)] + [""]
    return Part(tables, lines)


@section(files_at=3)
def budget(ctx: Context) -> Part:
    """Where the efficiency goes, Horovod's timeline."""
    res = ctx.res
    tables = []
    if any(b.get("budget") for b in res.budget):
        tables.append(_budget_table(res))
    if any(b.get("timeline_ms") for b in res.budget):
        tables.append(_timeline_table(res))
    return Part(tables, _budget_markdown(res, _by_name(tables)))


@section()
def plots(ctx: Context) -> Part:
    if not ctx.pngs:
        return Part()
    return Part([], ["## Plots", ""] + [f"![{p.stem}]({p.name})" for p in ctx.pngs] + [""])


@section(files_at=2)
def target(ctx: Context) -> Part:
    """Time to accuracy beside throughput."""
    res = ctx.res
    tables = [_target_table(res)] if any(c.get("target") for c in res.convergence) else []
    return Part(tables, _target_markdown(res, _by_name(tables)))


@section(files_at=5)
def points(ctx: Context) -> Part:
    """A study of the user's own command, point by point."""
    t = command_table(ctx.about)
    tables = [t] if t is not None else []
    return Part(tables, _command_markdown(ctx.about, ctx.res.records, _by_name(tables)))


@section(files_at=4)
def systems(ctx: Context) -> Part:
    """The asynchronous server's and the pipeline's own figures."""
    tables = [_systems_table(ctx.res)] if ctx.res.systems else []
    return Part(tables, _systems_markdown(_by_name(tables)))


@section(files_at=1)
def model(ctx: Context) -> Part:
    """Which model the report has (or why none), and the published runs beside it."""
    res = ctx.res
    tables = [_published_table(res.published)]
    return Part(tables, _model_markdown(res, _by_name(tables)))


@section(files_at=1)
def prediction(ctx: Context) -> Part:
    """The points not calibrated on, predicted part by part, beside two baselines and a band."""
    pred = ctx.res.prediction
    if not pred:
        return Part()
    tables = [_prediction_table(pred)]
    if pred["cross_rate"]:
        tables.append(_cross_rate_table(pred))
    if pred["remedies"]:
        tables.append(_remedy_table(pred))
    table = _forecast_table(pred) if pred.get("forecast") else None
    if table is not None and table.rows:
        tables.append(table)
    return Part(tables, _prediction_markdown(pred, _by_name(tables)))


@section()
def runs(ctx: Context) -> Part:
    prov = ctx.res.provenance
    pooled = (["What was pooled (the code in hpcdl/ and the TensorFlow, Horovod and MPI under it, "
               "the study file and the box's settings must be the same in every record; runs "
               "sharing a machine must not overlap in time):",
               ""] + prov.lines() + [""]) if prov else []
    return Part([], ["## Runs", ""] + _manifest_summary(ctx.about, ctx.res.records) + [""] + pooled
                + _settings_markdown(ctx.about))


def _settings_markdown(about: Runs) -> List[str]:
    """The exchange settings each configuration's records ran with (from 'hpcdl tune' or not)."""
    if not about.settings:
        return []
    out = ["Exchange settings per configuration (what each run's record says it ran with):", ""]
    for axis, words in sorted(about.settings.items()):
        for w, n in words.most_common():
            out.append(f"- {axis}: {w} ({n} record(s))")
    return out + [""]


# --- tables and words the sections use ----------------------------------------------------------------

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


def _timeline_table(res) -> Table:
    """Horovod's own view of each point beside the budget's exchange not hidden."""
    shown = [b for b in res.budget if b.get("timeline_ms")]
    totals: Dict[str, float] = {}
    for b in shown:
        for name, ms in b["timeline_ms"].items():
            totals[name] = totals.get(name, 0.0) + ms
    names = sorted(totals, key=lambda n: -totals[n])[:8]
    t = Table("horovod-timeline", "Horovod's timeline, ms per step",
              ["axis", "nodes", "ranks"] + names + ["budget: exchange not hidden (ms)",
                                                    "ranks ready apart (ms, median)",
                                                    "ready last (rank: negotiations)"],
              meta={"method": "per activity, the union of its intervals over the tensors' rows, "
                              "per timed step; median over repeats"})
    for b in shown:
        secs = (b.get("budget") or {}).get("seconds") or {}
        ex = secs.get("exchange")
        neg = b.get("negotiation") or {}
        last = ", ".join(f"{r}: {n}" for r, n in sorted((neg.get("last_ready") or {}).items(),
                                                         key=lambda kv: -kv[1])[:3]) or "-"
        t.add([b["axis"], b["nodes"], b["ranks"]]
              + [_f(b["timeline_ms"].get(n), 3) for n in names]
              + [_f(None if ex is None else ex * 1e3, 3), _f(neg.get("ready_spread_ms_median"), 3),
                 last],
              {"axis": b["axis"], "nodes": b["nodes"], "ranks": b["ranks"],
               **{n: b["timeline_ms"].get(n) for n in sorted(totals)},
               "budget_exchange_ms": None if ex is None else ex * 1e3,
               "ready_spread_ms_median": neg.get("ready_spread_ms_median"),
               "last_ready": last})
    return t


def _budget_table(res) -> Table:
    t = Table("efficiency-budget", "Where the efficiency goes",
              ["axis", "nodes", "ranks", "efficiency", "measured loss"]
              + [LABELS[p] for p in PARTS] + ["unexplained", "stragglers named"],
              meta={"unit": "share of the step", "model": "budget.py: each part from the "
                    "ranks' own phase timings; exchange not hidden is bounded by the exchange "
                    "timed alone"})
    for b in res.budget:
        bud = b.get("budget")
        if bud is None:
            continue
        names = "; ".join(f"{s['rank']}@{s['host']} {s['phase']} ({s['repeats']}/{s['of']})"
                          for s in b["stragglers"]) or "none"
        if "shares" not in bud:
            t.add([b["axis"], b["nodes"], b["ranks"], _f(b["efficiency"], pct=True), "-"]
                  + ["-"] * (len(PARTS) + 1) + [names], {**b, "budget": bud})
            continue
        sh = bud["shares"]
        t.add([b["axis"], b["nodes"], b["ranks"], _f(b["efficiency"], pct=True),
               _f(bud["loss"], pct=True)] + [_f(sh[p], pct=True) for p in PARTS]
              + [_f(sh["unexplained"], pct=True), names],
              {"axis": b["axis"], "nodes": b["nodes"], "ranks": b["ranks"],
               "efficiency": b["efficiency"], "loss": bud["loss"],
               **{p: sh[p] for p in PARTS + ("unexplained",)},
               "stragglers": " | ".join(describe(s) for s in b["stragglers"])})
    return t


def command_table(about: Runs) -> Optional[Table]:
    """Each point of a study of the user's own command, its latest record (failed ones too):
    exit status, wall time, whether hpcdl's callback recorded it, and every scraped figure."""
    latest = about.commands
    if not latest:
        return None
    names = list(OrderedDict((n, None) for r in latest.values()
                             for n in r["command"].get("scraped") or {}))
    t = Table("command-points", "Your command, point by point",
              ["point", "ranks", "status", "exit status", "wall time (s)", "recorded by",
               "throughput from", "throughput per rank"] + [f"scraped {n}" for n in names],
              meta={"scraped": "the number on the last output line the study's pattern matched; "
                               "NO MATCH where no line did (never taken as zero)"})
    for pid, rec in latest.items():
        cmd = rec["command"]
        figs = cmd.get("scraped") or {}
        thr = rec["throughput"]
        source = ("-" if not thr else thr.get("source") or "hpcdl's callback (timed steps)")
        t.add([pid, rec["size"], rec["status"],
               cmd.get("exit_status"), _f(cmd.get("wall_time_s"), 1),
               "hpcdl's callback" if cmd.get("recorder") else "the launcher (no callback)",
               source, "-" if not thr else f"{thr['mean'] / (rec['size'] or 1):.6g}"]
              + [("NO MATCH" if figs.get(n, {}).get("value") is None else f"{figs[n]['value']:g}")
                 if n in figs else "-" for n in names],
              {"point": pid, "status": rec["status"], "exit_status": cmd.get("exit_status"),
               "wall_time_s": cmd.get("wall_time_s"), "recorder": cmd.get("recorder"),
               "throughput_source": None if not thr else source,
               "throughput_per_rank": None if not thr else thr["mean"] / (rec["size"] or 1),
               **{f"scraped_{n}": figs.get(n, {}).get("value") for n in names}})
    return t


def _command_markdown(about: Runs, count: int, by_name) -> List[str]:
    t = by_name.get("command-points")
    if t is None:
        return []
    lines = ["## Your command", "",
             "Each point ran the study's `[workload] command` on every rank. Figures under "
             "*scraped* were read from the output with the study's `[scrape]` patterns; a pattern "
             "that matched no line reads NO MATCH. A point that failed is listed here and left "
             "out of the tables above; `hpcdl study run` (or `submit`) runs it again.", ""]
    if about.recorded_commands:
        lines += ["With hpcdl's Keras callback the step time and throughput are timed steps, as "
                  "in hpcdl's own loop. The compute/exchange split comes from the callback's "
                  "probes after training (the forward and backward pass alone on random inputs "
                  "of the batch's shape, then the fp32 allreduce of those gradients), not from "
                  "the training steps themselves, whose exchange Keras runs inside the step.", ""]
    if about.recorded_commands < count:
        lines += ["Without the callback a point is seen from outside: speedup and efficiency "
                  "come from the scraped throughput where the study names one (`throughput` or "
                  "`throughput_per_rank`), else from the wall time, start-up included. Such a "
                  "point has no step time, no compute/exchange split and no model.", ""]
    return lines + [t.markdown(), "", f"CSV: `{t.name}.csv`", ""]


def _target_table(res) -> Table:
    t = Table("time-to-target", "Time to target beside throughput",
              ["axis", "nodes", "ranks", "global batch", "learning rate (rule, warm-up steps)",
               "seeds", "reached", "steps to target",
               "samples to target", "time to target (s, range)", "statistical efficiency",
               "time-to-target speedup", "throughput speedup"],
              meta={"summary": "MLPerf-style over seeds: with >= 5, the fastest and slowest "
                               "dropped and the rest averaged", "time": "training only, "
                               "evaluations excluded"})
    for c in res.convergence:
        if not c.get("target"):
            continue
        st, sa, ti = c["steps"], c["samples"], c["time_s"]
        rng = (f"{ti['mean']:.3g} ({ti['min']:.3g}–{ti['max']:.3g})" if ti["mean"] is not None
               else f"not reached in {c['max_steps']} steps")
        lr = c["lr"]
        t.add([c["axis"], c["nodes"], c["ranks"], c["global_batch"],
               f"{_f(lr['lr'], 4)} ({lr['rule']}, {lr['warmup_steps']})", c["seeds"],
               f"{c['reached']}/{c['seeds']}", _f(st["mean"], 4), _f(sa["mean"], 4), rng,
               _f(c["statistical_efficiency"]), _f(c["ttt_speedup"]),
               _f(c["throughput_speedup"])],
              {k: c.get(k) for k in ("axis", "nodes", "ranks", "global_batch", "seeds",
                                     "seed_values", "reached", "max_steps", "steps", "samples",
                                     "time_s", "statistical_efficiency", "ttt_speedup",
                                     "throughput_speedup", "target", "lr")})
    return t


def _scaling_table(res, axis, notes: List[str]) -> Table:
    sel = [r for r in res.rows if r.axis == axis]
    unit = sel[0].unit
    t = Table(f"scaling-{_axis_slug(axis)}", f"{res.scaling} scaling, {axis}",
              ["nodes", "ranks", "global batch", f"throughput ({unit}, ±1.96σ)", "step (ms)",
               "speedup", "efficiency", "Karp–Flatt e", "compute", "rest of step",
               "exchange hidden", "runs", "notes"],
              meta={"study": res.study, "scaling": res.scaling, "axis": axis, "unit": unit,
                    "baseline_ranks": min(r.ranks for r in sel)})
    for r in sel:
        ids = "; ".join(f"[{notes.index(f) + 1}]" for f in r.flags)
        t.add([r.nodes, r.ranks, r.global_batch, f"{r.throughput:.1f} ± {r.ci95:.1f}",
               _ms(r.step_time), _f(r.speedup, 2), _f(r.efficiency, pct=True),
               _f(r.karp_flatt, 3), _f(r.compute_share, pct=True), _f(r.rest_share, pct=True),
               _f(r.hidden_share, pct=True), r.runs, ids],
              {"backend": r.backend, "compression": r.compression, "nodes": r.nodes,
               "ranks_per_node": r.ranks_per_node, "ranks": r.ranks, "batch_size": r.batch_size,
               "global_batch": r.global_batch, "throughput_mean": r.throughput,
               "throughput_std": r.throughput_std, "throughput_ci95": r.ci95, "unit": unit,
               "step_time_s": r.step_time, "speedup": r.speedup, "efficiency": r.efficiency,
               "karp_flatt": r.karp_flatt, "compute_s": r.compute_s,
               "compute_share": r.compute_share, "rest_share": r.rest_share,
               "exchange_hidden_share": r.hidden_share,
               "gradient_bytes": r.gradient_bytes, "runs": r.runs, "flags": " | ".join(r.flags)})
    return t


def _notes(res) -> List[str]:
    """The study-wide list of the rows' flags, each once; a row's notes are numbered in it."""
    out = []
    for r in res.rows:
        for f in r.flags:
            if f not in out:
                out.append(f)
    return out


def _published_table(published) -> Table:
    s = analysis.PUBLISHED_SETUP
    net = costmodel.PRESETS[s["network"]]
    t = Table("model-vs-published", "MODEL vs Horovod's published efficiency at 512 GPUs",
              ["network model", "gradients (MB, fp32)", "MODEL compute (s)", "MODEL exchange (s)",
               "MODEL efficiency, no overlap", "published",
               "window the model needs (share of compute)"],
              meta={"gpus": s["gpus"], "network": net.name, "alpha_s": net.alpha,
                    "beta_s_per_byte": net.beta, "gamma_s_per_byte": s["gamma"],
                    "batch_per_gpu": s["batch_per_gpu"], "fusion_bytes": s["fusion_bytes"],
                    "kind": "model"})
    for p in published:
        t.add([p["model"], _f(p["gradient_MB"], 1), _f(p["compute_s"], 3), _f(p["exchange_s"], 3),
               _f(p["model_efficiency_no_overlap"], pct=True), _f(p["published_efficiency"], pct=True),
               _f(p["window_needed"], pct=True)], p)
    return t


# --- Markdown -------------------------------------------------------------------------------------

def _manifest_summary(about: Runs, count: int) -> List[str]:
    times = about.first_time is not None
    out = [f"- records: {count}" + (f", {about.first_time} to {about.last_time}"
                                    if times else ""),
           f"- hosts: {', '.join(sorted(about.hosts)) or '-'}",
           f"- Slurm job ids: {_some(sorted(about.jobs)) if about.jobs else 'none (run locally through mpirun)'}",
           f"- git commits: {', '.join(sorted(about.commits)) or '-'}",
           f"- threads per rank: {', '.join(str(t) for t in sorted(about.threads, key=str))}"]
    for v, n in about.versions.most_common():
        out.append(f"- versions ({n} record(s)): " + ", ".join(f"{k} {x}" for k, x in v))
    for cpu, n in about.cpus.most_common():
        out.append(f"- processor ({n} record(s)): {cpu}")
    if about.platform:
        out.append(f"- platform: {about.platform}, {about.cpu_count} CPUs")
    return out


def _some(items, k: int = 8) -> str:
    return ", ".join(items) if len(items) <= k else (
        f"{len(items)} jobs: {', '.join(items[:k // 2])}, ..., {', '.join(items[-k // 2:])}")


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


def _budget_markdown(res, by_name) -> List[str]:
    t = by_name.get("efficiency-budget")
    named = [(b, s) for b in res.budget for s in b["stragglers"]]
    if t is None and not named:
        return []
    lines = ["## Where the efficiency goes", ""]
    if t is not None:
        lines += ["The measured efficiency loss 1 − E of each point against the smallest run of "
                  "its axis, split by the ranks' own phase timings (per timed step: input, the "
                  "step, the bookkeeping after it; at the probes: compute alone, the exchange "
                  "alone, the wait for the slowest rank). The typical rank is the lower median over "
                  "ranks (of two, the faster). Compute slowdown: the typical rank's compute "
                  "beyond the baseline's (scaled by the per-rank batch); waiting for "
                  "stragglers: the slowest rank's compute and input beyond the typical rank's; "
                  "input: the typical rank's input beyond the baseline's; fixed: bookkeeping "
                  "beyond the baseline's; exchange not hidden: the rest of the typical rank's "
                  "step, bounded by the exchange timed alone. Unexplained is what these parts "
                  "leave of the measured loss (the parts are medians of different steps; the "
                  "loss comes from the throughput).", "", t.markdown(), "",
                  f"CSV: `{t.name}.csv`", ""]
        notes = sorted({(b.get("budget") or {}).get("note") for b in res.budget} - {None})
        lines += [f"- {n}." for n in notes] + ([""] if notes else [])
    lines += [f"**Stragglers** (a rank ≥ {RATIO:.2f}× the other ranks' median in compute or "
              f"input, costing them ≥ {LOST_SHARE * 100:.0f}% of the step): "
              + ("none named." if not named else ""), ""]
    lines += [f"- {b['axis']}, {b['nodes']} node(s): {describe(s)}, in {s['repeats']} of "
              f"{s['of']} run(s)" for b, s in named] + ([""] if named else [])
    tl = by_name.get("horovod-timeline")
    if tl is not None:
        lines += ["**Horovod's timeline** (`[run] timeline = true`): its own view of the timed "
                  "steps, to cross-check the budget. NEGOTIATE_ALLREDUCE is the ranks agreeing "
                  "on which tensors are ready (long when one rank arrives late), ALLREDUCE the "
                  "collective with its copies in and out of the fusion buffer; each activity is "
                  "the wall time during which at least one tensor was in it.", "",
                  tl.markdown(), "", f"CSV: `{tl.name}.csv`", ""]
    return lines


def _target_markdown(res, by_name) -> List[str]:
    t = by_name.get("time-to-target")
    if t is None:
        return []
    c0 = next(c for c in res.convergence if c.get("target"))
    goal = (f"{c0['target']['metric']} {'≥' if c0['target']['metric'] == 'accuracy' else '≤'} "
            f"{c0['target']['value']:g}")
    methods = sorted({c["time_s"]["method"] for c in res.convergence if c.get("target")})
    return ["## Time to target", "",
            f"Target: held-out {goal}, within {c0['max_steps']} steps; training ends at the first "
            "evaluation that reaches it. Steps, samples and time to target over the seeds of each "
            f"configuration ({'; '.join(methods)}); time is training only (evaluations left "
            "out), counted from the first step, so it includes the first steps' graph building "
            "and the warm-up that the throughput leaves out: in runs of seconds these weigh. "
            "Statistical efficiency = samples to target at the smallest count / at N; "
            "time-to-target speedup = T(N₀)/T(N), beside the throughput speedup of the scaling "
            "table: the gap between the two is what a larger global batch costs in samples (their "
            "ratio is the statistical efficiency) and what the start costs. "
            "A configuration where a seed did not reach the target has no ratio.", "",
            t.markdown(), "", f"CSV: `{t.name}.csv`", ""]


def _model_markdown(res, by_name) -> List[str]:
    head = (["## Communication model", "",
             "One model: the part-by-part model of the next section, calibrated on this study's "
             "runs" + (" and checked on the points it was not calibrated on" if
                       res.prediction.get("held_out") else "")
             + ", then carried to the forecast."] if res.prediction else
            ["## Communication model", "", f"None: {res.why_no_model}."])
    return head + ["", "Horovod's published run, with the same exchange formula:", ""] + \
        _published_markdown(by_name["model-vs-published"])[2:]


def _prediction_table(pred) -> Table:
    t = Table("prediction-vs-measured", "Prediction beside measurement, part by part",
              ["axis", "nodes", "point", "allreduce", "compute meas (ms)", "pred", "err",
               "exchange meas (ms)", "pred", "err", "exchange from", "step meas (ms)", "pred",
               "err", f"{pred['nominal'] * 100:.0f}% band (ms)", "in band", "naive err",
               "one-β err"],
              meta={"calibration": f"runs with at most {pred['nodes_max']} node(s)"
                                   + "".join(sorted({f"; exchange from the {src}" for src in (
                                       a["model"]["exchange_source"] for a in pred["axes"])
                                       if src.startswith("bench fit")})),
                    "compute": "the slowest rank's median probe, first probe left out",
                    "exchange": "the slowest rank's median exchange timed alone",
                    "band": f"conformal, {pred['nominal'] * 100:.0f}% nominal, "
                            f"±{_f(pred['band_halfwidth'], pct=True)}; beyond the calibration "
                            "its lower edge as if the exchange hid as at the calibration",
                    "naive": "efficiency stays at the largest calibrated point's",
                    "one_beta": "1-node step + one beta (alpha = 0) from the largest calibrated "
                                "point's excess"})
    for ax in pred["axes"]:
        for pt in ax["points"]:
            m, p, e = pt["measured"], pt["predicted"], pt["error"]
            band = pt.get("band")
            t.add([ax["axis"], pt["nodes"], "fitted" if pt["fitted"] else "PREDICTED",
                   pt["algorithm"], _ms(m["compute"]), _ms(p["compute"]), _f(e["compute"], pct=True),
                   _ms(m["exchange"]), _ms(p["exchange"]), _f(e["exchange"], pct=True),
                   "tune" if pt.get("exchange_from") else "model",
                   _ms(m["step"]), _ms(p["step"]), _f(e["step"], pct=True),
                   f"{band[0] * 1e3:.4g}–{band[1] * 1e3:.4g}" if band else "-",
                   {True: "yes", False: "**no**"}.get(pt.get("inside"), "-"),
                   _f(pt["naive_error"], pct=True), _f(pt["one_parameter_error"], pct=True)],
                  {"axis": ax["axis"], "nodes": pt["nodes"], "fitted": pt["fitted"],
                   "algorithm": pt["algorithm"], "runs": pt["runs"],
                   **{f"measured_{k}_s": m[k] for k in m}, **{f"model_{k}_s": p[k] for k in p},
                   **{f"{k}_error": e[k] for k in e}, "band_s": band, "inside": pt.get("inside"),
                   "exchange_from": pt.get("exchange_from"),
                   "link_model_exchange_s": pt.get("model_exchange"),
                   "link_model_exchange_error": pt.get("model_exchange_error"),
                   "naive_step_s": pt["naive"], "naive_error": pt["naive_error"],
                   "one_parameter_step_s": pt["one_parameter"],
                   "one_parameter_error": pt["one_parameter_error"]})
    return t


def _cross_rate_table(pred) -> Table:
    t = Table("prediction-across-rates", "Calibrated at one link rate, predicting another",
              ["calibrated on", "predicts", "nodes", "step meas (ms)", "pred", "err",
               "exchange meas (ms)", "pred", "err"],
              meta={"given": "only the other link rate"})
    for c in pred["cross_rate"]:
        t.add([c["calibrated"], c["predicted"], c["nodes"], _ms(c["measured_step"]),
               _ms(c["model_step"]), _f(c["error"], pct=True), _ms(c["measured_exchange"]),
               _ms(c["model_exchange"]), _f(c["exchange_error"], pct=True)], dict(c))
    return t


def _remedy_table(pred) -> Table:
    t = Table("prediction-remedies", "Remedies: the gain predicted, and measured where run",
              ["axis", "nodes", "remedy", "MODEL E as run", "MODEL E", "MODEL gain",
               "measured E as run", "measured E", "measured gain", "gain error"],
              meta={"efficiency": "1-node step / p-node step (weak scaling)"})
    for r in pred["remedies"]:
        t.add([r["axis"], r["nodes"], r["remedy"], _f(r["model_efficiency_as_run"], pct=True),
               _f(r["model_efficiency"], pct=True),
               "-" if r["model_gain"] is None else f"{r['model_gain']:.3f}×",
               _f(r["measured_efficiency_as_run"], pct=True), _f(r["measured_efficiency"], pct=True),
               "-" if r["measured_gain"] is None else f"{r['measured_gain']:.3f}×",
               _f(r["gain_error"], pct=True)], dict(r))
    return t


def _noise_words(noise) -> str:
    """What the repeats say about the measurement's own error."""
    if not noise or not noise["points"]:
        return ("One repeat per point: the measurement's own error (repeats of one point apart) "
                "is not known, so no error above can be told from it.")
    return ("The measurement's own error: the repeats of one point lie "
            f"{_f(noise['median'], pct=True)} apart (slowest − fastest step over their median; "
            f"median of {noise['points']} points, at most {_f(noise['max'], pct=True)}); a "
            "prediction is not checked closer than about half that.")


def _floor_words(pred, mae, half) -> str:
    """Whether half the one-β baseline's error is closer than these repeats can check: below the
    error a model without bias would show (:mod:`hpcdl.analysis.floor`), or, without folds of
    repeats to refit on, within half the repeats' own spread."""
    if half is None or mae is None or mae <= half:
        return ""
    low, noise = pred.get("floor") or {}, pred.get("noise") or {}
    if low:
        folds = ", ".join(_f(x, pct=True) for x in low["mae_model_by_fold"])
        ones = ", ".join(_f(x, pct=True) for x in low["mae_one_parameter_by_fold"])
        words = (f" Calibrated on each of {low['folds']} folds of repeats alone, the model's "
                 f"mean error was {folds} against the one-β baseline's {ones}. Its prediction "
                 f"of a held-out point varied by ±{_f(low['model_moves'], pct=True)} (standard "
                 f"deviation) between folds, the one-β baseline's by "
                 f"±{_f(low['one_parameter_moves'], pct=True)}, a held-out point's repeats by "
                 f"±{_f(low['measured_moves'], pct=True)}. A "
                 "model without any bias, calibrated on all of them, would show a mean error of "
                 f"about {_f(low['floor'], pct=True)} here (`hpcdl.analysis.floor`)")
        if half <= low["floor"]:
            return words + (f"; half the one-β baseline's error ({_f(half, pct=True)}) is below "
                            "that: these repeats cannot show a model that close (more repeats "
                            "lower it as 1/√n).")
        return words + "."
    if noise.get("median") is not None and half <= noise["median"] / 2:
        return (f" Half the one-β baseline's error ({_f(half, pct=True)}) is within half "
                "the repeats' own spread, about what a predictor that knew every point "
                "exactly would miss by: these repeats cannot show a model that close.")
    return ""


def _bench_words(pred) -> List[str]:
    """What the held-out points' exchange from ``hpcdl tune``'s files was, and what the link
    model alone would have said."""
    bench = pred.get("exchange_bench")
    if not bench:
        return []
    held = [pt for ax in pred["axes"] for pt in ax["points"] if pt.get("exchange_from")]
    out = [f"Exchange of the held-out points (\"tune\" above): the median `hpcdl tune` measured "
           f"for the setting and compression the point ran, from `{bench['pattern']}` at the "
           "point's node count (the workload's own gradient tensors through the path a training "
           "step calls; a launch of the ranks and seconds of timing, not a training run), for "
           f"{len(held)} of the held-out points; the others keep the link model's."]
    errs = [abs(pt["model_exchange_error"]) for pt in held
            if pt.get("model_exchange_error") is not None]
    if errs:
        out[0] += (f" The link model alone would have put the exchange of those points within "
                   f"15% at {sum(e <= 0.15 for e in errs)} of {len(errs)} (mean absolute error "
                   f"{_f(sum(errs) / len(errs), pct=True)}).")
    out += [f"- {src}" for src in sorted({pt["exchange_from"] for pt in held})]
    out += [f"- not taken: {why}" for why in bench.get("misses") or []]
    return out + [""]


def _file_words(entry: Optional[dict], words: Callable[[dict], str]) -> List[str]:
    """A short benchmark's file the prediction took (``entry``, what it gave): what it did, in
    ``words(entry)``, and why it was not taken where it was not."""
    if not entry:
        return []
    return [words(entry)] + [f"- not taken: {why}" for why in entry.get("misses") or []] + [""]


def _loop_words(pred) -> List[str]:
    """Where the held-out Horovod points' compute followed a loop file's shares."""
    return _file_words(pred.get("loop_bench"), lambda loop: (
        f"Compute beyond the calibration, on {len(loop['axes'])} Horovod axis(es): also × "
        "(1 − s(calibrated p)) / (1 − s(p)), s the median rank's share of its CPU that "
        "Horovod's loop took from its compute at p nodes and the axis's cycle time, measured "
        f"by a short benchmark on the allocation: {loop['source']}; between the node counts it "
        "measured, s is interpolated in log p, beyond the largest held at its value."))


def _spread_words(pred) -> List[str]:
    """Where the held-out points' slowest rank was drawn from a spread file."""
    return _file_words(pred.get("spread_bench"), lambda spread: (
        f"The slowest rank beyond the calibration, on {len(spread['axes'])} axis(es): the "
        "expected maximum over p ranks drawn from how far the allocation's nodes lay apart "
        + ("computing the workload in one short training of k ranks, one per node, exchanging "
           "as the study's runs do" if spread.get("coupled") else
           "computing the workload at once (each node alone, nothing exchanged)")
        + ", measured by a short benchmark on it at the largest node count k <= p: "
        f"{spread['source']}. The model pools the rounds; each round alone would give "
        + "; ".join(f"×{'/'.join(f'{f:.3f}' for f in fs)} at {k} nodes"
                    for k, fs in sorted((spread.get("rounds") or {}).items(),
                                        key=lambda kv: int(kv[0])))
        + "."))


def _axis_words(ax) -> str:
    """One axis's calibrated parts, in words."""
    m = ax["model"]
    loop = sorted((int(n), v) for n, v in (m.get("loop_shares") or {}).items())
    return (f"- **{ax['axis']}**: compute {m['per_sample_s'] * 1e6:.1f} µs/sample at one "
            f"rank, ×{1 + m['k']:.2f} beyond one rank"
            + (", the loop's share " + "/".join(f"{v * 100:.0f}" for _, v in loop) + "% at "
               + "/".join(str(n) for n, _ in loop) + " nodes" if loop else "")
            + (f"; spread from {m['rank_draws']} rank medians" if m["rank_draws"] else
               "; no spread of its own (no calibration run with more than one rank's probes)")
            + "".join(f", at {n} nodes ×{v['max_factor']:.3f} from {v['draws']} node medians "
                      f"at {n} nodes" for n, v in (m.get("host_spread") or {}).items())
            + "; "
            f"fixed {m['fixed_s'] * 1e3:.1f} ms; window {m['window'] * 100:.0f}%; "
            + (f"exchange from the {m['exchange_source']}"
               if m["exchange_source"].startswith("bench fit") else
               "exchange: link bytes at the link's payload rate, "
               + (f"+{m['duplex'] * 100:.0f}% of the other direction's where both "
                  "ways share a connection" if m["duplex"] else
                  f"+{m['per_exchange_s'] * 1e3:.1f} ms per exchange")
               if m["rated"] else
               f"{m['seconds_per_link_byte'] * 1e9:.3f} ns per link byte"
               if m["seconds_per_link_byte"] is not None else "exchange not measured")
            + ".")


def _prediction_markdown(pred, by_name) -> List[str]:
    h = pred["heldout"]
    lines = (["## Prediction of the points not calibrated on (MODEL, checked against "
              "measurement)", "", f"Calibrated on the runs with at most {pred['nodes_max']} "
              "node(s) of each axis (`hpcdl.analysis.predict`), every larger point predicted part "
              "by part."] if pred.get("held_out", True) else
             ["## The model, calibrated on every point (MODEL; no point held out)", "",
              "The study declares no calibration subset (`[model] calibrate = {nodes_max = N}` "
              "holds the larger points out to check the model on), so every point calibrates "
              "the part-by-part model (`hpcdl.analysis.predict`) and none checks it; the band "
              "comes from leaving repeats out."])
    lines = [lines[0], lines[1], lines[2] + " Compute: the "
             "1-node compute per sample, times 1 + k beyond one rank, k measured at the largest "
             "calibrated point (the exchange's background work, Horovod's cycle or MPI's "
             "progress, takes a share of a node's CPU once a rank has peers), times the expected "
             "maximum over p ranks of the ranks' median compute spread measured at the "
             "calibration points (the step waits for its slowest rank, and pays that rank's "
             "median compute). Exchange: the bytes on each link of the allreduce "
             "algorithm the MPI library runs at that rank count and size (named per row; Open "
             "MPI's fixed decision unless the run pinned one) at the link's payload rate (on the "
             "box; elsewhere at the time per byte the calibration measured), plus what the "
             "calibration runs spent beyond that: where the algorithm sends and receives over "
             "one connection at once (recursive halving and doubling, a ring of two), a share of "
             "the other direction's bytes (on a shaped link each direction's data queues with "
             "the other's acknowledgements), else a fixed time per exchange. Step: compute + "
             "fixed + exchange − the part hidden behind the measured window of compute up to the "
             "calibrated node count, none beyond it (the 2-node points of the box studies hid "
             "much of their exchange, their 4- and 8-node points about none), and none "
             "for the parameter server, whose step pays the ranks' center compute rather than "
             "the slowest's: it takes the other workers' pushes while the slowest computes). "
             "Beside it, two baselines: "
             "**naive** (efficiency stays at the largest calibrated point's) and **one-β** (the "
             "1-node step plus one β, α = 0, from the largest calibrated point's excess).", "",
             by_name["prediction-vs-measured"].markdown(), ""]
    lines += _bench_words(pred) + _loop_words(pred) + _spread_words(pred)
    lines += [_axis_words(ax) for ax in pred["axes"]]
    if h["points"]:
        mae = h["mae_model"]
        half = h["mae_one_parameter"] / 2 if h["mae_one_parameter"] is not None else None
        verdict = ("" if mae is None or half is None else
                   " The model's error is at most half the one-β baseline's." if mae <= half else
                   " The model does **not** reach half the one-β baseline's error."
                   if mae < h["mae_one_parameter"] else
                   " The model does **not** beat the one-β baseline.")
        if mae is not None and h["mae_naive"] is not None and mae >= h["mae_naive"]:
            verdict += " The model does **not** beat the naive baseline."
        verdict += _floor_words(pred, mae, half)
        lines += ["", f"Held-out points: {h['points']}. Step within 10%: {h['within_10']} of "
                  f"{h['points']}; compute and exchange each within 15%: {h['parts_within_15']} "
                  f"of {h['points']}. Mean absolute step error: model {_f(mae, pct=True)}, naive "
                  f"{_f(h['mae_naive'], pct=True)}, one-β {_f(h['mae_one_parameter'], pct=True)} "
                  f"(compute {_f(h['mae_compute'], pct=True)}, exchange "
                  f"{_f(h['mae_exchange'], pct=True)})." + verdict]
        lines += _bias_words(h.get("by_nodes") or [])
        lines.append(_noise_words(pred.get("noise")))
        lines.append(_band_words(pred, h))
    if pred["cross_rate"]:
        errs = [abs(c["error"]) for c in pred["cross_rate"] if c["error"] is not None]
        lines += ["", "Across link rates: each axis's model, calibrated at its rate, predicting "
                  "the same configuration's held-out points at the other rate, given only that "
                  f"rate: {sum(e <= 0.15 for e in errs)} of {len(errs)} within 15%.", "",
                  by_name["prediction-across-rates"].markdown()]
    if pred["remedies"]:
        lines += _remedies_markdown(pred, by_name)
    if "forecast" in by_name:
        lines += _forecast_markdown(pred, by_name)
    elif pred.get("forecast"):
        lines += ["", "### Forecast (MODEL)", "", "None to show: every named network's exchange "
                  "stays under 1% of every step (a column would only repeat the compute's ratio)"
                  + (", and every rank ran on one machine, whose shared memory says nothing of a "
                     "network." if pred.get("one_node") else ".")]
    return lines + [""]


def _band_words(pred, h) -> str:
    basis = pred.get("band_basis") or ""
    if pred["band_halfwidth"] is None:
        return f"No band: {basis}."
    dist = "; ".join(f"{c['inside']} of {c['points']} at {2 ** c['distance']:.3g}× the "
                     "calibrated nodes" for c in pred.get("coverage_by_distance") or [])
    return (f"Band: ±{_f(pred['band_halfwidth'], pct=True)} at the calibrated node count "
            f"({pred['nominal'] * 100:.0f}%, {basis}: each multi-rank calibration run predicted "
            "by the model calibrated without its repeat, all axes pooled), widened to "
            "±q·√(1 + log2(N / calibrated nodes)) at N nodes: each doubling beyond the "
            "calibration adds an error of the calibration's size. Beyond the calibrated node "
            "count its lower edge is the step as if the exchange hid as much as at the "
            f"calibration. Nominal coverage {pred['nominal'] * 100:.0f}%, measured "
            f"{h['covered']} of {h['banded']} held-out points ({_f(h['coverage'], pct=True)})"
            + (f"; by distance: {dist}." if dist else "."))


def _forecast_table(pred) -> Table:
    t = Table("forecast", "MODEL forecast at larger node counts",
              ["axis", "network", "nodes", "allreduce", "compute (ms)", "exchange (ms)",
               "step (ms)", "band (ms)", "throughput", "efficiency"],
              meta={"kind": "model", "hidden": "none of the exchange beyond the calibration"})
    for f in pred["forecast"]:
        nets = [("this allocation", f["here"])] + [(n["label"], n["rows"])
                                                   for n in f["networks"]]
        for label, rows in nets:
            for r in rows:
                if r.get("step_s") is None:
                    continue
                b = r["band_s"]
                t.add([f["axis"], label, r["nodes"], r["algorithm"], _ms(r["compute_s"]),
                       _ms(r["exchange_s"]), _ms(r["step_s"]),
                       f"{b[0] * 1e3:.4g}–{b[1] * 1e3:.4g}" if b else "-",
                       _f(r["throughput"], 1), _f(r["efficiency"], pct=True)],
                      {"axis": f["axis"], "network": label, **r})
    return t


def _forecast_markdown(pred, by_name) -> List[str]:
    f0 = pred["forecast"][0]
    left = sorted({n for f in pred["forecast"] for n in f["left_out"]})
    return ["", "### Forecast (MODEL)", "",
            f"The model above, calibrated on at most {f0['calibrated_nodes']} node(s), at the "
            "node counts planned: the slowest of N ranks' compute, the exchange of the "
            "allreduce the MPI library runs at N ranks (on this allocation from "
            f"{f0['exchange_here']}; on a named network its latency per message plus bytes "
            "at 90% of its line rate, over the algorithm's messages), the fixed cost as "
            "measured, none of the exchange hidden. Efficiency against the model's one node.",
            "", by_name["forecast"].markdown(), ""] + (
        [(f"One column stands for {', '.join(left)}" if any(
            n["network"] == "any" for f in pred["forecast"] for n in f["networks"])
          else f"Left out: {', '.join(left)}")
         + ": on each the exchange stays under 1% of every step here, so a column of each would "
         "only repeat the compute's ratio, not show a network effect.", ""] if left else []) \
        + _input_words(pred)


def _input_words(pred) -> List[str]:
    """Which of the allocation's inputs the forecast drew on, what each moved its largest node
    count's step by, and what stands in for a missing one."""
    said = []
    top = max((r["nodes"] for f in pred["forecast"]
               for r in f["here"] + [x for n in f["networks"] for x in n["rows"]]), default=0)
    for key, name, instead in (
            ("loop", "the loop file (Horovod's share of a node)",
             "compute beyond the calibration holds the calibration's share"),
            ("spread", "the spread file (how far the nodes lie apart)",
             "the slowest of N ranks is drawn from the calibration runs' own spread")):
        moved = [(f["axis"], f["inputs"][key]) for f in pred["forecast"]
                 if (f.get("inputs") or {}).get(key) is not None]
        if moved:
            said.append(f"{name} moved the step at {top} nodes by "
                        + ", ".join(f"{e * 100:+.1f}% ({a})" for a, e in moved))
        else:
            bench = pred.get(f"{key}_bench") or {}
            why = ("not taken (" + "; ".join(bench["misses"]) + ")" if bench.get("misses") else
                   "no change to it" if bench else "none")
            said.append(f"{name}: {why}: {instead}" if not bench or bench.get("misses")
                        else f"{name}: {why}")
    said.append(_exchange_input(pred))
    return ["Inputs measured on the allocation (`hpcdl bench allocation` and `hpcdl tune --knobs "
            "algorithm`, run by its own ranks at each node count it can get; a study with "
            "`[model] forecast` runs them): " + "; ".join(said) + ".", ""] + _cost_words(pred)


def _exchange_input(pred) -> str:
    """Where the forecast's exchange on this allocation starts from."""
    starts = sorted({(f["axis"], r["exchange_from"]) for f in pred["forecast"]
                     for r in f["here"] if r.get("exchange_from")})
    if starts:
        return ("the exchange on this allocation from each algorithm's time measured there, "
                "the model's growth beyond: " + "; ".join(f"{src} ({a})" for a, src in starts))
    bench = pred.get("exchange_bench") or {}
    why = ("not taken (" + "; ".join(bench["misses"]) + ")" if bench.get("misses") else "none")
    return (f"the exchange files (each algorithm's exchange on the allocation): {why}: the "
            "exchange on this allocation is the model's from the calibration alone")


def _cost_words(pred) -> List[str]:
    """What leaving each input out did to the held-out points (:func:`hpcdl.analysis.predict.
    input_costs`), or why it is not measured."""
    costs = pred.get("input_costs")
    if not costs:
        return ["What a missing input costs is measured where points are held out "
                "(`[model] calibrate = {nodes_max = N}`): none is here.", ""]
    names = {"all": "with every input", "exchange": "without the exchange files",
             "loop": "without the loop file", "spread": "without the spread file"}

    def pct(x):
        return "-" if x is None else f"{x * 100:.1f}%"
    return ["What each input is worth here: the held-out points predicted again without it "
            "(mean absolute step error; the band half-width that would have held 90% of "
            "them): " + "; ".join(f"{names[c['input']]} {pct(c['mae'])}, "
                                  f"{pct(c['needed_halfwidth'])}" for c in costs)
            + f" ({costs[0]['points']} point(s)).", ""]


def _bias_words(by_nodes) -> List[str]:
    """Where the held-out errors at one node count lean one way (a sign test), what leans."""
    out = []
    for b in by_nodes:
        if not b["biased"]:
            continue
        way = "under" if b["under"] > b["over"] else "over"
        parts = ", ".join(f"{k} {b[k] * 100:+.1f}%" for k in ("compute", "exchange")
                          if b[k] is not None)
        out.append(f"**Bias at {b['nodes']} nodes**: {max(b['under'], b['over'])} of "
                   f"{b['points']} held-out steps are {way}-predicted (mean "
                   f"{b['step'] * 100:+.1f}%; {parts}; sign test p = "
                   f"{b['sign_p']:.3f}), more one way than chance gives: the model misses "
                   f"something that grows with the node count there, and its extrapolation "
                   f"beyond {b['nodes']} nodes is likely {way}stated in step time "
                   f"({'optimistic' if way == 'under' else 'pessimistic'} in efficiency).")
    return out


def _remedies_markdown(pred, by_name) -> List[str]:
    tuned = any(r["remedy"].startswith("the tuned settings") for r in pred["remedies"])
    return ["", "**What to try** (MODEL, checked where run): at the largest point of each "
            "uncompressed axis, the efficiency the model above predicts with fp16 gradients "
            "(half the bytes on every link) and with twice the batch per rank (twice the "
            "compute per exchange), and its gain over the efficiency it predicts as run. "
            "Measured: fp16 by this study's fp16 axis; twice the batch by a study of the same "
            "workload with that batch (`benchmarks/remedy_check.py` sets the two side by "
            "side). For an axis the MPI library exchanges, also the allreduce algorithm the model "
            "predicts fastest at that point where the library chose another: pin it with "
            "`OMPI_MCA_coll_tuned_use_dynamic_rules=1` and `OMPI_MCA_coll_tuned_allreduce_"
            "algorithm=N` in the study's `[run] env`, or let `hpcdl tune` find it."
            + (" Where the study has a tuning axis, also at each default-settings axis's "
               "largest point: the tuned points' allreduce algorithm, measured by those "
               "points (the model has a term for the algorithm only, not for Horovod's cycle "
               "time or fusion)." if tuned else ""),
            "", by_name["prediction-remedies"].markdown()]


def _published_markdown(t) -> List[str]:
    s = analysis.PUBLISHED_SETUP
    net = costmodel.PRESETS[s["network"]]
    inp = analysis.PUBLISHED_INPUTS
    return ["### MODEL vs published: Horovod at 512 GPUs on 25 GbE RoCE", "",
            "Sergeev & Del Balso (2018) report 90% scaling efficiency for ResNet-101 and 68% for "
            "VGG-16 on 128 servers × 4 Pascal GPUs over 25 Gbit/s RoCE. The model gives the "
            "efficiency with none of the exchange hidden, and the fraction that would have to "
            "hide behind backprop to meet the published figure.", "",
            f"- published inputs: {inp['published']};",
            f"- assumed: {inp['assumed']} (α = {net.alpha * 1e6:.0f} µs, "
            f"β = {net.beta * 1e9:.3f} ns/B, γ = {s['gamma'] * 1e9:.3f} ns/B);",
            f"- derived: {inp['derived']}.", "", t.markdown(), ""]
