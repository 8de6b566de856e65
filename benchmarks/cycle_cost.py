#!/usr/bin/env python
"""What time slices cost a node with a fraction of a core: Horovod's cycle (``--cycles``, ms
between its background thread's wake-ups; 1 is Horovod's default) or the cluster box's CPU
quota period (``--periods``, microseconds; a node whose quota is spent waits for the next one).
A study's points are trained with each setting, alternating, on the cluster box, through the
study's own job scripts (``hpcdl study submit --dry-run`` renders them). The cycle time is passed
through sbatch's environment; the period is written to every box node's cgroup before the job
(root) and the box's own period put back at the end, and each record's ranks say the period
their cgroup had. Per point and setting: the medians over rounds of the slowest rank's probed
compute, the exchange timed alone, the step and the throughput, and the compute's ratio to the
first setting's: what the wake-ups (or the quota's gaps) take from the forward and backward pass.

    scripts/cluster-box.sh up 8 --link 500mbit --cpus-per-node 0.2 && scripts/cluster-box.sh check
    python -m benchmarks.cycle_cost jobs/box-cnn-tuned-weak.toml \\
        --points n1-r1-horovod-none-500mbit-tdefault-rep0,n2-r1-horovod-none-500mbit-tdefault-rep0 \\
        > results/cycle-cost.txt
    python -m benchmarks.cycle_cost jobs/box-cnn-weak.toml \\
        --points n2-r1-horovod-none-200mbit-rep0 --periods 10000,5000 > results/box-cpu-period.txt
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


from hpcdl import box, records
from hpcdl.errors import UserError
from hpcdl.model.measured import measured
from hpcdl.launch import local


def set_period(period_us: int) -> None:
    """Every box node's CPU quota at ``period_us``, its cores kept."""
    b = box.load()
    for node in b["nodes"].values():
        try:
            box.set_quota(node["cgroup"], float(b["cpus_per_node"]), period_us)
        except UserError as e:
            raise SystemExit(f"--periods {period_us}: {e}") from None


def _ran_with(rec: dict, knob: str) -> str:
    if knob == "cycle":
        return str((rec.get("manifest") or {}).get("env", {}).get("HOROVOD_CYCLE_TIME"))
    periods = {str((r.get("cgroup") or {}).get("period_us"))
               for r in records.lookup(rec, "metrics", "ranks") or []}
    return periods.pop() if len(periods) == 1 else str(sorted(periods))


def _run(script: Path, knob: str, value: str, results: Path, extra) -> dict:
    """One job of ``script`` with the cycle time (or box period); the record it appended."""
    before = len(records.read(results)) if results.exists() else 0
    env = dict(os.environ)
    if knob == "cycle":
        env["HOROVOD_CYCLE_TIME"] = value
    else:
        set_period(int(value))
    res = subprocess.run(["sbatch", "--wait", *extra, str(script.name)], cwd=script.parent, env=env,
                         capture_output=True, text=True, timeout=1800)
    recs = records.read(results) if results.exists() else []
    if res.returncode != 0 or len(recs) <= before:
        raise SystemExit(f"{script.name} with {knob} {value} failed: "
                         f"{res.stdout[-1500:]} {res.stderr[-1500:]}")
    rec = recs[before]
    if _ran_with(rec, knob) != value:
        raise SystemExit(f"the record of {script.name} says {knob} {_ran_with(rec, knob)!r}, "
                         f"not {value}")
    return rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("study")
    ap.add_argument("--points", required=True, help="point ids, comma-separated")
    knob = ap.add_mutually_exclusive_group()
    knob.add_argument("--cycles", help="cycle times in ms, the first the reference (1,5)")
    knob.add_argument("--periods", help="box CPU quota periods in microseconds, the first the "
                                        "reference, e.g. 10000,5000")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sbatch", default="", help="more sbatch options, e.g. '--nice=-10000' to "
                                                 "go ahead of a study's queued jobs")
    opts = ap.parse_args()
    knob, unit = ("period", "us") if opts.periods else ("cycle", "ms")
    cycles = (opts.periods or opts.cycles or "1,5").split(",")
    own = (box.load() or {}).get("cpu_period_us")
    if knob == "period" and not own:
        raise SystemExit("--periods needs the cluster box up (scripts/cluster-box.sh up)")
    points = opts.points.split(",")
    root = Path(tempfile.mkdtemp(prefix="hpcdl-cycle-"))
    res = local.run(local.hpcdl_command(["study", "submit", opts.study, "--dry-run",
                                         "--results-root", str(root)]), timeout=300)
    if res.returncode != 0:
        raise SystemExit(f"rendering the study's jobs failed: {res.stderr[-2000:]}")
    jobs = next(root.glob("*/jobs"))
    results = jobs.parent / "runs.jsonl"
    figures = {(p, c): [] for p in points for c in cycles}
    t0 = time.monotonic()
    print(f"# python -m benchmarks.cycle_cost {opts.study} --points {opts.points} "
          f"--{knob}s {','.join(cycles)} --rounds {opts.rounds}"
          + (f" --sbatch '{opts.sbatch}'" if opts.sbatch else ""))
    try:
        for k in range(opts.rounds):
            order = cycles[k % len(cycles):] + cycles[:k % len(cycles)]   # rotate who goes first
            for p in points:
                for c in order:
                    rec = _run(jobs / f"step-{p}.sbatch", knob, c, results, opts.sbatch.split())
                    m = measured(rec)
                    thr = records.lookup(rec, "metrics", "throughput", "mean")
                    figures[(p, c)].append((m.compute, m.exchange, m.step, thr))
                    print(f"#   round {k + 1} {p} {knob} {c} {unit}: compute "
                          f"{m.compute * 1e3:.1f} ms, exchange "
                          f"{m.exchange * 1e3 if m.exchange else float('nan'):.1f} ms, "
                          f"step {m.step * 1e3:.1f} ms", flush=True)
    finally:
        if knob == "period":
            set_period(int(own))            # the box as it was brought up
    print(f"# {opts.rounds} round(s), {time.monotonic() - t0:.0f} s; medians over rounds; "
          "compute: the slowest rank's probed forward and backward pass")
    print(f"{'point':<44} {knob:>6} {'compute ms':>11} {'exchange ms':>12} {'step ms':>9} "
          f"{'samples/s':>10} {'compute vs ' + cycles[0] + ' ' + unit:>17}")
    for p in points:
        ref = statistics.median(f[0] for f in figures[(p, cycles[0])])
        for c in cycles:
            f = figures[(p, c)]
            comp = statistics.median(x[0] for x in f)
            ex = [x[1] for x in f if x[1] is not None]
            print(f"{p:<44} {c:>6} {comp * 1e3:>11.1f} "
                  f"{statistics.median(ex) * 1e3 if ex else float('nan'):>12.1f} "
                  f"{statistics.median(x[2] for x in f) * 1e3:>9.1f} "
                  f"{statistics.median(x[3] for x in f):>10.1f} {comp / ref:>17.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
