"""Average buffers with Horovod's allreduce and grouped allreduce (TensorFlow binding).

Horovod sums in a background thread that wakes every ``HOROVOD_CYCLE_TIME`` ms and fuses the
tensors ready by then up to ``HOROVOD_FUSION_THRESHOLD`` bytes; see docs/ or the bench note in
``results/bench/`` for the settings that matter when ranks share a node's few cores.

``fp16`` is ``hvd.Compression.fp16`` (cast to half, sum in half, cast back), as in
``hvd.DistributedGradientTape(compression=...)``. Horovod has no int8 compressor, and int8
codes with per-chunk scales cannot be summed on the wire: ``int8`` allgathers every rank's
payload (codes and scales) with ``hvd.allgather`` and each rank decodes and averages them in
rank order, so all ranks end with the same bits (``allgather`` in :mod:`hpcdl.costmodel`):
each rank receives p-1 quarter-size payloads, less traffic than a float32 ring up to p = 8.
"""
from __future__ import annotations

import os

import numpy as np

from . import ALIGN as _ALIGN, Backend, _as_f32, empty_aligned as _aligned_empty


# Niceness given to the threads hvd.init() starts (Horovod's background thread); 0 leaves them be.
# ``hpcdl bench`` sets 19 where unset; training leaves the default.
NICE_ENV = "HPCDL_HOROVOD_NICE"
NICE_DEFAULT = 0
_INIT = {}


def _threads():
    try:
        return {int(t) for t in os.listdir("/proc/self/task")}
    except OSError:             # not Linux: no per-thread priorities to set
        return set()


def nice_setting(environ=None) -> int:
    """``HPCDL_HOROVOD_NICE`` from ``environ`` (os.environ), checked: ValueError names the fix."""
    env = os.environ if environ is None else environ
    raw = env.get(NICE_ENV, str(NICE_DEFAULT))
    try:
        nice = int(raw)
    except ValueError:
        nice = -1
    if not 0 <= nice <= 19:
        raise ValueError(f"{NICE_ENV}={raw!r}: give an integer from 0 (leave Horovod's thread "
                         "alone) to 19 (lowest priority)")
    return nice


def init(hvd, environ=None) -> dict:
    """``hvd.init()``, then lower the priority of the thread(s) it started; return what was done.

    Horovod's background thread wakes every cycle and, when a rank has one core, shares it with
    the thread that calls Horovod. At equal priority the scheduler lets the waking background
    thread preempt the caller in the middle of its Python and TensorFlow dispatch, and the other
    rank then waits for both. At nice 19 it runs when the caller blocks on the result, which is
    when it has work. On 2 ranks with one core each (``hpcdl bench``, cycle 0.1 ms) a 4 KiB
    Horovod allreduce took 154-212 us at nice 5-19 against 208-378 us at 0, 1 MiB 257-269 us
    against 465-481 us (results/bench/README.md). Training, where TensorFlow's threads float over
    the node's cores (``--bind-to none``), did not gain (the small CNN on 2 ranks: 713-719 img/s
    at 19, 730-736 at 0), so the default leaves the threads alone.

    ``HPCDL_HOROVOD_NICE`` (0-19, default 0) sets the value; a thread already nicer keeps its
    own. Threads are told apart through /proc/self/task, so where MPI starts inside
    ``hvd.init()`` its helper threads get the value too.
    """
    if hvd.is_initialized():
        return dict(_INIT)
    nice = nice_setting(environ)
    before = _threads()
    hvd.init()
    new = sorted(_threads() - before)
    got = []                    # the niceness each new thread has afterwards, read back
    for tid in new:
        try:
            if nice:
                os.setpriority(os.PRIO_PROCESS, tid,
                               max(nice, os.getpriority(os.PRIO_PROCESS, tid)))
            got.append(os.getpriority(os.PRIO_PROCESS, tid))
        except OSError:         # the thread has exited, or the system forbids it: leave it
            pass
    _INIT.clear()
    _INIT.update({"asked": nice, "threads": len(got), "nice": sorted(set(got))})
    return dict(_INIT)


def init_info() -> dict:
    """What :func:`init` did in this process (``{}`` if Horovod was started elsewhere)."""
    return dict(_INIT)


