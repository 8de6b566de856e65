"""Predict and fit allreduce times with the alpha-beta-gamma cost model (numpy only).

``n`` is the message in bytes of float32 payload, ``p`` the rank count, ``alpha`` the time per
message (latency, s), ``beta`` the time per byte over a link (s/B) and ``gamma`` the time per byte
to reduce (s/B). Each algorithm is a sum ``a*alpha + b*beta + c*gamma``:

- ``ring`` (reduce-scatter, then allgather; p-1 steps each, n/p bytes per step and link)::

      t = 2(p-1)*alpha + 2(p-1)/p * n*beta + (p-1)/p * n*gamma

- ``ps`` (parameter server at rank 0: the root receives p-1 messages of n bytes, adds each into
  its sum, and only then sends p-1 messages of n bytes back; the two phases cannot overlap, as
  the result needs every input)::

      t = 2(p-1)*alpha + 2(p-1) * n*beta + (p-1) * n*gamma

  The root's link carries (p-1)*n bytes each way, a ring link 2(p-1)/p * n each way. On
  full-duplex links (a network, one rank per node: ``LINK_BOUND``) a ring rank sends and receives
  at once while the ps root does one direction after the other, so ps/ring -> p at large n.
  Where each byte in *or* out costs its rank's CPU a copy (one node's shared memory, TCP over
  loopback: ``COPY_BOUND``), a ring rank's 2 * 2(p-1)/p * n bytes of copies are serial too and
  ps/ring -> p/2. With more ranks than cores (``CPU_BOUND``), all ranks' copies share the cores:
  both move 4(p-1)*n bytes in all, and ps/ring -> 1. :func:`bandwidth_ratio` gives the three.

- ``allgather`` (int8 over ``mpi`` and ``horovod``: codes with per-chunk scales cannot be summed
  on the wire, so every rank encodes its vector once, gathers the other p-1 payloads of
  n/4 + scales bytes, and decodes and adds all p of them locally)::

      t = (p-1)*alpha + (p-1) * n*(beta + delta) + n*gamma

  gamma is one encode plus one decode-add per float32 byte (the measured reduction hop), so the
  p decode-adds are that hop's one plus p-1 more at delta, the decode-add alone. delta and beta
  have the same coefficient (p-1)*n at every p, so they cannot be told apart by any sweep and
  need not be: the fitted beta of this model is beta + delta, the time per float32 byte of
  receiving one more payload and decoding it. (Charging p*n*gamma, as before, counted p encodes
  where the code does one.)

The MPI library's and Horovod's own allreduce are modelled as ``ring``: their large-message
algorithms (ring, recursive halving/doubling) have its bandwidth cost. With compression, ``n``
still counts float32 bytes, so the fitted beta is the effective time per float32 byte, the wire
saving and the coding time included; gamma is measured, not fitted (see :func:`fit`).
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence, Tuple

import numpy as np

__all__ = ["REGIMES", "bandwidth_ratio", "exchange_time", "regime_for", "MODELS", "coefficients", "predict", "ring_time", "ps_time", "allgather_time",
           "busbw_factor", "model_for", "fit", "fit_regimes", "predict_fit"]

MODELS = ("ring", "ps", "allgather")


def coefficients(model: str, n, p: int) -> Tuple:
    """(a, b, c) of ``t = a*alpha + b*beta + c*gamma`` for ``model`` at ``n`` bytes, ``p`` ranks."""
    n = np.asarray(n, dtype=np.float64)
    if p <= 1:
        z = np.zeros_like(n)
        return z, z, z
    one = np.ones_like(n)
    if model == "ring":
        return 2 * (p - 1) * one, 2 * (p - 1) / p * n, (p - 1) / p * n
    if model == "ps":
        return 2 * (p - 1) * one, 2 * (p - 1) * n, (p - 1) * n
    if model == "allgather":
        # one encode + one decode-add in gamma; the other p-1 decode-adds ride with beta
        return (p - 1) * one, (p - 1) * n, n
    raise ValueError(f"unknown model '{model}': choose one of {', '.join(MODELS)}")


def predict(model: str, n, p: int, alpha: float, beta: float, gamma: float):
    a, b, c = coefficients(model, n, p)
    t = a * alpha + b * beta + c * gamma
    return float(t) if np.ndim(t) == 0 else t


def ring_time(n, p, alpha, beta, gamma):
    """2(p-1)*alpha + 2(p-1)/p*n*beta + (p-1)/p*n*gamma"""
    return predict("ring", n, p, alpha, beta, gamma)


def ps_time(n, p, alpha, beta, gamma):
    """2(p-1)*alpha + 2(p-1)*n*beta + (p-1)*n*gamma"""
    return predict("ps", n, p, alpha, beta, gamma)


def allgather_time(n, p, alpha, beta, gamma):
    """(p-1)*alpha + (p-1)*n*beta + n*gamma, beta holding the decode-add of each received payload"""
    return predict("allgather", n, p, alpha, beta, gamma)


LINK_BOUND, COPY_BOUND, CPU_BOUND = "link-bound", "copy-bound", "cpu-bound"
REGIMES = (LINK_BOUND, COPY_BOUND, CPU_BOUND)


def bandwidth_ratio(p: int, regime: str) -> float:
    """ps/ring time at large n (alpha and gamma left out) where ``regime`` is the bottleneck.

    link-bound: the ps root's 2(p-1)n serial bytes against a ring link's 2(p-1)/p n each way at
    once: p. copy-bound: 2(p-1)n against a ring rank's 4(p-1)/p n of serial copies: p/2.
    cpu-bound: 4(p-1)n bytes of copies in all for both, shared by the cores: 1.
    """
    if p <= 1:
        return 1.0
    if regime == LINK_BOUND:
        return float(p)
    if regime == COPY_BOUND:
        return p / 2.0
    if regime == CPU_BOUND:
        return 1.0
    raise ValueError(f"unknown regime '{regime}': choose one of {', '.join(REGIMES)}")


def exchange_time(model: str, n, p: int, beta: float, gamma: float, regime: str,
                  cores: Optional[int] = None) -> float:
    """Large-n time of ``ring`` or ``ps`` where ``regime`` is the bottleneck (alpha left out).

    The time is the serial work of the busiest rank: a ring rank's bytes over its link (each way
    at once when link-bound, in and out one after the other when copy-bound) plus its
    (p-1)/p*n reduced bytes; the ps root's 2(p-1)*n bytes (receive, then send) plus (p-1)*n
    reduced. When cpu-bound (p > cores) it is at least all ranks' work shared by the cores: both
    algorithms copy 4(p-1)*n bytes and reduce (p-1)*n in all, but the ps root's serial share can
    still be the longer.
    """
    if p <= 1:
        return 0.0
    if model == "ring":
        link = (2.0 if regime == LINK_BOUND else 4.0) * (p - 1) / p * n
        serial = link * beta + (p - 1) / p * n * gamma
    elif model == "ps":
        serial = 2.0 * (p - 1) * n * beta + (p - 1) * n * gamma
    else:
        raise ValueError(f"exchange_time models ring and ps, not '{model}'")
    if regime == CPU_BOUND and cores:
        total = 4.0 * (p - 1) * n * beta + (p - 1) * n * gamma
        return max(serial, total / cores)
    return serial


def regime_for(p: int, cores: int, nodes: int = 1) -> str:
    """The bottleneck of an exchange among ``p`` ranks (one per core where they fit)."""
    if nodes >= p:
        return LINK_BOUND
    return COPY_BOUND if p <= cores else CPU_BOUND


def busbw_factor(p: int) -> float:
    """busbw = algbw * 2(p-1)/p for allreduce (nccl-tests), so figures compare across p."""
    return 2.0 * (p - 1) / p if p > 1 else 1.0


def model_for(backend: str, compression: str = "none") -> str:
    """The cost model of a backend as hpcdl.comm implements it."""
    if backend == "ps":
        return "ps"
    if compression == "int8" and backend in ("mpi", "horovod"):
        return "allgather"
    return "ring"


def fit(model: str, sizes: Sequence[float], times: Sequence[float], p: int,
        gamma=None) -> dict:
    """Fit alpha and beta (and gamma when not given) to measured times by least squares.

    The residuals are relative (``(predicted - measured) / measured``, i.e. weighted least
    squares with weights 1/t, close to a fit in log space) so that a 256 MiB point does not
    drown the 64 KiB ones. In one allreduce algorithm the beta and gamma terms both grow as n
    with a fixed ratio, so one sweep cannot tell them apart: pass ``gamma`` measured on its own
    (the reduction kernel's time per byte; a scalar, or one value per size), and gamma=None fits
    beta alone with gamma = 0. Negative estimates are clamped to zero and the rest refitted.
    """
    n = np.asarray(sizes, dtype=np.float64)
    t = np.asarray(times, dtype=np.float64)
    if n.size < 2:
        raise ValueError("need at least two sizes to fit alpha and beta")
    a, b, c = coefficients(model, n, p)
    g = np.broadcast_to(np.asarray(0.0 if gamma is None else gamma, dtype=np.float64), n.shape)
    y = t - c * g
    w = 1.0 / t
    cols = [a, b]
    free = [True, True]
    sol = [0.0, 0.0]
    for _ in range(2):
        idx = [i for i in range(2) if free[i]]
        if not idx:
            break
        A = np.stack([cols[i] * w for i in idx], axis=1)
        est, *_ = np.linalg.lstsq(A, y * w, rcond=None)
        if all(e >= 0 for e in est):
            for i, e in zip(idx, est):
                sol[i] = float(e)
            break
        for i, e in zip(idx, est):
            if e < 0:
                free[i] = False
                sol[i] = 0.0
    alpha, beta = sol
    pred = a * alpha + b * beta + c * g
    ss_res = float(np.sum((t - pred) ** 2))
    ss_tot = float(np.sum((t - t.mean()) ** 2))
    rel = (pred - t) / t
    g_scalar = float(g[0]) if np.ndim(gamma) == 0 else float(np.dot(n, g * n) / np.dot(n, n))
    return {"model": model, "alpha_s": alpha, "beta_s_per_byte": beta, "gamma_s_per_byte": g_scalar,
            "r2": 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0,
            "max_rel_err": float(np.max(np.abs(rel))), "n_points": int(n.size)}


def fit_regimes(model: str, sizes: Sequence[float], times: Sequence[float], p: int,
                gamma=None, min_points: int = 3, gain: float = 0.8, floor: float = 0.05,
                max_regimes: int = 3) -> dict:
    """Fit one alpha-beta line, or up to ``max_regimes`` joined where the machine changes regime.

    A message whose buffers fit in the last-level cache moves at cache speed, one that does not
    at memory speed, and buffers that the allocator maps afresh on every call (above glibc's
    32 MiB heap limit) pay page faults too; MPI libraries also switch protocol (eager to
    rendezvous) at some size. So one beta cannot hold over a sweep from 64 KiB to 256 MiB on one
    node. Every split of the sorted sizes into consecutive runs of at least ``min_points`` is
    tried; a split into k+1 regimes replaces the best k-regime fit when that one misses some
    size by more than ``floor`` and the split brings the worst relative error below ``gain``
    times its. The result holds ``regimes`` (each ``from_bytes``, ``to_bytes``, ``alpha_s``,
    ``beta_s_per_byte``; :func:`predict_fit` uses them), ``breakpoint_bytes`` (the first size
    of the largest regime; None for one regime) and ``max_rel_err`` of that piecewise model; the
    top-level ``alpha_s`` and ``beta_s_per_byte`` are the single line over all sizes (with its
    ``line_max_rel_err``), the figures a scaling model that knows one alpha and one beta can use.
    """
    import itertools
    n = np.asarray(sizes, dtype=np.float64)
    t = np.asarray(times, dtype=np.float64)
    order = np.argsort(n)
    n, t = n[order], t[order]
    g = np.broadcast_to(np.asarray(0.0 if gamma is None else gamma, dtype=np.float64),
                        (len(sizes),))[order]

    def segmented(cuts):
        bounds = [0, *cuts, n.size]
        parts = [fit(model, n[a:b], t[a:b], p, gamma=g[a:b]) for a, b in zip(bounds, bounds[1:])]
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
        # memory, then freshly mapped buffers) are often not helped by a single split
        if top["max_rel_err"] < gain * best["max_rel_err"]:
            best = top
    pred = predict_fit(best, n, p, gamma=g)
    ss_res = float(np.sum((t - pred) ** 2))
    ss_tot = float(np.sum((t - t.mean()) ** 2))
    best["r2"] = 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0
    best["gamma_s_per_byte"] = fit(model, n, t, p, gamma=g)["gamma_s_per_byte"]
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
    a, b, c = coefficients(res["model"], nn, p)
    t = a * alpha + b * beta + c * g
    return float(t) if np.ndim(t) == 0 else t


def gamma_from(sizes: Iterable[float], reduce_times: Iterable[float]) -> float:
    """Time per byte of the reduction kernel: the least-squares slope through the origin."""
    n = np.asarray(list(sizes), dtype=np.float64)
    t = np.asarray(list(reduce_times), dtype=np.float64)
    if not n.size or not np.any(n > 0):
        return 0.0
    return float(max(0.0, np.dot(n, t) / np.dot(n, n)))
