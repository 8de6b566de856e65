"""Draw a study's plots (matplotlib, Agg): throughput and speedup, efficiency, where the step
goes, backends compared, the model's prediction and its forecast. Renders an analysis; computes
nothing."""
from __future__ import annotations

import os
from collections import OrderedDict
from pathlib import Path
from typing import List

from .. import analysis
from ..analysis.budget import LABELS, PARTS


_PLOTS = (("throughput-speedup", "_plot_throughput"), ("efficiency", "_plot_efficiency"),
          ("step-split", "_plot_split"), ("efficiency-budget", "_plot_budget"),
          ("axes-compared", "_plot_axes"), ("model-forecast", "_plot_forecast"),
          ("model-prediction", "_plot_prediction"), ("convergence", "_plot_convergence"),
          ("time-to-target", "_plot_time_to_target"))
_DRAWING = {}          # what forked drawers read: the analysis and the folder (not pickled)


def draw_plots(res: analysis.StudyAnalysis, out: Path, workers: int = 0) -> List[Path]:
    """Throughput and speedup, efficiency, the split of the step, axes compared, the model.
    ``workers`` processes draw them (default: one per core, at most 4): this one and the rest
    forked, each its share of the figures (a fork adds only the memory its drawing takes)."""
    os.environ.setdefault("MPLBACKEND", "Agg")
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot  # noqa: F401 - imported once, before any fork
    workers = min(workers or len(os.sched_getaffinity(0)), 4, len(_PLOTS))
    stems = [stem for stem, _ in _PLOTS]
    shares = [stems[k::workers] for k in range(max(1, workers))]
    if len(shares) < 2:
        return [p for stem in stems for p in _draw(stem, res, out)]
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor
    _DRAWING.update(res=res, out=out)
    try:
        with ProcessPoolExecutor(len(shares) - 1,
                                 mp_context=multiprocessing.get_context("fork")) as ex:
            theirs = [ex.submit(_draw_forked, share) for share in shares[1:]]
            drawn = {p.stem: p for stem in shares[0] for p in _draw(stem, res, out)}
            drawn.update((p.stem, p) for f in theirs for p in f.result())
    finally:
        _DRAWING.clear()
    return [drawn[stem] for stem in stems if stem in drawn]


def _draw_forked(stems: List[str]) -> List[Path]:
    return [p for stem in stems for p in _draw(stem, _DRAWING["res"], _DRAWING["out"])]


def _draw(stem: str, res, out: Path) -> List[Path]:
    """The figure ``stem`` (none where the analysis has nothing to show in it) as its file."""
    import matplotlib.pyplot as plt
    fig = globals()[dict(_PLOTS)[stem]](plt, res)
    if fig is None:
        return []
    path = out / f"{stem}.png"
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return [path]


def _plot_budget(plt, res):
    """Per axis, stacked bars of the efficiency loss of each point, part by part."""
    shown = [b for b in res.budget if (b.get("budget") or {}).get("shares")]
    if not shown:
        return None
    axes_ = list(OrderedDict((b["axis"], None) for b in shown))
    fig, axs = plt.subplots(1, len(axes_), figsize=(5 * len(axes_), 4), squeeze=False)
    colors = dict(zip(PARTS + ("unexplained",), ("C0", "C3", "C2", "C7", "C1", "0.6")))
    for ax, axis in zip(axs[0], axes_):
        sel = [b for b in shown if b["axis"] == axis]
        x = list(range(len(sel)))
        pos, neg = [0.0] * len(sel), [0.0] * len(sel)
        for part in PARTS + ("unexplained",):
            vals = [b["budget"]["shares"][part] * 100 for b in sel]
            bottoms = [pos[i] if v >= 0 else neg[i] for i, v in enumerate(vals)]
            ax.bar(x, vals, bottom=bottoms, color=colors[part], label=LABELS[part],
                   hatch="//" if part == "unexplained" else None)
            for i, v in enumerate(vals):
                if v >= 0:
                    pos[i] += v
                else:
                    neg[i] += v
        ax.plot(x, [b["budget"]["loss"] * 100 for b in sel], "k_", ms=25, mew=2,
                label="measured loss (1 − E)")
        ax.set_xticks(x, [f"{b['nodes']}×{b['ranks'] // b['nodes']}" for b in sel])
        ax.set_xlabel("nodes × ranks per node")
        ax.set_ylabel("efficiency loss (% of the step)")
        ax.set_title(f"{res.study}: where the efficiency goes\n{axis}", fontsize=9)
        ax.axhline(0, color="k", lw=0.5)
        ax.grid(True, axis="y", alpha=0.3)
    axs[0][0].legend(fontsize=7)
    return fig


