"""One launch of ``hpcdl tune``: the ranks' side. Every rank builds the workload's model and times,
for its real gradient tensors, the exchange a training step runs under the launch's setting
(given as JSON by the driver, :mod:`hpcdl.bench.tune`), alternating over rounds; rank 0 prints
the times as one JSON line after :data:`MARKER`, which the driver reads.

- Horovod's exchange (``HorovodBackend.average``, as ``DistributedGradientTape`` runs it) on a
  communicator whose allreduce algorithm is forced through MPI_T, one or more algorithms per
  launch, Horovod started again for each (:meth:`Worker.session`);
- in launches of one algorithm, the forward and backward pass on one batch while that Horovod
  runs beside it;
- where the driver asks, before Horovod first starts in the launch, hpcdl's flat backends' step
  exchange (:meth:`Worker.flat_exchange`) and the forward and backward pass with no Horovod
  beside them, as training runs them (it starts no Horovod for them:
  :mod:`hpcdl.train.collectives`);
- references: the MPI library's own ``MPI_Allreduce`` of one buffer of the same bytes, and the
  limit (the link's where the machine sets its rate, or a memcpy where the ranks share memory).
"""
from __future__ import annotations

import argparse
import json
import os
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

from .allreduce import timed
from .. import cluster, machine, stack
from ..costmodel import HOROVOD_DEFAULTS
from ..errors import UserError

MARKER = "hpcdl-tune-result "


