"""What the MPI library runs and what each link carries: Open MPI's allreduce decision, the
algorithm a record's exchange ran, the bytes each rank's link carries in it, and whether it sends
and receives over one connection at once. Numpy-free."""
from __future__ import annotations

import math
from typing import Callable, List, Optional, Tuple

from .. import costmodel
from ..records import lookup as _get

from ..costmodel import FRAMING, payload   # noqa: F401  (the link model's payload rate)
from ..costmodel import OMPI_ALLREDUCE       # noqa: F401  (Open MPI's algorithms, by number)


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


def link_parts(algorithm: str, n: float, p: int) -> Tuple[float, float]:
    """Bytes one rank's link carries in one allreduce of ``n`` bytes on ``p`` ranks (one rank
    per node), on the slowest rank's path, split in two: those it sends while receiving as much
    from the same peer (one connection carrying data both ways at once), and those sent one way
    only. Beyond a power of two q, Open MPI's Rabenseifner and recursive doubling fold the
    r = p - q extra ranks in first and send them the result last (coll_base_allreduce.c):
    Rabenseifner's pairs swap halves (n/2 both ways), the odd rank sends its reduced half (n/2
    one way) and at the end gets the whole result (n one way); recursive doubling's send the
    whole buffer in (n) and the result out (n), one way each."""
    if p <= 1:
        return 0.0, 0.0
    q = 1 << (int(p).bit_length() - 1)     # the largest power of two <= p
    fold = q < p
    if algorithm in ("ring", "segmented ring"):
        ring = 2.0 * (p - 1) / p * n
        return (ring, 0.0) if p == 2 else (0.0, ring)     # two ranks: the neighbours are one
    if algorithm == "rabenseifner":
        core = 2.0 * (q - 1) / q * n
        return core + (0.5 * n if fold else 0.0), (1.5 * n if fold else 0.0)
    if algorithm == "recursive doubling":
        return math.log2(q) * n, (2.0 * n if fold else 0.0)
    if algorithm in ("linear", "ps"):
        return 0.0, 2.0 * (p - 1) * n         # the root's link carries everyone's buffer
    if algorithm == "nonoverlapping":         # a binomial reduce to the root, then its bcast
        return 0.0, 2.0 * math.ceil(math.log2(p)) * n
    if algorithm == "allgather":
        return ((p - 1) * n, 0.0) if p == 2 else (0.0, (p - 1) * n)
    raise ValueError(f"no link model for allreduce algorithm '{algorithm}'")


def step_spans(algorithm: str, n: float, p: int) -> List[Tuple[float, int, int]]:
    """The messages on the slowest rank's path of one allreduce of ``n`` bytes on ``p`` ranks,
    as (bytes of one message, how many in turn, span): what a per-message cost adds up over.
    Their bytes are :func:`link_bytes`'s; their count is the latency term a link-rate model
    leaves out, which grows with p (a ring's 2(p-1) steps of n/p bytes, recursive halving's
    log2 p). The span is how many ranks apart the farthest pair that exchanges it sits (ranks
    placed in order, one per node), so that on a tree of L nodes per leaf switch a message whose span reaches L crosses the tree. A ring's every step waits on its
    wrap-around pair (p - 1 apart); recursive halving and doubling send n/2^i (halving) or n
    (doubling) to the partner 2^(i-1) away; the fold of the ranks beyond a power of two pairs
    neighbours; a binomial tree's round i is 2^i apart."""
    if p <= 1:
        return []
    q = 1 << (int(p).bit_length() - 1)
    fold = q < p
    k = int(math.log2(q))
    if algorithm in ("ring", "segmented ring"):
        return [(n / p, 2 * (p - 1), p - 1)]
    if algorithm == "rabenseifner":
        return ([(n / 2 ** i, 2, 2 ** (i - 1)) for i in range(1, k + 1)]
                + ([(n / 2, 2, 1), (n, 1, 1)] if fold else []))
    if algorithm == "recursive doubling":
        return [(n, 1, 2 ** (i - 1)) for i in range(1, k + 1)] + ([(n, 2, 1)] if fold else [])
    if algorithm in ("linear", "ps"):
        return [(n, 2 * (p - 1), p - 1)]
    if algorithm == "nonoverlapping":
        return [(n, 2, 2 ** i) for i in range(math.ceil(math.log2(p)))]
    if algorithm == "allgather":
        return [(n, p - 1, p - 1)]
    raise ValueError(f"no link model for allreduce algorithm '{algorithm}'")


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


def link_bytes(algorithm: str, n: float, p: int) -> float:
    """Bytes one rank's link carries each way in one allreduce of ``n`` bytes on ``p`` ranks
    (one rank per node), both parts of :func:`link_parts`."""
    return sum(link_parts(algorithm, n, p))


def pairwise(algorithm: str, p: int) -> bool:
    """Whether some of the algorithm's bytes go both ways over one connection at once
    (:func:`link_parts`): recursive halving and doubling always; a ring of two ranks, whose left
    and right neighbour are one rank. The ring of three or more sends to one neighbour and
    receives from another; a parameter server gathers, then sends back."""
    return link_parts(algorithm, 1.0, p)[0] > 0.0


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