def _log2(ax):
    ax.set_xscale("log", base=2)
    ax.set_xlabel("ranks N")
    ax.grid(True, which="both", alpha=0.3)


def _by_axis(res):
    return [(axis, [r for r in res.rows if r.axis == axis]) for axis in res.axes]


def _plot_throughput(plt, res):
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for i, (axis, sel) in enumerate(_by_axis(res)):
        n = [r.ranks for r in sel]
        a1.errorbar(n, [r.throughput for r in sel], yerr=[r.ci95 for r in sel], marker="o",
                    capsize=3, label=f"{axis} measured")
        a1.plot(n, [sel[0].throughput * k / n[0] for k in n], "k--", lw=0.8,
                label="ideal" if i == 0 else None)
        a2.plot(n, [r.speedup for r in sel], marker="o", label=f"{axis} measured")
    nmin, nmax = min(r.ranks for r in res.rows), max(r.ranks for r in res.rows)
    a2.plot([nmin, nmax], [1, nmax / nmin], "k--", lw=0.8, label="ideal")
    for ax, ylabel, title in ((a1, f"throughput ({res.rows[0].unit})", f"{res.study}: throughput"),
                              (a2, "speedup S(N)", f"{res.scaling} scaling speedup")):
        _log2(ax)
        ax.set_yscale("log", base=2)
        ax.set_ylabel(ylabel)
        ax.set_title(title)
        ax.legend(fontsize=8)
    return fig


def _plot_efficiency(plt, res):
    fig, ax = plt.subplots(figsize=(6, 4))
    for axis, sel in _by_axis(res):
        ax.plot([r.ranks for r in sel], [r.efficiency * 100 for r in sel], marker="o",
                label=f"{axis} measured")
    ax.axhline(100, color="k", ls="--", lw=0.8)
    _log2(ax)
    ax.set_ylabel("efficiency E (%)")
    ax.set_ylim(bottom=0)
    ax.set_title(f"{res.study}: efficiency")
    ax.legend(fontsize=8)
    return fig


def _plot_split(plt, res):
    rows = [r for r in res.rows if r.compute_share is not None]
    if not rows:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    x = list(range(len(rows)))
    comp = [r.compute_share * 100 for r in rows]
    ax.bar(x, comp, label="compute (probed)")
    ax.bar(x, [r.rest_share * 100 for r in rows], bottom=comp,
           label="rest: exchange not hidden, update, overhead")
    ax.set_xticks(x, [f"{r.ranks}\n{r.compression}" if len(res.axes) > 1 else str(r.ranks)
                      for r in rows])
    ax.set_xlabel("ranks")
    ax.set_ylabel("share of the step (%)")
    ax.set_title(f"{res.study}: where the step goes")
    ax.legend(fontsize=8)
    return fig


def _plot_axes(plt, res):
    if len(res.axes) < 2:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for axis, sel in _by_axis(res):
        ax.errorbar([r.ranks for r in sel], [r.throughput for r in sel],
                    yerr=[r.ci95 for r in sel], marker="o", capsize=3, label=axis)
    _log2(ax)
    ax.set_ylabel(f"throughput ({res.rows[0].unit})")
    ax.set_title(f"{res.study}: backends and compressions")
    ax.legend(fontsize=8)
    return fig


def _plot_forecast(plt, res):
    """The forecast's efficiency against nodes, per axis on this allocation and per named
    network for the first axis, its band shaded, beside the measured points."""
    fc = (res.prediction or {}).get("forecast") or []
    if not fc:
        return None
    fig, ax = plt.subplots(figsize=(6.5, 4.2))
    for i, f in enumerate(fc):
        color = f"C{i % 10}"
        sel = [r for r in res.rows if r.axis == f["axis"]]
        ax.plot([r.ranks for r in sel], [r.efficiency * 100 for r in sel], "o", color=color,
                label=f"{f['axis']} measured")
        curves = [("this allocation", f["here"], "--")] + (
            [(n["label"], n["rows"], ":") for n in f["networks"]] if i == 0 else [])
        for label, rows, style in curves:
            rows = [r for r in rows if r.get("step_s")]
            if not rows:
                continue
            n = [r["nodes"] for r in rows]
            ax.plot(n, [r["efficiency"] * 100 for r in rows], style, marker=".", color=color,
                    label=f"MODEL {label}" + (f" ({f['axis']})" if len(fc) > 1 else ""))
            band = [r for r in rows if r.get("band_s")]
            if band and label == "this allocation":
                t1 = [r["efficiency"] * r["step_s"] for r in band]     # the one-node step / p
                ax.fill_between([r["nodes"] for r in band],
                                [e / r["band_s"][1] * 100 for e, r in zip(t1, band)],
                                [min(100.0, e / max(r["band_s"][0], 1e-12) * 100)
                                 for e, r in zip(t1, band)], color=color, alpha=0.12)
    _log2(ax)
    ax.set_ylabel("efficiency E (%)")
    ax.set_ylim(0, 105)
    ax.set_title(f"{res.study}: MODEL forecast")
    ax.legend(fontsize=6)
    return fig


