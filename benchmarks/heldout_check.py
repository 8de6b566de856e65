#!/usr/bin/env python
"""How the reports' held-out predictions do, part by part, over several studies at once.

Reads the ``prediction`` section of each study's ``report.json`` (what ``hpcdl study report``
wrote; nothing is recomputed) and prints, per study and pooled over all of them, by backend:
how many held-out points, the mean signed error (bias) and the mean absolute error of the
predicted compute, exchange and step, how many steps are within 10% and how many points have
both parts within 15%, and the mean absolute step error of the two baselines the report prints
beside the model (one beta from the largest calibrated point's excess; efficiency stays); then,
pooled over every study, per node count, the mean signed errors and the sign test each report
applies to its own points (a bias at a node count that one study's few points cannot show);
then, from the studies' records (``runs.jsonl``), how the Horovod ranks' compute probes lay apart
by node count: what a held-out point's slowest rank is predicted from; last, where two studies
ran the same configuration (the same workload, settings, box setting and node count; two box
sessions), how far apart the two measured the held-out step over the calibrated one, beside the
model's prediction of that ratio in each: what no prediction from the calibration can follow;
and over every configuration run in two sessions or more, how far that ratio and each predictor's
step error move between sessions (a part of the error no correction of a configuration's bias
removes), how much of it the repeats' own noise makes, and what it leaves a predictor with no
bias at all: its mean absolute error, and the chance that all of a study's points lie within 10%.

With ``--after COMMIT`` the studies whose files were committed before their runs, and whose runs
came after COMMIT, are pooled apart (read from each record's git_commit and study_sha256 and the
clone's git): the check of the rules COMMIT set, on points they did not see.

A bias near zero with a large absolute error is noise; a step bias near zero whose parts carry
opposite biases is cancellation, which the per-part columns show.

    python -m benchmarks.heldout_check results/box-cnn-*/ > results/heldout-check.txt
"""
import argparse
import hashlib
import json
import math
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from statistics import mean, median, pstdev
from typing import NamedTuple, Optional

from hpcdl import machine, records
from hpcdl.model import baselines, host_spread
from hpcdl.model.floor import SQRT_2_PI
from hpcdl.model.measured import probe_slack

PARTS = ("compute", "exchange", "step")


def _report(folder: Path):
    """(path, document) of a study's report.json (the folder's, or the file given); document None
    where it cannot be read."""
    path = folder / "report.json" if folder.is_dir() else folder
    try:
        return path, json.loads(path.read_text())
    except (OSError, ValueError):
        return path, None


def _runs(folder: Path) -> Path:
    """The study's runs.jsonl, beside its report."""
    return (folder if folder.is_dir() else folder.parent) / "runs.jsonl"


def heldout(folder: Path):
    """(study, backend, point) for every held-out point of the study's report, else nothing."""
    path, doc = _report(folder)
    if doc is None:
        return []
    name = (doc.get("study") or {}).get("name") if isinstance(doc.get("study"), dict) else None
    name = name or path.parent.name
    out = []
    for axis in (doc.get("prediction") or {}).get("axes") or []:
        for pt in axis.get("points") or []:
            if pt.get("fitted") is False and pt.get("error"):
                grown = _growth_factor(axis.get("model") or {}, pt.get("nodes"))
                out.append((name, axis.get("backend") or "?",
                            pt if grown is None else {**pt, "growth_factor": grown}))
    return out


def _growth_factor(model: dict, nodes) -> Optional[float]:
    """The growth the model carried to a point beyond the calibration: report.json's
    ``model.growth`` factor of the count the point drew on, by the model's own rule
    (:func:`hpcdl.model.host_spread.at`: the largest count below it); None where the axis had
    no growth table or the point drew on none of its counts."""
    table = {int(k): v.get("factor") for k, v in (model.get("growth") or {}).items()}
    if not table or not nodes:
        return None
    got = host_spread.at(table, int(nodes), int(model.get("calibrated_p") or 1))
    return float(got) if got else None


