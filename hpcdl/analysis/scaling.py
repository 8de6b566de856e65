"""A study's rows: records pooled by configuration, speedup, efficiency and Karp-Flatt against
the smallest run of each axis, and the flags that say what a figure cannot support."""
from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import asdict, dataclass, field
from typing import Iterable, List, Optional, Sequence

import numpy as np

from .reading import NONE, Digest, Repeats, axis_name
from .units import seconds
from .. import costmodel


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
    heldout_error: Optional[float] = None     # the part-by-part model's, at a held-out point
    flags: List[str] = field(default_factory=list)
    network: str = ""                # the link rate the point needed ([axes] network), else ""
    lr_rule: str = ""                # the learning-rate rule ([axes] lr_scaling), "" elsewhere
    fitted: bool = True              # the model was calibrated on this row (else: predicted)
    variant: str = ""                # the study's [variants] name, "" elsewhere
    tuning: str = ""                 # [axes] tuning: "default" or "tuned", "" elsewhere
    modelled: bool = True            # the allreduce model describes the step (see modelled())

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

    @property
    def ring_bound_s(self) -> Optional[float]:
        """The step's bytes in a ring allreduce at the link's line rate ([axes] network), each
        link busy both ways at once: the least any allreduce can take. None at one rank, with
        several ranks per node, or where the records name no link rate."""
        if self.ranks <= 1 or self.ranks_per_node != 1 or not self.network:
            return None
        return costmodel.ring_bound(self.wire_bytes, self.nodes,
                                    costmodel.rate_bits(self.network))

    @property
    def over_bound(self) -> Optional[tuple]:
        """The step over its physical bound: (over the measured compute and the line-rate ring
        overlapped, over the two one after the other); None where either is not known."""
        ring = self.ring_bound_s
        if ring is None or self.compute_s is None or not self.step_time > 0:
            return None
        return (self.step_time / max(self.compute_s, ring),
                self.step_time / (self.compute_s + ring))

    def as_dict(self) -> dict:
        d = asdict(self)
        d.update(ci95=self.ci95, rest_share=self.rest_share, axis=self.axis,
                 wire_bytes=self.wire_bytes)
        if self.over_bound is not None:
            d.update(ring_bound_s=self.ring_bound_s, step_over_bound=list(self.over_bound))
        return d


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
        out.append(f"probed compute ({seconds(r.compute_s)}) ≥ step ({seconds(r.step_time)}): "
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
                        f"the step went from {seconds(base.step_time)} to {seconds(r.step_time)}: "
                        "per-step costs that do not shrink with the batch dominate")
    return cause + "; per-step exchange and overhead exceed the compute saved"