def _plot_prediction(plt, res):
    """Measured step time (median, the repeats' range as bars) against the model's prediction
    with its band, per axis; only where points were held out of the calibration."""
    pred = res.prediction or {}
    if not pred.get("held_out"):
        return None
    fig, ax = plt.subplots(figsize=(7.5, 4.8))
    for i, axd in enumerate(pred["axes"]):
        color = f"C{i % 10}"
        sel = [r for r in res.rows if r.axis == axd["axis"]]
        n = [r.ranks for r in sel]
        lo = [r.step_time - min(r.step_times) for r in sel]
        hi = [max(r.step_times) - r.step_time for r in sel]
        ax.errorbar(n, [r.step_time for r in sel], yerr=[lo, hi], fmt="o", color=color,
                    capsize=3, label=f"{axd['axis']} measured")
        pts = [p for p in axd["points"] if p["predicted"]["step"] is not None]
        ax.plot([p["nodes"] for p in pts], [p["predicted"]["step"] for p in pts], "--",
                color=color, label=f"{axd['axis']} MODEL")
        band = [p for p in pts if p.get("band")]
        if band:
            ax.fill_between([p["nodes"] for p in band], [p["band"][0] for p in band],
                            [p["band"][1] for p in band], color=color, alpha=0.15)
    ax.axvspan(0.8, pred["nodes_max"] * 1.15, color="0.9", zorder=0, label="calibrated on")
    _log2(ax)
    ax.set_ylabel("step time (s)")
    ax.set_title("MODEL prediction of held-out points (dashed; 90% band)")
    ax.legend(fontsize=7, ncol=2)
    return fig


def _plot_convergence(plt, res):
    """The seeds' figure: the held-out metric against samples seen and against training time,
    one curve per rank count (mean over seeds, their range shaded)."""
    conv = [c for c in res.convergence if c["curve"]["step"]]
    if not conv:
        return None
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    for c in conv:
        cv = c["curve"]
        label = f"{c['axis']} {c['ranks']} rank(s), {c['seeds']} seed(s)"
        for ax, x in ((a1, cv["samples"]), (a2, cv["time_s"])):
            line, = ax.plot(x, cv["mean"], marker=".", label=label)
            ax.fill_between(x, cv["lo"], cv["hi"], color=line.get_color(), alpha=0.2)
    name = conv[0]["metric"].replace("test_", "held-out ")
    target = next((c["target"] for c in conv if c.get("target")), None)
    for ax, xlabel in ((a1, "samples seen"), (a2, "training time (s)")):
        if target:
            ax.axhline(target["value"], color="k", ls=":", lw=0.8, label="target")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(name)
        ax.grid(True, alpha=0.3)
    a1.set_title(f"{res.study}: {name} against samples")
    a2.set_title(f"{res.study}: {name} against time")
    a1.legend(fontsize=7)
    return fig


def _plot_time_to_target(plt, res):
    """Time-to-target speedup beside throughput speedup, against ranks."""
    conv = [c for c in res.convergence if c.get("ttt_speedup") is not None]
    if not conv:
        return None
    fig, ax = plt.subplots(figsize=(6, 4))
    for axis in OrderedDict((c["axis"], None) for c in conv):
        sel = [c for c in conv if c["axis"] == axis]
        n = [c["ranks"] for c in sel]
        ax.plot(n, [c["throughput_speedup"] for c in sel], marker="o",
                label=f"{axis} throughput speedup")
        ax.plot(n, [c["ttt_speedup"] for c in sel], marker="s", ls="--",
                label=f"{axis} time-to-target speedup")
    n = sorted({c["ranks"] for c in conv})
    ax.plot(n, [k / n[0] for k in n], "k:", lw=0.8, label="ideal")
    _log2(ax)
    ax.set_ylabel("speedup")
    ax.set_title(f"{res.study}: time to target beside throughput")
    ax.legend(fontsize=7)
    return fig