def growth_ends(points) -> Optional[dict]:
    """The compute's error with the growth the model carried and with none (the predicted
    compute over that growth): {end: (mean absolute error, points beyond 15%)} and n, over the
    points that carry a growth; None where none does."""
    pts = [p for p in points if p.get("growth_factor") and (p.get("measured") or {}).get("compute")
           and (p.get("predicted") or {}).get("compute")]
    if not pts:
        return None
    out = {"n": len(pts)}
    for end, div in (("carried", False), ("none", True)):
        errs = [abs(p["predicted"]["compute"] / (p["growth_factor"] if div else 1.0)
                    / p["measured"]["compute"] - 1) for p in pts]
        out[end] = (mean(errs), sum(e > 0.15 for e in errs))
    return out


def summary(points) -> dict:
    """The figures of one group of held-out points."""
    errs = {part: [p["error"][part] for p in points if p["error"].get(part) is not None]
            for part in PARTS}
    both = [p for p in points if p["error"].get("compute") is not None
            and p["error"].get("exchange") is not None]
    return {
        "n": len(points),
        **{f"bias_{part}": mean(e) if e else None for part, e in errs.items()},
        **{f"mae_{part}": mean(abs(x) for x in e) if e else None for part, e in errs.items()},
        "within_10": sum(abs(e) <= 0.10 for e in errs["step"]),
        "parts_15": sum(abs(p["error"]["compute"]) <= 0.15 and abs(p["error"]["exchange"]) <= 0.15
                        for p in both),
        "parts_n": len(both),
        "mae_one_parameter": _mae(points, "one_parameter_error"),
        "mae_naive": _mae(points, "naive_error"),
        "inside": sum(bool(p.get("inside")) for p in points if "inside" in p and p.get("band")),
        "banded": sum(1 for p in points if p.get("band")),
    }


def run_after(folder: Path, commit: str, repo: Path = Path(".")) -> Optional[bool]:
    """Whether every training record of the study ran on a commit that descends from ``commit``
    and already held the study file with the hash the records carry: the file written, and
    committed, before its runs, and the runs after that commit. None where the records or git
    cannot tell (no commit or study file named, a commit not in this clone)."""
    pairs = set()
    try:
        lines = _runs(folder).read_text().splitlines()
    except OSError:
        return None
    for text in lines:
        rec = json.loads(text)
        if rec.get("kind") != "train":
            continue
        d = rec.get("declared") or {}
        pairs.add(((rec.get("manifest") or {}).get("git_commit"), d.get("study_file"),
                   d.get("study_sha256")))
    if not pairs or any(None in p for p in pairs):
        return None

    def git(*args):
        return subprocess.run(["git", "-C", str(repo), *args], capture_output=True)

    for ran, path, sha in pairs:
        if git("cat-file", "-e", f"{ran}^{{commit}}").returncode:
            return None
        held = git("show", f"{ran}:{path}")
        if (git("merge-base", "--is-ancestor", commit, ran).returncode or held.returncode
                or hashlib.sha256(held.stdout).hexdigest() != sha):
            return False
    return True


def _print_after(held: dict, commits) -> None:
    """Per commit, the studies written before their runs and run after it (:func:`run_after`),
    apart from the rest: the check of the rules that commit set, on points they did not see.
    ``held``: each folder's held-out points, as :func:`heldout` read them."""
    for commit in commits:
        after = {f: run_after(f, commit) for f in held}
        kept = [f for f, ok in after.items() if ok and held[f]]
        names = sorted({held[f][0][0] for f in kept})
        print()
        print(f"# written, and committed, before their runs, and run after {commit} (each "
              f"record's git_commit descends from it and holds the study file with the "
              f"records' study_sha256): {len(names)} studies ({', '.join(names)}); "
              f"undecided: {sum(v is None for v in after.values())}")
        pts = [pt for f in kept for _, _, pt in held[f]]
        if pts:
            print(line(f"after {commit}", "all", summary(pts)))
            _print_hidden_ends(pts)


