"""Compare the parameter server with the ring from 2 to 4 ranks, against the cost model.

Runs ``hpcdl bench allreduce -B ring,ps -C none`` under mpirun for each rank count (and each
transport asked for), then prints per size the measured ps/ring time ratio beside the model's
for the bottleneck of that run (:func:`hpcdl.costmodel.bandwidth_ratio`): copy-bound (ranks <=
cores, one node: every byte in or out is a copy by its rank's CPU) -> p/2, cpu-bound (more ranks
than cores) -> 1; the link-bound ratio p of a real network is printed beside them.

    python benchmarks/ps_vs_ring.py [--ranks 2,3,4] [--transport shm,tcp] [-b 1M] [-e 16M]
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpcdl import costmodel as model  # noqa: E402
from hpcdl.launch import local  # noqa: E402
from _run import bench_record  # noqa: E402  (benchmarks/, this script's directory)

TRANSPORTS = {"shm": "self,vader", "tcp": "self,tcp"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="2,3,4")
    ap.add_argument("--transport", default="shm", help="shm, tcp or both comma-separated (shm)")
    ap.add_argument("-b", default="1M")
    ap.add_argument("-e", default="16M")
    ap.add_argument("-f", default="4")
    ap.add_argument("-n", default="10")
    ap.add_argument("--results", default="results/bench/ps_vs_ring.jsonl")
    ap.add_argument("--tolerance", type=float, default=0.25,
                    help="relative distance from the model's ratio counted as agreeing (0.25)")
    ap.add_argument("--timeout", type=float, default=300)
    opts = ap.parse_args(argv)
    cores = os.cpu_count() or 1
    table = []
    for transport in opts.transport.split(","):
        for p in [int(x) for x in opts.ranks.split(",")]:
            argv = local.mpirun_command(
                p, local.hpcdl_command(
                    ["bench", "allreduce", "-B", "ring,ps", "-C", "none", "-b", opts.b, "-e", opts.e,
                     "-f", opts.f, "-n", opts.n, "--results", opts.results,
                     "--tag", f"ps-vs-ring p={p} transport={transport}"]),
                bind="core" if p <= cores else "none")
            env = dict(os.environ, PYTHONPATH=str(ROOT), OMPI_MCA_btl=TRANSPORTS[transport])
            _, rec = bench_record(argv, opts.results, opts.timeout, env,
                                  f"{transport} at {p} ranks")
            rows = {(r["backend"], r["size_bytes"]): r for r in rec["rows"]}
            regime = model.regime_for(p, cores)
            for size in sorted({s for _, s in rows}):
                ring = rows[("ring", size)]["time_us"]["median"]
                ps = rows[("ps", size)]["time_us"]["median"]
                # gamma: this run's float32 add, per byte; beta: what the ring's time leaves
                gamma = rows[("ring", size)]["reduce_us"] / size
                unit = model.bottleneck_time("ring", size, p, 1.0, 0.0, regime, cores)
                beta = max(0.0, ring - model.bottleneck_time("ring", size, p, 0.0, gamma, regime,
                                                           cores)) / unit
                pred = model.bottleneck_time("ps", size, p, beta, gamma, regime, cores) / ring
                table.append((transport, p, size, ring, ps, ps / ring, regime, pred,
                              model.bandwidth_ratio(p, regime),
                              model.bandwidth_ratio(p, model.LINK_BOUND)))
    print(f"# ps vs ring: {Path(opts.results)}; {cores} cores; median times; bind-to core where "
          f"ranks <= cores")
    print("# model: ps time predicted from the same run's ring time (hpcdl.costmodel.bottleneck_time"
          " for the run's bottleneck: beta from the ring, gamma = the run's measured add per byte),"
          " over the measured ring time")
    print("# bw-only: the ratio without reduction (copy-bound p/2, cpu-bound 1); link: p, a "
          "full-duplex network link, for reference")
    print(f"#{'tport':>5} {'ranks':>5} {'size(B)':>10} {'ring(us)':>10} {'ps(us)':>10} {'ps/ring':>8} "
          f"{'regime':>10} {'model':>6} {'bw-only':>7} {'link':>5} {'agree':>5}")
    agree = 0
    for transport, p, size, ring, ps, meas, regime, pred, bw, link in table:
        ok = abs(meas / pred - 1) <= opts.tolerance
        agree += ok
        print(f" {transport:>5} {p:>5} {size:>10} {ring:>10.1f} {ps:>10.1f} {meas:>8.2f} "
              f"{regime:>10} {pred:>6.2f} {bw:>7.2f} {link:>5.1f} {'yes' if ok else 'no':>5}")
    print(f"# {agree}/{len(table)} rows within +-{opts.tolerance * 100:.0f}% of the model's ratio")
    return 0


if __name__ == "__main__":
    sys.exit(main())
