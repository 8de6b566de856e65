"""Compute scaling figures from run records and model the gradient exchange with alpha-beta-gamma.

Scaling: speedup S(N) = X(N)/X(N0), efficiency E = S/(N/N0) and the Karp-Flatt serial fraction
e = (1/S - 1/p)/(1 - 1/p) with p = N/N0, for throughput X (samples or images per second, all
ranks together). With that definition ideal strong and weak scaling both have S = N/N0.

The model: one step takes ``compute + fixed + exchange(p, n)`` where compute is the forward and
backward pass of a per-rank batch b (probed for each measured configuration, ``c0 + c1 b`` fitted
to the probes where extrapolating), ``fixed`` the per-step cost outside the
network (optimizer update, the framework's own cycle), and the exchange of n gradient bytes among
p ranks costs, in the alpha-beta-gamma model (latency alpha s per message, beta s per byte on the
wire, gamma s per byte reduced):

* ring allreduce (reduce-scatter + allgather): ``2(p-1) alpha + 2(p-1)/p n beta + (p-1)/p n gamma``
* one parameter server (every worker sends n bytes to the server and gets n back through the
  server's link): ``2(p-1) alpha + 2(p-1) n beta + (p-1) n gamma``

A fraction ``overlap`` of the exchange may hide behind backprop (Horovod starts reducing the last
layers' gradients while the first layers are still being differentiated).

numpy only: a report is made without TensorFlow, Horovod or mpi4py.
"""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import asdict, dataclass, field, replace
from typing import Dict, Iterable, List, Optional, Sequence

import numpy as np

ALGORITHMS = ("ring", "ps")
# Bytes on the wire per fp32 gradient byte for each compression.
WIRE_FACTOR = {"none": 1.0, "fp16": 0.5, "int8": 0.25}


# --- scaling maths ------------------------------------------------------------------------------

def speedup(x, x0):
    return np.asarray(x, dtype=float) / float(x0)


def efficiency(s, n, n0):
    return np.asarray(s, dtype=float) / (np.asarray(n, dtype=float) / float(n0))


def karp_flatt(s, p):
    """Experimentally determined serial fraction; NaN where p == 1 (undefined)."""
    s = np.asarray(s, dtype=float)
    p = np.asarray(p, dtype=float)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = (1.0 / s - 1.0 / p) / (1.0 - 1.0 / p)
    return np.where(p > 1, e, np.nan)


def pooled(means: Sequence[float], stds: Sequence[float], ns: Sequence[int]):
    """Mean and standard deviation of the union of several samples given their summaries."""
    m = np.asarray(means, dtype=float)
    s = np.nan_to_num(np.asarray(stds, dtype=float))
    n = np.maximum(np.asarray(ns, dtype=float), 1.0)
    total = n.sum()
    mean = float((n * m).sum() / total)
    if total <= 1:
        return mean, 0.0
    ss = ((n - 1) * s ** 2).sum() + (n * (m - mean) ** 2).sum()
    return mean, float(math.sqrt(ss / (total - 1)))


# --- records -> table rows ----------------------------------------------------------------------

def _get(d, *keys, default=None):
    for k in keys:
        if not isinstance(d, dict) or k not in d:
            return default
        d = d[k]
    return d


