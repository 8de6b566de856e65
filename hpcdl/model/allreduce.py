"""What the MPI library runs and what each link's bytes cost: Open MPI's allreduce decision, the
algorithm a record's exchange ran, and the time of an exchange from the messages and link bytes
:mod:`hpcdl.costmodel` says each algorithm sends. Numpy-free."""
from __future__ import annotations

import math
from typing import Callable, Optional

from .. import costmodel
from ..records import lookup as _get

from ..costmodel import FRAMING, payload   # noqa: F401  (the link model's payload rate)
from ..costmodel import OMPI_ALLREDUCE       # noqa: F401  (Open MPI's algorithms, by number)
# what each algorithm sends is written once, in costmodel (the benchmark's fit counts it too)
from ..costmodel import link_parts, step_spans


# Open MPI 4.1's fixed decision (ompi_coll_tuned_allreduce_intra_dec_fixed, commutative
# operations), as its own table: for communicators smaller than the first figure, the first
# algorithm whose message limit the size is under, else the last algorithm
OMPI_DECISION = (
    (4, ((8, 4), (4096, 3), (8192, 4), (16384, 3), (65536, 4), (262144, 5)), 6),
    (8, ((16, 4), (8192, 3)), 6),
    (16, ((8192, 3),), 6),
    (32, ((64, 5), (4096, 3)), 6),
    (64, ((128, 5),), 6),
    (128, ((262144, 3),), 6),
    (256, ((131072, 2), (262144, 3)), 6),
    (512, ((4096, 2),), 6),
    (2048, ((2048, 2), (16384, 3)), 6),
    (4096, ((2048, 2), (4096, 5), (16384, 3)), 6),
    (math.inf, ((2048, 2), (16384, 5), (32768, 3)), 6),
)


def ompi_allreduce(p: int, nbytes: float) -> int:
    """The allreduce algorithm Open MPI 4.1's tuned module picks by its fixed rules for ``p``
    ranks and a message of ``nbytes`` (:data:`OMPI_DECISION`)."""
    limits, last = next((lim, last) for below, lim, last in OMPI_DECISION if p < below)
    return next((alg for size, alg in limits if nbytes < size), last)


def exchange_time(algorithm: str, n: float, p: int,
                  per_message: Callable[[float], float],
                  far: Optional[Callable[[float], float]] = None, leaf: Optional[int] = None,
                  fixed: float = 0.0) -> float:
    """Seconds of one allreduce: ``fixed`` once per call plus ``per_message(bytes)`` (a link's
    α + bytes·β, or what a message of that size adds to a ring's time on the allocation)
    summed over :func:`step_spans`. On a tree of ``leaf`` nodes per switch, a message whose
    pair spans a leaf costs ``far(bytes)`` instead: a ring's every step, whose ranks move in
    lock step, waits on its slowest pair."""
    return fixed + float(sum(
        count * (far if far is not None and leaf and span >= leaf else per_message)(m)
        for m, count, span in step_spans(algorithm, n, p)))


def algorithm_of(rec: dict, p: int, nbytes: float) -> str:
    """The allreduce algorithm a record's exchange ran at ``p`` ranks: hpcdl's own for its ring
    and parameter server, the MPI library's (pinned in the run's environment, or Open MPI's fixed
    decision) for Horovod over MPI and the mpi backend."""
    params = rec.get("params") or {}
    backend, comp = params.get("backend", "horovod"), params.get("compression", "none")
    own = costmodel.algorithm_for(backend, comp)
    if own != "ring" or backend not in ("horovod", "mpi"):
        return own
    env = _get(rec, "manifest", "env") or {}
    if str(env.get("HOROVOD_CONTROLLER", "")).lower() == "gloo":
        return "ring"
    pinned = str(env.get("OMPI_MCA_coll_tuned_allreduce_algorithm", "0"))
    if str(env.get("OMPI_MCA_coll_tuned_use_dynamic_rules", "0")) == "1" and pinned not in ("", "0"):
        return OMPI_ALLREDUCE.get(int(pinned), "ring")
    return OMPI_ALLREDUCE[ompi_allreduce(p, nbytes)]


def on_link(algorithm: str, wire: float, p: int, rate: float, duplex: float = 0.0) -> float:
    """Seconds the link's bytes take one way at the payload rate of a ``rate`` bit/s link, those
    sent both ways at once over one connection ``1 + duplex`` times as long."""
    both, one = link_parts(algorithm, wire, p)
    return (both * (1.0 + duplex) + one) / payload(rate)


def duplex_of(exchange: float, algorithm: str, wire: float, p: int, rate: float) -> float:
    """The share ``duplex`` that makes :func:`on_link` the measured ``exchange`` (s): what it
    took beyond the bytes at the payload rate, over the time of the bytes sent both ways."""
    both, _ = link_parts(algorithm, wire, p)
    return (exchange - on_link(algorithm, wire, p, rate)) / (both / payload(rate))
