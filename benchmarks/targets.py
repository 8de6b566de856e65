#!/usr/bin/env python
"""Judge the allreduce targets on repeated sweeps: per size, the median of same-sweep ratios.

A single sweep on a shared machine can put one backend in a quiet moment and the other in a
busy one; the targets compare backends in the same run, so each ratio is taken within one sweep
and the verdict is on the median over the last ``--records`` sweeps of the results file:

- ring at >= 4 MiB: busbw >= 0.8x mpi;
- horovod at >= 4 MiB: busbw >= 0.9x mpi;
- fp16 at >= 16 MiB: effective busbw >= 1.5x none, for ring and for mpi;
- and, as the physical reference, every backend's busbw against the raw MPI_Allreduce of the
  same buffers in the same sweep (not a target: where the rest of the time goes).

    python -m benchmarks.targets [--input results/bench/allreduce.jsonl] [--records 3]
"""
from __future__ import annotations

import argparse
import statistics
import sys


from hpcdl import records

# (label, numerator, denominator, smallest size, target)
TARGETS = [("ring/mpi", ("ring", "none"), ("mpi", "none"), 4 << 20, 0.8),
           ("horovod/mpi", ("horovod", "none"), ("mpi", "none"), 4 << 20, 0.9),
           ("mpi fp16/none", ("mpi", "fp16"), ("mpi", "none"), 16 << 20, 1.5),
           ("ring fp16/none", ("ring", "fp16"), ("ring", "none"), 16 << 20, 1.5)]


def _ratio_rows(runs, label, a, b, lo, target):
    """Per size from ``lo``: the median, min and max of the same-run ratios, and the verdict."""
    sizes = sorted({k[2] for k in runs[0] if k[:2] == a and k[2] >= lo})
    out = []
    for size in sizes:
        ratios = [run[a + (size,)] / run[b + (size,)] for run in runs
                  if a + (size,) in run and b + (size,) in run]
        if ratios:
            med = statistics.median(ratios)
            out.append((label, size, med, min(ratios), max(ratios), target, med >= target))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--input", default="results/bench/allreduce.jsonl")
    ap.add_argument("--records", type=int, default=3, help="the last N sweeps of the file (3)")
    opts = ap.parse_args(argv)
    recs = [r for r in records.read(opts.input) if r.get("op") == "allreduce"][-opts.records:]
    if not recs:
        raise SystemExit(f"no allreduce records in {opts.input}")
    runs = [{(r["backend"], r["compression"], r["size_bytes"]): r["busbw_gbs"] for r in rec["rows"]}
            for rec in recs]
    mpi_ref = [{(r["backend"], r["compression"], r["size_bytes"]): r["busbw_gbs"] / r["mpi_busbw_gbs"]
                for r in rec["rows"] if r.get("mpi_busbw_gbs")} for rec in recs]
    print(f"# targets on {recs[-1]['layout']['size']} ranks from the last {len(recs)} sweep(s) of "
          f"{opts.input} ({recs[0].get('time')} .. {recs[-1].get('time')})")
    print("# ratio = busbw(a)/busbw(b) in the same sweep; median over sweeps [min..max]")
    print(f"#{'ratio':>15} {'size(B)':>11} {'median':>7} {'min':>6} {'max':>6} {'target':>7} {'met':>4}")
    verdicts = {}
    for label, a, b, lo, target in TARGETS:
        for row in _ratio_rows(runs, label, a, b, lo, target):
            verdicts.setdefault(label, []).append(row[-1])
            print(f" {row[0]:>15} {row[1]:>11} {row[2]:>7.2f} {row[3]:>6.2f} {row[4]:>6.2f} "
                  f"{row[5]:>7.2f} {'yes' if row[6] else 'NO':>4}")
    for label, oks in verdicts.items():
        print(f"# {label}: {sum(oks)}/{len(oks)} sizes meet the target")
    print("#")
    print("# every backend against the raw MPI_Allreduce of the same buffers, same sweep, >= 4 MiB "
          "(median over sweeps of busbw / MPI busbw)")
    keys = sorted({k[:2] for k in mpi_ref[0]})
    for key in keys:
        sizes = sorted(s for (b, c, s) in mpi_ref[0] if (b, c) == key and s >= 4 << 20)
        meds = [statistics.median(run[key + (s,)] for run in mpi_ref if key + (s,) in run)
                for s in sizes]
        if meds:
            print(f" {'+'.join(k for k in key if k != 'none'):>15} "
                  + " ".join(f"{m:.2f}" for m in meds) + f"   ({sizes[0] >> 20}-{sizes[-1] >> 20} MiB)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
