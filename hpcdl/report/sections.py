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
from typing import Any, Callable, List, Optional

from .forecast import _forecast_table
from .prediction import (_cross_rate_table, _model_markdown, _model_table, _prediction_markdown,
                         _prediction_table, _remedy_table)
from .systems import COST_COLUMN, _systems_markdown, _systems_table, _timeline_table
from .table import HOW, _axis_slug, _f, _ms, Table
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
    lines = [f"## {res.scaling.capitalize()} scaling", ""] + _one_table(res.axes, tables) + [
        "", f"CSV: `{tables[0].name}.csv`"
        + (f" and one per other axis ({len(tables) - 1}, listed last)." if len(tables) > 1
           else "."), ""]
    if any(r.hidden_share is not None for r in res.rows):
        lines += ["Exchange hidden: a lower bound on the share of the exchange the step hid "
                  f"behind the backward pass ({HOW}).", ""]
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
    tables = [_prediction_table(pred), _model_table(pred)]
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
    pooled = (["What was pooled (one code, software, study file and machine setting; no two "
               "runs on one machine at once):", ""] + prov.lines() + [""]) if prov else []
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
               "exchange hidden", "step ÷ bound", "runs", "notes"],
              meta={"study": res.study, "scaling": res.scaling, "axis": axis, "unit": unit,
                    "baseline_ranks": min(r.ranks for r in sel),
                    "bound": "the measured compute beside a ring allreduce at the link's line "
                             "rate: step over them overlapped / one after the other"})
    for r in sel:
        ids = "; ".join(f"[{notes.index(f) + 1}]" for f in r.flags)
        t.add([r.nodes, r.ranks, r.global_batch, f"{r.throughput:.1f} ± {r.ci95:.1f}",
               _ms(r.step_time), _f(r.speedup, 2), _f(r.efficiency, pct=True),
               _f(r.karp_flatt, 3), _f(r.compute_share, pct=True), _f(r.rest_share, pct=True),
               _f(r.hidden_share, pct=True),
               "-" if r.over_bound is None else "{:.2f} / {:.2f}".format(*r.over_bound),
               r.runs, ids],
              {"backend": r.backend, "compression": r.compression, "nodes": r.nodes,
               "ranks_per_node": r.ranks_per_node, "ranks": r.ranks, "batch_size": r.batch_size,
               "global_batch": r.global_batch, "throughput_mean": r.throughput,
               "throughput_std": r.throughput_std, "throughput_ci95": r.ci95, "unit": unit,
               "step_time_s": r.step_time, "speedup": r.speedup, "efficiency": r.efficiency,
               "karp_flatt": r.karp_flatt, "compute_s": r.compute_s,
               "compute_share": r.compute_share, "rest_share": r.rest_share,
               "exchange_hidden_share": r.hidden_share, "ring_bound_s": r.ring_bound_s,
               "step_over_bound_overlapped": r.over_bound and r.over_bound[0],
               "step_over_bound_serial": r.over_bound and r.over_bound[1],
               "gradient_bytes": r.gradient_bytes, "runs": r.runs, "flags": " | ".join(r.flags)})
    return t


def _one_table(axes: List[str], tables: List[Table]) -> List[str]:
    """The axes' scaling tables as one Markdown table, an axis column first (where more than
    one)."""
    if len(tables) == 1:
        return [tables[0].markdown()]
    cols = ["axis"] + tables[0].columns
    out = ["| " + " | ".join(cols) + " |", "|" + "|".join("---:" for _ in cols) + "|"]
    for axis, t in zip(axes, tables):
        out += [f"| {axis} | " + " | ".join(r) + " |" for r in t.rows]
    return ["\n".join(out)]


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
    t = Table("model-vs-published", "BASELINE (a whole-step α-β-γ estimate, not the model) vs "
              "Horovod's published efficiency at 512 GPUs",
              ["network model", "gradients (MB, fp32)", "BASELINE compute (s)",
               "BASELINE exchange (s)", "BASELINE efficiency, no overlap", "published",
               "window the baseline needs (share of compute)"],
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


def _largest(res):
    """Keeps the budget rows of each axis's largest point."""
    top = {}
    for b in res.budget:
        top[b["axis"]] = max(top.get(b["axis"], (0, 0)), (b["ranks"], b["nodes"]))
    return lambda raw: (raw["ranks"], raw["nodes"]) == top.get(raw["axis"])


def _budget_markdown(res, by_name) -> List[str]:
    t = by_name.get("efficiency-budget")
    named = [(b, s) for b in res.budget for s in b["stragglers"]]
    if t is None and not named:
        return []
    lines = ["## Where the efficiency goes", ""]
    if t is not None:
        lines += ["The measured efficiency loss 1 − E of each point against the smallest run of "
                  "its axis, split by the ranks' own phase timings (how: "
                  f"{HOW}); at each axis's largest point, every point in `{t.name}.csv`.", "",
                  t.markdown(_largest(res)), "", ""]
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
                  "the wall time during which at least one tensor was in it."
                  + (" The last column is what the timeline cost a step: each run's timed steps "
                     "it recorded over those before it, the median over the point's runs."
                     if COST_COLUMN in tl.columns else ""), "",
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
