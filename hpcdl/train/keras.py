"""Scaling records from your own ``model.fit``: the :class:`ScalingRecorder` Keras callback.

Add it to the callbacks of a Keras script, with or without Horovod::

    from hpcdl.train.keras import ScalingRecorder
    model.fit(data, epochs=2, callbacks=[*horovod_callbacks,
              ScalingRecorder("results/runs.jsonl", batch_size=64)])

It only watches: it times every training batch after ``warmup`` batches (from batch begin to
batch end, so the gradients' exchange that Horovod's optimizer does inside the step is in), keeps
the loss and metrics Keras reports per epoch (and Keras' loss every ``log_every`` batches, its
running mean over the epoch so far), and at the end of training has rank 0 append one
record in hpcdl's format (the same schema, manifest and cluster facts as ``hpcdl train``) that
``hpcdl study report`` reads. Throughput comes, as in hpcdl's own loop, from the iterations (of
``per_iter`` batches) of the rank whose timed batches took longest in all.

The exchange happens inside Keras' step, where a callback cannot time it apart. So, once training
has ended, every rank runs ``probes`` probe steps as hpcdl's loop does: the forward and backward
pass alone on a batch of the same shape (random inputs, the sum of squared outputs as the loss:
the same layers and the same gradient shapes as training), then, on several ranks, the exchange
of those gradients alone (Horovod's fused allreduce, fp32). Nothing is applied, and variables the
forward pass touches (batch-norm statistics) are put back, so training is unchanged. A model
whose input shape is unknown is not probed, and the record says so.

Under ``hpcdl study run`` (or a study's job script) the study, point and results file come from the
environment (``HPCDL_STUDY``, ``HPCDL_POINT``, ``HPCDL_RESULTS``), so the script needs no hpcdl
options.
"""
from __future__ import annotations

import statistics
import time
from typing import List, Optional, Tuple

import tensorflow as tf

from .collectives import HorovodCollectives
from .figures import iteration_rates, slowest_rank_iterations, step_split, summarize_values
from .. import checks, cluster, machine, records, stack

stack.check_keras(tf)      # a clear error where tf.keras is Keras 3, before Keras 2's classes

__all__ = ["ScalingRecorder"]


def _horovod():
    """Horovod (its TensorFlow module, the same runtime as its Keras one) when this process
    initialised it, else None (one process)."""
    try:
        import horovod.tensorflow as hvd
        hvd.size()
        return hvd
    except (ImportError, ValueError):
        return None