@dataclass
class Worker:
    """A launch's MPI world, the workload's tensors, and its times."""

    opts: object
    tensors: list
    layout: object
    world: object
    tf: object
    workload: dict
    grads: object = None            # the workload's forward and backward pass on one batch
    started: bool = False           # Horovod started once (its settings now fixed)
    fns: dict = field(default_factory=dict)    # compression -> the step's exchange, traced once
    flat: dict = field(default_factory=dict)   # (backend, compression) -> hpcdl's flat exchange

    @property
    def root(self) -> bool:
        return self.world.Get_rank() == 0

    def session(self, algorithm: Tuple[int, int], compressions: List[str], rounds: int,
                compute: bool = False) -> Tuple[Dict[str, List[float]], List[float]]:
        """Horovod started once on a communicator that runs ``algorithm``; per compression,
        ``rounds`` rounds' times of a step's exchange (each the slowest rank's median), and with
        ``compute`` each round's time of the forward and backward pass while Horovod's
        background thread runs beside it (what its cycle costs the step's compute)."""
        import horovod.tensorflow as hvd
        import numpy as np
        from ..comm import mpit
        from ..comm.horovod import HorovodBackend
        if self.started:           # Horovod keeps its first start's settings; naming them again crashes it
            for name in HOROVOD_DEFAULTS:
                os.environ.pop(name, None)
        if algorithm[0] or mpit.read(mpit.ALGORITHM):
            if not (mpit.write(mpit.ALGORITHM, algorithm[0]) and mpit.write(mpit.SEGMENT, algorithm[1])):
                raise UserError("the MPI library refused an allreduce algorithm through MPI_T")
        comm = self.world.Dup()
        hvd.init(comm=comm)
        self.started = True
        out: Dict[str, List[float]] = {c: [] for c in compressions}
        comp_times: List[float] = []
        compute = compute and self.grads is not None
        try:
            fns = self.fns      # traced in the first session, run again on each new start (their
            for comp in compressions:           # ops find the Horovod of the moment when they run)
                if comp not in fns:
                    be = HorovodBackend(comp)
                    fns[comp] = self.tf.function(lambda ts, be=be: be.average(ts))
                fns[comp](self.tensors)                          # negotiation, fusion buffer
            for r in range(rounds):
                for comp in compressions:
                    times, _ = timed(self.world, lambda: fns[comp](self.tensors), self.opts.iters, 0)
                    out[comp].append(float(np.median(times)))
                if compute:
                    comp_times.append(self.compute_round(r))
        finally:
            hvd.shutdown()
            comm.Free()
        return out, comp_times

    def flat_rounds(self, flat: dict, compressions: List[str], rounds: int) -> List[float]:
        """Before Horovod starts in this launch (training starts none for these backends):
        ``flat`` ({backend: {compression: []}}) gets each round's time of hpcdl's flat backends'
        step exchange; the return is each round's forward and backward pass with nothing beside
        it."""
        import numpy as np
        if self.started:
            raise RuntimeError("flat backends are timed before Horovod starts in a launch")
        comp_times: List[float] = []
        for r in range(rounds):
            for name, by_comp in flat.items():
                for comp in compressions:
                    times, _ = timed(self.world, self.flat_exchange(name, comp), self.opts.iters,
                                     0 if r else 1)
                    by_comp[comp].append(float(np.median(times)))
            if self.grads is not None:
                comp_times.append(self.compute_round(r))
        return comp_times

    def compute_round(self, r: int) -> float:
        """Round ``r``'s median time of the forward and backward pass on one batch (the first
        round warms it up once)."""
        import numpy as np
        times, _ = timed(self.world, lambda: self.grads()[-1].numpy(), self.opts.iters,
                         0 if r else 1)
        return float(np.median(times))

    def flat_exchange(self, backend: str, compression: str):
        """A flat backend's exchange as a training step runs it on these tensors
        (:func:`hpcdl.train.replica.flat_exchange`), the backend made once (before any
        algorithm is forced: its communicator runs the library's own choice, as in training)."""
        import numpy as np
        from ..comm import get_backend
        from ..train.replica import flat_exchange
        be = self.flat.get((backend, compression))
        if be is None:
            be = self.flat[(backend, compression)] = get_backend(backend, compression)
        return lambda: flat_exchange(np, self.tf, be, self.tensors, self.tensors)[-1].numpy()

    def native(self, nbytes: int) -> float:
        """The MPI library's MPI_Allreduce (its own algorithm choice) of one buffer of ``nbytes``."""
        import numpy as np
        from ..comm import mpit
        if mpit.read(mpit.ALGORITHM):
            mpit.write(mpit.ALGORITHM, 0)
        comm = self.world.Dup()
        src = np.full(nbytes // 4, 0.5, dtype=np.float32)
        dst = np.empty_like(src)
        times, _ = timed(comm, lambda: comm.Allreduce(src, dst), self.opts.iters, 1)
        comm.Free()
        return float(np.median(times))


def add_workload_arguments(p: argparse.ArgumentParser, title: str) -> None:
    """The workload options :func:`_train_opts` reads: a study file's, or the flags."""
    w = p.add_argument_group(title)
    w.add_argument("--study", default=None, help="a study file: its [workload] (else the options below)")
    w.add_argument("--workload", "-w", default="cnn", help="expmlp, mnist, cnn or package.module:factory (cnn)")
    w.add_argument("--model", default=None, help="cnn: its model (resnet50)")
    w.add_argument("--image-size", type=int, default=None, help="cnn: input resolution")
    w.add_argument("--num-classes", type=int, default=None, help="cnn: classes")


def _train_opts(opts):
    """``hpcdl train``'s options for the workload: a study file's first point, or the flags."""
    from ..train import options as train_options
    if opts.study:
        from .. import study as study_mod
        argv = study_mod.load(opts.study).points()[0].train_args("-")
    else:
        argv = ["--workload", opts.workload]
        for flag, value in (("--model", opts.model), ("--image-size", opts.image_size),
                            ("--num-classes", opts.num_classes)):
            if value is not None:
                argv += [flag, str(value)]
    parser = argparse.ArgumentParser(prog="hpcdl train")
    train_options.add_arguments(parser)
    return parser.parse_args(argv)


def _start_worker(opts, setting: dict) -> Worker:
    """The launch's Horovod settings and rank defaults as training sets them, Open MPI's dynamic
    rules on (an algorithm can then be forced per communicator), TensorFlow, the tensors."""
    os.environ.update(setting["env"])
    layout = cluster.discover()
    threads = cluster.configure_threads(layout)
    cluster.apply_rank_defaults()
    if any(a[0] for a in setting["algorithms"]):
        os.environ["OMPI_MCA_coll_tuned_use_dynamic_rules"] = "1"
    targs = _train_opts(opts)
    tf = stack.import_tensorflow()
    cluster.apply_tf_threads(tf, threads)
    from mpi4py import MPI
    from .. import workloads
    wl = workloads.load(targs.workload, targs)
    tensors = [tf.random.stateless_normal(v.shape, seed=[i, 7], stddev=0.01)
               for i, v in enumerate(wl.model.trainable_variables)]
    wk = Worker(opts, tensors, layout, MPI.COMM_WORLD.Dup(), tf,
                {"workload": targs.workload, **(wl.info or {})},
                _grads_fn(tf, wl, targs.batch_size))
    for name in setting.get("backends") or []:      # made before any algorithm is forced
        for comp in setting["compressions"]:
            wk.flat_exchange(name, comp)
    return wk


def _grads_fn(tf, wl, batch_size: Optional[int]):
    """The workload's forward and backward pass on one per-rank batch (its synthetic batch, else
    the first of its data), as a training step computes it; None without a batch."""
    batch = wl.synthetic
    n = batch_size or wl.batch_size
    if batch is None and isinstance(wl.train, tuple):
        batch = (tf.constant(wl.train[0][:n]), tf.constant(wl.train[1][:n]))
    elif batch is None and isinstance(wl.train, tf.data.Dataset):
        # a user's factory: an unbatched dataset of (x, y) pairs, batched as training batches it
        batch = next(iter(wl.train.batch(n).take(1)), None)
    if batch is None:
        return None
    x, y = batch
    variables = wl.model.trainable_variables

    @tf.function
    def grads():
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(wl.loss(y, wl.model(x, training=True)))
        return tape.gradient(loss, variables)
    return grads


def run(opts) -> int:
    """One launch: every algorithm of the setting, alternating over ``--worker-rounds`` rounds;
    rank 0 prints the times as one JSON line after :data:`MARKER`."""
    from ..comm import mpit
    setting = json.loads(opts.worker)
    wk = _start_worker(opts, setting)
    algs = [tuple(a) for a in setting["algorithms"]]
    skipped = []
    if len(algs) > 1 and mpit.read(mpit.ALGORITHM) is None:
        algs = [(0, 0)]
        skipped.append("algorithm: the MPI library has no coll_tuned_allreduce_algorithm control "
                       "variable (not Open MPI, or its tuned collectives are off)")
    comps = setting["compressions"]
    nbytes = sum(int(t.shape.num_elements()) * 4 for t in wk.tensors)
    if len(algs) > 1 and all(n in os.environ for n in ("HOROVOD_CYCLE_TIME", "HOROVOD_FUSION_THRESHOLD")):
        raise UserError("a launch that fixes both Horovod's cycle time and fusion threshold can "
                        "start Horovod only once, so it can time only one algorithm")
    times = {f"{a[0]}/{a[1]}": {c: [] for c in comps} for a in algs}
    compute: Dict[str, List[float]] = {}
    native = [wk.native(nbytes)]
    flat = {b: {c: [] for c in comps} for b in setting.get("backends") or []}
    flat_compute = wk.flat_rounds(flat, comps, opts.worker_rounds) if flat else []
    if len(algs) == 1:             # one start of Horovod, the rounds inside it: a Horovod setting
        key = f"{algs[0][0]}/{algs[0][1]}"     # whose thread's cost on compute is measured too
        times[key], compute[key] = wk.session(algs[0], comps, opts.worker_rounds, compute=True)
        native.append(wk.native(nbytes))
    dropped: List[str] = []
    for r in range(opts.worker_rounds if len(algs) > 1 else 0):
        if r:
            native.append(wk.native(nbytes))
        k = r % len(algs)
        for a in algs[k:] + algs[:k]:
            for comp, ts in wk.session(a, comps, 1)[0].items():
                times[f"{a[0]}/{a[1]}"][comp] += ts
        if r == 0:
            algs, out = prune(algs, times, comps)
            dropped += out
    limit = _link_limit(wk.layout.host, wk.world.Get_size(), nbytes)
    copy = None if limit else _memcpy(wk.world, nbytes, opts.iters)
    if wk.root:
        lay = wk.layout
        print(MARKER + json.dumps({
            "env": setting["env"], "times": times, "compute": compute, "native": native,
            "flat": {b: v for b, v in flat.items() if any(v.values())},
            "flat_compute": flat_compute,
            "bytes": nbytes,
            "tensors": len(wk.tensors), "workload": wk.workload, "ranks": wk.world.Get_size(),
            "nodes": lay.num_nodes, "ranks_per_node": lay.local_size, "host": lay.host,
            "skipped": skipped, "dropped": dropped, "link_limit_s": limit,
            "memcpy_s": copy}), flush=True)
    wk.world.Barrier()
    return 0


PRUNE = 1.5     # after a launch's first round, an algorithm this much slower than the fastest
#                 for every compression is not timed again (the library's own choice always is)


def prune(algs: List[Tuple[int, int]], times: dict, comps: List[str]):
    """(the algorithms to time in the next rounds, the keys of those dropped)."""
    best = {c: min(min(times[f"{a[0]}/{a[1]}"][c]) for a in algs) for c in comps}
    keep = [a for a in algs if a == (0, 0) or any(
        min(times[f"{a[0]}/{a[1]}"][c]) <= PRUNE * best[c] for c in comps)]
    return keep, [f"{a[0]}/{a[1]}" for a in algs if a not in keep]


def _memcpy(world, nbytes: int, iters: int) -> float:
    """Where ranks share memory, the limit's yardstick: a copy of ``nbytes`` on every rank at
    once, as the allreduce bench's reference (the median of the slowest rank's times)."""
    import numpy as np
    src = np.full(nbytes // 4, 0.5, dtype=np.float32)
    dst = np.zeros_like(src)
    times, _ = timed(world, lambda: np.copyto(dst, src), max(3, iters), 1)
    return float(np.median(times))


def _link_limit(host: str, p: int, nbytes: int) -> Optional[float]:
    """Where the machine sets its link rate, a ring's bytes over that link:
    2(p-1)/p x bytes / rate."""
    bits = machine.link_bits_at(host)
    if not bits or p < 2:
        return None
    from ..costmodel import ring_bound
    return ring_bound(nbytes, p, bits)

