"""Exchange gradients between ranks: four backends behind one small interface.

Training and the allreduce benchmark make a backend with :func:`get_backend` and call the same
method of it: ``average(grads)`` inside the training step's graph where the backend works there
(``in_graph``: horovod with none or fp16, as ``hvd.DistributedGradientTape`` does), else
``allreduce_mean(flat)`` on one fused float32 buffer per step. The result is the same, bit for
bit, on every rank.

- ``horovod`` (default): Horovod's allreduce (MPI or Gloo underneath; NCCL on GPU builds).
- ``mpi``: mpi4py ``Allreduce``, the MPI library's own tuned algorithm.
- ``ring``: a readable reference ring allreduce in numpy over mpi4py point-to-point:
  reduce-scatter then allgather, p-1 steps each, pipelined in pieces (see :mod:`.ring`).
- ``ps``: a synchronous parameter server: every rank sends to rank 0, which averages and sends
  the result back (see :mod:`.ps`).

Compression (``none``, ``fp16``, ``int8``; :mod:`.compression`) applies to every backend. Where a
payload cannot be summed on the wire (int8 codes with per-chunk scales over ``mpi`` and
``horovod``), the ranks allgather the payloads and average them locally. The time each takes is
modelled in :mod:`hpcdl.costmodel` (``algorithm_for`` names the algorithm of each backend).

This package's top level imports numpy only; mpi4py, TensorFlow and Horovod are imported when a
backend is made.
"""
from __future__ import annotations

import importlib

import numpy as np
from .compression import get_codec

__all__ = ["BACKENDS", "COMPRESSIONS", "Backend", "get_backend"]

BACKENDS = ("horovod", "mpi", "ring", "ps")
COMPRESSIONS = ("none", "fp16", "int8")

class Backend:
    """The interface; subclasses implement ``allreduce_mean``, ``broadcast`` and ``barrier``, and
    those that work inside the training step's graph (``in_graph``) ``average`` too."""

    name = "base"
    in_graph = False

    def __init__(self, compression: str = "none"):
        if compression not in COMPRESSIONS:
            raise ValueError(f"unknown compression '{compression}': choose one of "
                             f"{', '.join(COMPRESSIONS)}")
        self.compression = compression
        self.codec = get_codec(compression)
        self.rank = 0
        self.size = 1

    @property
    def label(self) -> str:
        return self.name if self.compression == "none" else f"{self.name}+{self.compression}"

    def allreduce_mean(self, flat: np.ndarray) -> np.ndarray:
        """The element-wise mean of ``flat`` over all ranks, as a new float32 array.

        The array may be read-only (horovod returns its output tensor's buffer): copy it before
        changing it in place.
        """
        raise NotImplementedError

    def allreduce_mean_list(self, arrays):
        """Average several arrays as one fused flat buffer (tensor fusion); same shapes back."""
        arrays = [np.asarray(a, dtype=np.float32) for a in arrays]
        flat = np.concatenate([a.ravel() for a in arrays]) if arrays else np.zeros(0, np.float32)
        avg = self.allreduce_mean(flat)
        out, off = [], 0
        for a in arrays:
            out.append(avg[off:off + a.size].reshape(a.shape))
            off += a.size
        return out

    def average(self, grads):
        """The ranks' mean of each gradient tensor, inside the step's tf.function (in_graph only)."""
        raise NotImplementedError(f"{self.label} exchanges a flat buffer: use allreduce_mean")

    def timed_call(self, flat: np.ndarray):
        """``(call, fetch)`` for the benchmark: ``call()`` runs the exchange that a training step
        runs on ``flat``, ``fetch(result)`` gives the result as a float32 array."""
        return (lambda: self.allreduce_mean(flat)), (lambda res: res)

    def broadcast(self, arr: np.ndarray, root: int = 0) -> np.ndarray:
        raise NotImplementedError

    def barrier(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release communicators (optional)."""


def _as_f32(flat) -> np.ndarray:
    return np.ascontiguousarray(flat, dtype=np.float32).ravel()


def get_backend(name: str, compression: str = "none") -> Backend:
    """Make the backend ``name`` (one of BACKENDS) with ``compression`` (one of COMPRESSIONS)."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend '{name}': choose one of {', '.join(BACKENDS)}")
    module = importlib.import_module(f"{__name__}.{name}")
    return module.make(compression)
