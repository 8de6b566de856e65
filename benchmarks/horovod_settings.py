"""Horovod against mpi under several settings of one environment variable, in alternating rounds.

Each round runs ``hpcdl bench allreduce -B mpi,horovod -C none`` once per value of ``--var``
(one mpirun per run, 2 ranks bound one per core, as the issue's targets ask), reversing the order
of the values every other round so that neither value always runs first. Each run is a full
process: Horovod reads its settings once, at hvd.init(). The table gives, per run, Horovod's
median time at each size and the same-run ratio horovod busbw / mpi busbw (= mpi time / horovod
time; the target is >= 0.9 at >= 4 MiB). The mpi row's time at 4 MiB is printed too: this VM has
two speeds for shared-memory transfers that change from minute to minute (results/bench/README.md),
and the ratio depends on which one the run got. The footer gives the median over rounds per value.

    python benchmarks/horovod_settings.py --var HPCDL_HOROVOD_NICE --values 0,19 --rounds 5
    python benchmarks/horovod_settings.py --var HOROVOD_CYCLE_TIME --values 0.1,0.03,0.01
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from hpcdl.bench import _size  # noqa: E402
from hpcdl.launch import local  # noqa: E402
from _run import bench_record  # noqa: E402  (benchmarks/, this script's directory)


def _human(n: int) -> str:
    for unit, shift in (("M", 20), ("K", 10)):
        if n >= 1 << shift and n % (1 << shift) == 0:
            return f"{n >> shift}{unit}"
    return str(n)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--var", required=True, help="the environment variable to vary")
    ap.add_argument("--values", required=True, help="comma list of its values")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("-b", default="4K")
    ap.add_argument("-e", default="16M")
    ap.add_argument("-f", default="4")
    ap.add_argument("-n", default="20")
    ap.add_argument("--ratio-sizes", default="1M,4M,16M",
                    help="sizes whose horovod/mpi ratio the table shows (1M,4M,16M)")
    ap.add_argument("--results", default="results/bench/horovod-settings.jsonl")
    ap.add_argument("--timeout", type=float, default=600)
    opts = ap.parse_args(argv)
    values = [v.strip() for v in opts.values.split(",") if v.strip()]
    if not values or opts.rounds < 1:
        ap.error("--values needs at least one value and --rounds at least 1")
    lo, hi = _size(opts.b), _size(opts.e)
    ratio_sizes = [_size(s) for s in opts.ratio_sizes.split(",")]

    runs = []                    # (value, round, {(backend, size): median us})
    for rnd in range(1, opts.rounds + 1):
        for value in (values if rnd % 2 else values[::-1]):
            argv = local.mpirun_command(2, local.hpcdl_command(
                ["bench", "allreduce", "-B", "mpi,horovod", "-C", "none", "-b", opts.b, "-e", opts.e,
                 "-f", opts.f, "-n", opts.n, "--results", opts.results,
                 "--tag", f"horovod settings {opts.var}={value} round {rnd}/{opts.rounds}"]),
                bind="core")
            env = dict(os.environ, PYTHONPATH=str(ROOT), HPCDL_THREADS="1", **{opts.var: value})
            _, rec = bench_record(argv, opts.results, opts.timeout, env,
                                  f"{opts.var}={value} round {rnd}")
            runs.append((value, rnd, {(r["backend"], r["size_bytes"]): r["time_us"]["median"]
                                      for r in rec["rows"]}))
            print(f"# {opts.var}={value} round {rnd} done", file=sys.stderr, flush=True)

    sizes = sorted({s for _, _, t in runs for b, s in t if b == "horovod" and lo <= s <= hi})
    ratio_sizes = [s for s in ratio_sizes if s in sizes]
    mode_size = 4 << 20 if (4 << 20) in sizes else sizes[-1]
    print(f"# horovod against mpi, 2 ranks one core each, {opts.var} in {','.join(values)}, "
          f"{opts.rounds} rounds; each run: {opts.var}=V HPCDL_THREADS=1 mpirun -np 2 --bind-to core "
          f"python -m hpcdl bench allreduce -B mpi,horovod -C none -b {opts.b} -e {opts.e} "
          f"-f {opts.f} -n {opts.n}; records in {opts.results}")
    print("# hvd: Horovod's median time (us); ratio = mpi time / horovod time = horovod busbw / mpi "
          f"busbw in the same run; mpi {_human(mode_size)}: the machine's speed in that run")
    head = (f"{'value':>8} {'round':>5} " + " ".join(f"{'hvd ' + _human(s):>9}" for s in sizes)
            + f" {'mpi ' + _human(mode_size):>9} | " + " ".join(f"{'ratio ' + _human(s):>9}" for s in ratio_sizes))
    print(head)
    for value, rnd, t in runs:
        print(f"{value:>8} {rnd:>5} " + " ".join(f"{t[('horovod', s)]:>9.1f}" for s in sizes)
              + f" {t[('mpi', mode_size)]:>9.1f} | "
              + " ".join(f"{t[('mpi', s)] / t[('horovod', s)]:>9.2f}" for s in ratio_sizes))
    print("# median over rounds")
    for value in values:
        mine = [t for v, _, t in runs if v == value]
        print(f"{value:>8} {'med':>5} "
              + " ".join(f"{statistics.median(t[('horovod', s)] for t in mine):>9.1f}" for s in sizes)
              + f" {statistics.median(t[('mpi', mode_size)] for t in mine):>9.1f} | "
              + " ".join(f"{statistics.median(t[('mpi', s)] / t[('horovod', s)] for t in mine):>9.2f}"
                         for s in ratio_sizes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
