"""Analyse a scaling study: records in, one :class:`StudyAnalysis` out (the report only renders it).

Scaling: speedup S(N) = X(N)/X(N0), efficiency E = S/(N/N0) and the Karp-Flatt serial fraction
e = (1/S - 1/p)/(1 - 1/p) with p = N/N0, for throughput X (samples or images per second, all
ranks together); ideal strong and weak scaling both have S = N/N0. Every figure outside its
meaningful range, or not resolved by the spread of the repeats, carries a flag naming why.

The step model and everything it predicts come from :mod:`hpcdl.costmodel`; when the runs cannot
determine it, the analysis says so and draws no extrapolation.

numpy only: a report is made without TensorFlow, Horovod or mpi4py. The module runs past 400
lines on purpose: every figure a report shows is computed here, from the rows to the result
object, so that :mod:`hpcdl.report` and :mod:`hpcdl.report.plots` only render.
"""
from __future__ import annotations

import math
import re
from collections import OrderedDict
from dataclasses import asdict, dataclass, field, replace
from typing import Dict, Iterable, List, Optional, Sequence, Tuple

import numpy as np

from . import budget, predict, provenance
from .reading import NONE, Digest, Repeats, Systems, axis_name
from .exchange_bench import Bench
from .host_spread import HostSpread
from .loop_share import LoopShare
from .. import costmodel
from ..costmodel import Network, PRESETS, StepModel
from ..records import lookup as _get

EXTRAPOLATE_RANKS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)
SCALINGS = ("strong", "weak")


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