def hidden_ends(points) -> Optional[dict]:
    """The step's error with each share of the exchange hidden beyond the calibration: none
    (each point's ``step_if_none``), the model's (its predicted step: the middle) and all of the
    calibration's (``step_if_hidden``): {end: (mean absolute error, points beyond 15%)} and n;
    and, over the points whose loop file measured a window, the model's and the window's
    (``step_if_window``) as ``windowed``; None where no point carries both ends."""
    pts = [p for p in points if p.get("step_if_none") and p.get("step_if_hidden")
           and (p.get("measured") or {}).get("step") and (p.get("predicted") or {}).get("step")]
    if not pts:
        return None

    def err(sel, key):
        errs = [abs((p[key] if key else p["predicted"]["step"]) / p["measured"]["step"] - 1)
                for p in sel]
        return mean(errs), sum(e > 0.15 for e in errs)

    out = {"n": len(pts)}
    for end, key in (("none", "step_if_none"), ("model", None), ("all", "step_if_hidden")):
        out[end] = err(pts, key)
    win = [p for p in pts if p.get("step_if_window")]
    out["windowed"] = None if not win else {"n": len(win), "model": err(win, None),
                                            "window": err(win, "step_if_window")}
    return out


def _print_hidden_ends(points) -> None:
    g = growth_ends(points)
    if g:
        print(f"  the compute's growth beyond the calibration, over {g['n']} points whose loop "
              f"file measured it: carried {_pct(g['carried'][0])} ({g['carried'][1]} beyond 15%), "
              f"none {_pct(g['none'][0])} ({g['none'][1]})")
    h = hidden_ends(points)
    if h:
        print(f"  the exchange hidden beyond the calibration, over {h['n']} points: none "
              f"{_pct(h['none'][0])} ({h['none'][1]} beyond 15%), the model's "
              f"{_pct(h['model'][0])} ({h['model'][1]}), all of the calibration's "
              f"share {_pct(h['all'][0])} ({h['all'][1]})")
        w = h["windowed"]
        if w:
            print(f"  where a loop file measured the window, over {w['n']} points: the model's "
                  f"{_pct(w['model'][0])} ({w['model'][1]}), the window's "
                  f"{_pct(w['window'][0])} ({w['window'][1]})")


def _mae(points, key):
    vals = [abs(p[key]) for p in points if p.get(key) is not None]
    return mean(vals) if vals else None


def _pct(x, signed=False):
    return "-" if x is None else (f"{x * 100:+.1f}%" if signed else f"{x * 100:.1f}%")


HEAD = (f"{'study':26s} {'backend':8s} {'n':>3s}  {'compute bias/MAE':>17s}  "
        f"{'exchange bias/MAE':>17s}  {'step bias/MAE':>15s}  {'<=10%':>5s}  {'parts<=15%':>10s}  "
        f"{'1-beta':>6s}  {'naive':>6s}  {'band':>5s}")


def line(study: str, backend: str, s: dict) -> str:
    return (f"{study:26s} {backend:8s} {s['n']:3d}  "
            + "  ".join(f"{_pct(s[f'bias_{part}'], True):>7s} / {_pct(s[f'mae_{part}']):>6s}"
                        .rjust(17 if part != 'step' else 15) for part in PARTS)
            + f"  {s['within_10']:>2d}/{s['n']:<2d}  {s['parts_15']:>4d}/{s['parts_n']:<5d}"
            f"  {_pct(s['mae_one_parameter']):>6s}  {_pct(s['mae_naive']):>6s}"
            f"  {s['inside']:>2d}/{s['banded']:<2d}")


def _probes(rec: dict):
    """Per rank of a multi-rank Horovod record, its compute probes (the first, a warm-up, left
    out), the CPU a probe took and its compute (the median probe the record gives); else
    nothing."""
    if not records.ok_train(rec) or records.lookup(rec, "point", "backend") != "horovod":
        return []
    ranks = records.lookup(rec, "metrics", "ranks") or []
    probes = [r.get("compute_probes_s", [])[1:] for r in ranks]
    if len(ranks) < 2 or min(map(len, probes)) < 3:
        return []
    return [(p, r.get("compute_cpu_s"), r["compute_s"]) for p, r in zip(probes, ranks)]


