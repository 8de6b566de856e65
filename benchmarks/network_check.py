#!/usr/bin/env python
"""The named networks' exchange (the forecast's InfiniBand and RoCE columns) against SMPI.

The forecast prices a named network's allreduce from ``hpcdl/model/networks.json``
(:func:`hpcdl.model.networks.exchange`: SMPI's rings of 2-8 ranks on a fat tree of that
network, ``python -m benchmarks.network_prices``). Here SMPI runs the whole allreduce on the same
platform at 16-1024 ranks and two counts that are not powers of two, at the committed studies'
gradient sizes, each algorithm by name: Open MPI's fixed decision at that count and size (what
the forecast prints where the runs did not pin one) and the ring (what ``hpcdl tune`` picks on
the box), in network time alone as the prices are. Beside it, the declared α + bytes/(90% of
line rate) the columns printed before.
Sizes are rounded to whole floats per rank at every count (SMPI's ring reduces the remainder of
an uneven split with another algorithm afterwards), at most 0.1% off the studies' own.

    python -m benchmarks.network_check > results/network-check.txt
"""
import argparse
import sys
from concurrent.futures import ThreadPoolExecutor
from math import lcm
from pathlib import Path

from hpcdl import costmodel
from hpcdl.model import networks
from hpcdl.model.allreduce import OMPI_ALLREDUCE, exchange_time, ompi_allreduce
from benchmarks.smpi_check import ALGORITHMS, platform_file, prepared, smpi

# the studies' gradient bytes (report.json gradient_bytes): the small CNN, MobileNetV2, the
# wide MLP; DenseNet-121's 27.9 MB is within 2% of the wide MLP's, ResNet-50's 94 MB takes SMPI
# minutes a run at 1024 ranks (it copies every payload)
SIZES = {"small CNN": 4617088, "MobileNetV2": 8946728, "wide MLP": 28332032}


def rounded(nbytes: int, ranks) -> int:
    """``nbytes`` to the nearest whole number of floats per rank at every count of ``ranks``."""
    unit = 4 * lcm(*ranks)
    return max(unit, round(nbytes / unit) * unit)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--networks", default=",".join(costmodel.PRESETS))
    ap.add_argument("--ranks", default="16,24,64,256,384,1024")
    ap.add_argument("--work", default="build/smpi")
    ap.add_argument("--tolerance", type=float, default=0.15)
    ap.add_argument("--jobs", type=int, default=2, help="smpirun runs at once")
    opts = ap.parse_args(argv)
    work = Path(opts.work)
    version = prepared(work)
    ranks = [int(x) for x in opts.ranks.split(",")]
    print(f"# python -m benchmarks.network_check --networks {opts.networks} --ranks {opts.ranks}")
    print(f"# SimGrid {version}; prices: {networks.source()}")
    print(f"{'network':9} {'workload':11} {'algorithm':19} {'ranks':>5} {'bytes':>9} "
          f"{'SMPI ms':>9} {'forecast':>9} {'err':>7} {'declared':>9} {'err':>7}")
    within = total = 0
    worst = {}
    cases = []
    for key in opts.networks.split(","):
        pr = networks.prices(key)
        if pr is None:
            raise SystemExit(f"no SMPI prices for {key}: python -m benchmarks.network_prices")
        platform_file(work, f"net-{key}", pr.platform)
        for what, size in SIZES.items():
            n = rounded(size, ranks)
            for p in ranks:
                library = OMPI_ALLREDUCE[ompi_allreduce(p, n)]
                cases += [(key, what, name, p, n) for name in dict.fromkeys((library, "ring"))]
    for p in ranks:                       # rank r on node r, written before the runs share it
        (work / f"in-order-{p}.txt").write_text("".join(f"n{i}\n" for i in range(p)))
    # each run is one single-threaded smpirun: --jobs of them at once, printed in order
    with ThreadPoolExecutor(opts.jobs) as pool:
        sims = pool.map(lambda c: smpi(work, f"net-{c[0]}", c[3], c[4], ALGORITHMS[c[2]],
                                       str(work / f"in-order-{c[3]}.txt"), True), cases)
        for (key, what, name, p, n), sim in zip(cases, sims):
            net = costmodel.PRESETS[key]
            got = networks.exchange(key, name, n, p)
            plain = exchange_time(name, n, p, lambda m: net.alpha + m * net.beta)
            err, err0 = (got - sim) / sim, (plain - sim) / sim
            total += 1
            within += abs(err) <= opts.tolerance
            worst[key] = max(worst.get(key, 0.0), abs(err))
            print(f"{key:9} {what:11} {name:19} {p:5d} {n:9d} {sim * 1e3:9.3f} "
                  f"{got * 1e3:9.3f} {err * 100:+6.1f}% {plain * 1e3:9.3f} "
                  f"{err0 * 100:+6.1f}%", flush=True)
    print(f"\n# within {opts.tolerance * 100:.0f}% of SMPI: {within} of {total}")
    for key, w in worst.items():
        print(f"# worst |error| {key}: {w * 100:.1f}%")
    return 0 if within == total else 1


if __name__ == "__main__":
    sys.exit(main())
