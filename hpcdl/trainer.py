"""Set up one rank of a data-parallel training job, in named pieces that follow Horovod's order.

:func:`start` sets threads and rank defaults and starts TensorFlow and Horovod; :func:`make_plan`
turns the options into batch sizes, step counts and the learning rate; a :class:`Replica` holds
this rank's model, optimizer, data shard and gradient exchange (``hpcdl.comm``, the code the
benchmark times too) and its step functions; :func:`resume` restores a checkpoint on every rank.
The loop and the run's figures are in :mod:`hpcdl.trainloop`; ``hpcdl.train`` calls them in order.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from . import cluster
from .asyncps import NAME as ASYNC
from .errors import UserError



# --- start ----------------------------------------------------------------------------------------

@dataclass
class Runtime:
    """TensorFlow, Horovod and where this rank sits."""

    tf: object
    hvd: object
    layout: cluster.Layout
    threads: int
    gpu: Optional[int]

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


def start(timeline: bool = False) -> Runtime:
    """Threads and rank defaults before anything starts, then TensorFlow, ``hvd.init()``, the GPU.
    ``timeline``: Horovod may record its timeline (started and stopped around the timed steps)."""
    layout = cluster.discover()
    threads = cluster.configure_threads(layout)
    cluster.apply_rank_defaults(timeline=timeline)
    check_horovod()
    import tensorflow as tf
    cluster.apply_tf_threads(tf, threads)
    try:
        import horovod.tensorflow as hvd
    except (ImportError, OSError, tf.errors.NotFoundError) as exc:
        # Typically libmpi (or another library Horovod links) does not load on this node.
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise UserError(f"cannot load Horovod's TensorFlow extension ({first}): load the MPI "
                        "library Horovod was built with (module load openmpi, or LD_LIBRARY_PATH), "
                        "or rebuild Horovod with scripts/setup.sh") from exc
    hvd.init()
    layout = cluster.refine_with_horovod(layout, hvd)
    return Runtime(tf, hvd, layout, threads, cluster.pin_gpu(tf, layout))


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
    else:
        steps = opts.steps or wl.steps
        warmup = opts.warmup if opts.warmup is not None else min(10, steps // 10)
        per_iter = opts.num_batches_per_iter or max(1, min(10, (steps - warmup) // 10 or 1))
    if warmup >= steps:
        raise UserError(f"--warmup {warmup} leaves no timed steps of --steps {steps}")
    base_lr = opts.lr or wl.lr
    scale = batch * size / wl.ref_batch if opts.lr_scaling == "linear" else 1.0
    return Plan(batch, batch * size, steps, warmup, per_iter, base_lr, base_lr * scale)


# --- the replica ----------------------------------------------------------------------------------

class Replica:
    """This rank's model, optimizer, data shard and gradient exchange, and the step functions.

    The exchange is ``hpcdl.comm.get_backend(backend, compression)``: where it works inside the
    step's graph (Horovod, as ``hvd.DistributedGradientTape``), the step averages the tape's
    gradients with its ``average``; otherwise the step computes the gradients, exchanges them
    as one flat buffer with its ``allreduce_mean`` and applies the result, timing each part.
    """

    def __init__(self, rt: Runtime, wl, plan: Plan, opts, shard=None):
        import numpy as np
        from . import comm
        from .data import Sharder
        tf = rt.tf
        self.rt, self.wl, self.plan, self.np = rt, wl, plan, np
        self.model = wl.model
        self.variables = self.model.trainable_variables
        lr = plan.lr
        if opts.lr_warmup_steps and plan.lr != plan.base_lr:
            lr = _warmup_schedule(tf, plan.base_lr, plan.lr, opts.lr_warmup_steps)
        self.opt = wl.make_optimizer(lr)
        self.opt.build(self.variables)
        self.sharder, self.dataset, self.it = None, None, None
        index, count = shard or (rt.rank, rt.size)     # this rank's shard of how many
        if isinstance(wl.train, tuple):       # numpy arrays: sharded by index (hpcdl.data)
            self.sharder = Sharder(len(wl.train[0]), plan.batch, index, count, opts.seed)
        elif wl.train is not None:            # a tf.data dataset
            self.dataset = wl.train.repeat().shard(count, index).batch(plan.batch,
                                                                       drop_remainder=True)
        # hpcdl.asyncps's workers push and pull through their server, not through a backend
        self.exchange = None if opts.backend == ASYNC else comm.get_backend(opts.backend,
                                                                             opts.compression)
        self.in_graph = bool(self.exchange and self.exchange.in_graph)
        self._build_functions()

    def _build_functions(self):
        tf, model, variables, loss_fn = self.rt.tf, self.model, self.variables, self.wl.loss
        exchange, opt = self.exchange, self.opt

        @tf.function
        def compute_grads(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(loss_fn(y, model(x, training=True)))
            return loss, tape.gradient(loss, variables)

        @tf.function
        def graph_step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(loss_fn(y, model(x, training=True)))
            grads = exchange.average(tape.gradient(loss, variables))
            opt.apply_gradients(zip(grads, variables))
            return loss

        @tf.function
        def apply_grads(grads):
            opt.apply_gradients(zip(grads, variables))

        self.compute_grads, self._graph_step, self._apply = compute_grads, graph_step, apply_grads
        self._exchange_only = tf.function(lambda grads: exchange.average(grads)) \
            if exchange is not None else None

    def step(self, x, y):
        """One training step: (loss tensor, compute s, exchange s); the times are None in-graph."""
        if self.in_graph:
            return self._graph_step(x, y), None, None
        np, tf = self.np, self.rt.tf
        t0 = time.perf_counter()
        loss, grads = self.compute_grads(x, y)
        flat = np.concatenate([g.numpy().ravel() for g in grads])
        t1 = time.perf_counter()
        avg = self.exchange.allreduce_mean(flat)
        t2 = time.perf_counter()
        out, off = [], 0
        for v in self.variables:
            n = int(np.prod(v.shape))
            out.append(tf.constant(avg[off:off + n].reshape(v.shape), dtype=v.dtype))
            off += n
        self._apply(out)
        return loss, t1 - t0, t2 - t1

    def probe(self, x, y, slow: float = 0.0):
        """(compute s, exchange s or None, wait s or None, total s) of a probe: the forward and
        backward pass alone, then, on several ranks, a barrier (its wait is how long this rank
        waits for the slowest one's compute: the arrival skew at the exchange) and the exchange
        of the gradients alone (the same ``average`` the step calls). Every rank probes at the
        same steps, so the collectives match; nothing is applied. ``slow``: seconds of compute
        this rank adds (a straggler injected on purpose, HPCDL_SLOW)."""
        t0 = time.perf_counter()
        _, grads = self.compute_grads(x, y)
        _ = grads[-1].numpy()
        if slow:
            time.sleep(slow)
        t1 = time.perf_counter()
        if self.rt.size == 1:
            return t1 - t0, None, None, t1 - t0
        hvd, tf = self.rt.hvd, self.rt.tf
        hvd.allreduce(tf.constant(0.0), op=hvd.Sum, name="hpcdl.probe.barrier")
        t2 = time.perf_counter()
        out = self._exchange_only(grads)
        _ = out[-1].numpy()
        t3 = time.perf_counter()
        return t1 - t0, t3 - t2, t2 - t1, t3 - t0

    def batch(self, step: int):
        if self.sharder is not None:
            idx = self.sharder.indices(step)
            x_all, y_all = self.wl.train
            return self.rt.tf.constant(x_all[idx]), self.rt.tf.constant(y_all[idx])
        if self.dataset is not None:
            return next(self.it)
        return self.wl.synthetic

    def sample_batch(self):
        """A batch to time things on that leaves the data's position where it is."""
        if self.dataset is not None:
            return next(iter(self.dataset))
        return self.batch(0)

    def seek(self, step: int) -> None:
        """Position the data at ``step`` (index-sharded data needs nothing: it is a function of it)."""
        if self.dataset is not None:
            self.it = iter(self.dataset.skip(step))

    def broadcast_state(self) -> None:
        hvd = self.rt.hvd
        hvd.broadcast_variables(self.model.variables, root_rank=0)
        hvd.broadcast_variables(_opt_variables(self.opt), root_rank=0)

    def arrays(self) -> dict:
        out = {f"model/{i}": v.numpy() for i, v in enumerate(self.model.variables)}
        out.update({f"opt/{i}": v.numpy() for i, v in enumerate(_opt_variables(self.opt))})
        return out

    def restore(self, arrays: dict, header: dict) -> None:
        mv, ov = self.model.variables, _opt_variables(self.opt)
        n_model = sum(1 for k in arrays if k.startswith("model/"))
        n_opt = sum(1 for k in arrays if k.startswith("opt/"))
        if n_model != len(mv) or n_opt != len(ov):
            raise UserError(f"checkpoint of step {header['step']} does not fit this model: it holds "
                            f"{n_model} model and {n_opt} optimizer arrays, the model has {len(mv)} "
                            f"and {len(ov)} (was it written by another workload?)")
        for i, v in enumerate(mv):
            v.assign(arrays[f"model/{i}"])
        for i, v in enumerate(ov):
            v.assign(arrays[f"opt/{i}"])

    def digest(self) -> str:
        import hashlib
        np = self.np
        flat = np.concatenate([v.numpy().ravel().astype(np.float32) for v in self.model.variables])
        return hashlib.sha256(flat.tobytes()).hexdigest()

    def gradient_bytes(self) -> int:
        return int(sum(int(self.np.prod(v.shape)) for v in self.variables) * 4)

    def evaluate(self) -> dict:
        """Held-out loss (and accuracy) over the test set, sharded across the ranks (collective)."""
        from .data import even_split
        wl, tf, np, hvd = self.wl, self.rt.tf, self.np, self.rt.hvd
        if wl.test is None:
            return {}
        xt, yt = wl.test
        sl = even_split(len(xt), self.rt.rank, self.rt.size)
        pred = self.model(tf.constant(xt[sl]), training=False)
        sums = [float(tf.reduce_mean(wl.loss(yt[sl], pred))) * len(xt[sl]), float(len(xt[sl]))]
        if wl.accuracy:
            sums.append(float(np.sum(np.argmax(pred.numpy(), axis=1) == yt[sl])))
        tot = hvd.allreduce(tf.constant(sums, tf.float64), op=hvd.Sum, name="hpcdl.eval").numpy()
        out = {"test_loss": tot[0] / tot[1]}
        if wl.accuracy:
            out["test_accuracy"] = tot[2] / tot[1]
        return out


def _opt_variables(opt):
    v = opt.variables
    return list(v() if callable(v) else v)


def _warmup_schedule(tf, start, target, steps):
    """A learning rate ramped linearly from ``start`` to ``target`` over ``steps`` (Goyal et al.)."""
    class Schedule(tf.keras.optimizers.schedules.LearningRateSchedule):
        def __call__(self, step):
            frac = tf.minimum(1.0, tf.cast(step, tf.float32) / float(steps))
            return start + (target - start) * frac

        def get_config(self):
            return {"start": start, "target": target, "steps": steps}
    return Schedule()


# --- checkpoints and resume -------------------------------------------------------------------------

def save_checkpoint(rep: Replica, ckpt_dir: Optional[Path], step: int, opts) -> Optional[Path]:
    """Rank 0 writes an atomic, verified checkpoint of ``step``; other ranks return None."""
    if not rep.rt.root or ckpt_dir is None:
        return None
    from . import checkpoint
    p = rep.plan
    meta = {"workload": opts.workload, "seed": opts.seed, "size": rep.rt.size, "batch_size": p.batch,
            "global_batch": p.global_batch, "samples_seen": step * p.global_batch,
            "data_position": {"step": step, "epoch": (step // rep.sharder.steps_per_epoch)
                              if rep.sharder else None},
            "rng": {"tf_global": rep.rt.tf.random.get_global_generator().state.numpy().tolist()}}
    return checkpoint.save(ckpt_dir, step, rep.arrays(), meta, keep=opts.keep_checkpoints)


def resume(rep: Replica, opts, ckpt_dir: Optional[Path]):
    """(first step, what was resumed or None): rank 0 finds the checkpoint, every rank takes it."""
    from . import checkpoint
    rt = rep.rt
    if not opts.resume:
        return 0, None
    found = error = None
    if rt.root:
        found, error = checkpoint.find(opts.resume, ckpt_dir,
                                       warn=lambda m: cluster.log(m, rt.layout))
    info = rt.hvd.broadcast_object(
        error or (None if found is None else
                  (str(found[0]), found[1]["step"], found[1].get("meta", {}).get("rng"))),
        root_rank=0)
    if isinstance(info, str):
        raise UserError(info)
    if info is None:
        rt.say(f"No checkpoint in {ckpt_dir}: starting from step 0")
        return 0, None
    if rt.root:
        rep.restore(found[2], found[1])
    if (info[2] or {}).get("tf_global") is not None:
        # Every rank continues the random stream where the checkpointed run left it.
        rt.tf.random.get_global_generator().reset(rep.np.asarray(info[2]["tf_global"],
                                                                 dtype=rep.np.int64))
    rep.broadcast_state()
    rt.say(f"Resumed from {info[0]} at step {info[1]}")
    return info[1], {"path": info[0], "step": info[1]}