def rank_spread(folders) -> dict:
    """Per node count, per record (medians over the records): the slowest rank's probe over the
    median rank's, probe by probe; the slowest rank's compute over the median rank's (the
    slowest rank's compute a report measures); the ranks' own probe-to-probe variation (standard
    deviation over mean); the share of probes on which the most often slowest rank was the
    slowest; a probe's wall time over its CPU time; the median rank's CPU a probe."""
    out = defaultdict(lambda: defaultdict(list))
    for folder in folders:
        path = _runs(folder)
        if not path.is_file():
            continue
        for rec in records.iter_records(path):
            ranks = _probes(rec)
            if not ranks:
                continue
            n = min(len(p) for p, _, _ in ranks)
            cols = [[p[j] for p, _, _ in ranks] for j in range(n)]
            slowest = [c.index(max(c)) for c in cols]
            meds = [c for _, _, c in ranks]
            f = out[len(ranks)]
            f["per_probe"].append(median(max(c) / median(c) for c in cols))
            f["rank_medians"].append(max(meds) / median(meds))
            f["within_cv"].append(median(pstdev(p) / mean(p) for p, _, _ in ranks))
            f["same_slowest"].append(max(slowest.count(i) for i in set(slowest)) / n)
            cpu = [(c, u) for _, u, c in ranks if u]
            if cpu:
                f["wall_per_cpu"].append(median(c / u for c, u in cpu))
                f["cpu_s"].append(median(u for _, u in cpu))
    return {k: {key: median(v) for key, v in f.items()} | {"records": len(f["per_probe"])}
            for k, f in sorted(out.items())}


def _print_rank_spread(folders) -> None:
    spread = rank_spread(folders)
    if not spread:
        return
    print()
    print("# the Horovod ranks' compute in the records, by ranks (medians over records): slowest"
          " over median rank probe by probe, and of the ranks' median probes (the slowest rank's"
          " compute the reports measure); a rank's probe-to-probe variation (sd/mean); the share"
          " of probes the most often slowest rank was slowest; a probe's wall over CPU time; the"
          " median rank's CPU a probe")
    for k, f in spread.items():
        cpu = (f"; wall/CPU {f['wall_per_cpu']:.2f}, CPU a probe {f['cpu_s']:.3f} s"
               if "cpu_s" in f else "")
        print(f"{k:>3d} ranks: {f['records']:3d} records, slowest/median {f['per_probe']:.3f} "
              f"probe by probe, {f['rank_medians']:.3f} of rank medians; within a rank "
              f"{f['within_cv'] * 100:.1f}%; the same rank slowest on {f['same_slowest'] * 100:.0f}%"
              f" of probes{cpu}")


# what makes two studies' points the same configuration: the workload and its settings, the
# exchange, the box setting, the node count, the MPI library's allreduce in force and the
# Horovod and Open MPI settings the job ran with (not the repeats, the seed or the commit)
SAME_PARAMS = ("workload", "model", "image_size", "num_classes", "batch_size", "global_batch",
               "batches_per_iter", "steps", "warmup", "threads_per_rank", "parallel", "backend",
               "compression", "lr")
SAME_BOX = ("link_rate", "cpus_per_node", "cpu_period_us", "nodes_in_box", "latency", "cores")


def configurations(folder: Path) -> dict:
    """(axis label, nodes) -> the configuration its records ran, from the study's runs.jsonl."""
    path = _runs(folder)
    out = {}
    for rec in (records.iter_records(path) if path.is_file() else ()):
        box = machine.of_record(rec)
        if not records.ok_train(rec) or box.get("kind") != "box":
            continue
        par = rec.get("params") or {}
        label = f"{par.get('backend')}/{par.get('compression')}@{box.get('link_rate')}"
        nodes = len(box.get("nodes") or [])
        env = (rec.get("manifest") or {}).get("env") or {}
        out[(label, nodes)] = (tuple(par.get(k) for k in SAME_PARAMS),
                               tuple(box.get(k) for k in SAME_BOX), nodes,
                               json.dumps((rec.get("tuning") or {}).get("in_force"),
                                          sort_keys=True),
                               tuple(sorted((k, v) for k, v in env.items()
                                            if k.startswith(("HOROVOD_", "OMPI_MCA_")))))
    return out


