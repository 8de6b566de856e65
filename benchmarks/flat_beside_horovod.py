#!/usr/bin/env python
"""What a started Horovod costs the MPI traffic of the ranks' main thread: hpcdl's flat exchanges
and the MPI library's own MPI_Allreduce, timed with no Horovod and with Horovod started beside
them (as every ``hpcdl train`` starts it, idle when the backend is not Horovod), alternating.

Run under mpirun (two ranks on this machine):

    mpirun -np 2 python -m benchmarks.flat_beside_horovod --rounds 3 > results/flat-beside-horovod.txt

Per round and state, per size (4, 16, 64 MiB of float32): the MPI library's ``MPI_Allreduce`` of
one preallocated buffer, the ring and mpi backends' ``allreduce_mean`` (what the bench times),
and for the small CNN's gradient tensors (4000 classes, 4.4 MiB) the step exchange a training
step of a flat backend runs (:func:`hpcdl.train.replica.flat_exchange`: gather, allreduce_mean,
scatter). Each figure is the slowest rank's median over ``--iters``; the table gives the median
over rounds. Horovod is started (``hvd.init``) and shut down again between the states, its
settings those training uses (:func:`hpcdl.cluster.apply_rank_defaults`).
"""
import argparse
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

from hpcdl import cluster, records

SIZES = (4 << 20, 16 << 20, 64 << 20)


def _tensors(tf):
    """The small CNN's (4000 classes, 32x32) gradient tensors' shapes, random values."""
    from hpcdl import workloads
    from hpcdl.train import options
    parser = argparse.ArgumentParser()
    options.add_arguments(parser)
    targs = parser.parse_args(["--workload", "cnn", "--model", "small", "--image-size", "32",
                               "--num-classes", "4000"])
    wl = workloads.load("cnn", targs)
    return [tf.random.stateless_normal(v.shape, seed=[i, 7]) for i, v in
            enumerate(wl.model.trainable_variables)]


def _figures(world, np, tf, backends, tensors, iters):
    """{name: seconds} of one state."""
    from hpcdl.bench.allreduce import timed
    from hpcdl.train.replica import flat_exchange
    out = {}
    for size in SIZES:
        src = np.full(size // 4, 0.5, np.float32)
        dst = np.empty_like(src)
        t, _ = timed(world, lambda: world.Allreduce(src, dst), iters, 1)
        out[f"MPI_Allreduce {size >> 20} MiB"] = float(np.median(t))
        for name, be in backends.items():
            t, _ = timed(world, lambda: be.allreduce_mean(src), iters, 1)
            out[f"{name} allreduce_mean {size >> 20} MiB"] = float(np.median(t))
    mib = sum(int(x.shape.num_elements()) for x in tensors) * 4 / (1 << 20)
    for name, be in backends.items():
        t, _ = timed(world, lambda: flat_exchange(np, tf, be, tensors, tensors)[-1].numpy(),
                     iters, 1)
        out[f"{name} step exchange, CNN {mib:.1f} MiB"] = float(np.median(t))
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10)
    o = ap.parse_args(argv)
    layout = cluster.discover()
    cluster.configure_threads(layout)
    cluster.apply_rank_defaults()
    import numpy as np
    import tensorflow as tf
    from mpi4py import MPI
    from hpcdl.comm import get_backend
    world = MPI.COMM_WORLD.Dup()
    backends = {name: get_backend(name) for name in ("ring", "mpi")}
    tensors = _tensors(tf)
    import horovod.tensorflow as hvd
    states = ("no Horovod", "Horovod started, idle")
    runs = {s: [] for s in states}
    for r in range(o.rounds):
        for s in (states if r % 2 == 0 else states[::-1]):
            if s != states[0]:
                hvd.init()
            runs[s].append(_figures(world, np, tf, backends, tensors, o.iters))
            if s != states[0]:
                hvd.shutdown()
    if world.Get_rank() == 0:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                cwd=ROOT).stdout.strip()
        print(f"# command: mpirun -np {world.Get_size()} python -m benchmarks.flat_beside_horovod "
              f"--rounds {o.rounds} --iters {o.iters}")
        print(f"# commit: {commit}; processor: {records.cpu_identity()}; {os.cpu_count()} CPUs; "
              f"{world.Get_size()} ranks; Horovod's cycle "
              f"{os.environ.get('HOROVOD_CYCLE_TIME', '1')} ms")
        print("# medians over rounds (states alternating) of the slowest rank's median time")
        print(f"{'':44s} {'no Horovod':>11s} {'Horovod idle':>13s} {'ratio':>6s}")
        for name in runs[states[0]][0]:
            a = statistics.median(x[name] for x in runs[states[0]])
            b = statistics.median(x[name] for x in runs[states[1]])
            print(f"{name:44s} {a * 1e3:8.2f} ms {b * 1e3:10.2f} ms {b / a:6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
