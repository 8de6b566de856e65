#!/usr/bin/env python
"""How much of its CPU quota a cluster-box node gets, per quota period: the box check's compute
probe (one thread of numpy matrix products) run on node n1 through Slurm, with n1's quota set
to each (cores, period) in turn, alternating, and the box's own setting put back at the end.
Per setting, the medians over rounds of the probe's wall and CPU seconds per round, the cores
it got (CPU / wall) and their share of what the quota grants one thread (min(cores, 1)).

A short period keeps the stops short when a node's quota runs out (what ``cluster-box.sh``
wants for MPI, which spins); this measures what a short period costs the quota itself, which is
how the script chooses its period (5 ms, or longer where the quota would be under 1 ms).

    scripts/cluster-box.sh up 2 --cpus-per-node 1
    python -m benchmarks.quota_period > results/quota-period.txt
"""
import argparse
import statistics
import sys
import time


from hpcdl import box
from hpcdl.bench.boxcheck import job_env, srun_json


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cores", default="0.2,0.5,1", help="quotas in cores, comma-separated")
    ap.add_argument("--periods", default="1000,2000,5000,10000",
                    help="periods in microseconds; those whose quota would be under 1 ms skipped")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--work", type=int, default=400, help="matrix products per probe round")
    ap.add_argument("--reps", type=int, default=3, help="probe rounds per job")
    opts = ap.parse_args()
    b = box.load()
    if not b:
        raise SystemExit("the cluster box is not up: scripts/cluster-box.sh up 2 --cpus-per-node 1")
    node = b["nodes"]["n1"]
    settings = [(float(c), int(p)) for c in opts.cores.split(",") for p in opts.periods.split(",")
                if float(c) * int(p) >= 1000]
    probe = [sys.executable, "-m", "hpcdl.bench.boxcheck", "probe", "--work", str(opts.work),
             "--reps", str(opts.reps)]
    env = job_env(b)
    got = {s: [] for s in settings}
    t0 = time.monotonic()
    print(f"# python -m benchmarks.quota_period --cores {opts.cores} --periods {opts.periods} "
          f"--rounds {opts.rounds} --work {opts.work} --reps {opts.reps}")
    print(f"# box {b['box']}: {b['nodes_count']} nodes, its own quota {b['cpus_per_node']} cores "
          f"of {b.get('cpu_period_us')} us; this machine {b.get('cores')} cores")
    try:
        for k in range(opts.rounds):
            order = settings[k % len(settings):] + settings[:k % len(settings)]
            for cores, period in order:
                box.set_quota(node["cgroup"], cores, period)
                (row,) = srun_json(["-N1", "-n1", "-w", "n1"] + probe, 600, env)
                got[(cores, period)].append((row["seconds"], statistics.median(row["cpu"])))
                print(f"#   round {k + 1}: {cores} cores, {period} us: wall {row['seconds']:.3f} s, "
                      f"cpu {statistics.median(row['cpu']):.3f} s", flush=True)
    finally:
        box.set_quota(node["cgroup"], float(b["cpus_per_node"]), int(b["cpu_period_us"]))
    print(f"# {opts.rounds} round(s), {time.monotonic() - t0:.0f} s; medians over rounds of the "
          "medians over a job's probe rounds")
    print(f"{'cores':>6} {'period us':>10} {'quota us':>9} {'wall s':>8} {'cpu s':>7} "
          f"{'cores got':>10} {'of quota':>9}")
    for cores, period in settings:
        wall = statistics.median(w for w, _ in got[(cores, period)])
        cpu = statistics.median(c for _, c in got[(cores, period)])
        print(f"{cores:>6} {period:>10} {int(cores * period):>9} {wall:>8.3f} {cpu:>7.3f} "
              f"{cpu / wall:>10.3f} {cpu / wall / min(cores, 1.0):>8.0%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
