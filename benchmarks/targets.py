"""Check the allreduce targets of issue 3 on repeated 2-rank sweeps: per size, the median ratio.

A single sweep on a shared machine can put one backend in a quiet moment and the other in a
busy one; the targets compare backends "in the same run", so every repeat is one run of all
the backends involved, and the verdict is on the median over repeats of each same-run ratio:

- ring at >= 4 MiB: busbw >= 0.8x mpi;
- horovod at >= 4 MiB: busbw >= 0.9x mpi;
- fp16 at >= 16 MiB: effective busbw >= 1.5x none, for ring and for mpi.

    python benchmarks/targets.py [--repeats 3] [--transport shm|tcp] [-b 4M] [-e 256M]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpcdl.launch import local  # noqa: E402
from _run import bench_record  # noqa: E402  (benchmarks/, this script's directory)

TRANSPORTS = {"shm": "self,vader", "tcp": "self,tcp"}
# (label, numerator, denominator, smallest size, target)
TARGETS = [("ring/mpi", ("ring", "none"), ("mpi", "none"), 4 << 20, 0.8),
           ("horovod/mpi", ("horovod", "none"), ("mpi", "none"), 4 << 20, 0.9),
           ("mpi fp16/none", ("mpi", "fp16"), ("mpi", "none"), 16 << 20, 1.5),
           ("ring fp16/none", ("ring", "fp16"), ("ring", "none"), 16 << 20, 1.5)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--transport", default="shm", choices=sorted(TRANSPORTS))
    ap.add_argument("--backends", default="mpi,ring,horovod")
    ap.add_argument("-b", default="4M")
    ap.add_argument("-e", default="256M")
    ap.add_argument("-n", default="10")
    ap.add_argument("--results", default="results/bench/targets.jsonl")
    ap.add_argument("--timeout", type=float, default=600)
    opts = ap.parse_args(argv)
    runs = []
    for i in range(opts.repeats):
        argv = local.mpirun_command(2, local.hpcdl_command(
            ["bench", "allreduce", "-B", opts.backends, "-C", "none,fp16", "-b", opts.b,
             "-e", opts.e, "-n", opts.n, "--results", opts.results,
             "--tag", f"targets {opts.transport} repeat {i + 1}/{opts.repeats}"]), bind="core")
        env = dict(os.environ, PYTHONPATH=str(ROOT), OMPI_MCA_btl=TRANSPORTS[opts.transport],
                   HPCDL_THREADS="1")
        _, rec = bench_record(argv, opts.results, opts.timeout, env, f"repeat {i + 1}")
        runs.append({(r["backend"], r["compression"], r["size_bytes"]): r["busbw_gbs"]
                     for r in rec["rows"]})
    sizes = sorted({k[2] for k in runs[0]})
    print(f"# targets on 2 ranks over {opts.transport} ({TRANSPORTS[opts.transport]}), "
          f"{opts.repeats} runs of -B {opts.backends} -C none,fp16; {opts.results}")
    print("# ratio = busbw(a)/busbw(b) in the same run; median over runs [min..max]")
    print(f"#{'ratio':>15} {'size(B)':>11} {'median':>7} {'min':>6} {'max':>6} {'target':>7} {'met':>4}")
    met_all = {}
    for label, a, b, lo, target in TARGETS:
        if (a[0], a[1], sizes[-1]) not in runs[0] or (b[0], b[1], sizes[-1]) not in runs[0]:
            continue
        for size in (s for s in sizes if s >= lo):
            ratios = [run[(a[0], a[1], size)] / run[(b[0], b[1], size)] for run in runs]
            med = statistics.median(ratios)
            ok = med >= target
            met_all.setdefault(label, []).append(ok)
            print(f" {label:>15} {size:>11} {med:>7.2f} {min(ratios):>6.2f} {max(ratios):>6.2f} "
                  f"{target:>7.2f} {'yes' if ok else 'NO':>4}")
    for label, oks in met_all.items():
        print(f"# {label}: {sum(oks)}/{len(oks)} sizes meet the target")
    return 0


if __name__ == "__main__":
    sys.exit(main())
