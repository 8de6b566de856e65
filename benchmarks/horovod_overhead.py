"""Where Horovod's allreduce loses time against MPI's: the mean's scaling pass and the barrier.

Run under mpirun, one core per rank, as the bench runs (the launcher's environment applies
hpcdl's defaults: yield when idle, a 0.1 ms cycle unless HOROVOD_CYCLE_TIME is set)::

    mpirun -np 2 --bind-to core python benchmarks/horovod_overhead.py [--sizes 1M,4M,8M,16M]

For each size it times, in one process and interleaved (every variant once per round, the
rounds repeated, the minimum over rounds of each variant's median reported, so that a busy
minute does not fall on one variant only):

- ``average``: ``hvd.allreduce(op=Average)``: MPI_Allreduce(input -> output), then Horovod's
  ScaleBuffer pass over the output;
- ``prescale``: ``op=Sum, prescale_factor=1/p`` (what hpcdl's horovod backend does): the scaled
  copy of the input is the output, reduced in place;
- ``sum``: no scaling at all, the floor of the two;

each after a barrier outside the timed region, of two kinds: Horovod's own (a tiny allreduce
through its background thread) and an MPI_Barrier from the main thread (mpi4py), which runs
beside Horovod's background thread and its per-cycle coordination.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="1M,4M,8M,16M,32M")
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--rounds", type=int, default=3)
    opts = ap.parse_args(argv)

    from hpcdl import cluster
    from hpcdl.comm import apply_defaults, empty_aligned
    apply_defaults()
    os.environ.setdefault("HOROVOD_CYCLE_TIME", "0.1")
    n_threads = cluster.configure_threads(cluster.discover())
    import numpy as np
    from mpi4py import MPI
    from hpcdl.bench import _keep_freed_memory
    malloc = _keep_freed_memory()     # as the bench: freed outputs stay mapped
    import tensorflow as tf
    import horovod.tensorflow as hvd
    cluster.apply_tf_threads(tf, n_threads)
    comm = MPI.COMM_WORLD.Dup()
    hvd.init()
    p, rank = hvd.size(), hvd.rank()

    def hvd_barrier():
        hvd.allreduce(tf.constant(0.0), op=hvd.Sum, name="bar")

    def timed(fn, sync):
        ts = np.empty(opts.iters)
        for i in range(opts.iters + 3):
            sync()
            t0 = time.perf_counter()
            fn()
            if i >= 3:
                ts[i - 3] = time.perf_counter() - t0
        comm.Allreduce(MPI.IN_PLACE, ts, op=MPI.MAX)   # the slowest rank per iteration
        return float(np.median(ts)) * 1e6

    from hpcdl.bench import _size
    sizes = [_size(s) for s in opts.sizes.split(",")]
    if rank == 0:
        print(f"# {' '.join(sys.argv)}")
        print(f"# ranks={p} threads/rank={n_threads} HOROVOD_CYCLE_TIME={os.environ['HOROVOD_CYCLE_TIME']} "
              f"iters={opts.iters} rounds={opts.rounds} malloc: {malloc}; median us of the slowest rank, "
              "min over rounds")
        print(f"#{'size(B)':>10} {'barrier':>8} {'average':>9} {'prescale':>9} {'sum':>9} "
              f"{'pre/avg':>8}")
    for size in sizes:
        n = size // 4
        x = empty_aligned(n)
        x[...] = 1.0
        xt = tf.experimental.dlpack.from_dlpack(x.__dlpack__())
        variants = {
            "average": lambda: hvd.allreduce(xt, op=hvd.Average, name=f"a{n}"),
            "prescale": lambda: hvd.allreduce(xt, op=hvd.Sum, prescale_factor=1.0 / p,
                                              name=f"p{n}"),
            "sum": lambda: hvd.allreduce(xt, op=hvd.Sum, name=f"s{n}"),
        }
        best = {}
        for _ in range(opts.rounds):
            for bname, sync in (("horovod", hvd_barrier), ("mpi", comm.Barrier)):
                for vname, fn in variants.items():
                    t = timed(fn, sync)
                    key = (bname, vname)
                    best[key] = min(best.get(key, t), t)
        if rank == 0:
            for bname in ("horovod", "mpi"):
                avg, pre, s = (best[(bname, v)] for v in ("average", "prescale", "sum"))
                print(f" {size:>10} {bname:>8} {avg:>9.0f} {pre:>9.0f} {s:>9.0f} "
                      f"{pre / avg:>8.2f}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
