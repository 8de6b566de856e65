"""Model the time of a gradient exchange and of a training step: the alpha-beta-gamma model, once.

``n`` is the gradient in bytes of float32 payload, ``p`` the rank count, ``alpha`` the time per
message (latency, s), ``beta`` the time per byte over a link (s/B), ``gamma`` the time per byte
reduced (s/B). Each algorithm costs ``a*alpha + b*beta + c*gamma`` (:func:`coefficients`):

- ``ring`` (reduce-scatter, then allgather; p-1 steps each, n/p bytes per step and link);
  the MPI library's and Horovod's allreduce are modelled as ring too (their large-message
  algorithms have its bandwidth cost);
- ``ps`` (one parameter server at rank 0: it receives p-1 messages of n bytes, adds each, and
  only then sends p-1 back);
- ``allgather`` (int8 over mpi and horovod: codes with per-chunk scales cannot be summed on the
  wire, so each rank encodes once, gathers p-1 payloads and decodes and adds them all; gamma is
  the measured encode + decode-add of one payload and each further decode-add rides with beta,
  as the two have the same coefficient at every p).

With compression, ``n`` still counts float32 bytes: a fitted beta is the effective time per
float32 byte. :data:`FORMULAS` is the text of each, for reports and tables.

The step built on these, and its forecast, is :mod:`hpcdl.model.predict`.
:data:`PRESETS` holds the named networks a forecast is drawn on. numpy only.
"""
from __future__ import annotations

import itertools
import math
import re
from collections import OrderedDict
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

# Open MPI's tuned allreduce algorithms by their number (coll_tuned_allreduce_algorithm): the
# name the exchange model knows each by (:mod:`hpcdl.model.allreduce`), and the name tables
# and records print; 0 leaves the choice to the library
OMPI_ALGORITHMS = {1: ("linear", "basic linear"), 2: ("nonoverlapping", "nonoverlapping"),
                   3: ("recursive doubling", "recursive doubling"), 4: ("ring", "ring"),
                   5: ("segmented ring", "segmented ring"), 6: ("rabenseifner", "Rabenseifner")}
OMPI_ALLREDUCE = {n: model for n, (model, _) in OMPI_ALGORITHMS.items()}
OMPI_ALLREDUCE_NAMES = {0: "library's choice",
                        **{n: label for n, (_, label) in OMPI_ALGORITHMS.items()}}
# Horovod 0.28's own values (the cycle time and fusion threshold since Horovod 0.21)
HOROVOD_DEFAULTS = {"HOROVOD_CYCLE_TIME": "1", "HOROVOD_FUSION_THRESHOLD": str(128 << 20),
                    "HOROVOD_HIERARCHICAL_ALLREDUCE": "0"}


def setting_name(env: Dict[str, str]) -> str:
    """The name ``hpcdl tune`` gives the exchange settings an environment holds (its tables'
    and tuning files' candidates): Open MPI's allreduce algorithm where dynamic rules pin one
    (with its segments), then Horovod's cycle time, fusion threshold and hierarchical allreduce,
    each at Horovod's default where unset."""
    eff = {n: str(env.get(n, d)) for n, d in HOROVOD_DEFAULTS.items()}
    dynamic = str(env.get("OMPI_MCA_coll_tuned_use_dynamic_rules", "0")) == "1"
    number = int(env.get("OMPI_MCA_coll_tuned_allreduce_algorithm") or 0) if dynamic else 0
    segment = (int(env.get("OMPI_MCA_coll_tuned_allreduce_algorithm_segmentsize") or 0)
               if dynamic and number else 0)
    return (f"{OMPI_ALLREDUCE_NAMES.get(number, f'algorithm {number}')}"
            f"{f' ({segment // 1024} KiB segments)' if segment else ''}, "
            f"cycle {eff['HOROVOD_CYCLE_TIME']} ms, fusion "
            f"{int(eff['HOROVOD_FUSION_THRESHOLD']) / (1 << 20):g} MiB"
            + (", hierarchical" if eff["HOROVOD_HIERARCHICAL_ALLREDUCE"] == "1" else ""))


def setting_cycle(name: str) -> Optional[str]:
    """Horovod's cycle time in ms (as the environment wrote it) that a :func:`setting_name`
    names, else None."""
    m = re.search(r"cycle ([0-9.]+) ms", name)
    return m.group(1) if m else None