class ScalingRecorder(tf.keras.callbacks.Callback):
    """Times ``model.fit``'s batches and appends one hpcdl record at the end (rank 0)."""

    def __init__(self, results: Optional[str] = None, batch_size: Optional[int] = None,
                 warmup: int = 10, per_iter: int = 10, workload: Optional[str] = None,
                 tag: Optional[str] = None, probes: int = 10, log_every: int = 0):
        super().__init__()
        self.results = results or cluster.setting("HPCDL_RESULTS") or "results/runs.jsonl"
        self.batch_size, self.warmup, self.per_iter = batch_size, warmup, per_iter
        self.workload, self.tag, self.probes, self.log_every = workload, tag, probes, log_every
        self.curve: List[list] = []      # [batch, loss] every log_every batches
        self.batch_times: List[float] = []
        self.epochs: List[dict] = []
        self._t0 = self._start = 0.0
        self._seen = 0

    # --- what Keras calls -----------------------------------------------------------------------
    def on_train_begin(self, logs=None):
        hvd = _horovod()
        if self.results != "-" and (hvd is None or hvd.rank() == 0):
            checks.check_writable(self.results, "the recorder's results file")   # before fit spends
        self._start = time.perf_counter()

    def on_train_batch_begin(self, batch, logs=None):
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, batch, logs=None):
        dt = time.perf_counter() - self._t0
        self._seen += 1
        if self._seen > self.warmup:
            self.batch_times.append(dt)
        if self.log_every and self._seen % self.log_every == 0 and "loss" in (logs or {}):
            self.curve.append([self._seen, float(logs["loss"])])

    def on_epoch_end(self, epoch, logs=None):
        self.epochs.append({"epoch": epoch + 1, "batches": self._seen,
                            **{k: float(v) for k, v in (logs or {}).items()}})

    def on_train_end(self, logs=None):
        record = self.record(time.perf_counter() - self._start)
        if record is not None and self.results != "-":
            kept = records.append_or_keep(self.results, record)
            print(f"Record appended to {kept or self.results}", flush=True)

    # --- the probes --------------------------------------------------------------------------------
    def probe(self, hvd) -> Tuple[List[float], List[float], str]:
        """(compute times, exchange times, why not) of the probe steps, on this rank. Every rank
        calls it at the end of training, so the collectives match."""
        shape = getattr(self.model, "input_shape", None)
        if not self.probes or not self.batch_size:
            return [], [], "no probes asked for" if not self.probes else "batch_size not given"
        if not isinstance(shape, tuple) or any(d is None for d in shape[1:]):
            return [], [], f"the model's input shape {shape!r} is not one fixed tensor shape"
        model, variables = self.model, self.model.trainable_variables
        x = tf.random.stateless_uniform((self.batch_size, *shape[1:]), seed=(1, 2))
        saved = [v.numpy() for v in model.non_trainable_variables]

        @tf.function
        def grads():
            with tf.GradientTape() as tape:
                out = model(x, training=True)
                outs = out if isinstance(out, (list, tuple)) else [out]
                loss = tf.add_n([tf.reduce_mean(tf.square(tf.cast(o, tf.float32))) for o in outs])
            return tape.gradient(loss, variables)

        @tf.function
        def exchange(gs):
            return hvd.grouped_allreduce(list(gs), op=hvd.Average, name="hpcdl.train.keras.probe")

        def barrier():
            if hvd:
                hvd.allreduce(tf.constant(0.0), op=hvd.Sum, name="hpcdl.train.keras.barrier")

        comp, exch = [], []
        try:
            gs = grads()                                   # trace once, untimed
            if hvd and hvd.size() > 1:
                exchange(gs)
            for _ in range(self.probes):
                barrier()
                t0 = time.perf_counter()
                gs = grads()
                _ = gs[-1].numpy()
                comp.append(time.perf_counter() - t0)
                if hvd and hvd.size() > 1:
                    barrier()
                    t0 = time.perf_counter()
                    _ = exchange(gs)[-1].numpy()
                    exch.append(time.perf_counter() - t0)
        finally:
            for v, value in zip(model.non_trainable_variables, saved):
                v.assign(value)
        return comp, exch, ""

    # --- the record --------------------------------------------------------------------------------
    def record(self, wall: float) -> Optional[dict]:
        """Every rank takes part (a collective under Horovod); rank 0 gets the record."""
        hvd = _horovod()
        size, rank = (hvd.size(), hvd.rank()) if hvd else (1, 0)
        coll = HorovodCollectives(hvd, tf) if hvd else None

        def slowest(values):
            if coll is None:
                return list(values)
            return coll.allreduce(values, "max", "hpcdl.train.keras.max").tolist()

        iters = [sum(self.batch_times[i:i + self.per_iter])
                 for i in range(0, len(self.batch_times) - self.per_iter + 1, self.per_iter)]
        if coll:
            iters = slowest_rank_iterations(coll, iters)
        own = summarize_values(self.batch_times)
        keys = ("mean", "std", "ci95", "min", "median", "p99", "max")
        step = dict(zip(keys, slowest([float(own.get(k, 0.0)) for k in keys])))
        step["n"] = own["n"]
        comp, exch, why_not = self.probe(hvd)
        layout = cluster.discover()
        hosts = (coll.allgather_object(layout.host, "hpcdl.train.keras.hosts") if coll
                 else [layout.host])
        if comp:
            c, e = slowest([statistics.median(comp), statistics.median(exch) if exch else 0.0])
            split = step_split(size, step.get("median"), "probe", float(c))
            split["probes"] = len(comp)
            if exch:
                split["exchange_alone_s"] = float(e)
        else:
            split = {"method": "none", "why": f"not probed: {why_not}"}
        if rank != 0:
            return None
        per_rank = self.batch_size
        rate = iteration_rates(per_rank * self.per_iter, iters) if per_rank else {"n": 0}
        unit = "samples/s" if per_rank else "unknown (give ScalingRecorder batch_size)"
        last = self.epochs[-1] if self.epochs else {}
        grad_bytes = sum(int(v.shape.num_elements()) * v.dtype.size
                         for v in self.model.trainable_variables)
        return records.build(
            source="keras-callback", study=cluster.setting("HPCDL_STUDY"), tag=self.tag,
            point=cluster.setting("HPCDL_POINT"), declared=cluster.setting("HPCDL_DECLARED"),
            params={"workload": self.workload or f"keras:{self.model.name}",
                    "batch_size": per_rank, "global_batch": per_rank * size if per_rank else None,
                    "steps": self._seen, "warmup": self.warmup, "batches_per_iter": self.per_iter,
                    "backend": "horovod" if hvd else "none", "compression": "none"},
            layout=records.layout_section(layout, hosts),
            gradient_bytes=grad_bytes,
            machine=machine.record_section(hosts),
            metrics={
                "throughput": {**{k: (v * size if k != "n" else v) for k, v in rate.items()},
                               "unit": unit},
                "throughput_per_rank": {**rate, "unit": unit},
                "step_time": step, "split": split,
                "epochs": self.epochs, "final_loss": last.get("loss"),
                **({"loss_curve": self.curve} if self.log_every else {}),
                "wall_time_s": wall},
            manifest=records.manifest(layout, hosts=hosts,
                                      extra={"recorder": "hpcdl.train.keras.ScalingRecorder"}))
