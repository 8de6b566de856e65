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

A training step (:class:`StepModel`) is ``compute(b) + fixed + exchange(p, n) - hidden``, where
the exchange hides behind at most a measured share (``window``) of the compute:
``hidden = min(exchange, window * compute)``, up to the most ranks the window was measured at
and none beyond; :func:`calibrate` fits it to measured configurations and says when the runs
cannot determine it.
:data:`PRESETS` holds the networks that extrapolations are drawn on. numpy only. The module runs
past 400 lines on purpose: the model is written once, and splitting its formulas from their fit
and from the step model built on them would give it two homes again.
"""
from __future__ import annotations

import itertools
import math
import re
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np

ALGORITHMS = ("ring", "ps", "allgather")
# Open MPI's tuned allreduce algorithms by their number (coll_tuned_allreduce_algorithm), as
# tables and records name them; 0 leaves the choice to the library
OMPI_ALLREDUCE_NAMES = {0: "library's choice", 1: "basic linear", 2: "nonoverlapping",
                        3: "recursive doubling", 4: "ring", 5: "segmented ring", 6: "Rabenseifner"}
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


def node_bytes(algorithm: str, n: float, p: int, root: bool = False) -> Tuple[float, float]:
    """(sent, received) bytes of one rank in one exchange of ``n`` payload bytes on ``p`` ranks,
    one rank per node: what its node's interface carries. ``root``: the parameter server."""
    if p <= 1:
        return 0.0, 0.0
    if algorithm == "ring":
        each = 2.0 * (p - 1) / p * n
    elif algorithm == "ps":
        each = (p - 1) * n if root else n
    elif algorithm == "allgather":
        each = (p - 1) * n
    else:
        raise ValueError(f"unknown algorithm '{algorithm}': choose one of {', '.join(ALGORITHMS)}")
    return each, each


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

def coefficients(algorithm: str, n, p: int) -> Tuple:
    """(a, b, c) of ``t = a*alpha + b*beta + c*gamma`` at ``n`` bytes on ``p`` ranks (0 at p = 1)."""
    n = np.asarray(n, dtype=np.float64)
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown algorithm '{algorithm}': choose one of {', '.join(ALGORITHMS)}")
    p = np.asarray(p, dtype=np.float64)
    one = np.where(p > 1, 1.0, 0.0) * np.ones_like(n)
    if algorithm == "ring":
        return 2 * (p - 1) * one, 2 * (p - 1) / p * n * one, (p - 1) / p * n * one
    if algorithm == "ps":
        return 2 * (p - 1) * one, 2 * (p - 1) * n * one, (p - 1) * n * one
    return (p - 1) * one, (p - 1) * n * one, n * one


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


def link_beta(gbit: float, efficiency: float = 0.9) -> float:
    """s per byte of a link of ``gbit`` Gbit/s delivering ``efficiency`` of its line rate."""
    return 1.0 / (gbit * 1e9 / 8 * efficiency)


# Latencies are MPI/NCCL point-to-point figures of each fabric; bandwidth 90% of the line rate.
PRESETS: Dict[str, Network] = OrderedDict([
    ("ib-edr", Network("InfiniBand EDR", 1.5e-6, link_beta(100), "100 Gbit/s, 1.5 us")),
    ("ib-hdr", Network("InfiniBand HDR", 1.2e-6, link_beta(200), "200 Gbit/s, 1.2 us")),
    ("ib-ndr", Network("InfiniBand NDR", 1.0e-6, link_beta(400), "400 Gbit/s, 1.0 us")),
    ("roce-25g", Network("25 GbE RoCE", 5.0e-6, link_beta(25), "25 Gbit/s, 5 us")),
])


# --- the step ---------------------------------------------------------------------------------------

@dataclass(frozen=True)
class Observation:
    """One measured configuration as the step model sees it."""

    ranks: int
    ranks_per_node: int
    batch_size: int             # per rank
    wire_bytes: float           # gradient bytes on the wire per step
    step_time: float            # s
    compute: Optional[float]    # probed forward + backward, s (None: not probed)
    exchange: Optional[float] = None   # the gradients' exchange timed alone, s (None: not probed)


