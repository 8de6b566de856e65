#!/usr/bin/env python
"""Do Grid Engine's runs of a study give what Slurm's give? Two results folders of the same study
file's points (box-cnn-sched-slurm and box-cnn-sched-gridengine: one workload, one box, one
after the other), compared per node count: each repeat's step time (the timed iterations'
median), the two schedulers' medians and their difference, set against the spread between
repeats within each scheduler (the box's run-to-run spread), and the weak-scaling efficiency
each gives against its own 1-node runs.

    python -m benchmarks.scheduler_match results/box-cnn-sched-slurm results/box-cnn-sched-gridengine \\
        > results/scheduler-match.txt
"""
import argparse
import statistics
import sys
from pathlib import Path


from hpcdl import machine, records
from hpcdl.model.measured import measured


def _steps(folder: Path) -> dict:
    """nodes -> step seconds of each recorded repeat, and the scheduler the records name."""
    out, scheds, boxes, commits = {}, set(), set(), set()
    for rec in records.read(folder / "runs.jsonl"):
        if rec.get("status", "ok") != "ok":
            continue
        out.setdefault(rec["point"]["nodes"], []).append(measured(rec).step)
        man = rec.get("manifest") or {}
        scheds.add((man.get("slurm") or {}).get("scheduler"))
        boxes.add(machine.instance(rec))
        commits.add((man.get("git_commit") or "")[:12])
    return out, scheds, boxes, commits


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("a", help="the first scheduler's results folder (the reference)")
    ap.add_argument("b", help="the other scheduler's results folder")
    opts = ap.parse_args()
    a, sa, ba, ca = _steps(Path(opts.a))
    b, sb, bb, cb = _steps(Path(opts.b))
    print(f"# python -m benchmarks.scheduler_match {opts.a} {opts.b}")
    print(f"# {opts.a}: scheduler {sorted(map(str, sa))}, box {sorted(map(str, ba))}, commit {sorted(ca)}")
    print(f"# {opts.b}: scheduler {sorted(map(str, sb))}, box {sorted(map(str, bb))}, commit {sorted(cb)}")
    print("# step: the timed iterations' median per run (ms); spread: the largest difference between "
          "two repeats of one scheduler at that node count; eff: against the scheduler's own 1-node median")
    print(f"{'nodes':>5} {'A steps':>16} {'B steps':>16} {'A med':>7} {'B med':>7} {'B-A':>7} "
          f"{'spread':>7} {'within':>7} {'A eff':>6} {'B eff':>6}")
    one_a, one_b = statistics.median(a[min(a)]), statistics.median(b[min(b)])
    inside = 0
    for n in sorted(set(a) & set(b)):
        ma, mb = statistics.median(a[n]), statistics.median(b[n])
        spread = max(max(a[n]) - min(a[n]), max(b[n]) - min(b[n]))
        ok = abs(mb - ma) <= spread
        inside += ok
        print(f"{n:>5} {','.join(f'{x * 1e3:.0f}' for x in a[n]):>16} "
              f"{','.join(f'{x * 1e3:.0f}' for x in b[n]):>16} {ma * 1e3:>7.0f} {mb * 1e3:>7.0f} "
              f"{(mb - ma) * 1e3:>+7.0f} {spread * 1e3:>7.0f} {'yes' if ok else 'NO':>7} "
              f"{one_a / ma:>6.1%} {one_b / mb:>6.1%}")
    print(f"# {inside} of {len(set(a) & set(b))} node counts: the schedulers' medians differ by no "
          "more than the repeats of one scheduler do")
    return 0


if __name__ == "__main__":
    sys.exit(main())