FORMULAS = {
    "ring": "2(p−1)·α + 2(p−1)/p·n·β + (p−1)/p·n·γ",
    "ps": "2(p−1)·α + 2(p−1)·n·β + (p−1)·n·γ",
    "allgather": "(p−1)·α + (p−1)·n·β + n·γ",
}

# --- bytes on the wire ------------------------------------------------------------------------------

INT8_CHUNK = 256          # int8: elements per float32 scale
_WIRE_ITEMSIZE = {"none": 4, "fp16": 2, "int8": 1}


def wire_bytes(count: int, compression: str = "none") -> int:
    """Bytes on the wire for ``count`` float32 values under ``compression``.

    none: 4 per value; fp16: 2; int8: 1 per value plus one float32 scale per INT8_CHUNK values.
    """
    if compression not in _WIRE_ITEMSIZE:
        raise ValueError(f"unknown compression '{compression}': choose one of "
                         f"{', '.join(_WIRE_ITEMSIZE)}")
    count = int(count)
    extra = 4 * -(-count // INT8_CHUNK) if compression == "int8" else 0
    return _WIRE_ITEMSIZE[compression] * count + extra


# --- what each algorithm sends, written once ---------------------------------------------------------
# The messages on the slowest rank's path (step_spans) and the bytes its link carries (link_parts):
# the forecast prices them, the record compares a node's counters with them (node_bytes), and the
# benchmark's alpha-beta fit counts them (coefficients).

def power_of_two_below(p: int) -> int:
    """The largest power of two <= p (p >= 1): the count Open MPI's folding algorithms run their
    steps on, the ranks beyond it folded in first."""
    return 1 << (int(p).bit_length() - 1)


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
    q = power_of_two_below(p)
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
    q = power_of_two_below(p)
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


def _path_bytes(algorithm: str, n: float, p: int) -> Tuple[float, float]:
    """(messages in turn, bytes) on the slowest rank's path of one exchange (:func:`step_spans`)."""
    spans = step_spans(algorithm, n, p)
    return float(sum(c for _, c, _ in spans)), float(sum(m * c for m, c, _ in spans))


def node_bytes(algorithm: str, n: float, p: int, root: bool = False) -> Tuple[float, float]:
    """(sent, received) bytes of one rank in one exchange of ``n`` payload bytes on ``p`` ranks,
    one rank per node: what its node's interface carries. ``root``: the parameter server, whose
    path's messages are half received (the gather) and half sent; a worker sends and receives one
    of them. A ring's or allgather's rank receives a message as large as each it sends."""
    if algorithm not in FORMULAS:
        raise ValueError(f"unknown algorithm '{algorithm}': choose one of {', '.join(FORMULAS)}")
    if p <= 1:
        return 0.0, 0.0
    _, total = _path_bytes(algorithm, n, p)
    each = (total / 2 if root else float(n)) if algorithm == "ps" else total
    return each, each


def ring_bound(n: float, p: int, rate: float) -> float:
    """The least seconds an allreduce of ``n`` bytes on ``p`` one-rank nodes takes on links of
    ``rate`` bit/s: a ring's bytes (:func:`link_parts`) at the line rate, each link busy both
    ways at once (what "step ÷ bound" and ``hpcdl tune``'s pick are measured against)."""
    both, one = link_parts("ring", n, p)
    return (both + one) / (rate / 8.0)


def busbw_factor(p: int) -> float:
    """busbw = algbw * 2(p-1)/p for allreduce (nccl-tests), so figures compare across p."""
    return 2.0 * (p - 1) / p if p > 1 else 1.0


def algorithm_for(backend: str, compression: str = "none") -> str:
    """The algorithm of a backend as hpcdl.comm implements it."""
    if backend == "ps":
        return "ps"
    if compression == "int8" and backend in ("mpi", "horovod"):
        return "allgather"
    return "ring"


# --- the exchange -----------------------------------------------------------------------------------

# each algorithm's reduction: the bytes the slowest rank reduces, per payload byte
_REDUCED = {"ring": lambda p: (p - 1) / p, "ps": lambda p: p - 1, "allgather": lambda p: 1.0}


def coefficients(algorithm: str, n, p: int) -> Tuple:
    """(a, b, c) of ``t = a*alpha + b*beta + c*gamma`` at ``n`` bytes on ``p`` ranks (0 at p = 1):
    the messages and bytes of :func:`step_spans`, and the bytes reduced."""
    n = np.asarray(n, dtype=np.float64)
    if algorithm not in FORMULAS:
        raise ValueError(f"unknown algorithm '{algorithm}': choose one of {', '.join(FORMULAS)}")
    p = np.asarray(p, dtype=np.float64)
    a1, b1 = np.vectorize(lambda q: _path_bytes(algorithm, 1.0, int(q)),
                          otypes=[np.float64, np.float64])(p)
    one = np.where(p > 1, 1.0, 0.0) * np.ones_like(n)
    return a1 * one, b1 * n * one, _REDUCED[algorithm](p) * n * one


def predict(algorithm: str, n, p, alpha: float, beta: float, gamma: float = 0.0):
    """Exchange time of ``algorithm`` for ``n`` bytes on ``p`` ranks."""
    a, b, c = coefficients(algorithm, n, p)
    t = a * alpha + b * beta + c * gamma
    return float(t) if np.ndim(t) == 0 else t


# Where the bottleneck of an exchange lies, for ps against ring at large n.
LINK_BOUND, COPY_BOUND, CPU_BOUND = "link-bound", "copy-bound", "cpu-bound"
REGIMES = (LINK_BOUND, COPY_BOUND, CPU_BOUND)


def bandwidth_ratio(p: int, regime: str) -> float:
    """ps/ring time at large n (alpha and gamma left out) where ``regime`` is the bottleneck.

    link-bound (one rank per node, full-duplex links): the ps root's 2(p-1)n serial bytes
    against a ring link's 2(p-1)/p n each way at once: p. copy-bound (each byte in or out costs
    its rank's CPU a copy: one node's shared memory, TCP over loopback): 2(p-1)n against a ring
    rank's 4(p-1)/p n of serial copies: p/2. cpu-bound (more ranks than cores): both move
    4(p-1)n bytes in all, shared by the cores: 1.
    """
    if regime not in REGIMES:
        raise ValueError(f"unknown regime '{regime}': choose one of {', '.join(REGIMES)}")
    if p <= 1:
        return 1.0
    return {LINK_BOUND: float(p), COPY_BOUND: p / 2.0, CPU_BOUND: 1.0}[regime]


def bottleneck_time(algorithm: str, n, p: int, beta: float, gamma: float, regime: str,
                    cores: Optional[int] = None) -> float:
    """Large-n time of ``ring`` or ``ps``: the serial work of the busiest rank (alpha left out).

    A ring rank's bytes over its link (each way at once when link-bound, in and out one after
    the other otherwise) plus its reduced bytes; the ps root's 2(p-1)n bytes plus (p-1)n
    reduced. When cpu-bound it is at least all ranks' work shared by the cores.
    """
    if p <= 1:
        return 0.0
    if algorithm == "ring":
        link = (2.0 if regime == LINK_BOUND else 4.0) * (p - 1) / p * n
        serial = link * beta + (p - 1) / p * n * gamma
    elif algorithm == "ps":
        serial = 2.0 * (p - 1) * n * beta + (p - 1) * n * gamma
    else:
        raise ValueError(f"bottleneck_time models ring and ps, not '{algorithm}'")
    if regime == CPU_BOUND and cores:
        return max(serial, (4.0 * (p - 1) * n * beta + (p - 1) * n * gamma) / cores)
    return serial


def regime_for(p: int, cores: int, nodes: int = 1) -> str:
    """The bottleneck of an exchange among ``p`` ranks (one per core where they fit)."""
    if nodes >= p:
        return LINK_BOUND
    return COPY_BOUND if p <= cores else CPU_BOUND


# --- fitting a size sweep ---------------------------------------------------------------------------

def fit(algorithm: str, sizes: Sequence[float], times: Sequence[float], p: int, gamma=None) -> dict:
    """Fit alpha and beta to measured exchange times; gamma is given (measured), not fitted.

    The residuals are relative (weights 1/t, close to a fit in log space) so that a 256 MiB
    point does not drown the 64 KiB ones. In one algorithm beta and gamma both grow as n with a
    fixed ratio, so a sweep cannot tell them apart: ``gamma`` (a scalar or one value per size)
    is the reduction kernel's own time per byte; None means 0. Negative estimates are clamped
    to zero and the other refitted.
    """
    n = np.asarray(sizes, dtype=np.float64)
    t = np.asarray(times, dtype=np.float64)
    if n.size < 2:
        raise ValueError("need at least two sizes to fit alpha and beta")
    a, b, c = coefficients(algorithm, n, p)
    g = np.broadcast_to(np.asarray(0.0 if gamma is None else gamma, dtype=np.float64), n.shape)
    w = 1.0 / t
    alpha, beta = nnls(np.stack([a * w, b * w], axis=1), (t - c * g) * w)
    pred = a * alpha + b * beta + c * g
    ss_tot = float(np.sum((t - t.mean()) ** 2))
    g_scalar = float(g[0]) if np.ndim(gamma) == 0 else float(np.dot(n, g * n) / np.dot(n, n))
    return {"model": algorithm, "alpha_s": float(alpha), "beta_s_per_byte": float(beta),
            "gamma_s_per_byte": g_scalar,
            "r2": 1.0 - float(np.sum((t - pred) ** 2)) / ss_tot if ss_tot > 0 else 1.0,
            "max_rel_err": float(np.max(np.abs((pred - t) / t))), "n_points": int(n.size)}


def fit_regimes(algorithm: str, sizes: Sequence[float], times: Sequence[float], p: int,
                gamma=None, min_points: int = 3, gain: float = 0.8, floor: float = 0.05,
                max_regimes: int = 3) -> dict:
    """Fit one alpha-beta line, or up to ``max_regimes`` joined where the machine changes regime.

    A message whose buffers fit in the last-level cache moves at cache speed, one that does not
    at memory speed, and MPI libraries switch protocol (eager to rendezvous) at some size, so
    one beta rarely holds from 64 KiB to 256 MiB on one node. Every split of the sorted sizes
    into consecutive runs of at least ``min_points`` is tried; k+1 regimes replace the best k
    when that one misses some size by more than ``floor`` and the split brings the worst
    relative error below ``gain`` times its. The result holds ``regimes`` (each ``from_bytes``,
    ``to_bytes``, ``alpha_s``, ``beta_s_per_byte``; :func:`predict_fit` uses them) and the
    piecewise ``max_rel_err``; the top-level ``alpha_s`` and ``beta_s_per_byte`` are the single
    line over all sizes (with ``line_max_rel_err``), the figures a step model can use.
    """
    order = np.argsort(np.asarray(sizes, dtype=np.float64))
    n = np.asarray(sizes, dtype=np.float64)[order]
    t = np.asarray(times, dtype=np.float64)[order]
    g = np.broadcast_to(np.asarray(0.0 if gamma is None else gamma, dtype=np.float64),
                        (len(sizes),))[order]

    def segmented(cuts):
        bounds = [0, *cuts, n.size]
        parts = [fit(algorithm, n[a:b], t[a:b], p, gamma=g[a:b]) for a, b in zip(bounds, bounds[1:])]
        res = dict(parts[-1])
        res["regimes"] = [{"from_bytes": float(n[a]), "to_bytes": float(n[b - 1]),
                           "alpha_s": f["alpha_s"], "beta_s_per_byte": f["beta_s_per_byte"]}
                          for (a, b), f in zip(zip(bounds, bounds[1:]), parts)]
        res["breakpoint_bytes"] = float(n[cuts[-1]]) if cuts else None
        res["max_rel_err"] = max(f["max_rel_err"] for f in parts)
        res["n_points"] = int(n.size)
        return res

    line = best = segmented(())
    for k in range(1, max_regimes):
        if best["max_rel_err"] <= floor:
            break
        cands = [segmented(c) for c in itertools.combinations(range(min_points, n.size), k)
                 if all(b - a >= min_points for a, b in zip((0, *c), (*c, n.size)))]
        if not cands:
            break
        top = min(cands, key=lambda r: r["max_rel_err"])
        # k+1 regimes are tried even when k did not gain enough: two changes of regime (cache to
        # memory, then another protocol) are often not helped by a single split
        if top["max_rel_err"] < gain * best["max_rel_err"]:
            best = top
    pred = predict_fit(best, n, p, gamma=g)
    ss_tot = float(np.sum((t - t.mean()) ** 2))
    best["r2"] = 1.0 - float(np.sum((t - pred) ** 2)) / ss_tot if ss_tot > 0 else 1.0
    best["gamma_s_per_byte"] = line["gamma_s_per_byte"]
    best["alpha_s"], best["beta_s_per_byte"] = line["alpha_s"], line["beta_s_per_byte"]
    best["line_max_rel_err"] = line["max_rel_err"]
    return best


def predict_fit(res: dict, n, p: int, gamma=None):
    """A fit's prediction at ``n`` bytes (its regime's alpha and beta; ``gamma`` per size or its own)."""
    nn = np.asarray(n, dtype=np.float64)
    g = np.broadcast_to(np.asarray(res["gamma_s_per_byte"] if gamma is None else gamma,
                                   dtype=np.float64), nn.shape)
    regimes = res.get("regimes") or [{"from_bytes": 0.0, "alpha_s": res["alpha_s"],
                                      "beta_s_per_byte": res["beta_s_per_byte"]}]
    alpha = np.full(nn.shape, regimes[0]["alpha_s"])
    beta = np.full(nn.shape, regimes[0]["beta_s_per_byte"])
    for reg in regimes[1:]:
        above = nn >= reg["from_bytes"]
        alpha = np.where(above, reg["alpha_s"], alpha)
        beta = np.where(above, reg["beta_s_per_byte"], beta)
    return predict(res["model"], nn, p, alpha, beta, g)


def nnls(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares for a handful of unknowns (every active set tried)."""
    k = A.shape[1]
    best, best_err = np.zeros(k), float(np.sum(y ** 2))
    for mask in range(1, 2 ** k):
        cols = [i for i in range(k) if mask >> i & 1]
        x, *_ = np.linalg.lstsq(A[:, cols], y, rcond=None)
        if np.any(x < 0):
            continue
        full = np.zeros(k)
        full[cols] = x
        err = float(np.sum((A @ full - y) ** 2))
        if err < best_err - 1e-30:
            best, best_err = full, err
    return best


# --- networks ---------------------------------------------------------------------------------------

@dataclass
class Network:
    """A network: latency per message and inverse bandwidth of one link."""

    name: str
    alpha: float          # s per message
    beta: float           # s per byte
    note: str = ""

    @property
    def bandwidth_GBps(self) -> float:
        return 1.0 / self.beta / 1e9 if self.beta > 0 else float("inf")


def rate_bits(rate: str) -> float:
    """A link rate as tc writes it ("200mbit", "1gbit") in bits per second."""
    import re
    m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", str(rate).strip().lower())
    if not m:
        raise ValueError(f"not a link rate such as 200mbit or 1gbit: {rate!r}")
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


FRAMING = 1448.0 / 1514.0      # TCP payload per Ethernet frame (MSS 1448 with timestamps in a
#                                1500-byte MTU, 14 bytes of Ethernet header that tbf counts)


def payload(rate: float) -> float:
    """Bytes of TCP payload a second on a ``rate`` bit/s link (:data:`FRAMING`)."""
    return rate / 8.0 * FRAMING


LINE_SHARE = 0.9        # of its line rate a named network's link delivers (the presets below)


def link_beta(gbit: float, efficiency: float = LINE_SHARE) -> float:
    """s per byte of a link of ``gbit`` Gbit/s delivering ``efficiency`` of its line rate."""
    return 1.0 / (gbit * 1e9 / 8 * efficiency)


# Latencies are MPI/NCCL point-to-point figures of each fabric; bandwidth LINE_SHARE of the line rate.
# The largest allocation whose exchange-only runs may price a larger point's exchange: what a
# user with a small allocation can measure before planning a larger one (hpcdl.model.predict)
SMALL = 4

PRESETS: Dict[str, Network] = OrderedDict([
    ("ib-edr", Network("InfiniBand EDR", 1.5e-6, link_beta(100), "100 Gbit/s, 1.5 us")),
    ("ib-hdr", Network("InfiniBand HDR", 1.2e-6, link_beta(200), "200 Gbit/s, 1.2 us")),
    ("ib-ndr", Network("InfiniBand NDR", 1.0e-6, link_beta(400), "400 Gbit/s, 1.0 us")),
    ("roce-25g", Network("25 GbE RoCE", 5.0e-6, link_beta(25), "25 Gbit/s, 5 us")),
])
