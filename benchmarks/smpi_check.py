#!/usr/bin/env python
"""The forecast's exchange against SimGrid's SMPI at 16-1024 ranks, where the box cannot go.

SMPI runs a real MPI program on a simulated platform (Degomme et al., IEEE TPDS 28(8), 2017),
each allreduce algorithm forced by name. The forecast's exchange is
:func:`hpcdl.analysis.allreduce.exchange_time`: the algorithm's messages on the slowest rank's
path, each at the cost a 2-rank sweep on the same platform measured for a message of its size:
between two nodes of one leaf switch, or for a message whose pairs span a leaf's nodes
(:func:`hpcdl.analysis.allreduce.step_spans`: a ring's wrap-around pair, halving and doubling's
far partners) between nodes in different leaves (what ``hpcdl bench allreduce`` gives in a 2-node
job placed within a leaf, or across the tree). So each platform is calibrated at 2 ranks only
and checked at every larger rank count. One pair for all messages is wrong one way or the other
on the tree: calibrated within a leaf the ring at 256 ranks came out 23% short, across the tree a
16-rank ring (one leaf) 89% over. Beside it, the same sum with
the platform's declared α and β (no measurement): what a plain α-β model would say.

Platforms: one switch with a private link per node (the box's shape, 150 Mbit/s), and a two-level
fat tree of full bisection (25 Gbit/s, 32 nodes per leaf, SimGrid's destination-mod-k routing).
Rank r runs on node r, as Slurm's block distribution places one rank per node: smpirun's own
host order, without a host file, is not the nodes' order, and scattered ranks share the fat
tree's uplinks (Rabenseifner at 256 ranks and 9.4 MB took 12.4 ms so against 7.2 ms in order). Needs ``smpicc``/``smpirun``
(Debian's ``libsimgrid-dev``); simulated time does not depend on this machine's load.

    python benchmarks/smpi_check.py > results/smpi-check.txt
"""
import argparse
import math
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

from hpcdl.analysis.allreduce import exchange_time, step_spans

PROGRAM = r"""
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
/* timing only: an operation that adds nothing keeps 1024 simulated ranks fast */
static void skip(void *in, void *io, int *len, MPI_Datatype *t) { (void)in; (void)io; (void)len; (void)t; }
int main(int argc, char **argv) {
  MPI_Init(&argc, &argv);
  int r; MPI_Comm_rank(MPI_COMM_WORLD, &r);
  long n = atol(argv[1]) / 4;
  float *a = SMPI_SHARED_MALLOC(n * 4), *b = SMPI_SHARED_MALLOC(n * 4);
  MPI_Op op; MPI_Op_create(skip, 1, &op);
  MPI_Barrier(MPI_COMM_WORLD);
  double t = MPI_Wtime();
  MPI_Allreduce(a, b, n, MPI_FLOAT, op, MPI_COMM_WORLD);
  t = MPI_Wtime() - t;
  if (!r) printf("%.9f\n", t);
  SMPI_SHARED_FREE(a); SMPI_SHARED_FREE(b); MPI_Finalize();
  return 0;
}
"""

HEAD = ("<?xml version='1.0'?>\n<!DOCTYPE platform SYSTEM \"https://simgrid.org/simgrid.dtd\">\n"
        "<platform version=\"4.1\"><zone id=\"AS0\" routing=\"Full\">\n")
# name: (cluster attributes, declared latency of a path between two nodes, declared link bit/s,
# nodes per leaf switch: None for one switch)
PLATFORMS = {
    "one-switch-150mbit": ('bw="150Mbps" lat="50us" bb_bw="1000Gbps" bb_lat="0"', 2 * 50e-6, 150e6,
                           None),
    "fat-tree-25gbit": ('bw="25Gbps" lat="1us" topology="FAT_TREE" '
                        'topo_parameters="2;32,32;1,32;1,1"', 2 * 1e-6, 25e9, 32),
}
# the forecast's name -> SMPI's (MPICH's Rabenseifner and recursive doubling, Open MPI's ring)
ALGORITHMS = {"ring": "lr", "rabenseifner": "rab_rdb", "recursive doubling": "rdb",
              "segmented ring": "ompi_ring_segmented"}
SWEEP = [2 ** k for k in range(8, 29)]          # 2-rank calibration, 256 B to 256 MiB


def build(work: Path) -> Path:
    work.mkdir(parents=True, exist_ok=True)
    (work / "ar.c").write_text(PROGRAM)
    subprocess.run(["smpicc", "-O2", str(work / "ar.c"), "-o", str(work / "ar")], check=True,
                   capture_output=True)
    for name, (attrs, _, _, _) in PLATFORMS.items():
        (work / f"{name}.xml").write_text(
            HEAD + f'<cluster id="c" prefix="n" suffix="" radical="0-1023" speed="1Gf" {attrs}/>\n'
            "</zone></platform>\n")
    return work / "ar"