# --- records -> rows ----------------------------------------------------------------------------

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
    computes: List[Optional[float]] = field(default_factory=list)  # each repeat's probed compute
    exchanges: List[Optional[float]] = field(default_factory=list)  # each repeat's exchange alone
    compute_s: Optional[float] = None
    compute_share: Optional[float] = None     # None where the probe is not shorter than the step
    gradient_bytes: int = 0
    speedup: float = float("nan")
    efficiency: float = float("nan")
    karp_flatt: float = float("nan")
    model_step_time: Optional[float] = None
    model_error: Optional[float] = None
    heldout_error: Optional[float] = None
    flags: List[str] = field(default_factory=list)
    network: str = ""                # the cluster box's link rate ([axes] network), "" elsewhere
    lr_rule: str = ""                # the learning-rate rule ([axes] lr_scaling), "" elsewhere
    fitted: bool = True              # the model was calibrated on this row (else: predicted)
    variant: str = ""                # the study's [variants] name, "" elsewhere
    tuning: str = ""                 # [axes] tuning: "default" or "tuned", "" elsewhere
    modelled: bool = True            # the allreduce model describes the step (see modelled())
    model_band: Optional[List[float]] = None   # 5-95% of the bootstrap's predicted step time

    @property
    def axis(self) -> str:
        return axis_name(self.backend, self.compression, self.network, self.lr_rule,
                         self.variant, self.tuning)

    @property
    def wire_bytes(self) -> float:
        """Bytes exchanged per step: the fp32 gradients under the compression."""
        return float(costmodel.wire_bytes(self.gradient_bytes // 4, self.compression))

    @property
    def ci95(self) -> float:
        return 1.96 * self.throughput_std

    @property
    def hidden_share(self) -> Optional[float]:
        """The share of the exchange (timed alone) the step hid behind the compute: (compute +
        exchange − step) / exchange, clipped to [0, 1], medians over repeats. A lower bound: the
        step also holds the update and overheads that neither probe times. Only where the
        exchange can overlap the backward pass (Horovod's per-tensor allreduce); None elsewhere,
        and where either probe is missing."""
        ex = [e for e in self.exchanges if e is not None]
        if self.backend != "horovod" or self.compression == "int8" or not ex \
                or self.compute_s is None or not self.step_time > 0:
            return None
        e = float(np.median(ex))
        return min(1.0, max(0.0, (self.compute_s + e - self.step_time) / e)) if e > 0 else None

    @property
    def rest_share(self) -> Optional[float]:
        """The step beyond the probed compute: exchange not hidden, update, overhead."""
        return None if self.compute_share is None else 1.0 - self.compute_share

    def observation(self) -> costmodel.Observation:
        return costmodel.Observation(self.ranks, self.ranks_per_node, self.batch_size,
                                     self.wire_bytes, self.step_time, _median(self.computes),
                                     _median(self.exchanges))

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(ci95=self.ci95, rest_share=self.rest_share, axis=self.axis,
                 wire_bytes=self.wire_bytes)
        return d


def _median(values) -> Optional[float]:
    vals = [v for v in values if v is not None]
    return float(np.median(vals)) if vals else None


def group_records(recs: Iterable[dict]) -> List[Row]:
    """Pool the repeats of each (backend, compression, nodes, ranks per node) configuration."""
    return rows_of(Digest.of(recs).runs)


def rows_of(runs: "OrderedDict[tuple, Repeats]") -> List[Row]:
    """The rows of each configuration's runs (:class:`.reading.Repeats`), ordered and scaled."""
    rows = [_row(key, rs) for key, rs in runs.items()]
    rows.sort(key=lambda r: (_rate(r.network), r.variant, r.backend, r.compression, r.lr_rule,
                             r.tuning, r.ranks, r.nodes))
    add_scaling(rows)
    return rows


def _rate(network: str) -> float:
    return costmodel.rate_bits(network) if network else 0.0


def _row(key, rs: Repeats) -> Row:
    backend, comp, nodes, rpn, size, net, lr_rule, variant, tuning = key
    mean, std = pooled(rs.mean, rs.std, rs.n)
    timed = [i for i, s in enumerate(rs.step) if not math.isnan(s)]
    keep = timed or range(len(rs))
    first = rs.first_timed if timed else rs.first
    steps = [rs.step[i] for i in keep]
    computes = [None if math.isnan(rs.compute[i]) else rs.compute[i] for i in keep]
    comps = [c for c in computes if c is not None]
    step = float(np.median(steps)) if steps else float("nan")
    compute = float(np.median(comps)) if comps else None
    share = compute / step if compute is not None and 0 < compute < step else None
    return Row(backend=backend, compression=comp, nodes=nodes, ranks_per_node=rpn, ranks=size,
               batch_size=first.batch, global_batch=first.global_batch, runs=len(steps),
               throughput=mean, throughput_std=std, unit=rs.first.unit,
               step_time=step, step_times=steps,
               repeats=[j if rs.repeat[i] == NONE else rs.repeat[i] for j, i in enumerate(keep)],
               computes=computes,
               exchanges=[None if math.isnan(rs.exchange[i]) else rs.exchange[i] for i in keep],
               compute_s=compute, compute_share=share,
               gradient_bytes=first.gradient_bytes, network=net,
               lr_rule=lr_rule, variant=variant, tuning=tuning, modelled=first.modelled)


def add_scaling(rows: List[Row]) -> None:
    """Speedup, efficiency and Karp-Flatt of each row against the smallest run of its axis."""
    for axis in axes(rows):
        sel = [r for r in rows if r.axis == axis]
        base = min(sel, key=lambda r: r.ranks)
        for r in sel:
            r.speedup = float(speedup(r.throughput, base.throughput))
            r.efficiency = float(efficiency(r.speedup, r.ranks, base.ranks))
            r.karp_flatt = float(karp_flatt(r.speedup, r.ranks / base.ranks))


def axes(rows: Sequence[Row]) -> List[str]:
    out = []
    for r in rows:
        if r.axis not in out:
            out.append(r.axis)
    return out


# --- flags: what a figure cannot support ----------------------------------------------------------

SPREAD_LIMIT = 0.25      # a relative ±1.96σ beyond this is called out whatever the effect


def flag_rows(rows: Sequence[Row], cores: Optional[int] = None) -> None:
    """Set each row's flags: unresolved spread, out-of-range Karp-Flatt, an undetermined split."""
    for axis in axes(rows):
        sel = [r for r in rows if r.axis == axis]
        base = min(sel, key=lambda r: r.ranks)
        for r in sel:
            r.flags = _flags(r, base, cores)


def _rel(r: Row) -> float:
    return r.ci95 / r.throughput if r.throughput > 0 else float("inf")


def _flags(r: Row, base: Row, cores: Optional[int]) -> List[str]:
    out = []
    if _rel(r) > SPREAD_LIMIT:
        out.append(f"throughput spread ±{_rel(r) * 100:.0f}% across timed iterations and repeats")
    if r.compute_s is not None and r.compute_s >= r.step_time:
        out.append(f"probed compute ({r.compute_s * 1e3:.3g} ms) ≥ step ({r.step_time * 1e3:.3g} ms): "
                   "the split of this step is not determined")
    if r is base:
        return out
    rel = math.hypot(_rel(r), _rel(base))
    spread = r.efficiency * rel
    if spread > abs(1.0 - r.efficiency):
        out.append(f"efficiency {r.efficiency * 100:.0f}% ± {spread * 100:.0f} points: not "
                   "resolved from ideal by these repeats")
    if not math.isnan(r.karp_flatt) and not 0.0 <= r.karp_flatt <= 1.0:
        # a slowdown (e > 1) is real only if the speedup's spread does not reach 1, a
        # superlinear speedup (e < 0) only if it does not reach the ideal
        target = 1.0 if r.karp_flatt > 1 else r.ranks / base.ranks
        noisy = r.speedup * rel > abs(r.speedup - target)
        out.append(f"Karp–Flatt e = {r.karp_flatt:.2f} outside [0, 1]: "
                   f"{_kf_cause(r, base, cores, noisy)}")
    return out


def _kf_cause(r: Row, base: Row, cores: Optional[int], noisy: bool) -> str:
    if r.karp_flatt < 0:
        return ("superlinear speedup: the serial-fraction model does not apply"
                + ("; the spread of the repeats is as large as the effect" if noisy else
                   " (a per-rank working set that fits in cache)"))
    cause = "slower than the baseline, so no serial fraction explains it"
    if noisy:
        return cause + "; the spread of the repeats is as large as the effect"
    if cores and r.ranks_per_node > cores:
        return cause + f"; {r.ranks_per_node} ranks share {cores} cores"
    if r.step_time > 0 and base.step_time > 0 and r.batch_size < base.batch_size:
        return cause + (f"; the per-rank batch fell from {base.batch_size} to {r.batch_size} while "
                        f"the step went from {base.step_time * 1e3:.3g} to {r.step_time * 1e3:.3g} ms: "
                        "per-step costs that do not shrink with the batch dominate")
    return cause + "; per-step exchange and overhead exceed the compute saved"


# --- the model beside the measurements ------------------------------------------------------------

def predict_rows(rows: Sequence[Row], model: StepModel) -> None:
    """Set each row's model step time and its relative error against the measurement."""
    for r in rows:
        pred = float(model.step_time(r.ranks, r.batch_size, r.wire_bytes))
        r.model_step_time = pred
        r.model_error = (pred - r.step_time) / r.step_time if r.step_time > 0 else None


def heldout_errors(rows: Sequence[Row], algorithm: str, fit: Optional[dict] = None) -> None:
    """For each row, the worst error of predicting one repeat from a model fitted without it
    (without its fold of repeats, beyond :data:`.predict.FOLDS` repeats)."""
    reps = sorted({k for r in rows for k in r.repeats})
    if len(reps) < 2:
        return
    fold = predict.folds(reps)
    worst: Dict[int, float] = {}
    where = [{} for _ in rows]            # each row's repeat -> its first run
    for r, w in zip(rows, where):
        for j, k in enumerate(r.repeats):
            w.setdefault(k, j)
    for f in sorted(set(fold.values())):
        left = {k for k in reps if fold[k] == f}
        train = [x for x in (_without_repeats(r, left) for r in rows) if x is not None]
        try:
            m = costmodel.calibrate([t.observation() for t in train], algorithm, fit)
        except ValueError:
            continue
        if not m.determined:
            continue
        for i, r in enumerate(rows):
            pred = float(m.step_time(r.ranks, r.batch_size, r.wire_bytes))
            for k in sorted(left.intersection(where[i])):
                meas = r.step_times[where[i][k]]
                err = (pred - meas) / meas
                if i not in worst or abs(err) > abs(worst[i]):
                    worst[i] = err
    for i, r in enumerate(rows):
        r.heldout_error = worst.get(i)


BOOTSTRAP = 200      # resamples of the calibration points' repeats for the prediction band


def declared_calibration(recs: Iterable[dict]) -> Tuple[Optional[str], int]:
    """(the bench fit's path, N) a study's records declare: ``[model] fit`` ("fit:PATH"),
    ``calibrate = {nodes_max = N}`` ("runs:nodes<=N"), or both ("runs:nodes<=N;fit:PATH");
    (None, 0) for neither."""
    return _calibration(_declared(recs))


def declared_bench(recs: Iterable[dict]) -> Optional[str]:
    """The path pattern of the tuning files a study's ``[model] calibrate = {exchange = ...}``
    names (declared as "...;bench:PATTERN"), else None."""
    return _parts(_declared(recs)).get("bench")


def declared_loop(recs: Iterable[dict]) -> Optional[str]:
    """The loop file a study's ``[model] calibrate = {loop = ...}`` names (declared as
    "...;loop:PATH"), else None."""
    return _parts(_declared(recs)).get("loop")


def declared_spread(recs: Iterable[dict]) -> Optional[str]:
    """The spread file a study's ``[model] calibrate = {spread = ...}`` names (declared as
    "...;spread:PATH"), else None."""
    return _parts(_declared(recs)).get("spread")


def _declared(recs: Iterable[dict]) -> str:
    """The first calibration the records declare that names a subset or a fit, else ""."""
    if isinstance(recs, Digest):
        return recs.calibration or ""
    for r in recs:
        cal = str(_get(r, "declared", "calibration") or "")
        if _calibration(cal) != (None, 0):
            return cal
    return ""


def _parts(cal: str) -> Dict[str, str]:
    """A declared calibration's parts by name: "runs:nodes<=N;fit:PATH;bench:PATTERN;loop:PATH;
    spread:PATH" (each part optional) gives {"runs": "nodes<=N", "fit": PATH, ...}."""
    out = {}
    for part in re.split(r";(?=(?:runs|fit|bench|loop|spread):)", cal):       # a path may hold ";"
        name, sep, value = part.partition(":")
        if sep:
            out.setdefault(name, value)
    return out


def _calibration(cal: str) -> Tuple[Optional[str], int]:
    parts = _parts(cal)
    runs = parts.get("runs", "")
    return (parts.get("fit"),
            int(runs.split("<=", 1)[1]) if runs.startswith("nodes<=") else 0)


def declared_nodes_max(recs: Iterable[dict]) -> int:
    """N of a study's ``[model] calibrate = {nodes_max = N}``, else 0."""
    return declared_calibration(recs)[1]


def calibrate_on_few_nodes(sel: List[Row], algorithm: str, nodes_max: int,
                           seed: int = 0, fit: Optional[dict] = None) -> StepModel:
    """Calibrate on the rows with at most ``nodes_max`` nodes and predict every row; each row's
    ``model_error`` is then a prediction error (``fitted`` False) except on the rows fitted to.
    ``model_band``: the 5-95% range of the predicted step time over a bootstrap of the
    calibration rows' repeats (each row's repeats drawn with replacement), i.e. how far the
    calibration's own spread moves the prediction. ``fit``: α, β, γ from a bench fit instead of
    the calibration rows' exchange."""
    train = [r for r in sel if r.nodes <= nodes_max]
    for r in sel:
        r.fitted = r.nodes <= nodes_max
    if not train:
        raise ValueError(f"no point with at most {nodes_max} node(s) to calibrate on")
    m = costmodel.calibrate([r.observation() for r in train], algorithm, fit, bandwidth_only=True)
    predict_rows(sel, m)
    if not m.determined:
        return m
    rng = np.random.default_rng(seed)
    preds = []
    cols = [_columns(r) for r in train]
    for _ in range(BOOTSTRAP):
        try:
            b = costmodel.calibrate([_resampled(r, c, rng) for r, c in zip(train, cols)],
                                    algorithm, fit, bandwidth_only=True)
        except ValueError:
            continue
        if b.determined:
            preds.append([float(b.step_time(r.ranks, r.batch_size, r.wire_bytes)) for r in sel])
    if preds:
        lo, hi = np.percentile(np.array(preds), [5, 95], axis=0)
        for r, a, z in zip(sel, lo, hi):
            r.model_band = [float(a), float(z)]
    return m


def _columns(r: Row):
    """A row's repeats as arrays (NaN where not probed) for resampling."""
    nan = float("nan")
    return (np.asarray(r.step_times, dtype=float),
            np.array([nan if c is None else c for c in r.computes], dtype=float),
            np.array([nan if e is None else e for e in r.exchanges], dtype=float))


def _resampled(r: Row, cols, rng) -> costmodel.Observation:
    """The row's observation with its repeats drawn with replacement (step, compute and
    exchange together)."""
    k = len(r.step_times)
    if k < 2:
        return r.observation()
    idx = rng.integers(0, k, size=k)
    steps, comps, exchs = cols

    def med(a):
        if a.size != k:                       # not one figure per repeat: kept as it is
            return _median([None if np.isnan(v) else float(v) for v in a])
        a = a[idx]
        a = a[~np.isnan(a)]
        return float(np.median(a)) if a.size else None
    return costmodel.Observation(r.ranks, r.ranks_per_node, r.batch_size, r.wire_bytes,
                                 float(np.median(steps[idx])), med(comps), med(exchs))


def _without_repeats(r: Row, left: set) -> Optional[Row]:
    """The row without the repeats in ``left`` (None when they were all its runs)."""
    if not left.intersection(r.repeats):
        return r
    keep = [i for i, rep in enumerate(r.repeats) if rep not in left]
    if not keep:
        return None
    steps = [r.step_times[i] for i in keep]
    comps = [r.computes[i] for i in keep] if len(r.computes) == len(r.repeats) else r.computes
    return replace(r, step_times=steps, repeats=[r.repeats[i] for i in keep],
                   step_time=float(np.median(steps)), computes=comps)


def extrapolate(model: StepModel, scaling: str, batch: int, nbytes: float,
                networks: Dict[str, Network], ranks: Sequence[int]) -> List[dict]:
    """Model throughput and efficiency at larger rank counts on each network (model only).

    Each network brings its own alpha and beta; compute, fixed cost, gamma and the window are
    the study's. ``batch`` is the per-rank batch (weak) or the global batch (strong); a
    strong-scaling point stops where the per-rank batch would fall below one sample.
    """
    if not model.compute_probed:
        raise ValueError("compute is not probed in these runs, so the model's compute(b) is not "
                         "determined")
    out = []
    for key, net in networks.items():
        t1 = float(model.step_time(1, batch, nbytes, network=net, measured=False))
        for p in ranks:
            b = batch if scaling == "weak" else batch / p
            if b < 1:
                break
            t = float(model.step_time(p, b, nbytes, network=net, measured=False))
            x, x1 = p * b / t, batch / t1
            e = float(model.exchange(p, nbytes, net))
            shown = e - float(model.hidden(p, e, model.compute(b, p, measured=False)))
            out.append({"network": key, "label": net.name, "ranks": p, "batch_per_rank": b,
                        "step_time_s": t, "throughput": x, "speedup": x / x1,
                        "efficiency": x / x1 / p, "exchange_share": shown / t})
    return out


# --- the published comparison (Horovod, Sergeev & Del Balso 2018) -------------------------------

# Published: 128 servers x 4 Pascal (P100) GPUs = 512 GPUs on 25 Gbit/s RoCE; scaling efficiency
# 90% for ResNet-101 and 68% for VGG-16 (tf_cnn_benchmarks, synthetic data, batch 64 per GPU).
# Per-GPU img/s: published tf_cnn_benchmarks P100 fp32 figures (ResNet-101 interpolated by FLOPs
# between ResNet-50's 219 and ResNet-152's 91). Parameters: the models' published counts.
PUBLISHED = [
    {"model": "ResNet-101", "params": 44.5e6, "published": 0.90, "img_per_s": 129.0},
    {"model": "VGG-16", "params": 138.0e6, "published": 0.68, "img_per_s": 154.0},
]
PUBLISHED_SETUP = {
    "gpus": 512, "batch_per_gpu": 64, "network": "roce-25g",   # published
    "fusion_bytes": 64 * 2 ** 20,     # HOROVOD_FUSION_THRESHOLD default: one ring per 64 MiB
    "gamma": 1.0 / 500e9,             # assumed: reduction on the GPU at ~500 GB/s
}
PUBLISHED_INPUTS = {
    "published": "GPU count, batch per GPU, network (25 GbE RoCE), the efficiencies, per-GPU "
                 "throughput (tf_cnn_benchmarks), parameter counts",
    "assumed": "α and β of the 25 GbE preset (90% of line rate), γ = 1/(500 GB/s), one ring "
               "per 64 MiB fusion buffer (Horovod's default threshold)",
    "measured": "the window (share of the compute the exchange hides behind), where this study "
                "measured one at as many ranks (none is carried beyond the ranks it was "
                "measured at)",
    "derived": "the window the model needs to meet each published figure",
}


def published_comparison(setup: Optional[dict] = None,
                         measured_window: Optional[float] = None) -> List[dict]:
    """The model at 512 GPUs for the Horovod paper's set-up, without overlap, beside the published
    efficiency; the share of the compute that the exchange would have to hide behind for the
    model to meet it (derived, not chosen; over 100% cannot be met by hiding alone); and, when a
    study measured one, the model with the window measured there."""
    s = dict(PUBLISHED_SETUP, **(setup or {}))
    net = PRESETS[s["network"]]
    p = s["gpus"]
    out = []
    for m in PUBLISHED:
        n = m["params"] * 4
        t_c = s["batch_per_gpu"] / m["img_per_s"]
        rings = max(1, math.ceil(n / s["fusion_bytes"]))
        t_ex = (costmodel.predict("ring", n, p, rings * net.alpha, net.beta, s["gamma"]))
        eff = t_c / (t_c + t_ex)
        need = (t_ex - (t_c / m["published"] - t_c)) / t_c
        out.append({"model": m["model"], "gradient_MB": n / 1e6, "compute_s": t_c,
                    "exchange_s": t_ex, "model_efficiency_no_overlap": eff,
                    "published_efficiency": m["published"],
                    "difference_points": (eff - m["published"]) * 100,
                    "window_needed": max(0.0, need),
                    "measured_window": measured_window,
                    "model_efficiency_measured_window":
                        None if measured_window is None else
                        t_c / (t_c + t_ex - min(t_ex, measured_window * t_c))})
    return out


# --- the whole study ------------------------------------------------------------------------------

@dataclass
class StudyAnalysis:
    """Everything the report shows, computed once; ``report.json`` is this object serialised."""

    study: str
    workload: Optional[str]
    scaling: str
    scaling_source: str                # where the scaling kind came from
    calibration: str                   # "runs" or "fit:<path>"
    records: int
    rows: List[Row]
    models: Dict[str, StepModel]
    extrapolation: List[dict]          # empty when the first axis's model is not determined
    extrapolation_axis: str
    extrapolation_batch: int
    extrapolation_bytes: float
    published: List[dict]
    cores: Optional[int] = None
    all_points_models: Dict[str, StepModel] = field(default_factory=dict)
    convergence: List[dict] = field(default_factory=list)   # time to accuracy (convergence.py)
    budget: List[dict] = field(default_factory=list)        # where the efficiency goes (budget.py)
    remedies: List[dict] = field(default_factory=list)      # MODEL: what the standard remedies give
    systems: List[dict] = field(default_factory=list)       # asynchronous and pipeline runs' own
    provenance: Optional[provenance.Provenance] = None      # what was pooled (provenance.py)
    prediction: dict = field(default_factory=dict)          # held-out points, part by part
    extrapolation_why: str = ""        # why nothing is extrapolated ("" when something is)
    extrapolation_flat: List[str] = field(default_factory=list)   # networks left out: no effect
    extrapolation_source: str = ""     # what the extrapolated parameters were fitted to

    @property
    def axes(self) -> List[str]:
        return axes(self.rows)

    def as_dict(self) -> dict:
        return {"schema": "hpcdl.report/2", "study": self.study, "workload": self.workload,
                "scaling": self.scaling, "scaling_source": self.scaling_source,
                "calibration": self.calibration, "records": self.records,
                "rows": [r.as_dict() for r in self.rows],
                "models": {k: m.as_dict() for k, m in self.models.items()},
                "extrapolation": {"axis": self.extrapolation_axis, "batch": self.extrapolation_batch,
                                  "gradient_bytes": self.extrapolation_bytes,
                                  "points": self.extrapolation,
                                  "why_none": self.extrapolation_why or None,
                                  "left_out": self.extrapolation_flat,
                                  "fitted_to": self.extrapolation_source},
                "published": {"setup": PUBLISHED_SETUP, "inputs": PUBLISHED_INPUTS,
                              "rows": self.published},
                "cores": self.cores,
                "all_points_models": {k: m.as_dict() for k, m in self.all_points_models.items()},
                "convergence": self.convergence, "budget": self.budget,
                "remedies": self.remedies, "systems": self.systems,
                "provenance": self.provenance.as_dict() if self.provenance else None,
                "prediction": self.prediction}


def declared_scaling(recs: Iterable[dict], given: Optional[str] = None):
    """(scaling kind, where it came from): the study's declaration in the records, else ``given``."""
    kinds = (set(recs.scalings) if isinstance(recs, Digest) else
             {_get(r, "declared", "scaling") for r in recs} - {None})
    if len(kinds) > 1:
        raise ValueError(f"the records declare different scaling kinds {sorted(kinds)}: "
                         "report one study at a time")
    if kinds:
        kind = kinds.pop()
        if given and given != kind:
            raise ValueError(f"--scaling {given} contradicts the study's declared {kind} scaling")
        return kind, "declared by the study"
    if given:
        return given, "given on the command line"
    raise ValueError("the records do not declare strong or weak scaling (they were not made by a "
                     "study): give --scaling strong or --scaling weak")


def analyse(recs: "Iterable[dict] | Digest", name: str, fit_doc: Optional[dict] = None,
            fit_label: Optional[str] = None, scaling: Optional[str] = None,
            algorithm: Optional[str] = None, max_ranks: int = 1024, allow_mixed: bool = False,
            exchange_bench: Optional[str] = None, loop_bench: Optional[str] = None,
            spread_bench: Optional[str] = None,
            forecast: Sequence[int] = predict.FORECAST) -> StudyAnalysis:
    """The analysis of one study's records, or of what :class:`.reading.Digest` kept of them
    as they were read (raises ValueError on what cannot be analysed, and
    :class:`provenance.MixedRecords` on records of different code, software, study files,
    processors or box settings unless ``allow_mixed``). ``exchange_bench``, ``loop_bench`` and
    ``spread_bench``: see :func:`_predicted`; ``forecast``: the node counts the part-by-part
    model forecasts."""
    recs = recs if isinstance(recs, Digest) else Digest.of(recs)
    origin = recs.origin.result(allow_mixed)
    rows = rows_of(recs.runs)
    if not rows:
        raise ValueError("no record has metrics.throughput")
    kind, source = declared_scaling(recs, scaling)
    # a bench fit (declared or given) calibrates the exchange: alone, with the study's every
    # point for the rest; beside a declared calibration subset, with the subset's points
    nodes_max = declared_nodes_max(recs)
    fit_for = _fit_for(fit_doc, fit_label)
    cores = recs.cores
    flag_rows(rows, cores)
    # an axis whose records time no step (a script seen only from outside) has no model, nor
    # one whose step is no allreduce (the asynchronous parameter server, a pipeline)
    timed = [a for a in axes(rows)
             if any(math.isfinite(r.step_time) and r.modelled for r in rows if r.axis == a)]
    pattern, loop = exchange_bench or declared_bench(recs), loop_bench or declared_loop(recs)
    spread = spread_bench or declared_spread(recs)
    ahead = _predicted(recs, origin, nodes_max, kind, fit_for, pattern, loop, spread, forecast)
    _heldout_from(ahead, rows)
    for r in rows:
        r.fitted = r.nodes <= nodes_max if nodes_max else r.fitted
    models, everything, first, batch, extra, why, flat, src = _whole_step(
        rows, timed, kind, nodes_max, fit_for, algorithm, fit_doc is not None, max_ranks,
        bool(ahead))
    spent = budget.of_points(recs.budget, rows)
    return StudyAnalysis(
        study=name, workload=recs.workload, scaling=kind,
        scaling_source=source, calibration=_calibration_text(fit_label if fit_doc else None,
                                                             nodes_max, pattern, loop, spread),
        records=recs.records, rows=rows, models=models, extrapolation=extra,
        extrapolation_axis=first, extrapolation_batch=batch,
        extrapolation_bytes=next(r.wire_bytes for r in rows if r.axis == first), cores=cores,
        extrapolation_why=why, extrapolation_flat=flat,
        extrapolation_source=("every point of the axis" if first in everything else
                              f"{src.configs} multi-rank configurations" if src else ""),
        published=published_comparison(measured_window=None if why else _measured_window(src)),
        all_points_models=everything,
        convergence=recs.curves.result({(r.axis, r.ranks): r.speedup for r in rows}),
        # where the part-by-part prediction gives the remedies (and checks them), it alone does
        budget=spent, remedies=[] if ahead else remedies(rows, models, spent, kind),
        systems=systems_of(recs.systems),
        provenance=origin, prediction=ahead)


def _whole_step(rows: List[Row], timed: List[str], kind: str, nodes_max: int, fit_for,
                algorithm: Optional[str], from_fit: bool, max_ranks: int, predicted: bool):
    """The whole-step model per axis and its extrapolation, for a study the part-by-part model
    does not predict (one model: where it does, ``predicted``, none is made)."""
    models: Dict[str, StepModel] = {}
    everything: Dict[str, StepModel] = {}
    for axis in ([] if predicted else timed):
        sel = [r for r in rows if r.axis == axis]
        algo = algorithm or costmodel.algorithm_for(sel[0].backend, sel[0].compression)
        fit = fit_for(sel[0].backend, sel[0].compression) if fit_for else None
        if nodes_max:
            models[axis] = calibrate_on_few_nodes(sel, algo, nodes_max, fit=fit)
            everything[axis] = costmodel.calibrate([r.observation() for r in sel], algo,
                                                   bandwidth_only=True)
            continue
        models[axis] = costmodel.calibrate([r.observation() for r in sel], algo, fit)
        predict_rows(sel, models[axis])
        heldout_errors(sel, algo, fit)
    # Extrapolate the first axis whose model is determined, uncompressed ones first. The network
    # presets need only the study's compute; "measured here" needs its alpha and beta too.
    order = sorted(models, key=lambda a: (not models[a].determined,
                                          not models[a].compute_probed, not a.endswith("/none")))
    first = order[0] if order else axes(rows)[0]
    base = [r for r in rows if r.axis == first]
    batch = base[0].global_batch if kind == "strong" else base[0].batch_size
    src = everything.get(first) or models.get(first)
    extra, why, flat = [], _undetermined(src, from_fit), []
    if predicted:
        why = "the part-by-part model forecasts instead (its section)"
    if not why:
        nets = {"local": Network("measured here (calibrated)", src.alpha, src.beta,
                                 "this study's fit"), **PRESETS}
        extra = extrapolate(src, kind, batch, base[0].wire_bytes, nets,
                            [p for p in EXTRAPOLATE_RANKS if p <= max_ranks])
        extra, flat = _network_effect(extra)
    return models, everything, first, batch, extra, why, flat, src


def _predicted(recs: Digest, origin, nodes_max: int, kind: str, fit_for, pattern: Optional[str],
               loop_bench: Optional[str], spread_bench: Optional[str] = None,
               forecast: Sequence[int] = predict.FORECAST) -> dict:
    """:func:`predict.of_points` of the records: the held-out exchange from the tuning files
    ``pattern`` names (a path pattern; else the study's declared one, if any), a Horovod axis's
    compute beyond its calibration after the loop file ``loop_bench`` (:mod:`.loop_share`; used
    only when every record ran on the machine it measured), every axis's slowest rank there
    drawn from the spread file ``spread_bench`` (:mod:`.host_spread`, likewise)."""
    machines = {key[2] for key in origin.groups}
    machine = machines.pop() if len(machines) == 1 else None
    loop = LoopShare(loop_bench, machine) if loop_bench and nodes_max else None
    spread = HostSpread(spread_bench, machine) if spread_bench and nodes_max else None
    return predict.of_points(recs.points, nodes_max, kind, exchange_fit=fit_for,
                             bench=Bench(pattern, machine=machine) if pattern and nodes_max else None,
                             loop=loop, spread=spread, forecast=forecast)


def _calibration_text(fit_label: Optional[str], nodes_max: int,
                      bench: Optional[str] = None, loop: Optional[str] = None,
                      spread: Optional[str] = None) -> str:
    if spread and nodes_max:
        return (_calibration_text(fit_label, nodes_max, bench, loop)
                + f"; their slowest rank from the nodes' spread in {spread}")
    if loop and nodes_max:
        return (_calibration_text(fit_label, nodes_max, bench)
                + f"; their compute after the share of a node Horovod's loop takes in {loop}")
    if bench and nodes_max:
        return (f"runs with at most {nodes_max} node(s); the other points are predicted, their "
                f"exchange from the tuning files {bench} where those measured it"
                + (f", else from fit:{fit_label}" if fit_label else ""))
    if fit_label and nodes_max:
        return (f"runs with at most {nodes_max} node(s), the exchange from fit:{fit_label}; the "
                "other points are predicted")
    if fit_label:
        return f"fit:{fit_label}"
    return (f"runs with at most {nodes_max} node(s); the other points are predicted"
            if nodes_max else "runs")


def _heldout_from(ahead: dict, rows: Sequence[Row]) -> None:
    """Each held-out row's step error as the part-by-part prediction made it."""
    errors = {(ax["axis"], pt["nodes"]): pt["error"]["step"]
              for ax in ahead.get("axes", []) for pt in ax["points"] if not pt["fitted"]}
    for r in rows:
        if (r.axis, r.nodes) in errors and r.ranks == r.nodes:
            r.heldout_error = errors[(r.axis, r.nodes)]


def _fit_for(fit_doc: Optional[dict], label: Optional[str]):
    """``(backend, compression) -> the fit's entry`` (its source naming ``label``), or None."""
    if fit_doc is None:
        return None

    def entry(backend: str, compression: str) -> Optional[dict]:
        fit = load_fit(fit_doc, backend, compression)
        if fit is not None and label:
            fit["_source"] = f"{fit['_source']} from {label}"
        return fit
    return entry


def systems_of(acc: Systems) -> List[dict]:
    """Per configuration of asynchronous or pipeline runs, their own figures pooled over the
    repeats: updates per second, the staleness histogram and its mean, p95 and max, the largest
    lead and the time held by the bound; the bubble against GPipe's and the bytes per step."""
    out = []
    for (axis, ranks), g in sorted(acc.groups.items()):
        row = {"axis": axis, "ranks": ranks, "runs": g["runs"]}
        asy = g["async"]
        if asy:
            hist: Dict[str, int] = {}
            for a in asy:
                for k, n in a["hist"].items():
                    hist[k] = hist.get(k, 0) + int(n)
            vals = sorted(int(k) for k, n in hist.items() for _ in range(n))
            row.update(kind="async", staleness_bound=asy[0]["staleness_bound"],
                       workers=asy[0]["workers"],
                       updates_per_s=float(np.median([a["updates_per_s"] for a in asy])),
                       staleness_hist=dict(sorted(hist.items(), key=lambda kv: int(kv[0]))),
                       staleness_mean=float(np.mean(vals)) if vals else None,
                       staleness_p95=vals[min(len(vals) - 1, max(0, math.ceil(0.95 * len(vals))
                                                                 - 1))] if vals else None,
                       staleness_max=vals[-1] if vals else None,
                       lead_max=max(a["lead_max"] for a in asy),
                       held_s=float(np.median([a["held_s"] for a in asy])))
        pipe = g["pipeline"]
        if pipe:
            exp = [p["bubble_expected"] for p in pipe if p.get("bubble_expected") is not None]
            row.update(kind="pipeline", stages=pipe[0]["stages"],
                       micro_batches=pipe[0]["micro_batches"],
                       bubble=float(np.median([p["bubble"] for p in pipe])),
                       bubble_theory=pipe[0]["bubble_theory"],
                       bubble_expected=float(np.median(exp)) if exp else None,
                       bytes_per_step=int(np.median([p["bytes_per_step"] for p in pipe])),
                       ring_bytes_per_rank=pipe[0]["ring_bytes_per_rank_at_k"])
        out.append(row)
    return out


def remedies(rows: Sequence[Row], models: Dict[str, StepModel], spent: List[dict],
             kind: str) -> List[dict]:
    """MODEL: for each axis whose largest point loses most to the exchange or the fixed cost, the
    efficiency the cost model predicts there with each standard remedy it can evaluate: fp16
    gradients (half the bytes), twice the batch per rank, a faster network preset. Nothing for
    a loss the model has no term for (compute slowdown, stragglers, input)."""
    out = []
    for axis, m in models.items():
        sel = [r for r in rows if r.axis == axis]
        top = max(sel, key=lambda r: r.ranks)
        entry = next((b for b in spent if b["axis"] == axis and b["ranks"] == top.ranks), {})
        shares = (entry.get("budget") or {}).get("shares")
        if not shares or not m.determined or not m.compute_probed or top.ranks < 2:
            continue
        dominant = max(budget.PARTS, key=lambda k: shares[k])
        row = {"axis": axis, "nodes": top.nodes, "ranks": top.ranks, "dominant": dominant,
               "measured_efficiency": top.efficiency, "options": []}
        if dominant in ("exchange", "fixed"):
            p, n = top.ranks, top.wire_bytes
            b = top.batch_size
            row["options"] = [
                {"remedy": name, "efficiency": _model_efficiency(m, kind, p, bb, nn, net)}
                for name, bb, nn, net in (
                    ("as measured (MODEL)", b, n, None),
                    ("fp16 gradients (half the bytes)", b, n / 2, None),
                    ("twice the batch per rank", 2 * b, n, None),
                    *((f"network: {net.name}", b, n, net) for net in PRESETS.values()))]
            if any(o["efficiency"] > 1 for o in row["options"]):
                row["note"] = (f"above 100%: the model's one rank alone computes {m.single:.2f}x "
                               "as long as a rank among several (single), so the baseline it "
                               "divides by is slow; check the baseline run's notes")
        out.append(row)
    return out


def _undetermined(m: Optional[StepModel], from_fit: bool) -> str:
    """Why a model's parameters cannot be extrapolated ("" when they can)."""
    if m is None:
        return "no axis with a timed step"
    if not m.compute_probed:
        return "the compute is not probed in these runs, so compute(b) is not determined"
    if not m.determined:
        return "α and β are not determined from these runs (" + "; ".join(m.why) + ")"
    if m.configs < 2 and not from_fit:
        return (f"the exchange was measured at {m.configs} multi-rank configuration(s), and one "
                "cannot tell latency from bandwidth nor fix the window and the multi-rank "
                "compute; measure more rank counts or calibrate from 'hpcdl bench fit' (--fit)")
    return ""


NETWORK_EFFECT = 0.01     # a network whose exchange is under 1% of every step shows no effect


def _network_effect(extra: List[dict]):
    """(the points of networks whose exchange shows in the step, the networks left out): a
    column whose exchange share stays under ``NETWORK_EFFECT`` at every rank count repeats the
    compute's ratio, not a network result."""
    nets = {e["network"] for e in extra}
    flat = sorted(n for n in nets if all(e["exchange_share"] < NETWORK_EFFECT
                                         for e in extra if e["network"] == n))
    labels = {e["network"]: e["label"] for e in extra}
    return [e for e in extra if e["network"] not in flat], [labels[n] for n in flat]


def _model_efficiency(m: StepModel, kind: str, p: int, b: float, nbytes: float, net) -> float:
    """The model's efficiency at p ranks of batch b each, against one rank (weak: the same b;
    strong: the whole global batch p·b on one rank)."""
    t = float(m.step_time(p, b, nbytes, network=net, measured=False))
    b1 = b if kind == "weak" else b * p
    t1 = float(m.step_time(1, b1, nbytes, network=net, measured=False))
    return (p * b / t) / (b1 / t1) / p


def _measured_window(model: StepModel) -> Optional[float]:
    """The study's window where it reaches the published comparison's GPU count (measured at as
    many ranks or more), else None: it is not carried beyond the ranks it was measured at."""
    return (model.window if model.window_measured
            and model.window_ranks >= PUBLISHED_SETUP["gpus"] else None)


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