@dataclass
class StepModel:
    """Step time = compute(b) + fixed + exchange(p, n) - min(exchange, window * compute(b));
    everything here is model.

    compute(b) = c0 + c1 b is a rank's forward and backward pass while the ranks exchange
    gradients (fitted to the multi-rank configurations where there are any), and ``single``
    times that for one rank alone, which exchanges nothing; a measured configuration uses its own
    probed compute (``measured``, keyed "ranks:batch"). The exchange overlaps the backward pass
    only: it can hide behind at most ``window`` x compute, however long it is (the gradients are
    ready only while the backward pass runs), so a longer exchange is not hidden in proportion.
    ``determined`` is False when the runs could not fix alpha and beta; ``why`` then says why,
    and no network is extrapolated with them.
    """

    algorithm: str = "ring"
    alpha: float = 0.0
    beta: float = 0.0
    gamma: float = 0.0
    c0: float = 0.0
    c1: float = 0.0
    single: float = 1.0              # compute of one rank alone / compute(b) while exchanging
    fixed: float = 0.0
    window: float = 0.0              # share of the compute the exchange can hide behind
    source: str = ""
    compute_probed: bool = False     # compute(b) comes from probes (else from a step time)
    window_measured: bool = False    # else none of the exchange is taken as hidden
    window_ranks: int = 0            # the most ranks it was measured at; none hidden beyond
    determined: bool = True
    configs: int = 0                 # distinct multi-rank configurations the exchange was fitted to
    why: List[str] = field(default_factory=list)
    notes: List[str] = field(default_factory=list)
    measured: Dict[str, float] = field(default_factory=dict)

    def compute(self, b, p=1, measured: bool = True):
        """Compute time of a rank at per-rank batch ``b`` among ``p`` ranks; a probed
        configuration's own figure unless ``measured`` is False."""
        key = f"{int(p)}:{int(b)}" if float(b) == int(b) else None
        if measured and key in self.measured:
            return self.measured[key]
        c = self.c0 + self.c1 * np.asarray(b, dtype=float)
        return c * self.single if int(p) == 1 else c

    def exchange(self, p, nbytes, network: Optional[Network] = None):
        a, b = (network.alpha, network.beta) if network else (self.alpha, self.beta)
        return predict(self.algorithm, nbytes, p, a, b, self.gamma)

    def window_at(self, p) -> float:
        """The window at ``p`` ranks: the measured one up to the most ranks it was measured at,
        none beyond (on the box the 2-node overlap did not survive at 4, 6 and 8 nodes, though
        at 3 it did: :mod:`hpcdl.analysis.predict` holds its held-out points to the same rule)."""
        return self.window if not self.window_ranks or int(p) <= self.window_ranks else 0.0

    def hidden(self, p, exchange, compute):
        """The part of the exchange hidden behind compute at ``p`` ranks: at most the window
        there (:meth:`window_at`) x compute."""
        return np.minimum(exchange, self.window_at(p) * np.asarray(compute, dtype=float))

    def step_time(self, p, b, nbytes, network: Optional[Network] = None, measured: bool = True):
        """Model step time; ``measured=False`` uses the fitted compute(b) even where probed."""
        c = self.compute(b, p, measured)
        e = self.exchange(p, nbytes, network)
        return c + self.fixed + e - self.hidden(p, e, c)

    def as_dict(self) -> dict:
        return asdict(self)


def calibrate(obs: Sequence[Observation], algorithm: str = "ring",
              fit: Optional[dict] = None, bandwidth_only: bool = False) -> StepModel:
    """Fit the step model to measured configurations; alpha, beta, gamma from a bench fit if given.

    compute(b): least squares of the probed compute times against the per-rank batch, on the
    least crowded nodes (ranks sharing cores compute slower), over the multi-rank
    configurations where there are any (a rank computes beside its exchange: progress, copies
    and reductions share its cores), and ``single`` the one-rank runs against it; fixed: the
    non-compute part of a 1-rank step (no network there); alpha, beta: non-negative least
    squares of the exchange timed alone in the multi-rank configurations (else of the step
    beyond compute and fixed cost), gamma folded into beta as one algorithm cannot tell them
    apart, unless ``fit`` gives them. The window is measured, never chosen: per configuration,
    the time the step did not pay for, compute + fixed + exchange - step, over its compute, and
    the model takes their median. The model is not ``determined`` when fewer distinct
    multi-rank configurations than unknowns were measured, or when no exchange time is left to
    fit.
    """
    m = StepModel(algorithm=algorithm)
    obs = [o for o in obs if not math.isnan(o.step_time)]
    if not obs:
        raise ValueError("no measured configuration to calibrate on")
    _calibrate_compute(m, obs)
    multi = [o for o in obs if o.ranks > 1]
    m.configs = len({(o.ranks, o.wire_bytes) for o in multi})
    if algorithm == "ps":
        m.notes.append("no window: a parameter server's exchange starts when the backward pass "
                       "has ended, so none of it hides behind compute")
    else:
        _measure_window(m, multi)
    if fit is not None:
        m.alpha, m.beta = float(fit["alpha_s"]), float(fit["beta_s_per_byte"])
        m.gamma = float(fit.get("gamma_s_per_byte") or 0.0)
        m.source = fit.get("_source", "bench fit")
        return m
    m.source = "this study's runs"
    _calibrate_exchange(m, multi, algorithm, bandwidth_only)
    return m