class HorovodBackend(Backend):
    name = "horovod"

    def __init__(self, compression="none"):
        super().__init__(compression)
        import tensorflow as tf
        import horovod.tensorflow as hvd
        init(hvd)
        self.tf, self.hvd = tf, hvd
        self.rank, self.size = hvd.rank(), hvd.size()
        self._hvd_compression = (hvd.Compression.fp16 if compression == "fp16"
                                 else hvd.Compression.none)
        self._stage = None
        dlpack = getattr(getattr(tf, "experimental", None), "dlpack", None)
        self._dlpack = dlpack if dlpack is not None and hasattr(np.ndarray, "__dlpack__") else None

    def allreduce_mean(self, flat):
        flat = _as_f32(flat)
        if self.size == 1:
            return flat.copy()
        tf, hvd, n = self.tf, self.hvd, flat.size
        if self.compression == "int8":
            from .mpi import decode_mean
            wire = self.codec.encode(flat)
            gathered = hvd.allgather(tf.constant(wire.reshape(1, -1)), name=f"hpcdl.ag8.{n}")
            return decode_mean(self.codec, np.asarray(gathered), n)
        # Names are stable per size so that Horovod's response cache can skip negotiation.
        res = hvd.allreduce(self._tensor(flat), compression=self._hvd_compression,
                            name=f"hpcdl.ar.{n}", **self._mean_args())
        # The output tensor's own buffer (read-only): .numpy() would copy it once more.
        return np.asarray(res)

    def _mean_args(self):
        """How Horovod is asked for the mean: a sum of inputs prescaled by 1/p, for float32.

        ``op=hvd.Average`` is a sum followed by a second pass over the output (ScaleBuffer, a
        scalar multiply in double precision), after MPI_Allreduce has already copied the input
        into the output (Open MPI's algorithms start from a copy when send != receive buffer).
        With ``prescale_factor`` Horovod writes input / p into the output (the scaling is the
        copy) and reduces in place: one pass less; 4-18% faster from 256 KiB to 32 MiB on 2
        ranks (results/bench/horovod-overhead.txt). At p = 2 the bits are those of Average; at other p each
        term is rounded once before the sum, within float32 rounding of the mean. fp16 keeps
        Average: prescaling halves before the sum would push small gradients into subnormals.
        """
        if self.compression == "none":
            return {"op": self.hvd.Sum, "prescale_factor": 1.0 / self.size}
        return {"op": self.hvd.Average}

    def _tensor(self, flat):
        """A TensorFlow tensor over ``flat``'s bytes, or over one copy of them.

        tf.convert_to_tensor copies into a freshly allocated tensor: at 64 MiB that took 12 ms
        (page faults included) of a 60 ms allreduce whose MPI part took 37. A 64-byte aligned,
        writable buffer goes to TensorFlow through DLPack without a copy (TensorFlow aborts the
        process on a less aligned one, so anything else is first copied into a reused aligned
        staging buffer).
        """
        if self._dlpack is None:
            return self.tf.convert_to_tensor(flat)
        if flat.ctypes.data % _ALIGN or not flat.flags.writeable:
            if self._stage is None or self._stage.size < flat.size:
                self._stage = _aligned_empty(flat.size)
            stage = self._stage[:flat.size]
            np.copyto(stage, flat)
            flat = stage
        return self._dlpack.from_dlpack(flat.__dlpack__())

    def allreduce_mean_list(self, arrays):
        if self.compression == "int8" or self.size == 1:
            return super().allreduce_mean_list(arrays)
        tf, hvd = self.tf, self.hvd
        tensors = [tf.convert_to_tensor(np.asarray(a, dtype=np.float32)) for a in arrays]
        res = hvd.grouped_allreduce(tensors, compression=self._hvd_compression,
                                    name=f"hpcdl.group.{len(arrays)}", **self._mean_args())
        return [np.array(t, dtype=np.float32) for t in res]

    def broadcast(self, arr, root=0):
        arr = np.ascontiguousarray(arr)
        return np.array(self.hvd.broadcast(self.tf.constant(arr), root_rank=root,
                                           name=f"hpcdl.bcast.{arr.dtype}.{arr.size}"))

    def barrier(self):
        self.hvd.allreduce(self.tf.constant(0.0), op=self.hvd.Sum, name="hpcdl.barrier")


def make(compression="none"):
    return HorovodBackend(compression)
