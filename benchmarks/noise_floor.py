"""How well a point's own repeats agree: the floor under any prediction of that point.

For every box study in ``results/`` and every point (axis, nodes) with at least two repeats, each
repeat's step time, compute (the slowest rank's median probe) and exchange (timed alone) are
compared with the median of the point's *other* repeats, as :mod:`hpcdl.model.measured` reads
them. A model that knew every point's true figure would still differ from one run by about this
much; a target of "every point within X%" is out of reach where the repeats themselves spread
further. Also printed: the 1-node compute of each study in the order its jobs ran, i.e. how far
the host drifted during the study; and every study's repeats pooled by the box's cores per node,
the floor under a held-out point of that setting (a prediction from one calibration run, checked
against one run, differs by about what two runs of one point do). Computes shorter than the box's
CPU period (the eX MLP's) are left out of the pool: they are quota slices, not a workload's pass.

    python -m benchmarks.noise_floor [results/box-*]
"""
from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Dict, List

ROOT = Path(__file__).resolve().parents[1]

from hpcdl import checks, machine
from hpcdl.analysis.reading import axis_name, record_axis
from hpcdl.model.measured import measured

PARTS = (("step", 0.10), ("compute", 0.15), ("exchange", 0.15))


def _points(path: Path):
    """({(axis, nodes): each repeat's started time and parts}, the first box record's cores per
    node and CPU period, {} where no record ran on a box)."""
    groups, setting = defaultdict(list), {}
    for rec in checks.scan(path, checks.train_record_problem).records:
        if rec.get("kind", "train") != "train" or rec.get("status", "ok") != "ok":
            continue
        m = measured(rec)
        if m is None:
            continue
        key = (axis_name(*record_axis(rec)), int((rec.get("layout") or {}).get("nodes") or 1))
        mach = machine.of_record(rec)      # older records name the box in a section of its own
        if not setting and mach.get("kind") == "box":
            setting = {"cores": mach.get("cpus_per_node"),
                       "period_s": (mach.get("cpu_period_us") or 0) / 1e6}
        groups[key].append({"started": (rec.get("manifest") or {}).get("started") or rec.get("time"),
                            **{p: m[p] for p, _ in PARTS}})
    return groups, setting


def _p90(devs):
    """The 90th percentile of sorted deviations (the nearest rank at or above it)."""
    return devs[min(len(devs) - 1, int(0.9 * len(devs)))]


def _loo(values):
    """|x_k / median(others) - 1| for each repeat k."""
    out = []
    for k, x in enumerate(values):
        others = values[:k] + values[k + 1:]
        if x is not None and others and all(o is not None for o in others):
            out.append(abs(x / statistics.median(others) - 1))
    return out


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    folders = [Path(a) for a in argv] or sorted((ROOT / "results").glob("box-*"))
    print(f"# command: python -m benchmarks.noise_floor {' '.join(argv)}".rstrip())
    print("# each repeat against the median of its point's other repeats: share within the "
          "target's tolerance, the 90th percentile and the largest, over all points with >= 2 "
          "repeats")
    print(f"#{'study':>22} {'part':>9} {'repeats':>7} {'within':>7} {'tol':>4} {'p90':>6} "
          f"{'max':>6}  worst point")
    pooled: Dict[float, Dict[str, List[float]]] = defaultdict(lambda: defaultdict(list))
    studies: Dict[float, set] = defaultdict(set)
    for folder in folders:
        groups, setting = _points(folder / "runs.jsonl")
        if not groups:
            continue
        if setting.get("cores") is not None:
            _pool(groups, setting, pooled[setting["cores"]], studies[setting["cores"]],
                  folder.name)
        for part, tol in PARTS:
            devs, worst = [], (0.0, "")
            for (axis, nodes), runs in sorted(groups.items()):
                d = _loo([r[part] for r in runs])
                devs += d
                if d and max(d) > worst[0]:
                    worst = (max(d), f"{axis} n{nodes}: "
                                     + " ".join(f"{r[part] * 1e3:.0f}" for r in runs) + " ms")
            if not devs:
                continue
            devs.sort()
            p90 = _p90(devs)
            inside = sum(d <= tol for d in devs)
            print(f" {folder.name:>22} {part:>9} {len(devs):>7} {inside / len(devs):>6.0%} "
                  f"{tol:>4.0%} {p90:>6.1%} {devs[-1]:>6.1%}  {worst[1]}")
        ones = sorted((r["started"] or "", r["compute"], axis) for (axis, nodes), runs
                      in groups.items() if nodes == 1 for r in runs)
        if len(ones) > 1:
            cs = [c for _, c, _ in ones]
            print(f" {folder.name:>22} 1-node compute in the order run (ms): "
                  + " ".join(f"{c * 1e3:.0f}" for c in cs)
                  + f"  (max/min {max(cs) / min(cs):.2f})")
    _print_pooled(pooled, studies)
    return 0


def _pool(groups, setting: dict, into: Dict[str, List[float]], names: set, name: str) -> None:
    """Add a study's repeat deviations to its setting's pool, leaving out points whose compute
    is shorter than the box's CPU period."""
    for runs in groups.values():
        if min((r["compute"] or 0) for r in runs) < setting.get("period_s", 0):
            continue
        for part, _ in PARTS:
            d = _loo([r[part] for r in runs])
            into[part] += d
            if d:
                names.add(name)


def _print_pooled(pooled, studies) -> None:
    print("# pooled by the box's cores per node: each repeat against its point's other repeats")
    for cores in sorted(pooled):
        for part, _ in PARTS:
            devs = sorted(pooled[cores][part])
            if not devs:
                continue
            p90 = _p90(devs)
            within = ", ".join(f"{sum(d <= t for d in devs) / len(devs):.0%} within {t:.0%}"
                               for t in (0.10, 0.15))
            print(f" {cores} cores/node, {len(studies[cores])} studies {part:>9} {len(devs):>5} "
                  f"repeats: {within}, median {statistics.median(devs):.1%}, p90 {p90:.1%}, "
                  f"max {devs[-1]:.1%}")


if __name__ == "__main__":
    sys.exit(main())
