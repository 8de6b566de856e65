"""Predict and fit allreduce times with the alpha-beta-gamma cost model (numpy only).

``n`` is the message in bytes of float32 payload, ``p`` the rank count, ``alpha`` the time per
message (latency, s), ``beta`` the time per byte over a link (s/B) and ``gamma`` the time per byte
to reduce (s/B). Each algorithm is a sum ``a*alpha + b*beta + c*gamma``:

- ``ring`` (reduce-scatter, then allgather; p-1 steps each, n/p bytes per step and link)::

      t = 2(p-1)*alpha + 2(p-1)/p * n*beta + (p-1)/p * n*gamma

- ``ps`` (parameter server at rank 0: the root receives p-1 messages of n bytes one after
  another, adds each into its sum, and sends p-1 messages of n bytes back)::

      t = 2(p-1)*alpha + 2(p-1) * n*beta + (p-1) * n*gamma

  so at large n the ps takes p times the ring's time: the root's link carries (p-1)*n bytes each
  way where a ring link carries 2(p-1)/p * n in all.

- ``allgather`` (int8 over ``mpi`` and ``horovod``: codes with per-chunk scales cannot be summed
  on the wire, so every rank gathers the others' payloads and decodes and adds them locally)::

      t = (p-1)*alpha + (p-1) * n*beta + p * n*gamma

The MPI library's and Horovod's own allreduce are modelled as ``ring``: their large-message
algorithms (ring, recursive halving/doubling) have its bandwidth cost. With compression, ``n``
still counts float32 bytes, so the fitted beta is the effective time per float32 byte, the wire
saving and the coding time included; gamma is measured, not fitted (see :func:`fit`).
"""
from __future__ import annotations

from typing import Iterable, Optional, Sequence, Tuple

import numpy as np

__all__ = ["MODELS", "coefficients", "predict", "ring_time", "ps_time", "allgather_time",
           "busbw_factor", "model_for", "fit"]

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
        return (p - 1) * one, (p - 1) * n, p * n
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
    """(p-1)*alpha + (p-1)*n*beta + p*n*gamma"""
    return predict("allgather", n, p, alpha, beta, gamma)


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
        gamma: Optional[float] = None) -> dict:
    """Fit alpha and beta (and gamma when not given) to measured times by least squares.

    The residuals are relative (``(predicted - measured) / measured``) so that a 256 MiB point
    does not drown the 64 KiB ones. In one allreduce algorithm the beta and gamma terms both
    grow as n with a fixed ratio, so one sweep cannot tell them apart: pass ``gamma`` measured
    on its own (the reduction kernel's time per byte), and gamma=None fits beta alone with
    gamma = 0. Negative estimates are clamped to zero and the rest refitted.
    """
    n = np.asarray(sizes, dtype=np.float64)
    t = np.asarray(times, dtype=np.float64)
    if n.size < 2:
        raise ValueError("need at least two sizes to fit alpha and beta")
    a, b, c = coefficients(model, n, p)
    g = float(gamma or 0.0)
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
    return {"model": model, "alpha_s": alpha, "beta_s_per_byte": beta, "gamma_s_per_byte": g,
            "r2": 1.0 - ss_res / ss_tot if ss_tot > 0 else 1.0,
            "max_rel_err": float(np.max(np.abs(rel))), "n_points": int(n.size)}


def gamma_from(sizes: Iterable[float], reduce_times: Iterable[float]) -> float:
    """Time per byte of the reduction kernel: the least-squares slope through the origin."""
    n = np.asarray(list(sizes), dtype=np.float64)
    t = np.asarray(list(reduce_times), dtype=np.float64)
    if not n.size or not np.any(n > 0):
        return 0.0
    return float(max(0.0, np.dot(n, t) / np.dot(n, n)))
