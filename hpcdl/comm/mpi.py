"""Average buffers with the MPI library's own Allreduce, through mpi4py."""
from __future__ import annotations

import numpy as np

from . import _as_f32, Backend
from .compression import FP16


def _mpi():
    from mpi4py import MPI  # after hvd.init() when Horovod runs: it attaches to the same MPI
    return MPI


_FP16_SUM = None


def _fp16_sum(MPI):
    """A commutative MPI op that adds IEEE half-precision values (MPI has no float16 type)."""
    global _FP16_SUM
    if _FP16_SUM is None:
        codec = FP16()

        def add(inbuf, inoutbuf, datatype):
            acc = np.frombuffer(inoutbuf, dtype=np.uint16)
            # The float32 sum of two halves is exact; the store rounds it once, as fp16 math does.
            codec.sum_halves(np.frombuffer(inbuf, dtype=np.uint16), acc, acc.size)
        _FP16_SUM = MPI.Op.Create(add, commute=True)
    return _FP16_SUM


class MPIBackend(Backend):
    """mpi4py on a private duplicate of COMM_WORLD (no message of ours meets anyone else's)."""

    name = "mpi"

    def __init__(self, compression="none", comm=None):
        super().__init__(compression)
        MPI = _mpi()
        self.MPI = MPI
        self.comm = (comm or MPI.COMM_WORLD).Dup()
        self.rank = self.comm.Get_rank()
        self.size = self.comm.Get_size()

    def allreduce_mean(self, flat):
        flat = _as_f32(flat)
        if self.size == 1:
            return flat.copy()         # nothing travels, nothing is rounded
        MPI, p = self.MPI, self.size
        if self.compression == "none":
            out = np.empty_like(flat)
            self.comm.Allreduce(flat, out, op=MPI.SUM)
        elif self.compression == "fp16":
            # the wire buffers are ours alone: reused, so that large ones are not page-faulted in
            # again on every call (a fresh 32 MiB buffer costs about as much as a pass over it)
            half = self.codec.encode(flat, out=self._scratch("half", 2 * flat.size))
            summed = self._scratch("sum", 2 * flat.size).view(np.uint16)
            self.comm.Allreduce([half.view(np.uint16), MPI.UINT16_T], [summed, MPI.UINT16_T],
                                op=_fp16_sum(MPI))
            return self.codec.decode(summed, flat.size, scale=1.0 / p)
        else:
            return _allgather_mean(self.comm, self.codec, flat, p, self._scratch)
        out /= np.float32(p)
        return out

    def _scratch(self, key, nbytes):
        """A reused uint8 buffer of ``nbytes`` private to this backend (never returned to callers)."""
        bufs = self.__dict__.setdefault("_bufs", {})
        buf = bufs.get(key)
        if buf is None or buf.size < nbytes:
            buf = bufs[key] = np.empty(nbytes, dtype=np.uint8)
        return buf[:nbytes]

    def broadcast(self, arr, root=0):
        arr = np.ascontiguousarray(arr)
        buf = arr.copy()
        self.comm.Bcast(buf, root=root)
        return buf

    def barrier(self):
        self.comm.Barrier()


def _allgather_mean(comm, codec, flat, p, scratch):
    """Gather every rank's encoded payload, decode and add in rank order, divide by p.

    The payload and the gathered buffers are reused (``scratch``); the first payload is decoded
    into the result, the others decode-added (the same bits as adding all p to zeros: decoded
    values are never -0.0).
    """
    nb = codec.wire_nbytes(flat.size)
    wire = codec.encode(flat, out=scratch("wire", nb))
    gathered = scratch("gathered", p * nb).reshape(p, nb)
    comm.Allgather(wire, gathered)
    return decode_mean(codec, gathered, flat.size)


def decode_mean(codec, gathered, n):
    """The mean of the p payloads in the rows of ``gathered``, added in rank order."""
    out = codec.decode(gathered[0], n)
    for r in range(1, gathered.shape[0]):
        codec.decode_add(gathered[r], n, out)
    out /= np.float32(gathered.shape[0])
    return out


def make(compression="none"):
    return MPIBackend(compression)