def _measure_window(m: StepModel, multi: Sequence[Observation]) -> None:
    """The median share of the compute that the exchange hid behind, from configurations whose
    split is determined (a probed compute shorter than the step). Where a configuration hid its
    whole exchange, its window is only a lower bound, and the notes say so."""
    usable = [o for o in multi if o.exchange and o.compute is not None]
    split = [o for o in usable if o.compute < o.step_time]
    hidden = [min(max(o.compute + m.fixed + o.exchange - o.step_time, 0.0), o.exchange)
              for o in split]
    raw = [h / o.compute for h, o in zip(hidden, split)]
    shares = raw
    if raw and float(np.median(raw)) > 1.0:
        # more hidden than the compute it hides behind: out of range, so not carried anywhere
        m.notes.append("window not determined: the exchange timed alone cost more than the step "
                       "paid for it beyond the compute (" + ", ".join(f"{r * 100:.0f}%"
                                                              for r in raw)
                       + " of the compute, over 100%: per-call overhead the step does not pay, "
                       "or noise); none of the exchange is taken as hidden")
        return
    if shares:
        m.window = float(np.median(shares))
        m.window_measured = True
        m.window_ranks = max(o.ranks for o in split)
        whole = sum(1 for h, o in zip(hidden, split) if h >= o.exchange)
        m.notes.append(f"window measured: the exchange hid behind {m.window * 100:.0f}% of the "
                       f"compute (median of {len(shares)} configuration(s): (compute + fixed + "
                       "exchange alone − step) / compute; "
                       + ", ".join(f"{h * 1e3:.3g} ms of {o.exchange * 1e3:.3g} ms hidden"
                                   for h, o in zip(hidden, split)) + ")"
                       + (f"; {whole} configuration(s) hid all of it, so the window may be wider"
                          if whole else "")
                       + ("; some over 100% (" + ", ".join(f"{r * 100:.0f}%" for r in raw)
                          + "): the median is within range and is what is used"
                          if any(r > 1 for r in raw) else "")
                       + f"; beyond {m.window_ranks} ranks none of the exchange is taken as "
                       "hidden")
    elif usable:
        m.notes.append("window not determined: no configuration's probed compute is shorter than "
                       "its step; none of the exchange is taken as hidden")
    elif multi:
        m.notes.append("window not measured (no exchange probes): none of the exchange is taken "
                       "as hidden")


