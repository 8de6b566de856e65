"""Average gradients with Horovod, as ``hvd.DistributedGradientTape`` does.

``none`` and ``fp16``: :meth:`HorovodBackend.average` puts one ``hvd.allreduce(op=Average)`` per
gradient tensor into the training step's graph, with ``hvd.Compression.fp16`` for fp16: what the
tape's ``gradient()`` adds with its default arguments (Horovod 0.28's
``_make_allreduce_grads_fn``: no predivide, no groups, dense gradients). Horovod's background
thread fuses the tensors ready in one cycle (``HOROVOD_CYCLE_TIME``) up to
``HOROVOD_FUSION_THRESHOLD`` bytes, so the exchange of late layers starts while early layers are
still being differentiated. Training calls :meth:`average` inside its step function; the
benchmark times the same method in a ``tf.function`` of its own (:meth:`timed_call`).

``int8``: Horovod has no int8 compressor, and codes with per-chunk scales cannot be summed on the
wire. Every rank's payload (codes and scales) is allgathered with ``hvd.allgather`` and each rank
decodes and averages them in rank order, so all ranks end with the same bits (``allgather`` in
:mod:`hpcdl.costmodel`). This runs on a flat numpy buffer, outside the step's graph.
"""
from __future__ import annotations

import numpy as np

from . import _as_f32, Backend
from .. import stack
from .mpi import decode_mean


class HorovodBackend(Backend):
    name = "horovod"

    def __init__(self, compression="none"):
        super().__init__(compression)
        tf = stack.import_tensorflow()
        import horovod.tensorflow as hvd
        if not hvd.is_initialized():
            hvd.init()
        self.tf, self.hvd = tf, hvd
        self.rank, self.size = hvd.rank(), hvd.size()
        self.in_graph = compression != "int8"
        self._hvd_compression = (hvd.Compression.fp16 if compression == "fp16"
                                 else hvd.Compression.none)
        self._graph_fn = None

    def average(self, grads):
        """The ranks' mean of each gradient tensor, inside a tf.function (the training step's)."""
        if self.size == 1:
            return list(grads)
        hvd = self.hvd
        return [hvd.allreduce(g, op=hvd.Average, compression=self._hvd_compression)
                if g is not None else g for g in grads]

    def timed_call(self, flat):
        """``(call, fetch)``: ``call()`` runs :meth:`average` on ``flat`` as one tensor in a
        tf.function (the tensor is made once, outside); ``fetch`` turns its result into numpy."""
        if not self.in_graph:
            return super().timed_call(flat)
        if self._graph_fn is None:
            self._graph_fn = self.tf.function(lambda ts: self.average(ts))
        tensor = self.tf.constant(_as_f32(flat))
        fn = self._graph_fn
        return (lambda: fn([tensor])), (lambda res: np.asarray(res[0]))

    def allreduce_mean(self, flat):
        flat = _as_f32(flat)
        if self.in_graph:
            call, fetch = self.timed_call(flat)
            return fetch(call()).copy()
        if self.size == 1:
            return flat.copy()
        n = flat.size
        wire = self.codec.encode(flat)
        gathered = self.hvd.allgather(self.tf.constant(wire.reshape(1, -1)), name=f"hpcdl.ag8.{n}")
        return decode_mean(self.codec, np.asarray(gathered), n)

    def broadcast(self, arr, root=0):
        arr = np.ascontiguousarray(arr)
        return np.array(self.hvd.broadcast(self.tf.constant(arr), root_rank=root,
                                           name=f"hpcdl.bcast.{arr.dtype}.{arr.size}"))

    def barrier(self):
        self.hvd.allreduce(self.tf.constant(0.0), op=self.hvd.Sum, name="hpcdl.barrier")


def make(compression="none"):
    return HorovodBackend(compression)
