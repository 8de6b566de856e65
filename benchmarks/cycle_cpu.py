#!/usr/bin/env python
"""What Horovod's background thread costs a node in CPU, by its cycle time and the node count:
on the cluster box, ranks (one per node) start Horovod as training does and exchange once; then
for ``--seconds`` their main thread sleeps (idle: the process's CPU is the background loop's, its
wake-ups and the small collective through which the ranks agree every cycle on what is ready,
Open MPI spinning while it waits for the peers), and for ``--seconds`` it computes (single-
threaded matrix products, as a rank's forward and backward pass runs on one thread): from each
thread's CPU time (/proc/self/task), the share of the process's CPU its other threads took
from the compute. On a node of 0.2 cores the compute is then about 1/(1 - share) as long as in
a process that had the node to itself.

Settings alternate (the order rotates each round), one job at a time (each takes the box's
licence, so it waits for a study's jobs rather than running beside them); per node count and
cycle, the median over rounds of the busiest rank's CPU per second.

    scripts/cluster-box.sh up 8 --link 200mbit --cpus-per-node 0.2 && scripts/cluster-box.sh check
    python -m benchmarks.cycle_cpu --nodes 1,2,8 --cycles 1,5 --rounds 3 > results/cycle-cpu.txt

With ``--json PATH`` it also writes the shares as a loop file (``hpcdl.loop-cpu/1``): per cycle
and node count, the share the median rank's and the busiest rank's loop took from compute, and
the box and processor it measured (the machine setting the records of that box carry). ``hpcdl
study report --loop-bench PATH`` then scales a held-out Horovod point's compute by how much more
of the node the loop takes at its node count than at the calibration's
(:mod:`hpcdl.model.loop_share`).
"""
import argparse
import json
import os
import statistics
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from hpcdl import box, records
from hpcdl.analysis import provenance
from hpcdl.model import loop_share
from hpcdl.bench.allocation import window as _window
from hpcdl.bench.boxcheck import job_env, srun_json


def rank_side(seconds: float) -> None:
    """One rank: Horovod started as training starts it, one allreduce, then a window with the
    main thread asleep and one with it computing (single-threaded matrix products)."""
    import socket
    import numpy as np
    import horovod.tensorflow as hvd
    import tensorflow as tf
    hvd.init()
    hvd.allreduce(tf.ones([1024]), op=hvd.Average)
    time.sleep(1.0)
    idle = _window(seconds)
    m = np.random.default_rng(0).random((160, 160))
    busy = _window(seconds, lambda: m @ m)
    print(json.dumps({"rank": hvd.rank(), "size": hvd.size(), "host": socket.gethostname(),
                      "idle": idle, "busy": busy,
                      "cycle_ms": os.environ.get("HOROVOD_CYCLE_TIME", "1")}), flush=True)
    hvd.shutdown()


