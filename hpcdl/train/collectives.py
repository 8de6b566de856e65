"""The collectives a run needs beside its gradients' exchange: the loss and the figures reduced,
the stop agreed, rank 0's weights and checkpoint path handed out, every rank's figures
gathered. Over Horovod where the run started it, else over MPI through mpi4py.

A run starts Horovod when something in it is Horovod's: its exchange (``--backend horovod``),
Horovod's timeline, or a mode built on Horovod. A synchronous run over hpcdl's own exchanges
(``mpi``, ``ring``, ``ps``, all mpi4py) does not: Horovod's background thread wakes every cycle
whether or not anything goes through it, agreeing with its peers, and where a rank has a
fraction of a core or two ranks share two, that comes out of the step (an idle Horovod made
the ring's exchange of 4 MiB 6.3x as long on 2 local ranks, ``results/flat-beside-horovod.txt``).

Both kinds give the same results: reductions in float64, objects by pickle, arrays bit for bit.
"""
from __future__ import annotations

from typing import Any, List, Sequence

import numpy as np

OPS = ("sum", "mean", "max", "min")


class Collectives:
    """The interface: ``rank``, ``size``, and collective calls every rank makes in the same
    order. ``name`` labels the call where the transport wants one (Horovod matches by it)."""

    rank = 0
    size = 1

    def allreduce(self, values: Sequence[float], op: str, name: str) -> np.ndarray:
        """``values`` reduced element-wise over the ranks by ``op`` (:data:`OPS`), float64."""
        raise NotImplementedError

    def broadcast_array(self, values: Sequence[float], root: int, name: str) -> np.ndarray:
        """Rank ``root``'s float64 ``values`` on every rank (all ranks pass as many)."""
        raise NotImplementedError

    def broadcast_object(self, obj: Any, root: int, name: str) -> Any:
        raise NotImplementedError

    def allgather_object(self, obj: Any, name: str) -> List[Any]:
        """Every rank's ``obj``, in rank order."""
        raise NotImplementedError

    def broadcast_variables(self, variables, root: int, name: str) -> None:
        """Set every rank's TensorFlow ``variables`` to rank ``root``'s."""
        raise NotImplementedError

    def barrier(self, name: str) -> None:
        raise NotImplementedError


def _check(op: str) -> None:
    if op not in OPS:
        raise ValueError(f"unknown reduction '{op}': one of {', '.join(OPS)}")


class HorovodCollectives(Collectives):
    """Through Horovod's TensorFlow ops (a started ``horovod.tensorflow``)."""

    def __init__(self, hvd, tf):
        self.hvd, self.tf = hvd, tf
        self.rank, self.size = hvd.rank(), hvd.size()

    def allreduce(self, values, op, name):
        _check(op)
        hvd = self.hvd
        hop = {"sum": hvd.Sum, "mean": hvd.Average, "max": hvd.Max, "min": hvd.Min}[op]
        t = self.tf.constant(np.asarray(values, dtype=np.float64))
        return np.asarray(hvd.allreduce(t, op=hop, name=name).numpy(), dtype=np.float64)

    def broadcast_array(self, values, root, name):
        t = self.tf.constant(np.asarray(values, dtype=np.float64))
        return np.asarray(self.hvd.broadcast(t, root_rank=root, name=name).numpy())

    def broadcast_object(self, obj, root, name):
        return self.hvd.broadcast_object(obj, root_rank=root, name=name)

    def allgather_object(self, obj, name):
        return self.hvd.allgather_object(obj, name=name)

    def broadcast_variables(self, variables, root, name):
        self.hvd.broadcast_variables(list(variables), root_rank=root)

    def barrier(self, name):
        self.hvd.allreduce(self.tf.constant(0.0), op=self.hvd.Sum, name=name)


class MpiCollectives(Collectives):
    """Through mpi4py, on a private duplicate of COMM_WORLD (nothing meets the exchange's
    messages, which run on their own duplicate)."""

    def __init__(self, comm=None):
        from mpi4py import MPI
        self.MPI = MPI
        self.comm = (comm or MPI.COMM_WORLD).Dup()
        self.rank, self.size = self.comm.Get_rank(), self.comm.Get_size()

    def allreduce(self, values, op, name):
        _check(op)
        MPI = self.MPI
        send = np.ascontiguousarray(values, dtype=np.float64)
        out = np.empty_like(send)
        mop = {"sum": MPI.SUM, "mean": MPI.SUM, "max": MPI.MAX, "min": MPI.MIN}[op]
        self.comm.Allreduce(send, out, op=mop)
        return out / self.size if op == "mean" else out

    def broadcast_array(self, values, root, name):
        buf = np.array(values, dtype=np.float64)
        self.comm.Bcast(buf, root=root)
        return buf

    def broadcast_object(self, obj, root, name):
        return self.comm.bcast(obj, root=root)

    def allgather_object(self, obj, name):
        return self.comm.allgather(obj)

    def broadcast_variables(self, variables, root, name):
        variables = list(variables)
        if not variables:
            return
        # one buffer of all of them, bytes as they are (any dtype), then each assigned
        arrays = [np.asarray(v.numpy()) for v in variables]     # 0-d for a scalar variable
        flat = np.concatenate([a.reshape(-1).view(np.uint8) for a in arrays])
        self.comm.Bcast(flat, root=root)
        off = 0
        for v, a in zip(variables, arrays):
            n = a.nbytes
            v.assign(flat[off:off + n].view(a.dtype).reshape(a.shape))
            off += n

    def barrier(self, name):
        self.comm.Barrier()