@dataclass
class Row:
    """One configuration of a study (its repeats pooled)."""

    backend: str
    compression: str
    nodes: int
    ranks_per_node: int
    ranks: int
    batch_size: int
    global_batch: int
    runs: int
    throughput: float
    throughput_std: float
    unit: str
    step_time: float                 # s, median over repeats of each run's median step
    step_times: List[float] = field(default_factory=list)   # each repeat's median step
    repeats: List[int] = field(default_factory=list)
    computes: List[Optional[float]] = field(default_factory=list)  # each repeat's compute
    compute_s: Optional[float] = None
    exchange_s: Optional[float] = None
    compute_share: Optional[float] = None
    gradient_bytes: int = 0
    speedup: float = float("nan")
    efficiency: float = float("nan")
    karp_flatt: float = float("nan")
    model_step_time: Optional[float] = None
    model_error: Optional[float] = None
    heldout_error: Optional[float] = None

    @property
    def axis(self) -> str:
        return f"{self.backend}/{self.compression}"

    @property
    def wire_bytes(self) -> float:
        """Bytes exchanged per step: the fp32 gradients shrunk by the compression."""
        return self.gradient_bytes * WIRE_FACTOR.get(self.compression, 1.0)

    @property
    def ci95(self) -> float:
        return 1.96 * self.throughput_std

    @property
    def exchange_share(self) -> Optional[float]:
        return None if self.compute_share is None else 1.0 - self.compute_share

    def as_dict(self) -> dict:
        d = asdict(self)
        d["ci95"] = self.ci95
        d["exchange_share"] = self.exchange_share
        d["axis"] = self.axis
        return d