def one(b: dict, nodes: int, cycle: str, seconds: float, extra=()) -> dict:
    env = dict(job_env(b), HOROVOD_CYCLE_TIME=cycle, TF_CPP_MIN_LOG_LEVEL="2")
    lines = srun_json([f"--licenses={b.get('licence', 'box')}:1", f"-N{nodes}", f"-n{nodes}",
                       "--ntasks-per-node=1", "--cpus-per-task=1", *extra, "--mpi=pmix", "--kill-on-bad-exit=1",
                       "--chdir", str(ROOT), sys.executable, str(Path(__file__).resolve()),
                       "--rank-side", "--seconds", str(seconds)], 3600, env)
    if len(lines) != nodes or {ln["cycle_ms"] for ln in lines} != {cycle}:
        raise SystemExit(f"{nodes} node(s), cycle {cycle}: got {lines}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", default="1,2,8")
    ap.add_argument("--cycles", default="1,5", help="HOROVOD_CYCLE_TIME values, ms")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=20.0, help="idle window per job")
    ap.add_argument("--srun", default="", help="more srun options, e.g. --srun=--nice=-10000 to go "
                                               "between a study's queued jobs")
    ap.add_argument("--json", default="", metavar="PATH",
                    help="also write the shares as a loop file (hpcdl.loop-cpu/1) for "
                         "'hpcdl study report --loop-bench'")
    ap.add_argument("--rank-side", action="store_true", help=argparse.SUPPRESS)
    opts = ap.parse_args()
    if opts.rank_side:
        rank_side(opts.seconds)
        return 0
    b = box.load()
    if not b:
        raise SystemExit("the cluster box is not up (scripts/cluster-box.sh up 8 ...)")
    nodes = [int(n) for n in opts.nodes.split(",")]
    cycles = opts.cycles.split(",")
    cores = float(b["cpus_per_node"])
    command = (f"python -m benchmarks.cycle_cpu --nodes {opts.nodes} --cycles {opts.cycles} "
               f"--rounds {opts.rounds} --seconds {opts.seconds:g}"
               + (f" --srun={opts.srun}" if opts.srun else "")
               + (f" --json {opts.json}" if opts.json else ""))
    print(f"# {command}")
    print(f"# box: {b['nodes_count']} nodes of {cores:g} cores (CPU quota period "
          f"{b.get('cpu_period_us')} us), links {b['link_rate']}; one job at a time")
    got = {(n, c): [] for n in nodes for c in cycles}
    t0 = time.monotonic()
    for k in range(opts.rounds):
        order = cycles[k % len(cycles):] + cycles[:k % len(cycles)]
        for n in nodes:
            for c in order:
                lines = one(b, n, c, opts.seconds, opts.srun.split())
                # idle: all of the process's CPU per second with the main thread asleep; beside
                # compute: the other threads' share of the CPU the process got while the main
                # thread computed (what they took from it); the busiest rank of each
                idle = max((w[1] + w[2]) / w[0] for w in (ln["idle"] for ln in lines))
                taken = sorted(w[2] / (w[1] + w[2]) for w in (ln["busy"] for ln in lines))
                got[(n, c)].append((idle, taken[-1], statistics.median(taken)))
                print(f"#   round {k + 1}: {n} node(s), cycle {c} ms: idle {idle * 1e3:.1f} ms "
                      f"of CPU per s; beside compute the other threads took "
                      + ", ".join(f"{t * 100:.1f}%" for t in taken) + " of the CPU", flush=True)
    print(f"# {opts.rounds} round(s), {time.monotonic() - t0:.0f} s; medians over rounds of the "
          "figures: idle, the busiest rank's CPU per second with its main thread asleep "
          "(Horovod's loop, spinning in MPI while it waits); beside compute, the share of a "
          "rank's CPU its other threads took while the main thread computed (the median rank "
          "and the busiest), and so the compute's time against a process that had it all, "
          "1 / (1 - share)")
    print(f"{'nodes':>5} {'cycle ms':>8} {'idle CPU ms/s':>14} {'of the node':>12} "
          f"{'beside compute':>15} {'compute x':>10} {'busiest rank':>13} {'compute x':>10}")
    shares = {}
    for n in nodes:
        for c in cycles:
            idle = statistics.median(x[0] for x in got[(n, c)])
            most = statistics.median(x[1] for x in got[(n, c)])
            mid = statistics.median(x[2] for x in got[(n, c)])
            shares.setdefault(c, {})[str(n)] = {"median": mid, "busiest": most,
                                                "idle_cpu_s_per_s": idle}
            print(f"{n:>5} {c:>8} {idle * 1e3:>14.1f} {idle / cores * 100:>11.1f}% "
                  f"{mid * 100:>14.1f}% {1 / (1 - min(mid, 0.99)):>10.3f} "
                  f"{most * 100:>12.1f}% {1 / (1 - min(most, 0.99)):>10.3f}")
    if opts.json:
        # the machine setting a record made on this box carries (its processor, the box's settings)
        facts = box.node_facts(sorted(b["nodes"])[0])
        machine = provenance.machine_setting({"manifest": {"cpu": records.cpu_identity()},
                                              "box": facts})
        doc = {"schema": loop_share.SCHEMA, "command": command,
               "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
               "made_for": {"machine": machine, "link_rate": b["link_rate"],
                            "nodes": nodes, "rounds": opts.rounds, "seconds": opts.seconds},
               "shares": shares}
        Path(opts.json).parent.mkdir(parents=True, exist_ok=True)
        Path(opts.json).write_text(json.dumps(doc, indent=1) + "\n")
        print(f"# wrote {opts.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