class Held(NamedTuple):
    """A held-out point of a study, as :func:`by_configuration` read it."""
    study: str
    axis: str
    nodes: int
    measured: float           # the measured step over the calibrated point's
    predicted: float          # the model's prediction of that ratio
    point: dict               # the report's point
    floor: Optional[float]    # the floor the study's report printed (:mod:`hpcdl.model.floor`)
    order: int                # the order it was read in


def by_configuration(folders) -> dict:
    """Each held-out point that the studies ran (a :class:`Held`), grouped by configuration (its
    own and its calibrated point's, as :func:`configurations` reads them), in the order the
    studies are given."""
    out, seq = defaultdict(list), 0
    for folder in folders:
        path, doc = _report(folder)
        if doc is None:
            continue
        confs = configurations(folder)
        prediction = doc.get("prediction") or {}
        floor = (prediction.get("floor") or {}).get("floor")
        for axis in prediction.get("axes") or []:
            pts = {pt["nodes"]: pt for pt in axis.get("points") or []}
            cal = max((n for n, pt in pts.items() if pt.get("fitted")), default=None)
            for n, pt in sorted(pts.items()):
                # the calibrated point must be the same configuration too (not so in strong
                # scaling against weak: the same 4-node point, another 2-node batch)
                key = (confs.get((axis.get("axis"), n)), confs.get((axis.get("axis"), cal)))
                if pt.get("fitted") is not False or cal is None or None in key:
                    continue
                c = pts[cal]
                out[key].append(Held(path.parent.name, axis["axis"], n,
                                     pt["measured"]["step"] / c["measured"]["step"],
                                     pt["predicted"]["step"] / c["predicted"]["step"], pt, floor,
                                     seq))
                seq += 1
    return out


def same_configuration(groups: dict) -> list:
    """For each held-out point that two studies both ran (``groups``: :func:`by_configuration`):
    the measured step over the calibrated point's in each, and the model's prediction of that
    ratio in each (each later study against the first that ran it), with the model's step
    error."""
    pairs = [(runs[0], r) for runs in groups.values() for r in runs[1:]]
    return [tuple(x[:5] + (x.point["error"]["step"],) for x in pair)
            for pair in sorted(pairs, key=lambda pair: pair[1].order)]


# the step's predictors a report prints, and where each one's error is in a point
PREDICTORS = (("the model", lambda pt: pt["error"]["step"]),
              ("one beta", lambda pt: pt.get("one_parameter_error")),
              ("naive", lambda pt: pt.get("naive_error")))


def _pooled_sd(groups) -> float:
    """The standard deviation within groups, pooled (each group's own mean taken out)."""
    squares = sum((x - mean(g)) ** 2 for g in groups for x in g)
    return (squares / sum(len(g) - 1 for g in groups)) ** 0.5


def session_residuals(groups: dict) -> dict:
    """Over the configurations that two or more studies (box sessions) ran (``groups``:
    :func:`by_configuration`): how far, between the
    sessions of one configuration, the measured held-out step over the calibrated one moves
    (relative to its mean), and how far each predictor's step error moves (standard deviations
    within a configuration, pooled); each predictor's mean absolute error over the same points.
    A correction of a configuration's bias removes none of that movement. ``parts``: how far the
    model's compute and exchange errors move the same way. ``repeats``: the part
    of it the repeats' own noise makes (the sd behind each report's floor, root mean square over
    the studies whose points are grouped). Empty when no configuration was run twice."""
    groups = [runs for runs in groups.values() if len(runs) > 1]
    if not groups:
        return {}
    per_study, floors = defaultdict(int), {}
    for runs in groups:
        for r in runs:
            per_study[r.study] += 1
            if r.floor is not None:
                floors[r.study] = r.floor
    out = {"configurations": len(groups), "points": sum(len(g) for g in groups),
           "repeats": (mean((f / SQRT_2_PI) ** 2 for f in floors.values()) ** 0.5
                       if floors else None),
           "dof": sum(len(g) - 1 for g in groups), "study_points": max(per_study.values()),
           "measured": _pooled_sd([[r.measured / mean(x.measured for x in g) for r in g]
                                   for g in groups]),
           "predictors": {}}
    for name, error in PREDICTORS:
        errs = [[error(r.point) for r in g] for g in groups]
        if any(e is None for g in errs for e in g):
            continue
        out["predictors"][name] = {"moves": _pooled_sd(errs),
                                   "mae": mean(abs(e) for g in errs for e in g)}
    out["parts"] = {}
    for part in ("compute", "exchange"):
        errs = [[(r.point.get("error") or {}).get(part) for r in g] for g in groups]
        if all(e is not None for g in errs for e in g):
            out["parts"][part] = _pooled_sd(errs)
    return out