def group_records(recs: Iterable[dict]) -> List[Row]:
    """Pool the repeats of each (backend, compression, nodes, ranks per node) configuration."""
    groups: "OrderedDict[tuple, list]" = OrderedDict()
    for rec in recs:
        if rec.get("kind", "train") != "train" or rec.get("status", "ok") != "ok":
            continue
        tput = _get(rec, "metrics", "throughput")
        if not isinstance(tput, dict) or tput.get("mean") is None:
            continue
        params = rec.get("params") or {}
        lay = rec.get("layout") or {}
        size = int(lay.get("size") or 1)
        nodes = int(lay.get("nodes") or 1)
        rpn = int(lay.get("ranks_per_node") or max(1, size // nodes))
        key = (params.get("backend", "horovod"), params.get("compression", "none"), nodes, rpn, size)
        groups.setdefault(key, []).append(rec)
    rows = []
    for (backend, comp, nodes, rpn, size), rs in groups.items():
        t = [_get(r, "metrics", "throughput") for r in rs]
        mean, std = pooled([x["mean"] for x in t], [x.get("std", 0.0) for x in t],
                           [x.get("n", 1) for x in t])
        rs = [r for r in rs if _get(r, "metrics", "step_time", "median") is not None] or rs
        steps = [float(_get(r, "metrics", "step_time", "median", default=float("nan"))) for r in rs]
        all_comps = [_get(r, "metrics", "split", "compute_s") for r in rs]
        exch = [_get(r, "metrics", "split", "exchange_s") for r in rs]
        comps = [float(c) for c in all_comps if c is not None]
        exch = [float(e) for e in exch if e is not None]
        step = float(np.median(steps)) if steps else float("nan")
        compute = float(np.median(comps)) if comps else None
        exchange = float(np.median(exch)) if exch else None
        share = min(1.0, compute / step) if compute is not None and step > 0 else None
        params = rs[0].get("params") or {}
        reps = [int(_get(r, "point", "repeat", default=i)) for i, r in enumerate(rs)]
        rows.append(Row(backend=backend, compression=comp, nodes=nodes, ranks_per_node=rpn,
                        ranks=size, batch_size=int(params.get("batch_size") or 0),
                        global_batch=int(params.get("global_batch") or 0), runs=len(rs),
                        throughput=mean, throughput_std=std,
                        unit=str(t[0].get("unit", "samples/s")), step_time=step,
                        step_times=steps, repeats=reps,
                        computes=[None if c is None else float(c) for c in all_comps],
                        compute_s=compute, exchange_s=exchange,
                        compute_share=share,
                        gradient_bytes=int(rs[0].get("gradient_bytes") or 0)))
    rows.sort(key=lambda r: (r.backend, r.compression, r.ranks, r.nodes))
    add_scaling(rows)
    return rows


def add_scaling(rows: List[Row]) -> None:
    """Speedup, efficiency and Karp-Flatt of each row against the smallest run of its axis."""
    for axis in axes(rows):
        sel = [r for r in rows if r.axis == axis]
        base = min(sel, key=lambda r: r.ranks)
        for r in sel:
            s = float(speedup(r.throughput, base.throughput))
            p = r.ranks / base.ranks
            r.speedup = s
            r.efficiency = float(efficiency(s, r.ranks, base.ranks))
            r.karp_flatt = float(karp_flatt(s, p))


def axes(rows: Sequence[Row]) -> List[str]:
    out = []
    for r in rows:
        if r.axis not in out:
            out.append(r.axis)
    return out


# --- the communication model --------------------------------------------------------------------

def ring_exchange(p, nbytes, alpha, beta, gamma=0.0):
    """Ring allreduce time (reduce-scatter + allgather) of nbytes among p ranks; 0 at p = 1."""
    p = np.asarray(p, dtype=float)
    n = np.asarray(nbytes, dtype=float)
    return 2 * (p - 1) * alpha + 2 * (p - 1) / p * n * beta + (p - 1) / p * n * gamma


def ps_exchange(p, nbytes, alpha, beta, gamma=0.0):
    """One parameter server: p-1 workers push n bytes through its link and pull the mean back."""
    p = np.asarray(p, dtype=float)
    n = np.asarray(nbytes, dtype=float)
    return 2 * (p - 1) * alpha + 2 * (p - 1) * n * beta + (p - 1) * n * gamma


def exchange_time(algorithm: str, p, nbytes, alpha, beta, gamma=0.0):
    if algorithm == "ring":
        return ring_exchange(p, nbytes, alpha, beta, gamma)
    if algorithm == "ps":
        return ps_exchange(p, nbytes, alpha, beta, gamma)
    raise ValueError(f"unknown algorithm '{algorithm}': use one of {', '.join(ALGORITHMS)}")


def _features(algorithm: str, p, n):
    """Coefficients of (alpha, beta, gamma) in the exchange time."""
    p = np.asarray(p, dtype=float)
    n = np.asarray(n, dtype=float)
    if algorithm == "ring":
        return np.stack([2 * (p - 1), 2 * (p - 1) / p * n, (p - 1) / p * n], axis=-1)
    return np.stack([2 * (p - 1), 2 * (p - 1) * n, (p - 1) * n], axis=-1)


@dataclass
class Network:
    """A network preset: latency per message and inverse bandwidth of one link."""

    name: str
    alpha: float          # s per message
    beta: float           # s per byte
    note: str = ""

    @property
    def bandwidth_GBps(self) -> float:
        return 1.0 / self.beta / 1e9


def _link(gbit: float, efficiency: float = 0.9) -> float:
    """s per byte of a link of ``gbit`` Gbit/s delivering ``efficiency`` of its line rate."""
    return 1.0 / (gbit * 1e9 / 8 * efficiency)


# Latencies are MPI/NCCL point-to-point figures of each fabric; bandwidth 90% of the line rate.
PRESETS: Dict[str, Network] = OrderedDict([
    ("ib-edr", Network("InfiniBand EDR", 1.5e-6, _link(100), "100 Gbit/s, 1.5 us")),
    ("ib-hdr", Network("InfiniBand HDR", 1.2e-6, _link(200), "200 Gbit/s, 1.2 us")),
    ("ib-ndr", Network("InfiniBand NDR", 1.0e-6, _link(400), "400 Gbit/s, 1.0 us")),
    ("roce-25g", Network("25 GbE RoCE", 5.0e-6, _link(25), "25 Gbit/s, 5 us")),
])


@dataclass
class Model:
    """Step time = compute + fixed + (1 - overlap) exchange(p, n); everything here is model.

    compute is the probed compute time of a measured configuration (``measured``, keyed
    "ranks:batch") and ``c0 + c1 b`` elsewhere (extrapolation).
    """

    algorithm: str = "ring"
    alpha: float = 0.0
    beta: float = 0.0
    gamma: float = 0.0
    c0: float = 0.0
    c1: float = 0.0
    fixed: float = 0.0
    overlap: float = 0.0
    source: str = ""
    notes: List[str] = field(default_factory=list)
    measured: Dict[str, float] = field(default_factory=dict)

    def compute(self, b, p=None):
        if p is not None:
            key = f"{int(p)}:{int(b)}" if float(b) == int(b) else None
            if key in self.measured:
                return self.measured[key]
        return self.c0 + self.c1 * np.asarray(b, dtype=float)

    def exchange(self, p, nbytes, network: Optional[Network] = None):
        a, b = (network.alpha, network.beta) if network else (self.alpha, self.beta)
        return exchange_time(self.algorithm, p, nbytes, a, b, self.gamma)

    def step_time(self, p, b, nbytes, network: Optional[Network] = None, overlap=None,
                  measured: bool = True):
        """Model step time; ``measured=False`` uses the fitted compute(b) even where probed."""
        ov = self.overlap if overlap is None else overlap
        comp = self.compute(b, p if measured else None)
        return comp + self.fixed + (1 - ov) * self.exchange(p, nbytes, network)

    def as_dict(self) -> dict:
        return asdict(self)


def _nnls(A: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Non-negative least squares for a handful of unknowns (active-set by enumeration)."""
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


def calibrate(rows: Sequence[Row], algorithm: str = "ring", fit: Optional[dict] = None,
              overlap: float = 0.0) -> Model:
    """Fit the model to a study's rows; take alpha, beta, gamma from a bench fit when given.

    compute(b): least squares of the rows' probed compute times against the per-rank batch (a
    constant when the batch never changes); without probes, the smallest run's step time.
    fixed: the non-compute part of the step of a 1-rank run (no network there).
    alpha, beta: non-negative least squares of the remaining exchange time of the multi-rank
    rows; gamma is folded into beta (the two have the same coefficient shape for one algorithm)
    unless a bench fit separates them.
    """
    m = Model(algorithm=algorithm, overlap=overlap)
    rows = [r for r in rows if not math.isnan(r.step_time)]
    if not rows:
        raise ValueError("no rows to calibrate on")
    with_c = [r for r in rows if _row_compute(r) is not None]
    if with_c:
        # Extrapolate compute from the least crowded nodes only: ranks sharing a node's cores
        # and memory compute slower, and a cluster run does not share them the same way.
        rpn = min(r.ranks_per_node for r in with_c)
        base = [r for r in with_c if r.ranks_per_node == rpn]
        b = np.array([r.batch_size for r in base], dtype=float)
        c = np.array([_row_compute(r) for r in base])
        if len(set(b)) >= 2:
            coef = _nnls(np.stack([np.ones_like(b), b], axis=1), c)
            m.c0, m.c1 = float(coef[0]), float(coef[1])
        else:
            m.c1 = float(np.mean(c / np.maximum(b, 1)))     # proportional to the batch
        m.measured = {f"{r.ranks}:{r.batch_size}": float(_row_compute(r)) for r in with_c}
        m.notes.append("compute: the probed compute time of each measured configuration; the "
                       f"extrapolation uses compute(b) = c0 + c1 b fitted to the runs with "
                       f"{rpn} rank(s) per node")
        for r in with_c:
            if r.ranks_per_node > rpn:
                slow = _row_compute(r) / float(m.c0 + m.c1 * r.batch_size)
                m.notes.append(f"{r.ranks_per_node} ranks on one node: probed compute is "
                               f"{slow:.2f}x compute(b={r.batch_size}) (ranks sharing the node's "
                               f"cores and memory, and per-step costs that do not shrink with "
                               f"the batch)")
    else:
        base = min(rows, key=lambda r: r.ranks)
        m.c1 = base.step_time / max(1, base.batch_size)
        m.notes.append(f"no compute probes: compute taken as the {base.ranks}-rank step time, "
                       "proportional to the per-rank batch")
    ones = [r for r in rows if r.ranks == 1]
    if ones and with_c:
        m.fixed = float(np.median([max(0.0, r.step_time - float(m.compute(r.batch_size, r.ranks)))
                                   for r in ones]))
    multi = [r for r in rows if r.ranks > 1]
    if fit is not None:
        m.alpha = float(fit["alpha_s"])
        m.beta = float(fit["beta_s_per_byte"])
        m.gamma = float(fit.get("gamma_s_per_byte") or 0.0)
        m.source = fit.get("_source", "bench fit")
    elif multi:
        y = np.array([r.step_time - float(m.compute(r.batch_size, r.ranks)) - m.fixed for r in multi])
        F = _features(algorithm, [r.ranks for r in multi], [r.wire_bytes for r in multi])
        A = F[:, :2]        # F1 beta + F2 gamma = F1 (beta + gamma/2): gamma rides on beta
        if np.linalg.matrix_rank(A) >= 2:
            coef = _nnls(A, y)
            m.alpha, m.beta = float(coef[0]), float(coef[1])
        else:
            # One rank count and one gradient size: the two terms cannot be told apart. Put the
            # whole exchange on the term that dominates at these sizes (latency below 64 KiB).
            per = np.maximum(y, 0.0)
            if np.median([r.wire_bytes for r in multi]) < 65536:
                m.alpha = float(np.mean(per / A[:, 0]))
                m.notes.append("one rank count and gradient size: the exchange is put on alpha "
                               "(latency-bound, gradients < 64 KiB); beta is not determined")
            else:
                m.beta = float(np.mean(per / A[:, 1]))
                m.notes.append("one rank count and gradient size: the exchange is put on beta "
                               "(bandwidth-bound, gradients >= 64 KiB); alpha is not determined")
        m.source = "this study's runs"
        m.notes.append("gamma folded into beta (beta_eff = beta + gamma/2)")
    else:
        m.source = "this study's runs (no multi-rank run: no exchange term)"
    return m


def _row_compute(r: Row) -> Optional[float]:
    vals = [c for c in r.computes if c is not None]
    if vals:
        return float(np.median(vals))
    return r.compute_s


def load_fit(doc: dict, backend: str = "horovod", compression: str = "none") -> Optional[dict]:
    """The alpha/beta/gamma entry of a ``hpcdl.fit/1`` document for a backend and compression."""
    entries = doc.get("backends") or {}
    # A compression's own entry first; else the uncompressed one (wire bytes carry the ratio).
    for key in (f"{backend}+{compression}", backend, f"{backend}+none"):
        if key in entries:
            out = dict(entries[key])
            out["_source"] = f"bench fit ({key}, {doc.get('ranks', '?')} ranks)"
            return out
    return None


def predict_rows(rows: Sequence[Row], model: Model) -> None:
    """Set each row's model step time and its relative error against the measurement."""
    for r in rows:
        pred = float(model.step_time(r.ranks, r.batch_size, r.wire_bytes, overlap=0.0))
        r.model_step_time = pred
        r.model_error = (pred - r.step_time) / r.step_time if r.step_time > 0 else None


def heldout_errors(rows: Sequence[Row], algorithm: str, fit: Optional[dict] = None) -> None:
    """For each row, the worst error of predicting one repeat from a model fitted without it."""
    reps = sorted({k for r in rows for k in r.repeats})
    if len(reps) < 2:
        return
    worst: Dict[int, float] = {}
    for k in reps:
        train = [x for x in (_without_repeat(r, k) for r in rows) if x is not None]
        try:
            m = calibrate(train, algorithm, fit)
        except ValueError:
            continue
        for i, r in enumerate(rows):
            if k not in r.repeats:
                continue
            pred = float(m.step_time(r.ranks, r.batch_size, r.wire_bytes, overlap=0.0))
            meas = r.step_times[r.repeats.index(k)]
            err = (pred - meas) / meas
            if i not in worst or abs(err) > abs(worst[i]):
                worst[i] = err
    for i, r in enumerate(rows):
        r.heldout_error = worst.get(i)


def _without_repeat(r: Row, k: int) -> Optional[Row]:
    """The row without repeat k (None when k was its only run)."""
    if k not in r.repeats:
        return r
    keep = [i for i, rep in enumerate(r.repeats) if rep != k]
    if not keep:
        return None
    steps = [r.step_times[i] for i in keep]
    comps = [r.computes[i] for i in keep] if len(r.computes) == len(r.repeats) else r.computes
    return replace(r, step_times=steps, repeats=[r.repeats[i] for i in keep],
                   step_time=float(np.median(steps)), computes=comps)


def extrapolate(model: Model, scaling: str, batch: int, nbytes: int, networks: Dict[str, Network],
                ranks: Sequence[int], overlap: Optional[float] = None) -> List[dict]:
    """Model throughput and efficiency at larger rank counts on each network (model only).

    ``batch`` is the per-rank batch (weak) or the global batch (strong); a strong-scaling point
    stops where the per-rank batch would fall below one sample.
    """
    out = []
    for key, net in networks.items():
        t1 = None
        for p in ranks:
            b = batch if scaling == "weak" else batch / p
            if b < 1:
                break
            t = float(model.step_time(p, b, nbytes, network=net, overlap=overlap, measured=False))
            x = p * b / t
            if t1 is None:
                t1 = float(model.step_time(1, batch, nbytes, network=net, overlap=overlap,
                                           measured=False))
            x1 = batch / t1
            out.append({"network": key, "label": net.name, "ranks": p, "batch_per_rank": b,
                        "step_time_s": t, "throughput": x, "speedup": x / x1,
                        "efficiency": x / x1 / p,
                        "exchange_share": float((1 - (model.overlap if overlap is None else overlap))
                                                * model.exchange(p, nbytes, net)) / t})
    return out


# --- the published comparison (Horovod, Sergeev & Del Balso 2018) -------------------------------

# Horovod's paper: 128 servers x 4 Pascal (P100) GPUs = 512 GPUs on 25 Gbit/s RoCE; scaling
# efficiency 90% for ResNet-101 and 68% for VGG-16 (tf_cnn_benchmarks, synthetic data).
PUBLISHED = [
    # name, parameters, published efficiency at 512 GPUs, per-GPU img/s (P100, fp32, batch 64)
    {"model": "ResNet-101", "params": 44.5e6, "published": 0.90, "img_per_s": 129.0},
    {"model": "VGG-16", "params": 138.0e6, "published": 0.68, "img_per_s": 154.0},
]
PUBLISHED_SETUP = {
    "gpus": 512, "gpus_per_node": 4, "batch_per_gpu": 64, "network": "roce-25g",
    "fusion_bytes": 64 * 2 ** 20,       # HOROVOD_FUSION_THRESHOLD: one allreduce per 64 MiB
    "gamma": 1.0 / 500e9,               # reduction on the GPU at ~500 GB/s of memory bandwidth
    "overlap": 0.5,                     # half the exchange hidden behind backprop
}


def published_comparison(overlap: Optional[float] = None, setup: Optional[dict] = None) -> List[dict]:
    """Model efficiency at 512 GPUs for the Horovod paper's set-up, beside the published figure.

    compute per step = batch / per-GPU throughput (P100 figures of tf_cnn_benchmarks; ResNet-101
    interpolated between ResNet-50 and ResNet-152 by FLOPs); exchange = ring allreduce of the fp32
    gradients over the 25 GbE link of each server, one ring per 64 MiB fusion buffer, a fraction
    ``overlap`` hidden behind backprop.
    """
    s = dict(PUBLISHED_SETUP, **(setup or {}))
    ov = s["overlap"] if overlap is None else overlap
    net = PRESETS[s["network"]]
    p = s["gpus"]
    out = []
    for m in PUBLISHED:
        n = m["params"] * 4
        t_c = s["batch_per_gpu"] / m["img_per_s"]
        buffers = max(1, math.ceil(n / s["fusion_bytes"]))
        t_ex = (buffers * 2 * (p - 1) * net.alpha + 2 * (p - 1) / p * n * net.beta
                + (p - 1) / p * n * s["gamma"])
        step = t_c + (1 - ov) * t_ex
        eff = t_c / step
        out.append({"model": m["model"], "gradient_MB": n / 1e6, "compute_s": t_c,
                    "exchange_s": t_ex, "overlap": ov, "step_s": step, "model_efficiency": eff,
                    "published_efficiency": m["published"],
                    "difference_points": (eff - m["published"]) * 100})
    return out
