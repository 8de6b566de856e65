"""One pass over a study's records: each record is reduced, as it is read, to the few figures
every part of the analysis computes with, and then dropped. A report's memory therefore grows
with a study's configurations and repeats' figures (a few hundred bytes a record), not with its
records (tens of kilobytes each once parsed): :class:`Digest` is what the analysis keeps.

What each part keeps of a record:

- the scaling table (:class:`Repeats`, from :func:`run_of`): throughput, step, compute and
  exchange alone, the repeat;
- provenance (:class:`.provenance.Origin`): the code, study file and machine it came from,
  its interval and machine;
- the efficiency budget (:class:`.budget.Point`): the typical and slowest ranks' phases, the
  stragglers it names, Horovod's timeline;
- the part-by-part prediction (:class:`.measured.Runs`, from :func:`.measured.entry`): the
  slowest rank's compute and exchange, the ranks' spread;
- time to accuracy (:class:`.convergence.Curves`): the evaluations summed per step;
- asynchronous and pipeline runs (:class:`Systems`): their own figures per configuration;
- the report's words about the runs (:class:`Runs`): hosts, jobs, versions, the commands.
"""
from __future__ import annotations

import sys
from collections import Counter, OrderedDict
from array import array
from typing import Dict, Iterable, NamedTuple, Optional, Tuple

from . import budget, convergence, provenance
from ..model import measured
from ..model.inputs import Inputs
from .. import machine
from ..costmodel import OMPI_ALLREDUCE_NAMES
from ..records import lookup as _get, ok_train


def record_axis(rec: dict) -> Tuple[str, str, str, str, str, str]:
    """(backend, compression, link rate, learning-rate rule, variant, tuning) of a record:
    what keeps its configurations apart beside the layout ("" where a study has no such axis)."""
    params = rec.get("params") or {}
    return (params.get("backend", "horovod"), params.get("compression", "none"),
            _get(rec, "point", "network") or machine.link_rate(rec),
            _get(rec, "point", "lr_scaling") or "", _get(rec, "point", "variant") or "",
            _get(rec, "point", "tuning") or "")


def axis_name(backend: str, compression: str, network: str = "", lr_rule: str = "",
              variant: str = "", tuning: str = "") -> str:
    """How a report names an axis: horovod/none, horovod/fp16@200mbit, ... lr:linear,
    ... settings:tuned; a study's variant by its name."""
    return ((variant or f"{backend}/{compression}") + (f"@{network}" if network else "")
            + (f" lr:{lr_rule}" if lr_rule else "") + (f" settings:{tuning}" if tuning else ""))


def modelled(rec: dict) -> bool:
    """Whether the allreduce cost model describes a record's step: not for the asynchronous
    parameter server, nor for a pipeline (neither averages gradients over all ranks)."""
    params = rec.get("params") or {}
    return params.get("backend") != "ps-async" and params.get("parallel", "data") == "data"


def exchange_alone(rec) -> Optional[float]:
    """The exchange timed on its own: probed, or timed around a flat backend's call."""
    split = _get(rec, "metrics", "split") or {}
    return split.get("exchange_alone_s", split.get("exchange_s") if split.get("method") == "timed"
                     else None)


def row_key(rec: dict) -> tuple:
    """(axis, nodes, ranks): the row a record belongs to (as the scaling table groups)."""
    lay = rec.get("layout") or {}
    return (axis_name(*record_axis(rec)), int(lay.get("nodes") or 1), int(lay.get("size") or 1))


class Run(NamedTuple):
    """One record's figures for the scaling table."""

    mean: float
    std: float
    n: int
    unit: str
    step: Optional[float]           # the run's median step (None: not timed)
    compute: Optional[float]        # metrics.split.compute_s
    exchange: Optional[float]       # the exchange timed alone (multi-rank runs)
    repeat: Optional[int]
    batch: int
    global_batch: int
    gradient_bytes: int
    modelled: bool