def attainable(moves: float, within: float, points: int,
               target_mae: Optional[float] = None) -> dict:
    """What an error that moves ``moves`` (sd) between sessions allows a predictor with no bias at
    all, errors normal: its expected absolute error, the chance a point lies within ``within``,
    the chance all ``points`` of a study do (independent points), and, given ``target_mae``, the
    largest sd whose expected absolute error meets it."""
    one = math.erf(within / (moves * math.sqrt(2.0)))
    out = {"mae": SQRT_2_PI * moves, "within": one, "all_within": one ** points}
    if target_mae is not None:
        out["moves_for_target"] = target_mae / SQRT_2_PI
    return out


def _print_same_configuration(groups: dict) -> None:
    pairs = same_configuration(groups)
    if not pairs:
        return
    print()
    print("# the same configuration in two studies (two box sessions; each later study against"
          " the first given that ran it): the held-out step over the calibrated point's step as"
          " each measured it and as the model predicted it there; the sessions' own difference is"
          " what no prediction from the calibration can follow")
    apart = []
    for a, b in pairs:
        apart.append(abs(b[3] / a[3] - 1))
        print(f"  {a[1]:<22} {a[2]} nodes: {a[0]} measured {a[3]:.3f}, predicted {a[4]:.3f}"
              f" (step {_pct(a[5], True)}); {b[0]} measured {b[3]:.3f}, predicted {b[4]:.3f}"
              f" (step {_pct(b[5], True)}); the sessions {apart[-1] * 100:.1f}% apart")
    print(f"  {len(pairs)} shared points: the sessions' measured ratios lay"
          f" {median(apart) * 100:.1f}% apart (median), {max(apart) * 100:.1f}% at most;"
          f" {sum(x > 0.10 for x in apart)} more than 10% apart")


def _print_session_residuals(groups: dict) -> None:
    res = session_residuals(groups)
    if not res or "one beta" not in res["predictors"]:
        return
    print()
    print(f"# between the sessions of one configuration ({res['configurations']} configurations,"
          f" {res['points']} held-out points, {res['dof']} degrees of freedom): how far the"
          " measured held-out step over the calibrated one moves, and how far each predictor's"
          " step error moves (sd within a configuration, pooled); no correction of a"
          " configuration's bias removes it. Beside it each predictor's mean absolute error over"
          " these points")
    print(f"  measured ratio: moves {_pct(res['measured'])}")
    for name, p in res["predictors"].items():
        print(f"  {name:<10} error moves {_pct(p['moves'])}, mean absolute error {_pct(p['mae'])}")
    least = min(p["moves"] for p in res["predictors"].values())
    half = res["predictors"]["one beta"]["mae"] / 2
    a = attainable(least, 0.10, res["study_points"], half)
    print(f"  what the least of these allows a predictor with no bias at all (errors normal):"
          f" mean absolute error {_pct(a['mae'])}; a point within 10% with probability"
          f" {a['within'] * 100:.0f}%, all {res['study_points']} of a study's"
          f" (independent) {a['all_within'] * 100:.0f}%; half of one beta's mean absolute error"
          f" here, {_pct(half)}, needs an error that moves at most {_pct(a['moves_for_target'])}")
    for part, moves in res["parts"].items():
        c = attainable(moves, 0.15, res["study_points"])
        print(f"  the model's {part} error moves {_pct(moves)}: a predicted {part} with no bias"
              f" that moved as much puts all {res['study_points']} of a study's within 15%"
              f" {c['all_within'] * 100:.0f}% of the time")
    if res["repeats"] is not None and res["repeats"] < least:
        own = (least ** 2 - res["repeats"] ** 2) ** 0.5
        b = attainable(own, 0.10, res["study_points"], half)
        print(f"  of that {_pct(least)}, the repeats' own noise makes {_pct(res['repeats'])} (the"
              f" sd behind these reports' floors) and the sessions {_pct(own)}: with repeats"
              f" without end, a predictor with no bias would err {_pct(b['mae'])} on average"
              f" and put all {res['study_points']} points within 10%"
              f" {b['all_within'] * 100:.0f}% of the time")


