"""Exchange gradients between ranks: four backends behind one small interface.

Every backend averages a flat float32 buffer across all ranks (``allreduce_mean``), broadcasts
(``broadcast``) and synchronises (``barrier``); the result of ``allreduce_mean`` is the same, bit
for bit, on every rank.

- ``horovod`` (default): Horovod's allreduce and grouped allreduce (MPI or Gloo underneath).
- ``mpi``: mpi4py ``Allreduce``, the MPI library's own tuned algorithm.
- ``ring``: a readable reference ring allreduce in numpy over mpi4py point-to-point:
  reduce-scatter then allgather, p-1 steps each, pipelined in pieces (see :mod:`.ring`).
- ``ps``: a synchronous parameter server: every rank sends to rank 0, which averages and sends
  the result back (see :mod:`.ps`).

Compression (``none``, ``fp16``, ``int8``; :mod:`.compression`) applies to every backend. Where a
payload cannot be summed on the wire (int8 codes with per-chunk scales over ``mpi`` and
``horovod``), the ranks allgather the payloads and average them locally.

The time each takes is modelled in :mod:`hpcdl.costmodel` (``algorithm_for`` names the
algorithm of each backend and compression).

This package's top level imports numpy only; mpi4py, TensorFlow and Horovod are imported when a
backend is made.
"""
from __future__ import annotations

import importlib

import numpy as np

__all__ = ["ALIGN", "BACKENDS", "COMPRESSIONS", "MPI_DEFAULTS", "Backend", "apply_defaults",
           "empty_aligned", "get_backend"]

BACKENDS = ("horovod", "mpi", "ring", "ps")
COMPRESSIONS = ("none", "fp16", "int8")

# Set in every rank before MPI starts unless the environment says otherwise (results/bench/README.md).
MPI_DEFAULTS = {
    # Open MPI busy-polls while a rank waits (in a collective, or Horovod's background thread
    # coordinating every cycle). When a rank's threads outnumber its cores (TensorFlow's thread
    # plus Horovod's, two ranks on two cores) the spinning thread takes the core from the thread
    # that has work: the small CNN ran at 496 img/s on 2 ranks against 404 on 1. Yielding while
    # idle gave 773 (weak-scaling efficiency 0.61 -> 0.96) and costs a few us of latency.
    "OMPI_MCA_mpi_yield_when_idle": "1",
}


def apply_defaults(environ=None) -> dict:
    """Put MPI_DEFAULTS into ``environ`` (os.environ) where unset; return what was set.

    Call before MPI_Init (hvd.init(), the first mpi4py import): Open MPI reads its OMPI_MCA_*
    parameters from the process environment then.
    """
    import os
    env = os.environ if environ is None else environ
    done = {}
    for key, value in MPI_DEFAULTS.items():
        if key not in env:
            env[key] = value
            done[key] = value
    return done


class Backend:
    """The interface; subclasses implement ``allreduce_mean``, ``broadcast`` and ``barrier``."""

    name = "base"

    def __init__(self, compression: str = "none"):
        from .compression import get_codec
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

    def broadcast(self, arr: np.ndarray, root: int = 0) -> np.ndarray:
        raise NotImplementedError

    def barrier(self) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """Release communicators (optional)."""


ALIGN = 64       # bytes: what TensorFlow's CPU tensors require (EIGEN_MAX_ALIGN_BYTES)


def empty_aligned(n: int, dtype=np.float32) -> np.ndarray:
    """An uninitialised array of n elements whose data starts on an ALIGN-byte boundary.

    numpy aligns large arrays to 16 bytes; a 64-byte aligned buffer reaches Horovod's TensorFlow
    op without a copy (see :mod:`.horovod`).
    """
    item = np.dtype(dtype).itemsize
    raw = np.empty(n + ALIGN // item, dtype=dtype)
    off = (-raw.ctypes.data % ALIGN) // item
    return raw[off:off + n]


def _as_f32(flat) -> np.ndarray:
    return np.ascontiguousarray(flat, dtype=np.float32).ravel()


def get_backend(name: str, compression: str = "none") -> Backend:
    """Make the backend ``name`` (one of BACKENDS) with ``compression`` (one of COMPRESSIONS)."""
    if name not in BACKENDS:
        raise ValueError(f"unknown backend '{name}': choose one of {', '.join(BACKENDS)}")
    module = importlib.import_module(f"{__name__}.{name}")
    return module.make(compression)