def run_key(rec: dict) -> tuple:
    """(backend, compression, nodes, ranks per node, ranks, network, lr rule, variant, tuning)."""
    lay = rec.get("layout") or {}
    size, nodes = int(lay.get("size") or 1), int(lay.get("nodes") or 1)
    rpn = int(lay.get("ranks_per_node") or max(1, size // nodes))
    backend, comp, net, lr_rule, variant, tuning = record_axis(rec)
    return (backend, comp, nodes, rpn, size, net, lr_rule, variant, tuning)


def run_of(rec: dict) -> Optional[Run]:
    """What the scaling table keeps of an ok train record with a throughput, else None."""
    if not ok_train(rec):
        return None
    thr = _get(rec, "metrics", "throughput")
    if not isinstance(thr, dict) or thr.get("mean") is None:
        return None
    params = rec.get("params") or {}
    size = int((rec.get("layout") or {}).get("size") or 1)
    repeat = _get(rec, "point", "repeat")
    return Run(thr["mean"], thr.get("std", 0.0), thr.get("n", 1),
               sys.intern(str(thr.get("unit", "samples/s"))),
               _get(rec, "metrics", "step_time", "median"),
               _get(rec, "metrics", "split", "compute_s"),
               exchange_alone(rec) if size > 1 else None,
               None if repeat is None else int(repeat), int(params.get("batch_size") or 0),
               int(params.get("global_batch") or 0), int(rec.get("gradient_bytes") or 0),
               modelled(rec))


NONE = -(1 << 63)      # a repeat number not given


def _f(x) -> float:
    return float("nan") if x is None else float(x)


class Repeats:
    """One configuration's runs for the scaling table, a column each (NaN, or :data:`NONE` for
    the repeat, where a run has no such figure), and what the first run (and the first timed
    run) says of the configuration: unit, batch, global batch, gradient bytes, modelled."""

    __slots__ = ("mean", "std", "n", "step", "compute", "exchange", "repeat", "first",
                 "first_timed")

    def __init__(self):
        for k in ("mean", "std", "n", "step", "compute", "exchange"):
            setattr(self, k, array("d"))
        self.repeat = array("q")
        self.first: Optional[Run] = None
        self.first_timed: Optional[Run] = None

    def add(self, run: Run) -> None:
        self.first = self.first or run
        if run.step is not None and self.first_timed is None:
            self.first_timed = run
        self.mean.append(float(run.mean))
        self.std.append(_f(run.std))
        self.n.append(float(run.n))
        self.step.append(_f(run.step))
        self.compute.append(_f(run.compute))
        self.exchange.append(_f(run.exchange))
        self.repeat.append(NONE if run.repeat is None else run.repeat)

    def merge(self, other: "Repeats") -> None:
        self.first = self.first or other.first
        self.first_timed = self.first_timed or other.first_timed
        for k in ("mean", "std", "n", "step", "compute", "exchange", "repeat"):
            getattr(self, k).extend(getattr(other, k))

    def __len__(self) -> int:
        return len(self.mean)


class Systems:
    """Asynchronous and pipeline runs' own figures, per (axis, ranks), as read."""

    def __init__(self):
        self.groups: Dict[tuple, dict] = {}

    def add(self, rec: dict, axis: str) -> None:
        m = rec.get("metrics") or {}
        if rec.get("status", "ok") != "ok" or not (m.get("async") or m.get("pipeline")):
            return
        key = (axis, int((rec.get("layout") or {}).get("size") or 1))
        g = self.groups.setdefault(key, {"runs": 0, "async": [], "pipeline": []})
        g["runs"] += 1
        a = m.get("async")
        if a:
            g["async"].append({
                "staleness_bound": a["staleness_bound"], "workers": a["workers"],
                "updates_per_s": a["updates_per_s"],
                "hist": dict((a["staleness"].get("hist") or {})),
                "lead_max": a.get("lead_max", 0),
                "held_s": sum(w.get("held_s", 0.0) for w in a["per_worker"])})
        p = m.get("pipeline")
        if p:
            g["pipeline"].append({k: p.get(k) for k in (
                "stages", "micro_batches", "bubble", "bubble_theory", "bubble_expected",
                "bytes_per_step", "ring_bytes_per_rank_at_k")})

    def merge(self, other: "Systems") -> None:
        for key, g in other.groups.items():
            mine = self.groups.setdefault(key, {"runs": 0, "async": [], "pipeline": []})
            mine["runs"] += g["runs"]
            mine["async"] += g["async"]
            mine["pipeline"] += g["pipeline"]


def settings_of(rec: dict) -> Optional[str]:
    """The exchange settings a record ran with, in words (None for records made before runs
    recorded them): the tuning file's pick or the environment's Horovod settings, and the
    allreduce algorithm the MPI library ran, as read back from it."""
    t = rec.get("tuning")
    if not isinstance(t, dict):
        return None
    if t.get("source") == "default":
        env = t.get("settings") or {}
        words = "defaults" + (" with " + ", ".join(f"{k}={v}" for k, v in sorted(env.items()))
                              if env else "")
    else:
        words = f"{t.get('pick') or 'tuned'} (tuning file {t.get('file')}, from {t.get('source')})"
    alg = (t.get("in_force") or {}).get("algorithm")
    ran = "the library's choice" if alg == 0 else OMPI_ALLREDUCE_NAMES.get(alg, alg)
    return words + (f"; MPI allreduce ran {ran}" if alg is not None else "")


class Runs:
    """What the report says about the runs themselves: hosts, jobs, commits, versions, threads,
    when; the study file, the machines, the exchange settings per configuration, and the latest
    record of each point of a user's command."""

    def __init__(self):
        self.hosts: Counter = Counter()
        self.jobs: Counter = Counter()
        self.schedulers: Counter = Counter()     # slurm, gridengine: whose jobs ran the records
        self.commits: Counter = Counter()
        self.versions: Counter = Counter()
        self.cpus: Counter = Counter()
        self.settings: "OrderedDict[str, Counter]" = OrderedDict()
        self.threads: Counter = Counter()
        self.first_time: Optional[str] = None
        self.last_time: Optional[str] = None
        self.platform: Optional[str] = None
        self.cpu_count = None
        self.study_file: Optional[str] = None
        self.machines = machine.Seen()
        self.commands: "OrderedDict[str, dict]" = OrderedDict()
        self.recorded_commands = 0      # records of a command with hpcdl's callback in it

    def add(self, rec: dict, first: bool) -> None:
        man = rec.get("manifest") or {}
        for h in man.get("hosts") or (rec.get("layout") or {}).get("hosts") or []:
            self.hosts[h] += 1
        job = man.get("slurm") or {}          # the batch job's facts, Slurm's or Grid Engine's
        if job.get("job_id"):
            self.jobs[str(job["job_id"])] += 1
            self.schedulers[job.get("scheduler") or "slurm"] += 1
        if man.get("git_commit"):
            self.commits[man["git_commit"][:12]] += 1
        v = man.get("versions") or {}
        self.versions[tuple(sorted((k, str(x)) for k, x in v.items() if x))] += 1
        if man.get("cpu"):
            self.cpus[str(man["cpu"])] += 1
        self.threads[(rec.get("params") or {}).get("threads_per_rank")] += 1
        t = rec.get("time")
        if t:
            self.first_time = t if self.first_time is None else min(self.first_time, t)
            self.last_time = t if self.last_time is None else max(self.last_time, t)
        if first:
            self.platform, self.cpu_count = man.get("platform"), man.get("cpu_count")
        self.study_file = self.study_file or (rec.get("declared") or {}).get("study_file")
        self.machines.add(rec)
        cmd = rec.get("command")
        if isinstance(cmd, dict):
            self.recorded_commands += bool(cmd.get("recorder"))
            pid = str(_get(rec, "point", "id", default=len(self.commands)))
            self.commands.pop(pid, None)
            self.commands[pid] = {"command": cmd, "status": rec.get("status"),
                                  "size": _get(rec, "layout", "size"),
                                  "throughput": _get(rec, "metrics", "throughput")}

    def merge(self, other: "Runs") -> None:
        """Add what ``other`` gathered of the records that followed this one's (the first
        record's platform is :class:`Digest`'s to carry over)."""
        for name in ("hosts", "jobs", "schedulers", "commits", "versions", "cpus", "threads"):
            getattr(self, name).update(getattr(other, name))
        if other.first_time is not None:
            self.first_time = min(filter(None, (self.first_time, other.first_time)))
            self.last_time = max(filter(None, (self.last_time, other.last_time)))
        self.study_file = self.study_file or other.study_file
        self.machines.merge(other.machines)
        for pid, rec in other.commands.items():
            self.commands.pop(pid, None)
            self.commands[pid] = rec
        self.recorded_commands += other.recorded_commands
        for axis, words in other.settings.items():
            self.settings.setdefault(axis, Counter()).update(words)

    def add_settings(self, axis: str, rec: dict) -> None:
        words = settings_of(rec) if ok_train(rec) else None
        if words is not None:
            self.settings.setdefault(axis, Counter())[words] += 1


class Digest:
    """What the analysis keeps of a study's records, filled one record at a time by
    :meth:`add` (see the module's docstring)."""

    def __init__(self):
        self.records = 0
        self.study: Optional[str] = None
        self.workload: Optional[str] = None
        self.cores = None
        self.runs: "OrderedDict[tuple, Repeats]" = OrderedDict()
        self.origin = provenance.Origin()
        self.budget: Dict[tuple, budget.Point] = {}
        self.points: Dict[tuple, measured.Runs] = {}
        self.curves = convergence.Curves()
        self.systems = Systems()
        self.about = Runs()
        self.scalings: set = set()
        self.model: Optional[Inputs] = None     # the first record's model inputs, where declared
        self._shared: Dict[tuple, tuple] = {}

    def _slot(self, table: dict, key: tuple, make):
        """``table[key]``, made by ``make()`` the first time, its key one object for all the
        tables (a key is kept once, not once per record)."""
        if key not in table:
            table[self._shared.setdefault(key, key)] = make()
        return table[key]

    def add(self, rec: dict) -> None:
        first = self.records == 0
        self.records += 1
        if first:
            self.study = rec.get("study")
            self.workload = _get(rec, "params", "workload")
            self.cores = _get(rec, "manifest", "cpu_count")
        self.origin.add(rec)
        self.about.add(rec, first)
        scaling = _get(rec, "declared", "scaling")
        if scaling is not None:
            self.scalings.add(scaling)
        if self.model is None:
            self.model = Inputs.of_record(rec)
        run = run_of(rec)
        if run is not None:
            self._slot(self.runs, run_key(rec), Repeats).add(run)
        axis = axis_name(*record_axis(rec))
        self.about.add_settings(axis, rec)
        key = row_key(rec)
        self._slot(self.budget, key, budget.Point).add(rec)
        entry = measured.entry(rec)
        if entry is not None:
            self._slot(self.points, key, measured.Runs).add(entry)
        self.curves.add(rec, axis)
        self.systems.add(rec, axis)

    def merge(self, other: "Digest") -> None:
        """Add what ``other`` kept of the records that followed this one's (the same as if
        this one had read them too)."""
        if not self.records:
            self.study, self.workload, self.cores = other.study, other.workload, other.cores
            self.about.platform, self.about.cpu_count = other.about.platform, other.about.cpu_count
        self.records += other.records
        self.origin.merge(other.origin)
        self.about.merge(other.about)
        self.scalings |= other.scalings
        self.model = self.model if self.model is not None else other.model
        for mine, theirs, make in ((self.runs, other.runs, Repeats),
                                   (self.budget, other.budget, budget.Point),
                                   (self.points, other.points, measured.Runs)):
            for key, part in theirs.items():
                self._slot(mine, key, make).merge(part)
        self.curves.merge(other.curves)
        self.systems.merge(other.systems)

    @classmethod
    def of(cls, recs: Iterable[dict]) -> "Digest":
        d = cls()
        for rec in recs:
            d.add(rec)
        return d