def _print_input_costs(folders) -> None:
    """What each allocation input is worth: per study and input, the held-out points' mean
    absolute step error and the band half-width that holds 90% of them, with every input and
    without that one (each report's ``input_costs``), pooled over the studies that used it."""
    pooled = defaultdict(lambda: [0, 0.0, 0.0, 0.0, 0.0])   # points, sums of mae and need
    lines = []
    for f in folders:
        path, doc = _report(f)
        costs = ((doc or {}).get("prediction") or {}).get("input_costs") or []
        if len(costs) < 2:
            continue
        every = costs[0]
        for c in costs[1:]:
            lines.append(f"  {path.parent.name:26} without {c['input']:9} "
                         f"MAE {_pct(every['mae'])} -> {_pct(c['mae'])}, 90% half-width "
                         f"{_pct(every['needed_halfwidth'])} -> {_pct(c['needed_halfwidth'])} "
                         f"({c['points']} points)")
            acc = pooled[c["input"]]
            n = c["points"]
            acc[0] += n
            acc[1] += every["mae"] * n
            acc[2] += c["mae"] * n
            acc[3] += every["needed_halfwidth"] * n
            acc[4] += c["needed_halfwidth"] * n
    if not lines:
        return
    print()
    print("# what each input measured on the allocation is worth: the held-out points predicted"
          " again without it (each report's input_costs): mean absolute step error and the band"
          " half-width that would have held 90% of them, with every input -> without this one;"
          " pooled: weighted by points")
    for ln in lines:
        print(ln)
    for name, (n, m0, m1, h0, h1) in sorted(pooled.items()):
        print(f"  all studies without {name:9} MAE {_pct(m0 / n)} -> {_pct(m1 / n)}, 90% "
              f"half-width {_pct(h0 / n)} -> {_pct(h1 / n)} ({n} points)")


def one_rank_probes(folders) -> list:
    """Per 1-rank training record: (study, probed compute, step median, slack), the slack the
    two medians' sampling error (two standard errors of the probes' and the steps' spreads over
    as many probes), as tests/mpi/test_train.py checks a probe against its step."""
    out = []
    for folder in folders:
        for rec in records.iter_records(_runs(folder)):
            ranks = records.lookup(rec, "metrics", "ranks") or []
            probes = ranks[0].get("compute_probes_s") if len(ranks) == 1 else None
            if not records.ok_train(rec) or not probes or len(probes) < 2:
                continue
            step = rec["metrics"]["step_time"]
            out.append((folder.name, rec["metrics"]["split"]["compute_s"], step["median"],
                        probe_slack(probes, step)))
    return out


def _print_bands(rows, folders) -> None:
    """The bands: how each report drew its own (pooled from other studies: leave one study out),
    their coverage, median half-width and zero edges, beside a flat band of 15%, by distance."""
    drawn = defaultdict(int)
    for f in folders:
        _, doc = _report(f)
        src = (((doc or {}).get("prediction") or {}).get("band_drawn") or {}).get("source")
        drawn[src or "none"] += 1
    pts = [pt for _, _, pt in rows if pt.get("band")]
    print()
    print("# the bands: each report's 90% band ('pooled': conformal over the residuals file's "
          "other studies on the same kind of machine, so each study's coverage is left-one-"
          "study-out; 'own': its calibration's left-out runs); half-width: (upper - lower) / 2 "
          "over the predicted step")
    print("  reports by band: " + ", ".join(f"{k} {v}" for k, v in sorted(drawn.items())))
    if not pts:
        return
    half = [(p["band"][1] - p["band"][0]) / 2 / p["predicted"]["step"] for p in pts]
    flat = sum(abs(p["error"]["step"]) <= 0.15 for p in pts if p["error"].get("step") is not None)
    print(f"  all: {sum(bool(p.get('inside')) for p in pts)} of {len(pts)} inside, median "
          f"half-width {_pct(median(half))}, lower edges at 0 s: "
          f"{sum(p['band'][0] <= 0 for p in pts)}; a flat +-15% band holds {flat}")
    by = defaultdict(list)
    for p in pts:
        by[p["nodes"]].append(p)
    for nodes, group in sorted(by.items()):
        print(f"  {nodes:>3d} nodes: {sum(bool(p.get('inside')) for p in group)} of "
              f"{len(group)} inside, median half-width "
              f"{_pct(median((p['band'][1] - p['band'][0]) / 2 / p['predicted']['step'] for p in group))}")


