"""Start one rank in Horovod's order, and plan its run.

:func:`start` sets threads and rank defaults, starts TensorFlow and ``hvd.init()`` (or, for a
run with nothing of Horovod's in it, MPI alone: :mod:`.collectives`) and pins the GPU;
:func:`make_plan` turns the options into batch sizes, step counts and the learning rate.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Optional

from .. import cluster, machine, stack
from ..comm import tuning as tuning_file
from ..errors import UserError


# --- start ----------------------------------------------------------------------------------------

@dataclass
class Runtime:
    """TensorFlow, Horovod (None where the run did not start it), where this rank sits, and the
    collectives beside the exchange (:mod:`.collectives`)."""

    tf: object
    hvd: object
    layout: cluster.Layout
    threads: int
    gpu: Optional[int]
    tuning: Optional[dict] = None       # the record's tuning section: the exchange settings run
    node: Optional[dict] = None         # this node's links and CPU share, where set (machine.node)
    coll: object = None                 # Collectives: Horovod's, or mpi4py's without Horovod

    @property
    def rank(self) -> int:
        return self.layout.rank

    @property
    def size(self) -> int:
        return self.layout.size

    @property
    def root(self) -> bool:
        return self.layout.rank == 0

    def say(self, msg: str) -> None:
        """A result or progress line: rank 0, stdout."""
        if self.root:
            print(msg, flush=True)


def start(timeline: bool = False, tuning: Optional[str] = None, compression: str = "none",
          horovod: bool = True) -> Runtime:
    """The tuning file's settings, threads and rank defaults before anything starts, then
    TensorFlow, ``hvd.init()`` (``horovod``; else MPI through mpi4py alone), the GPU.
    ``timeline``: Horovod may record its timeline (started and stopped around the timed steps).
    ``tuning``: ``--tuning`` (else ``HPCDL_TUNING``), whose pick for ``compression`` replaces
    those settings in the environment."""
    layout = cluster.discover()
    threads = cluster.configure_threads(layout)
    path = tuning_file.path_of(tuning)
    if layout.size == 1 and path:
        # one rank exchanges nothing: a tuned cycle time would only wake Horovod's thread more;
        # the file is checked all the same (a wrong file is wrong at any size)
        tuning_file.load(path)
        tuned = dict(tuning_file.take("default", compression),
                     ignored=f"{path}: one rank has nothing to exchange")
    else:
        tuned = tuning_file.take(tuning, compression)
    cluster.apply_rank_defaults(timeline=timeline)
    if horovod:
        check_horovod()
    tf = stack.import_tensorflow()
    stack.check_keras(tf)
    cluster.apply_tf_threads(tf, threads)
    from . import collectives
    if horovod:
        hvd = _init_horovod(tf)
        layout = cluster.refine_with_horovod(layout, hvd)
        coll = collectives.HorovodCollectives(hvd, tf)
    else:
        hvd, coll = None, collectives.MpiCollectives()
        layout = _refine_with_mpi(layout, coll.MPI)
    from ..comm import mpit
    tuned["in_force"] = mpit.in_force()      # what the MPI library's allreduce runs with
    rt = Runtime(tf, hvd, layout, threads, cluster.pin_gpu(tf, layout), tuned,
                 machine.node(layout.host), coll)
    note = tuning_file.mismatch(tuned, layout.num_nodes, layout.size, rt.node)
    if note:
        rt.say(f"hpcdl: {note}")
    return rt


def _refine_with_mpi(layout: cluster.Layout, MPI) -> cluster.Layout:
    """Rank/size/local/cross from MPI as Horovod counts them (the ranks sharing a node, the
    node's index among the nodes), for a run that starts no Horovod."""
    from dataclasses import replace
    world = MPI.COMM_WORLD
    local = world.Split_type(MPI.COMM_TYPE_SHARED, key=world.Get_rank())
    cross = world.Split(color=local.Get_rank(), key=world.Get_rank())
    try:
        return replace(layout, rank=world.Get_rank(), size=world.Get_size(),
                       local_rank=local.Get_rank(), local_size=local.Get_size(),
                       node=cross.Get_rank(), num_nodes=cross.Get_size(),
                       launcher=layout.launcher if layout.launcher != "none" else "mpi")
    finally:
        local.Free()
        cross.Free()


def _init_horovod(tf):
    """``horovod.tensorflow``, started."""
    try:
        import horovod.tensorflow as hvd
    except (ImportError, OSError, tf.errors.NotFoundError) as exc:
        # Typically libmpi (or another library Horovod links) does not load on this node.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot load Horovod's TensorFlow extension ({first}): load the MPI "
                        "library Horovod was built with (module load openmpi, or LD_LIBRARY_PATH), "
                        "or rebuild Horovod with scripts/setup.sh") from exc
    hvd.init()
    return hvd


def check_horovod() -> None:
    """Raise UserError, before TensorFlow starts, when Horovod lacks its TensorFlow extension.

    Only looks at files: loading Horovod's library before TensorFlow (as ``hpcdl info`` does)
    makes TensorFlow's own import crash in the same process.
    """
    import glob
    import importlib.util
    spec = importlib.util.find_spec("horovod")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("Horovod is not installed in this Python: run scripts/setup.sh, or pip "
                        "install horovod with HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_MPI=1")
    root = list(spec.submodule_search_locations)[0]
    if not glob.glob(os.path.join(root, "tensorflow", "mpi_lib*.so")):
        raise UserError(f"Horovod at {root} is built without TensorFlow: rebuild it with "
                        "HOROVOD_WITH_TENSORFLOW=1 (scripts/setup.sh does)")


# --- the plan -------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Plan:
    """Batch sizes, steps and learning rate of a run (a function of the options, workload and size)."""

    batch: int               # per rank
    global_batch: int
    steps: int
    warmup: int              # untimed steps
    per_iter: int            # steps per timed iteration, the unit of the +- spread
    base_lr: float           # at the workload's reference global batch
    lr: float                # scaled to this global batch


def make_plan(opts, wl, size: int) -> Plan:
    batch = opts.batch_size or wl.batch_size
    if wl.synthetic is not None:      # the synthetic benchmark's options
        warmup = next(v for v in (opts.num_warmup_batches, opts.warmup, 10) if v is not None)
        per_iter = opts.num_batches_per_iter or 10
        steps = opts.steps or (warmup + (opts.num_iters or 10) * per_iter)
    elif opts.num_iters and not opts.steps:     # the benchmark's terms, for any workload
        warmup = next(v for v in (opts.num_warmup_batches, opts.warmup, 10) if v is not None)
        per_iter = opts.num_batches_per_iter or 10
        steps = warmup + opts.num_iters * per_iter
    else:
        steps = opts.steps or wl.steps
        warmup = next((v for v in (opts.num_warmup_batches, opts.warmup) if v is not None),
                      min(10, steps // 10))
        per_iter = opts.num_batches_per_iter or max(1, min(10, (steps - warmup) // 10 or 1))
    if warmup >= steps:
        raise UserError(f"--warmup {warmup} leaves no timed steps of --steps {steps}")
    base_lr = opts.lr or wl.lr
    scale = batch * size / wl.ref_batch if opts.lr_scaling == "linear" else 1.0
    return Plan(batch, batch * size, steps, warmup, per_iter, base_lr, base_lr * scale)