def _calibrate_compute(m: StepModel, obs: Sequence[Observation]) -> None:
    probed = [o for o in obs if o.compute is not None]
    if not probed:
        base = min(obs, key=lambda o: o.ranks)
        m.c1 = base.step_time / max(1, base.batch_size)
        m.notes.append(f"no compute probes: compute taken as the {base.ranks}-rank step time, "
                       "proportional to the per-rank batch")
        return
    rpn = min(o.ranks_per_node for o in probed)
    least = [o for o in probed if o.ranks_per_node == rpn]
    multi = any(o.ranks > 1 for o in least)
    base = [o for o in least if o.ranks > 1] if multi else least
    b = np.array([o.batch_size for o in base], dtype=float)
    c = np.array([o.compute for o in base])
    if len(set(b)) >= 2:
        m.c0, m.c1 = (float(v) for v in nnls(np.stack([np.ones_like(b), b], axis=1), c))
    else:
        m.c1 = float(np.mean(c / np.maximum(b, 1)))     # proportional to the batch
    m.measured = {f"{o.ranks}:{o.batch_size}": float(o.compute) for o in probed}
    m.compute_probed = True
    m.notes.append("compute: the probed compute time of each measured configuration; the "
                   f"extrapolation uses compute(b) = c0 + c1 b fitted to the "
                   f"{'multi-rank runs' if multi else 'runs'} with {rpn} rank(s) per node"
                   + ("" if len(set(b)) >= 2 else
                      f", one batch size among them ({int(b[0])}), so compute is taken as "
                      "proportional to the batch (c0 = 0 is not measured, it is assumed)"))
    alone = [o for o in least if o.ranks == 1]
    if multi and alone:
        single = float(np.median([o.compute / float(m.c0 + m.c1 * o.batch_size) for o in alone]))
        if single > 1.0:
            # a rank alone slower than one that also exchanges: out of range, not carried
            m.notes.append(f"one rank alone computed in {single:.2f}x the time of a rank that "
                           "exchanges gradients, which cannot be the exchange's doing (noise, or "
                           "the multi-rank compute's own spread): not carried, single = 1")
        else:
            m.single = single
            m.notes.append(f"one rank alone computes in {m.single:.2f}x the time of a rank that "
                           "exchanges gradients (the exchange's progress and copies share the "
                           "node's cores): multi-rank predictions use the multi-rank compute")
    for o in probed:
        if o.ranks_per_node > rpn:
            slow = o.compute / float(m.compute(o.batch_size, o.ranks, measured=False))
            m.notes.append(f"{o.ranks_per_node} ranks on one node: probed compute is {slow:.2f}x "
                           f"compute(b={o.batch_size}) (ranks sharing the node's cores and memory)")
    ones = [o for o in obs if o.ranks == 1]
    if ones:
        m.fixed = float(np.median([max(0.0, o.step_time - float(m.compute(o.batch_size, 1)))
                                   for o in ones]))
    for o in probed:
        if o.compute >= o.step_time:
            m.notes.append(f"{o.ranks} rank(s): the probed compute ({o.compute * 1e3:.3g} ms) is "
                           f"not shorter than the measured step ({o.step_time * 1e3:.3g} ms): the "
                           "probe ran slower than the steps it stands for (noise, or caches the "
                           "step keeps warm)")


def _calibrate_exchange(m: StepModel, multi: Sequence[Observation], algorithm: str,
                        bandwidth_only: bool = False) -> None:
    if not multi:
        m.determined = False
        m.why.append("no multi-rank run: nothing was exchanged, so α and β are not measured")
        return
    probed = [o for o in multi if o.exchange is not None]
    if probed:
        multi = probed
        y = np.array([o.exchange for o in multi])
        m.notes.append("α, β fitted to the exchange timed alone (the probes)")
    else:
        y = np.array([o.step_time - float(m.compute(o.batch_size, o.ranks)) - m.fixed
                      for o in multi])
        m.notes.append("α, β fitted to the step beyond compute and fixed cost (no exchange probes)")
    a, b, _ = coefficients(algorithm, [o.wire_bytes for o in multi], [o.ranks for o in multi])
    configs = {(o.ranks, o.wire_bytes) for o in multi}
    A = np.stack([a, b], axis=1)
    if (len(configs) < 2 or np.linalg.matrix_rank(A) < 2) and bandwidth_only and np.any(y > 0):
        # One configuration cannot tell latency from bandwidth. Asked to predict from it anyway
        # (a study calibrating on its smallest node counts), take the exchange as all bandwidth.
        m.alpha, m.beta = 0.0, float(np.median(np.maximum(y, 0) / np.maximum(b, 1e-30)))
        m.notes.append(f"α taken as 0 and β = {m.beta * 1e9:.4f} ns/B from {len(configs)} "
                       "multi-rank configuration(s), which cannot tell latency from bandwidth: "
                       "the exchange is modelled as all bandwidth")
        return
    if len(configs) < 2 or np.linalg.matrix_rank(A) < 2:
        m.determined = False
        m.why.append(f"{len(configs)} multi-rank configuration(s) give one equation for two "
                     "unknowns (α and β): measure more rank counts, or calibrate from "
                     "'hpcdl bench fit' (--fit)")
    if np.all(y <= 0):
        m.determined = False
        m.why.append("no exchange time to fit: the multi-rank steps are not longer than compute "
                     "+ fixed cost (it is hidden, or below the noise)")
    if not m.determined:
        return
    m.alpha, m.beta = (float(v) for v in nnls(A, y))
    if m.alpha == 0 and m.beta == 0:
        m.determined = False
        m.why.append("the best non-negative fit is α = β = 0: the exchange is not resolved")
    m.notes.append("gamma folded into beta (beta_eff = beta + gamma/2)")
