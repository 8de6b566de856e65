"""Compare the parameter server with the ring from 2 to 4 ranks, against the cost model.

Runs ``hpcdl bench allreduce -B ring,ps -C none`` under mpirun for each rank count, then prints
per size the measured ps/ring time ratio beside the model's: the root of a ps moves (p-1)*n bytes
each way, a ring link 2(p-1)/p*n in all, so at large n ps/ring -> p (hpcdl.comm.model).

    python benchmarks/ps_vs_ring.py [--ranks 2,3,4] [-b 1M] [-e 16M] [--results FILE]
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpcdl import records  # noqa: E402
from hpcdl.comm import model  # noqa: E402
from hpcdl.launch import local  # noqa: E402


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="2,3,4")
    ap.add_argument("-b", default="1M")
    ap.add_argument("-e", default="16M")
    ap.add_argument("-n", default="10")
    ap.add_argument("--results", default="results/bench/ps_vs_ring.jsonl")
    ap.add_argument("--timeout", type=float, default=300)
    opts = ap.parse_args(argv)
    table = []
    for p in [int(x) for x in opts.ranks.split(",")]:
        before = len(records.read(opts.results))
        argv = local.mpirun_command(p, local.hpcdl_command(
            ["bench", "allreduce", "-B", "ring,ps", "-C", "none", "-b", opts.b, "-e", opts.e,
             "-f", "4", "-n", opts.n, "--results", opts.results, "--tag", f"ps-vs-ring p={p}"]))
        res = local.run(argv, timeout=opts.timeout, env=dict(os.environ, PYTHONPATH=str(ROOT)))
        if res.returncode != 0 or res.timed_out:
            print(res.stdout[-2000:], res.stderr[-2000:], file=sys.stderr)
            return 1
        rec = records.read(opts.results)[before]
        rows = {(r["backend"], r["size_bytes"]): r["time_us"]["median"] for r in rec["rows"]}
        for size in sorted({s for _, s in rows}):
            ring, ps = rows[("ring", size)], rows[("ps", size)]
            # the model's ratio with latency and reduction left out: the bandwidth terms alone
            ratio = model.ps_time(size, p, 0, 1, 0) / model.ring_time(size, p, 0, 1, 0)
            table.append((p, size, ring, ps, ps / ring, ratio))
    print(f"# ps vs ring, {Path(opts.results)}; model ratio = root bytes (p-1)n / ring link 2(p-1)n/p")
    print(f"#{'ranks':>5} {'size(B)':>10} {'ring(us)':>10} {'ps(us)':>10} {'ps/ring':>8} {'model':>6}")
    for p, size, ring, ps, meas, pred in table:
        print(f" {p:>5} {size:>10} {ring:>10.1f} {ps:>10.1f} {meas:>8.2f} {pred:>6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
