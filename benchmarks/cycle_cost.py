#!/usr/bin/env python
"""What Horovod's background thread costs a node with a fraction of a core: a study's points
trained with HOROVOD_CYCLE_TIME set to each of ``--cycles`` (milliseconds between the thread's
wake-ups; 1 is Horovod's default), alternating, on the cluster box, through the study's own job
scripts (``hpcdl study submit --dry-run`` renders them; the cycle time is passed through sbatch's
environment). Per point and cycle time: the medians over rounds of the slowest rank's probed
compute, the exchange timed alone, the step and the throughput, and the compute's ratio to the
first cycle time's: what the wake-ups take from the forward and backward pass.

    scripts/cluster-box.sh up 8 --link 500mbit --cpus-per-node 0.2 && scripts/cluster-box.sh check
    python benchmarks/cycle_cost.py jobs/box-cnn-tuned-weak.toml \\
        --points n1-r1-horovod-none-500mbit-tdefault-rep0,n2-r1-horovod-none-500mbit-tdefault-rep0 \\
        > results/cycle-cost.txt
"""
import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpcdl import records  # noqa: E402
from hpcdl.analysis.measured import measured  # noqa: E402
from hpcdl.launch import local  # noqa: E402


def _run(script: Path, cycle: str, results: Path, extra) -> dict:
    """One job of ``script`` with the cycle time; the record it appended."""
    before = len(records.read(results)) if results.exists() else 0
    env = dict(os.environ, HOROVOD_CYCLE_TIME=cycle)
    res = subprocess.run(["sbatch", "--wait", *extra, str(script.name)], cwd=script.parent, env=env,
                         capture_output=True, text=True, timeout=1800)
    recs = records.read(results) if results.exists() else []
    if res.returncode != 0 or len(recs) <= before:
        raise SystemExit(f"{script.name} with HOROVOD_CYCLE_TIME={cycle} failed: "
                         f"{res.stdout[-1500:]} {res.stderr[-1500:]}")
    rec = recs[before]
    ran = (rec.get("manifest") or {}).get("env", {}).get("HOROVOD_CYCLE_TIME")
    if ran != cycle:
        raise SystemExit(f"the record of {script.name} says HOROVOD_CYCLE_TIME={ran!r}, not {cycle}")
    return rec


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("study")
    ap.add_argument("--points", required=True, help="point ids, comma-separated")
    ap.add_argument("--cycles", default="1,5", help="cycle times in ms, the first the reference")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sbatch", default="", help="more sbatch options, e.g. '--nice=-10000' to "
                                                 "go ahead of a study's queued jobs")
    opts = ap.parse_args()
    cycles = opts.cycles.split(",")
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
    print(f"# python benchmarks/cycle_cost.py {opts.study} --points {opts.points} "
          f"--cycles {opts.cycles} --rounds {opts.rounds}"
          + (f" --sbatch '{opts.sbatch}'" if opts.sbatch else ""))
    for k in range(opts.rounds):
        order = cycles[k % len(cycles):] + cycles[:k % len(cycles)]   # rotate who goes first
        for p in points:
            for c in order:
                rec = _run(jobs / f"step-{p}.sbatch", c, results, opts.sbatch.split())
                m = measured(rec)
                thr = records.lookup(rec, "metrics", "throughput", "mean")
                figures[(p, c)].append((m.compute, m.exchange, m.step, thr))
                print(f"#   round {k + 1} {p} cycle {c} ms: compute {m.compute * 1e3:.1f} ms, "
                      f"exchange {m.exchange * 1e3 if m.exchange else float('nan'):.1f} ms, "
                      f"step {m.step * 1e3:.1f} ms", flush=True)
    print(f"# {opts.rounds} round(s), {time.monotonic() - t0:.0f} s; medians over rounds; "
          "compute: the slowest rank's probed forward and backward pass")
    print(f"{'point':<44} {'cycle':>6} {'compute ms':>11} {'exchange ms':>12} {'step ms':>9} "
          f"{'samples/s':>10} {'compute vs ' + cycles[0] + ' ms':>17}")
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
