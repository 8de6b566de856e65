"""This rank's replica: its model, optimizer, data shard and gradient exchange, and the step
functions every way of training calls.

The exchange is the one a mode hands in (``hpcdl.comm.get_backend``, the code the benchmark times
too) or None where a mode moves parameters itself (the asynchronous server, the pipeline).
"""
from __future__ import annotations

import time
from typing import NamedTuple, Optional

from .data import even_split, Sharder
from .runtime import Plan, Runtime
from ..errors import UserError


# --- the flat exchange's buffers -------------------------------------------------------------------

def gather(np, grads):
    """The gradients as one float32 buffer, as a flat backend's ``allreduce_mean`` takes them."""
    return np.concatenate([g.numpy().ravel() for g in grads])


def scatter(np, tf, avg, variables) -> list:
    """The averaged buffer cut back into one tensor per variable."""
    out, off = [], 0
    for v in variables:
        n = int(np.prod(v.shape))
        out.append(tf.constant(avg[off:off + n].reshape(v.shape), dtype=v.dtype))
        off += n
    return out


def flat_exchange(np, tf, exchange, grads, variables) -> list:
    """What a step of a flat backend does between its compute and its update: :func:`gather`,
    ``exchange.allreduce_mean``, :func:`scatter` (``hpcdl tune`` times this)."""
    return scatter(np, tf, exchange.allreduce_mean(gather(np, grads)), variables)


# --- the replica ----------------------------------------------------------------------------------

class Probe(NamedTuple):
    """One probe's seconds: compute alone, the exchange alone and the wait before it (None on
    one rank), the whole probe (its gradients made first too: the loop leaves it all out of the
    timed iteration), and the process's CPU seconds in its compute and exchange."""
    compute: float
    exchange: Optional[float]
    wait: Optional[float]
    total: float
    compute_cpu: float
    exchange_cpu: Optional[float]


class Replica:
    """This rank's model, optimizer, data shard and gradient exchange, and the step functions.

    Where the exchange (a ``hpcdl.comm`` backend) works inside the step's graph (Horovod, as
    ``hvd.DistributedGradientTape``), the step averages the tape's gradients with its
    ``average``; otherwise the step computes the gradients, exchanges them as one flat buffer
    with its ``allreduce_mean`` and applies the result, timing each part.
    """

    def __init__(self, rt: Runtime, wl, plan: Plan, opts, shard=None, exchange=None):
        import numpy as np
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
        if isinstance(wl.train, tuple):       # numpy arrays: sharded by index (hpcdl.train.data)
            self.sharder = Sharder(len(wl.train[0]), plan.batch, index, count, opts.seed)
        elif wl.train is not None:            # a tf.data dataset
            self.dataset = wl.train.repeat().shard(count, index).batch(plan.batch,
                                                                       drop_remainder=True)
        self.exchange = exchange
        self.in_graph = bool(self.exchange and self.exchange.in_graph)
        self._build_functions()

    def _build_functions(self):
        tf, model, variables, loss_fn = self.rt.tf, self.model, self.variables, self.wl.loss
        exchange, opt = self.exchange, self.opt
        function = tf.function(autograph=self.wl.autograph)

        @function
        def compute_grads(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(loss_fn(y, model(x, training=True)))
            return loss, tape.gradient(loss, variables)

        @function
        def graph_step(x, y):
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(loss_fn(y, model(x, training=True)))
            grads = exchange.average(tape.gradient(loss, variables))
            opt.apply_gradients(zip(grads, variables))
            return loss

        @function
        def apply_grads(grads):
            opt.apply_gradients(zip(grads, variables))

        self.compute_grads, self._graph_step, self._apply = compute_grads, graph_step, apply_grads
        self._exchange_only = function(lambda grads: exchange.average(grads)) \
            if exchange is not None else None

    def step(self, x, y):
        """One training step: (loss tensor, compute s, exchange s); the times are None in-graph."""
        if self.in_graph:
            return self._graph_step(x, y), None, None
        np, tf = self.np, self.rt.tf
        t0 = time.perf_counter()
        loss, grads = self.compute_grads(x, y)
        flat = gather(np, grads)
        t1 = time.perf_counter()
        avg = self.exchange.allreduce_mean(flat)
        t2 = time.perf_counter()
        self._apply(scatter(np, tf, avg, self.variables))
        return loss, t1 - t0, t2 - t1

    def probe(self, x, y, slow: float = 0.0) -> "Probe":
        """A probe: the forward and backward pass alone, then, on several ranks, a barrier (its
        wait is how long this rank waits for the slowest one's compute: the arrival skew at the
        exchange) and the exchange of the gradients alone (the same ``average`` the step calls),
        each with the CPU time the process spent in it (all its threads: Horovod's background
        loop and MPI's progress too). Every rank probes at the same steps, so the collectives
        match; nothing is applied. ``slow``: seconds of compute this rank adds (a straggler
        injected on purpose, HPCDL_SLOW)."""
        # the exchange's gradients, made first: a compute timed right after the previous one,
        # as a step's is, and not the first call after a pause (a tiny model's probe then took
        # longer than its whole step: the pool's threads waking)
        start = time.perf_counter()
        grads = self.compute_grads(x, y)[1]
        t0, c0 = time.perf_counter(), time.process_time()
        _ = self.compute_grads(x, y)[1][-1].numpy()
        if slow:
            time.sleep(slow)
        t1, c1 = time.perf_counter(), time.process_time()
        if self.rt.size == 1:
            return Probe(t1 - t0, None, None, t1 - start, c1 - c0, None)
        self.rt.coll.barrier("hpcdl.probe.barrier")
        t2, c2 = time.perf_counter(), time.process_time()
        out = self._exchange_only(grads)
        _ = out[-1].numpy()
        t3, c3 = time.perf_counter(), time.process_time()
        return Probe(t1 - t0, t3 - t2, t2 - t1, t3 - start, c1 - c0, c3 - c2)

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
        coll = self.rt.coll
        coll.broadcast_variables(self.model.variables, 0, "hpcdl.bcast.model")
        coll.broadcast_variables(_opt_variables(self.opt), 0, "hpcdl.bcast.opt")

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
        wl, tf, np = self.wl, self.rt.tf, self.np
        if wl.test is None:
            return {}
        xt, yt = wl.test
        sl = even_split(len(xt), self.rt.rank, self.rt.size)
        pred = self.model(tf.constant(xt[sl]), training=False)
        sums = [float(tf.reduce_mean(wl.loss(yt[sl], pred))) * len(xt[sl]), float(len(xt[sl]))]
        if wl.accuracy:
            sums.append(float(np.sum(np.argmax(pred.numpy(), axis=1) == yt[sl])))
        tot = self.rt.coll.allreduce(sums, "sum", "hpcdl.eval")
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
