#!/usr/bin/env python
"""Which spread file predicts the held-out points' slowest rank: each study's report rendered
again (into a scratch folder, nothing in the study's own folder changes) with each spread file
given, and with none (the calibration runs' own spread), and the held-out Horovod points' compute
and step errors compared, by node count.

A spread file (``benchmarks/box_contention.py --json``) says how far the ranks' compute lies
apart at k nodes: measured on independent one-node trainings, or with ``--coupled`` in one k-rank
training. Every other flag of a study's report (its exchange and loop files) is the one its
committed ``report.md`` names in its command, so only the spread changes.

    python -m benchmarks.spread_check results/box-cnn-samehost results/box-cnn-weak5 \\
        --spread results/tuning/box-spread-coupled.json results/tuning/box-spread-samehost.json \\
        results/tuning/box-spread.json > results/spread-check.txt
"""
import argparse
import json
import sys
import tempfile
from dataclasses import replace
from pathlib import Path
from statistics import mean

from hpcdl.report import rendered_with, write_report

NONE = "none"                     # no spread file: the calibration runs' own spread


def _heldout(folder: Path, spread: str) -> tuple:
    """(held-out Horovod points of the report rendered with ``spread``, the file's max factors
    by node count, why the file was not taken)."""
    with tempfile.TemporaryDirectory() as tmp:
        # none: a file that is not there, so that a spread file the study itself declares is
        # not taken either (the report then draws from the calibration runs' spread)
        flags = rendered_with(folder)
        flags["given"] = replace(flags["given"], spread=str(Path(tmp) / "none.json")
                                 if spread == NONE else spread)
        write_report(folder, out_dir=tmp, plots=False, **flags)
        doc = json.loads((Path(tmp) / "report.json").read_text())
    pred = doc.get("prediction") or {}
    points, factors = [], {}
    for ax in pred.get("axes") or []:
        if ax.get("backend") != "horovod":
            continue
        for k, v in ((ax.get("model") or {}).get("host_spread") or {}).items():
            factors[int(k)] = v["max_factor"]
        points += [pt for pt in ax.get("points") or [] if pt.get("fitted") is False
                   and (pt.get("error") or {}).get("compute") is not None]
    misses = ((pred.get("spread_bench") or {}).get("misses")) or []
    return points, factors, misses


def _line(label: str, points: list) -> str:
    c = [p["error"]["compute"] for p in points]
    s = [p["error"]["step"] for p in points if p["error"].get("step") is not None]
    return (f"  {label:<46} {len(points):>3} {mean(c) * 100:>+7.1f}% {mean(map(abs, c)) * 100:>6.1f}%"
            f" {mean(s) * 100:>+7.1f}% {mean(map(abs, s)) * 100:>6.1f}%"
            f" {sum(abs(x) <= 0.10 for x in s):>3}/{len(s)}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("studies", nargs="+", help="study folders (with runs.jsonl and report.md)")
    ap.add_argument("--spread", nargs="+", required=True,
                    help=f"spread files to compare ('{NONE}': the calibration runs' own spread)")
    opts = ap.parse_args()
    spreads = [NONE] + [s for s in opts.spread if s != NONE]
    print(f"# python -m benchmarks.spread_check {' '.join(opts.studies)} --spread "
          f"{' '.join(opts.spread)}")
    print("# held-out Horovod points of each study's report rendered with each spread file; errors "
          "(predicted - measured) / measured of the slowest rank's compute and of the step; "
          "x: the expected maximum over p ranks the file gives at 4 / 8 nodes")
    print(f"  {'spread':<46} {'n':>3} {'compute bias':>8} {'MAE':>6} {'step bias':>8} {'MAE':>6}"
          f" {'<=10%':>5}")
    for folder in map(Path, opts.studies):
        print(f"{folder.name}")
        for spread in spreads:
            points, factors, misses = _heldout(folder, spread)
            if misses and spread != NONE:
                print(f"  {spread}: not taken ({'; '.join(misses)})")
                continue
            label = spread if spread == NONE else (
                Path(spread).name + " x" + "/".join(f"{factors.get(k, 1.0):.3f}" for k in (4, 8)))
            print(_line(label, points))
            for p in sorted({pt["nodes"] for pt in points}):
                print(_line(f"  at {p} nodes", [pt for pt in points if pt["nodes"] == p]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