def _print_one_rank_probes(folders) -> None:
    rows = one_rank_probes(folders)
    print()
    print("# at one rank, the probed compute against the step (each run's medians): a step is the"
          " compute plus the update, so the probe may be longer only within the two medians'"
          " sampling error (as tests/mpi/test_train.py checks)")
    by_study = defaultdict(list)
    for study, c, s, slack in rows:
        by_study[study].append((c, s, slack))
    for study, runs in sorted(by_study.items()):
        worst = max(c / s - 1 for c, s, _ in runs)
        print(f"  {study:<26} {len(runs)} runs: longer in {sum(c > s for c, s, _ in runs)}, beyond"
              f" the sampling error in {sum(c > s + sl for c, s, sl in runs)}; probe/step - 1 at"
              f" most {_pct(worst, True)}, median error allowed "
              f"{_pct(median(sl / s for _, s, sl in runs))}")
    print(f"  all: {len(rows)} runs, the probe longer in {sum(c > s for _, c, s, _ in rows)},"
          f" beyond the sampling error in {sum(c > s + sl for _, c, s, sl in rows)}")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("studies", type=Path, nargs="+", help="study results folders (or report.json)")
    ap.add_argument("--after", action="append", default=[], metavar="COMMIT",
                    help="pool apart the studies written before their runs and run after COMMIT")
    a = ap.parse_args(argv)
    held = {f: heldout(f) for f in a.studies}
    rows = [r for f in a.studies for r in held[f]]
    print(f"# python -m benchmarks.heldout_check {' '.join(map(str, a.studies))}"
          + "".join(f" --after {c}" for c in a.after))
    print("# from each study's report.json (hpcdl study report); errors are (predicted - measured)"
          " / measured; parts: compute and exchange each within 15%; band: measured step inside"
          " the report's 90% band")
    if not rows:
        print("# no held-out points in these reports")
        return 1
    print(HEAD)
    groups = defaultdict(list)
    for study, backend, pt in rows:
        groups[(study, backend)].append(pt)
    for (study, backend), pts in sorted(groups.items()):
        print(line(study, backend, summary(pts)))
    by_backend = defaultdict(list)
    for _, backend, pt in rows:
        by_backend[backend].append(pt)
    print()
    for backend, pts in sorted(by_backend.items()):
        print(line("all", backend, summary(pts)))
    print(line("all", "all", summary([pt for _, _, pt in rows])))
    _print_hidden_ends([pt for _, _, pt in rows])
    _print_after(held, a.after)
    print()
    print("# by node count, all studies and backends: the mean signed errors and whether the step"
          " errors lean one way more than chance gives (two-sided sign test, as each report "
          "tests its own points)")
    for b in baselines.bias_by_nodes([pt for _, _, pt in rows]):
        print(f"{b['nodes']:>3d} nodes: {b['points']:3d} points, step {_pct(b['step'], True)}, "
              f"compute {_pct(b['compute'], True)}, exchange {_pct(b['exchange'], True)}; "
              f"{b['under']} under, {b['over']} over, sign test p = {b['sign_p']:.3f}"
              + (" (a bias)" if b["biased"] else ""))
    _print_bands(rows, a.studies)
    _print_input_costs(a.studies)
    _print_one_rank_probes(a.studies)
    _print_rank_spread(a.studies)
    groups = by_configuration(a.studies)
    _print_same_configuration(groups)
    _print_session_residuals(groups)
    return 0


if __name__ == "__main__":
    sys.exit(main())
