"""Write a study's report: Markdown and CSV tables, PNG plots and the communication model.

Input is ``results/<study>/runs.jsonl``; output is ``report.md``, ``report.json`` (every table as
JSON), one CSV per table and PNG plots, next to it. Only numpy and matplotlib (Agg) are used, so
a report can be made anywhere the results folder is copied to.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
from collections import Counter
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from . import analysis, records
from .errors import UserError

EXTRAPOLATE_RANKS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


# --- formatting -----------------------------------------------------------------------------------

def _f(x, digits=3, pct=False):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    if pct:
        return f"{x * 100:.1f}%"
    if isinstance(x, int):
        return str(x)
    ax = abs(x)
    if ax != 0 and (ax >= 1e5 or ax < 1e-3):
        return f"{x:.{digits}g}"
    return f"{x:.{digits}f}" if ax < 10 else f"{x:.1f}"


def _ms(x):
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x * 1e3:.3f}"


class Table:
    """Columns, rows and a metadata header; renders to Markdown and to CSV."""

    def __init__(self, name: str, title: str, columns: Sequence[str], meta: Optional[dict] = None):
        self.name, self.title, self.columns = name, title, list(columns)
        self.rows: List[list] = []       # formatted cells for Markdown
        self.raw: List[dict] = []        # full-precision values for CSV and JSON
        self.meta = meta or {}

    def add(self, cells: Sequence, raw: dict) -> None:
        self.rows.append([str(c) for c in cells])
        self.raw.append(raw)

    def markdown(self) -> str:
        out = ["| " + " | ".join(self.columns) + " |",
               "|" + "|".join("---:" for _ in self.columns) + "|"]
        out += ["| " + " | ".join(r) + " |" for r in self.rows]
        return "\n".join(out)

    def csv_text(self) -> str:
        buf = io.StringIO()
        for k, v in self.meta.items():
            buf.write(f"# {k}: {v}\n")
        keys = list(self.raw[0]) if self.raw else []
        w = csv.DictWriter(buf, fieldnames=keys, lineterminator="\n")
        w.writeheader()
        for r in self.raw:
            w.writerow({k: ("" if v is None else v) for k, v in r.items()})
        return buf.getvalue()

    def as_json(self) -> dict:
        return {"title": self.title, "meta": self.meta, "rows": self.raw}


# --- the report -----------------------------------------------------------------------------------

def _resolve(src) -> Path:
    src = Path(src)
    return src / "runs.jsonl" if src.is_dir() else src


def select_records(recs: List[dict], study_name: Optional[str]) -> List[dict]:
    recs = [r for r in recs if r.get("kind", "train") == "train"]
    names = Counter(r.get("study") for r in recs)
    if study_name is None:
        named = [n for n in names if n]
        if len(named) > 1:
            raise UserError(f"records of several studies ({', '.join(sorted(named))}): "
                            "pick one with --study NAME")
        study_name = named[0] if named else None
    return [r for r in recs if r.get("study") == study_name] if study_name else recs


def write_report(src, out_dir=None, fit_path=None, study_name: Optional[str] = None,
                 algorithm: Optional[str] = None, overlap: float = 0.0, max_ranks: int = 1024,
                 plots: bool = True) -> Dict:
    """Make the report of the records in ``src``; return {'report': path, 'files': [...]}."""
    runs = _resolve(src)
    if not runs.exists():
        raise UserError(f"{runs}: no such results file (run the study first: hpcdl study run)")
    recs = select_records(records.read(runs), study_name)
    if not recs:
        raise UserError(f"{runs}: no train records{f' of study {study_name}' if study_name else ''}")
    out = Path(out_dir) if out_dir else runs.parent
    out.mkdir(parents=True, exist_ok=True)
    name = recs[0].get("study") or runs.parent.name
    rows = analysis.group_records(recs)
    if not rows:
        raise UserError(f"{runs}: no record has metrics.throughput")
    scaling = _scaling_kind(recs)
    backends = {r.backend for r in rows}
    algorithm = algorithm or ("ps" if backends == {"ps"} else "ring")

    fit_doc = None
    if fit_path:
        fit_doc = json.loads(Path(fit_path).read_text())
        if fit_doc.get("schema") != "hpcdl.fit/1":
            raise UserError(f"--fit {fit_path}: schema is {fit_doc.get('schema')!r}, "
                            "expected 'hpcdl.fit/1'")
        if not any(analysis.load_fit(fit_doc, r.backend, r.compression) for r in rows):
            raise UserError(f"--fit {fit_path}: no entry for the study's backends "
                            f"({', '.join(sorted(backends))}); it has "
                            f"{', '.join(fit_doc.get('backends') or {}) or 'none'}")

    # One model per axis: the backend and compression change the exchange, not the compute.
    models: Dict[str, analysis.Model] = {}
    for axis in analysis.axes(rows):
        sel = [r for r in rows if r.axis == axis]
        fit = analysis.load_fit(fit_doc, sel[0].backend, sel[0].compression) if fit_doc else None
        if fit is not None:
            fit["_source"] = f"{fit['_source']} from {fit_path}"
        models[axis] = analysis.calibrate(sel, algorithm, fit, overlap=overlap)
        analysis.predict_rows(sel, models[axis])
        analysis.heldout_errors(sel, algorithm, fit)

    tables = _scaling_tables(rows, name, scaling)
    tables.append(_model_table(rows, models))
    first_axis = analysis.axes(rows)[0]
    base = [r for r in rows if r.axis == first_axis]
    batch = base[0].global_batch if scaling == "strong" else base[0].batch_size
    local = analysis.Network("measured here (calibrated)", models[first_axis].alpha,
                             max(models[first_axis].beta, 1e-30), "this study's fit")
    nets = {"local": local, **analysis.PRESETS}
    ranks = [p for p in EXTRAPOLATE_RANKS if p <= max_ranks]
    extra = analysis.extrapolate(models[first_axis], scaling, batch, base[0].wire_bytes, nets,
                                 ranks, overlap=overlap)
    tables.append(_extrapolation_table(extra, first_axis, scaling, batch, int(base[0].wire_bytes)))
    published = analysis.published_comparison()
    tables.append(_published_table(published))

    files: List[Path] = []
    for t in tables:
        path = out / f"{t.name}.csv"
        path.write_text(t.csv_text())
        files.append(path)
    pngs = []
    if plots:
        pngs = draw_plots(rows, extra, out, name, scaling)
        files += pngs
    md = _markdown(name, runs, recs, rows, scaling, tables, models, pngs, published)
    report = out / "report.md"
    report.write_text(md)
    doc = {"schema": "hpcdl.report/1", "study": name, "scaling": scaling, "source": str(runs),
           "records": len(recs), "tables": {t.name: t.as_json() for t in tables},
           "models": {k: m.as_dict() for k, m in models.items()}}
    js = out / "report.json"
    js.write_text(json.dumps(doc, indent=1, sort_keys=True, default=_jsonable))
    files += [report, js]
    return {"report": report, "json": js, "files": files}


def _jsonable(x):
    if isinstance(x, float) and math.isnan(x):
        return None
    try:
        return float(x)
    except (TypeError, ValueError):
        return str(x)


def _scaling_kind(recs) -> str:
    gb = {(r.get("params") or {}).get("global_batch") for r in recs}
    pts = [r.get("point") for r in recs if isinstance(r.get("point"), dict)]
    sizes = {(r.get("layout") or {}).get("size") for r in recs}
    if len(sizes) > 1 and len(gb) == 1:
        return "strong"
    if pts or len(sizes) > 1:
        return "weak"
    return "weak"


def _axis_slug(axis: str) -> str:
    return axis.replace("/", "-")


def _scaling_tables(rows, name, scaling) -> List[Table]:
    tables = []
    for axis in analysis.axes(rows):
        sel = [r for r in rows if r.axis == axis]
        unit = sel[0].unit
        t = Table(f"scaling-{_axis_slug(axis)}", f"{scaling} scaling, {axis}",
                  ["nodes", "ranks", "global batch", f"throughput ({unit}, ±1.96σ)",
                   "step (ms)", "speedup", "efficiency", "Karp–Flatt e", "compute", "exchange",
                   "runs"],
                  meta={"study": name, "scaling": scaling, "axis": axis, "unit": unit,
                        "baseline_ranks": min(r.ranks for r in sel)})
        for r in sel:
            t.add([r.nodes, r.ranks, r.global_batch, f"{r.throughput:.1f} ± {r.ci95:.1f}",
                   _ms(r.step_time), _f(r.speedup, 2), _f(r.efficiency, pct=True),
                   _f(r.karp_flatt, 3), _f(r.compute_share, pct=True),
                   _f(r.exchange_share, pct=True), r.runs],
                  {"backend": r.backend, "compression": r.compression, "nodes": r.nodes,
                   "ranks_per_node": r.ranks_per_node, "ranks": r.ranks,
                   "batch_size": r.batch_size, "global_batch": r.global_batch,
                   "throughput_mean": r.throughput, "throughput_std": r.throughput_std,
                   "throughput_ci95": r.ci95, "unit": unit, "step_time_s": r.step_time,
                   "speedup": r.speedup, "efficiency": r.efficiency, "karp_flatt": r.karp_flatt,
                   "compute_s": r.compute_s, "exchange_s": r.exchange_s,
                   "compute_share": r.compute_share, "exchange_share": r.exchange_share,
                   "gradient_bytes": r.gradient_bytes, "runs": r.runs})
        tables.append(t)
    return tables


def _model_table(rows, models) -> Table:
    t = Table("model-vs-measured", "model (calibrated) beside each measurement",
              ["axis", "ranks", "batch/rank", "measured step (ms)", "MODEL step (ms)",
               "MODEL error", "held-out error", "MODEL compute (ms)", "MODEL fixed (ms)",
               "MODEL exchange (ms)"],
              meta={"model": "step = c0 + c1*b + fixed + exchange(p, n)",
                    "held_out": "worst error predicting one repeat from a model fitted without it"})
    for r in rows:
        m = models[r.axis]
        comp = float(m.compute(r.batch_size, r.ranks))
        ex = float(m.exchange(r.ranks, r.wire_bytes))
        t.add([r.axis, r.ranks, r.batch_size, _ms(r.step_time), _ms(r.model_step_time),
               _f(r.model_error, pct=True), _f(r.heldout_error, pct=True), _ms(comp),
               _ms(m.fixed), _ms(ex)],
              {"axis": r.axis, "ranks": r.ranks, "batch_size": r.batch_size,
               "measured_step_s": r.step_time, "model_step_s": r.model_step_time,
               "model_error": r.model_error, "heldout_error": r.heldout_error,
               "model_compute_s": comp, "model_fixed_s": m.fixed, "model_exchange_s": ex})
    return t


def _extrapolation_table(extra, axis, scaling, batch, nbytes) -> Table:
    nets = []
    for e in extra:
        if e["network"] not in nets:
            nets.append(e["network"])
    ranks = sorted({e["ranks"] for e in extra})
    labels = {e["network"]: e["label"] for e in extra}
    t = Table("model-extrapolation", f"MODEL efficiency at larger rank counts ({axis})",
              ["ranks"] + [f"MODEL E, {labels[n]}" for n in nets],
              meta={"axis": axis, "scaling": scaling, "batch": batch, "gradient_bytes": nbytes,
                    "kind": "model"})
    by = {(e["network"], e["ranks"]): e for e in extra}
    for p in ranks:
        t.add([p] + [_f(by[(n, p)]["efficiency"], pct=True) if (n, p) in by else "-" for n in nets],
              {"ranks": p, **{f"efficiency_{n}": by[(n, p)]["efficiency"] if (n, p) in by else None
                              for n in nets}})
    return t


def _published_table(published) -> Table:
    s = analysis.PUBLISHED_SETUP
    net = analysis.PRESETS[s["network"]]
    t = Table("model-vs-published", "MODEL vs Horovod's published efficiency at 512 GPUs",
              ["network model", "gradients (MB, fp32)", "MODEL compute (s)", "MODEL exchange (s)",
               "hidden", "MODEL efficiency", "published", "difference (points)"],
              meta={"gpus": s["gpus"], "network": net.name, "alpha_s": net.alpha,
                    "beta_s_per_byte": net.beta, "gamma_s_per_byte": s["gamma"],
                    "batch_per_gpu": s["batch_per_gpu"], "fusion_bytes": s["fusion_bytes"],
                    "overlap": s["overlap"], "kind": "model"})
    for p in published:
        t.add([p["model"], _f(p["gradient_MB"], 1), _f(p["compute_s"], 3), _f(p["exchange_s"], 3),
               _f(p["overlap"], pct=True), _f(p["model_efficiency"], pct=True),
               _f(p["published_efficiency"], pct=True), f"{p['difference_points']:+.1f}"], p)
    return t


# --- Markdown -------------------------------------------------------------------------------------

def _manifest_summary(recs) -> List[str]:
    hosts, jobs, commits, threads = Counter(), Counter(), Counter(), Counter()
    versions = Counter()
    times = []
    for r in recs:
        man = r.get("manifest") or {}
        for h in man.get("hosts") or (r.get("layout") or {}).get("hosts") or []:
            hosts[h] += 1
        jid = (man.get("slurm") or {}).get("job_id")
        if jid:
            jobs[str(jid)] += 1
        if man.get("git_commit"):
            commits[man["git_commit"][:12]] += 1
        v = man.get("versions") or {}
        versions[tuple(sorted((k, str(x)) for k, x in v.items() if x))] += 1
        threads[(r.get("params") or {}).get("threads_per_rank")] += 1
        if r.get("time"):
            times.append(r["time"])
    out = [f"- records: {len(recs)}" + (f", {min(times)} to {max(times)}" if times else ""),
           f"- hosts: {', '.join(sorted(hosts)) or '-'}",
           f"- Slurm job ids: {_some(sorted(jobs)) if jobs else 'none (run locally through mpirun)'}",
           f"- git commits: {', '.join(sorted(commits)) or '-'}",
           f"- threads per rank: {', '.join(str(t) for t in sorted(threads, key=str))}"]
    for v, n in versions.most_common():
        out.append(f"- versions ({n} record(s)): " + ", ".join(f"{k} {x}" for k, x in v))
    man0 = recs[0].get("manifest") or {}
    if man0.get("platform"):
        out.append(f"- platform: {man0['platform']}, {man0.get('cpu_count')} CPUs")
    return out


def _some(items, k: int = 8) -> str:
    return ", ".join(items) if len(items) <= k else (
        f"{len(items)} jobs: {', '.join(items[:k // 2])}, ..., {', '.join(items[-k // 2:])}")


def _markdown(name, runs, recs, rows, scaling, tables, models, pngs, published) -> str:
    by_name = {t.name: t for t in tables}
    wl = (recs[0].get("params") or {}).get("workload")
    lines = [f"# Scaling study `{name}`", "",
             f"{scaling.capitalize()} scaling of `{wl}` from `{runs}` "
             f"({len(recs)} record(s), {len(rows)} configuration(s)). "
             "Throughput is the total over all ranks, mean ± 1.96σ over the timed iterations of "
             "every repeat; the step time is the median step of the slowest rank (median over "
             "repeats). Speedup S = X(N)/X(N₀) and efficiency E = S/(N/N₀) against the smallest "
             "run of each axis; Karp–Flatt e = (1/S − 1/p)/(1 − 1/p). The compute share comes "
             "from compute-only probe steps; the rest of the step is exchange (and update).", ""]
    for axis in analysis.axes(rows):
        t = by_name[f"scaling-{_axis_slug(axis)}"]
        lines += [f"## {t.title}", "", t.markdown(), "", f"CSV: `{t.name}.csv`", ""]
    if pngs:
        lines += ["## Plots", ""]
        lines += [f"![{p.stem}]({p.name})" for p in pngs]
        lines.append("")
    lines += ["## Communication model (everything in this section is MODEL, not measurement)", "",
              "Step time = compute + fixed + exchange(α, β, γ, p, n). Compute is the forward and "
              "backward pass of the per-rank batch b, taken from the compute-only probe steps of "
              "each measured configuration (so the model does not hide compute slowed by ranks "
              "sharing a node); the extrapolation uses compute(b) = c0 + c1·b fitted to those "
              "probes. Fixed is the per-step cost outside the network (optimizer update, framework "
              "cycle) measured at one rank, and exchange the ring allreduce 2(p−1)α + 2(p−1)/p·n·β + (p−1)/p·n·γ (or, for "
              "a parameter server, 2(p−1)α + 2(p−1)·n·β + (p−1)·n·γ) of n gradient bytes.", ""]
    for axis, m in models.items():
        lines += [f"**{axis}** — calibrated from {m.source}; algorithm {m.algorithm}: "
                  f"c0 = {m.c0 * 1e3:.3f} ms, c1 = {m.c1 * 1e6:.3f} µs/sample, "
                  f"fixed = {m.fixed * 1e3:.3f} ms, α = {m.alpha * 1e6:.2f} µs, "
                  f"β = {m.beta * 1e9:.4f} ns/B ({(1 / m.beta / 1e9) if m.beta else float('inf'):.3g} GB/s), "
                  f"γ = {m.gamma * 1e9:.4f} ns/B.", ""]
        lines += [f"- {n}" for n in m.notes] + [""]
    t = by_name["model-vs-measured"]
    lines += ["### MODEL beside each measurement", "", t.markdown(), "",
              "Held-out error: the worst error of predicting one repeat's step time from a model "
              "calibrated on the other repeats only.", ""]
    t = by_name["model-extrapolation"]
    lines += ["### MODEL extrapolation to larger rank counts", "",
              f"Efficiency predicted for the first axis at {t.meta['scaling']} scaling "
              f"(batch {t.meta['batch']}, {t.meta['gradient_bytes']:,} gradient bytes), one rank "
              "per link, compute and fixed cost as measured here, α and β of each network:", "",
              t.markdown(), ""]
    lines += ["Network presets (MODEL parameters): "
              + "; ".join(f"{n.name}: α = {n.alpha * 1e6:.1f} µs, {n.bandwidth_GBps:.2f} GB/s"
                          for n in analysis.PRESETS.values())
              + " (90% of the line rate).", ""]
    t = by_name["model-vs-published"]
    s = analysis.PUBLISHED_SETUP
    lines += ["### MODEL vs published: Horovod at 512 GPUs on 25 GbE RoCE", "",
              "Sergeev & Del Balso (2018) report 90% scaling efficiency for ResNet-101 and 68% "
              "for VGG-16 on 128 servers × 4 Pascal GPUs over 25 Gbit/s RoCE. Model parameters: "
              f"per-GPU compute per step = batch {s['batch_per_gpu']} / the P100's fp32 throughput "
              "(ResNet-101 129 img/s, interpolated by FLOPs between ResNet-50's 219 and "
              "ResNet-152's 91; VGG-16 154 img/s: tf_cnn_benchmarks figures); gradients fp32, "
              "ResNet-101 44.5 M and VGG-16 138 M parameters; ring allreduce over each server's "
              f"25 Gbit/s link at 90% of line rate (β = {analysis.PRESETS['roce-25g'].beta * 1e9:.3f} ns/B), "
              f"α = {analysis.PRESETS['roce-25g'].alpha * 1e6:.0f} µs per message and one ring per "
              f"{s['fusion_bytes'] >> 20} MiB fusion buffer, γ = 1/(500 GB/s) for the reduction on the GPU; "
              f"{s['overlap'] * 100:.0f}% of the exchange hidden behind backprop.", "",
              t.markdown(), ""]
    no = analysis.published_comparison(overlap=0.0)
    lines += ["Without any overlap the same model gives "
              + ", ".join(f"{p['model']} {p['model_efficiency'] * 100:.1f}%" for p in no)
              + ": the overlap of exchange with backprop is what brings VGG-16 near its published "
                "figure.", ""]
    lines += ["## Runs", ""] + _manifest_summary(recs) + [""]
    lines += ["Files: " + ", ".join(f"`{t.name}.csv`" for t in tables) + ", `report.json`.", ""]
    return "\n".join(lines)


# --- plots ----------------------------------------------------------------------------------------

def draw_plots(rows, extra, out: Path, name: str, scaling: str) -> List[Path]:
    """Throughput, speedup, efficiency, communication share, axes compared and the model."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    ax_names = analysis.axes(rows)

    def save(fig, stem):
        path = out / f"{stem}.png"
        fig.tight_layout()
        fig.savefig(path, dpi=90)
        plt.close(fig)
        files.append(path)

    def log2(ax):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("ranks N")
        ax.grid(True, which="both", alpha=0.3)

    # Throughput and speedup with the ideal lines.
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for axis in ax_names:
        sel = [r for r in rows if r.axis == axis]
        n = [r.ranks for r in sel]
        a1.errorbar(n, [r.throughput for r in sel], yerr=[r.ci95 for r in sel], marker="o",
                    capsize=3, label=f"{axis} measured")
        a1.plot(n, [sel[0].throughput * k / n[0] for k in n], "k--", lw=0.8,
                label="ideal" if axis == ax_names[0] else None)
        a2.plot(n, [r.speedup for r in sel], marker="o", label=f"{axis} measured")
    nmax = max(r.ranks for r in rows)
    nmin = min(r.ranks for r in rows)
    a2.plot([nmin, nmax], [1, nmax / nmin], "k--", lw=0.8, label="ideal")
    log2(a1)
    a1.set_yscale("log", base=2)
    a1.set_ylabel(f"throughput ({rows[0].unit})")
    a1.set_title(f"{name}: throughput")
    a1.legend(fontsize=8)
    log2(a2)
    a2.set_yscale("log", base=2)
    a2.set_ylabel("speedup S(N)")
    a2.set_title(f"{scaling} scaling speedup")
    a2.legend(fontsize=8)
    save(fig, "throughput-speedup")

    # Efficiency, with the model's prediction from the calibrated local network.
    fig, ax = plt.subplots(figsize=(6, 4))
    for axis in ax_names:
        sel = [r for r in rows if r.axis == axis]
        ax.plot([r.ranks for r in sel], [r.efficiency * 100 for r in sel], marker="o",
                label=f"{axis} measured")
    loc = [e for e in extra if e["network"] == "local" and e["ranks"] <= max(2, nmax)]
    if loc:
        ax.plot([e["ranks"] for e in loc], [e["efficiency"] * 100 for e in loc], "x:",
                color="gray", label="MODEL (calibrated here)")
    ax.axhline(100, color="k", ls="--", lw=0.8)
    log2(ax)
    ax.set_ylabel("efficiency E (%)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{name}: efficiency")
    ax.legend(fontsize=8)
    save(fig, "efficiency")

    # Compute and exchange share of the step.
    fig, ax = plt.subplots(figsize=(6, 4))
    labels, comp, exch = [], [], []
    for r in rows:
        labels.append(f"{r.ranks}\n{r.compression}" if len(ax_names) > 1 else str(r.ranks))
        comp.append((r.compute_share or 0) * 100)
        exch.append((r.exchange_share or 0) * 100)
    x = list(range(len(rows)))
    ax.bar(x, comp, label="compute")
    ax.bar(x, exch, bottom=comp, label="exchange + update")
    ax.set_xticks(x, labels)
    ax.set_xlabel("ranks")
    ax.set_ylabel("share of the step (%)")
    ax.set_title(f"{name}: communication share")
    ax.legend(fontsize=8)
    save(fig, "comm-share")

    # Backends and compressions compared, where the study varies them.
    if len(ax_names) > 1:
        fig, ax = plt.subplots(figsize=(6, 4))
        for axis in ax_names:
            sel = [r for r in rows if r.axis == axis]
            ax.errorbar([r.ranks for r in sel], [r.throughput for r in sel],
                        yerr=[r.ci95 for r in sel], marker="o", capsize=3, label=axis)
        log2(ax)
        ax.set_ylabel(f"throughput ({rows[0].unit})")
        ax.set_title(f"{name}: backends and compressions")
        ax.legend(fontsize=8)
        save(fig, "axes-compared")

    # The model extrapolated to cluster networks.
    fig, ax = plt.subplots(figsize=(6, 4))
    nets = []
    for e in extra:
        if e["network"] not in nets:
            nets.append(e["network"])
    for net in nets:
        sel = [e for e in extra if e["network"] == net]
        ax.plot([e["ranks"] for e in sel], [e["efficiency"] * 100 for e in sel], marker=".",
                label=f"MODEL {sel[0]['label']}")
    for axis in ax_names[:1]:
        sel = [r for r in rows if r.axis == axis]
        ax.plot([r.ranks for r in sel], [r.efficiency * 100 for r in sel], "ko", label="measured")
    log2(ax)
    ax.set_ylabel("efficiency E (%)")
    ax.set_ylim(0, 105)
    ax.set_title(f"{name}: MODEL extrapolation ({ax_names[0]})")
    ax.legend(fontsize=7)
    save(fig, "model-extrapolation")
    return files