def smpi(work: Path, platform: str, p: int, nbytes: int, algorithm: str,
         hosts: str = "") -> float:
    """Simulated seconds of one allreduce of ``nbytes`` on ``p`` ranks (rank r on node r,
    else on the nodes of the host file ``hosts``)."""
    if not hosts:
        hosts = str(work / f"first-{p}.txt")
        Path(hosts).write_text("".join(f"n{i}\n" for i in range(p)))
    cmd = ["smpirun", "-np", str(p), "-platform", str(work / f"{platform}.xml"),
           *(["-hostfile", hosts] if hosts else []),
           "--cfg=smpi/host-speed:1Gf", "--log=root.thres:critical",
           "--cfg=smpi/shared-malloc-blocksize:134217728",        # few mappings at 1024 ranks
           f"--cfg=smpi/allreduce:{algorithm}", str(work / "ar"), str(nbytes)]
    out = subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=1800)
    return float(out.stdout.split()[-1])


def per_message(sizes, seconds):
    """A message's cost by its bytes, interpolated log-log between the sweep's points (a 2-rank
    ring is two messages of half the buffer each)."""
    m = np.log(np.asarray(sizes, dtype=float) / 2)
    t = np.log(np.asarray(seconds, dtype=float) / 2)
    return lambda b: float(np.exp(np.interp(math.log(b), m, t)))


def _sweep(work: Path, platform: str, pair) -> object:
    """A message's cost by its bytes between the two nodes ``pair`` (:func:`per_message`)."""
    hosts = work / f"pair-{pair[0]}-{pair[1]}.txt"
    hosts.write_text("".join(f"{h}\n" for h in pair))
    return per_message(SWEEP, [smpi(work, platform, 2, n, "lr", str(hosts)) for n in SWEEP])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--ranks", default="16,64,256,1024")
    ap.add_argument("--sizes", default="1000000,9407888",
                    help="bytes: a 1 MB message and the small CNN's gradients (ResNet-50's 102 MB "
                         "take SMPI minutes per run at 1024 ranks: it copies every payload)")
    ap.add_argument("--work", default="build/smpi")
    ap.add_argument("--tolerance", type=float, default=0.15)
    opts = ap.parse_args(argv)
    if not shutil.which("smpicc"):
        raise SystemExit("smpicc not found: apt-get install libsimgrid-dev (SimGrid 3.32)")
    work = Path(opts.work)
    build(work)
    ranks = [int(x) for x in opts.ranks.split(",")]
    sizes = [int(x) for x in opts.sizes.split(",")]
    print(f"# python benchmarks/smpi_check.py --ranks {opts.ranks} --sizes {opts.sizes}")
    print("# SimGrid " + subprocess.run(["smpirun", "--version"], capture_output=True,
                                        text=True).stdout.split("\n")[0].strip())
    print("# forecast: the algorithm's messages (step_spans()), each at the 2-rank sweep's cost "
          "for its size, within a leaf or across the tree as its pairs span; declared: the same "
          "messages at the platform's α + bytes/bandwidth")
    print(f"{'platform':20} {'algorithm':19} {'ranks':>5} {'bytes':>10} {'SMPI s':>9} "
          f"{'forecast':>9} {'err':>7} {'declared':>9} {'err':>7}")
    worst, within, total = {}, 0, 0
    for platform, (_, lat, bits, leaf) in PLATFORMS.items():
        near, far = (_sweep(work, platform, pair) for pair in (
            ("n0", "n1"), ("n0", "n1023") if leaf else ("n0", "n1")))
        declared = lambda b, lat=lat, bits=bits: lat + 8 * b / bits      # noqa: E731
        for name, algo in ALGORITHMS.items():
            for p in ranks:
                for n in sizes:
                    sim = smpi(work, platform, p, n, algo)
                    got = sum(count * (far if leaf and span >= leaf else near)(m)
                              for m, count, span in step_spans(name, n, p))
                    plain = exchange_time(name, n, p, declared)
                    err, err0 = (got - sim) / sim, (plain - sim) / sim
                    total += 1
                    within += abs(err) <= opts.tolerance
                    key = (platform, name)
                    worst[key] = max(worst.get(key, 0.0), abs(err))
                    print(f"{platform:20} {name:19} {p:5d} {n:10d} {sim:9.4f} {got:9.4f} "
                          f"{err * 100:+6.1f}% {plain:9.4f} {err0 * 100:+6.1f}%", flush=True)
    print(f"\n# within {opts.tolerance * 100:.0f}% of SMPI: {within} of {total}")
    for (platform, name), w in worst.items():
        print(f"# worst |error| {platform} {name}: {w * 100:.1f}%")
    return 0 if within == total else 1


if __name__ == "__main__":
    sys.exit(main())
