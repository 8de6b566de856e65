"""Read a study file and expand it into a validated list of runs.

A study (``jobs/<name>.toml``) names a workload and its parameters, strong or weak scaling, the
rank counts (``ranks = [1, 2]`` on one machine) or node counts x ranks per node (a cluster), the
repeats, the backend and compression axes, how to run a point locally and the Slurm resources.
:func:`load` checks all of it and raises :class:`StudyError` naming the file, the key and what is
allowed; :meth:`Study.points` lists the runs in the order they are run.

Standard library only: launchers, the report and the Slurm renderer all import this module.

Example::

    [study]
    name = "expmlp-strong"
    scaling = "strong"            # strong: global batch fixed; weak: per-rank batch fixed
    repeats = 3

    [workload]
    name = "expmlp"
    global_batch = 400            # strong scaling (batch_size = per-rank batch for weak)
    steps = 300

    [layout]
    ranks = [1, 2]                # or: nodes = [1, 2, 4], ranks_per_node = 4

    [axes]
    backend = ["horovod"]
    compression = ["none"]

    [run]                         # local runs through mpirun
    timeout = 300
    threads_per_rank = 1

    [slurm]
    partition = "gpu"
    time = "00:30:00"

    [model]                       # how the report calibrates the communication model
    fit = "results/bench/fit.json"   # from 'hpcdl bench fit' (default: this study's own runs)
    calibrate = { nodes_max = 2 } # fit to the runs on <= 2 nodes, predict the others (with
                                  # fit too: the exchange from the bench, the rest from the runs;
                                  # with exchange = "results/tuning/box-{nodes}n-{network}.json"
                                  # the others' exchange from 'hpcdl tune' at their node count;
                                  # with loop = "results/tuning/box-loop-cpu.json" their compute
                                  # after the share Horovod's loop takes of a node at theirs)
    forecast = [16, 64, 256]      # node counts the report forecasts (this is the default)

    [target]                      # time to accuracy: each repeat is then a seed
    metric = "accuracy"           # or "loss", on the held-out set
    value = 0.89
    max_steps = 1000              # instead of workload.steps; training ends at the target
    eval_every = 1000             # samples seen between evaluations

A study of your own script replaces the workload's name and options by the command that runs
one rank (placeholders {batch_size}, {global_batch}, {ranks}, {nodes}, {repeat}, {results}), and
may name figures its output prints (a regular expression whose first group is the number)::

    [workload]
    command = ["python", "train.py", "--batch-size", "{batch_size}"]
    global_batch = 256

    [scrape]
    throughput_per_rank = 'img/sec per rank: ([0-9.]+)'   # or throughput (all ranks), or any name
"""
from __future__ import annotations

import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Sequence, Tuple

from .. import checks, cluster, records
from ..errors import UserError

try:
    import tomllib as _toml
except ModuleNotFoundError:  # pragma: no cover - Python < 3.11
    import tomli as _toml  # type: ignore

DEFAULT_TIMEOUT = 600.0

# [workload] keys -> (type, hpcdl train flag). batch_size/global_batch are handled per scaling.
_WORKLOAD_KEYS: Dict[str, Tuple[type, str]] = {
    "model": (str, "--model"),
    "image_size": (int, "--image-size"),
    "num_classes": (int, "--num-classes"),
    "data": (str, "--data"),
    "steps": (int, "--steps"),
    "lr": (float, "--lr"),
    "lr_scaling": (str, "--lr-scaling"),
    "lr_warmup_steps": (int, "--lr-warmup-steps"),
    "seed": (int, "--seed"),
    "warmup": (int, "--warmup"),
    "num_warmup_batches": (int, "--num-warmup-batches"),
    "num_batches_per_iter": (int, "--num-batches-per-iter"),
    "num_iters": (int, "--num-iters"),
    "probes": (int, "--probes"),
    "log_every": (int, "--log-every"),
}
# Smallest allowed value of the [workload] keys (1 when not listed; None: any).
_WORKLOAD_MIN = {"seed": None, "lr": None, "model": None, "data": None, "lr_scaling": None,
                 "warmup": 0, "num_warmup_batches": 0, "lr_warmup_steps": 0, "probes": 0}
_SECTIONS = ("study", "workload", "layout", "axes", "run", "slurm", "model", "target", "scrape",
             "variants")
# [variants] name = "hpcdl train options": the options a variant may set, and what each takes
# (a tuple of allowed values, a type, or None for a flag without a value)
VARIANT_OPTIONS: Dict[str, Any] = {
    "--backend": None, "--compression": None,          # checked against the backends' names
    "--staleness": str, "--ps-dedicated": None, "--slow-rank": str,
    "--parallel": ("data", "pipeline"), "--stages": int, "--micro-batches": int,
    "--cut": ("time", "layers"), "--lr-scaling": ("linear", "none"),
}
_VARIANT_FLAGS = ("--ps-dedicated",)
# What a [workload] command may name: "{batch_size}" becomes this point's per-rank batch, etc.
PLACEHOLDERS = ("batch_size", "global_batch", "ranks", "nodes", "repeat", "results")
_PLACEHOLDER = re.compile(r"\{(\w*)\}")
# the backend of a command's points: the script exchanges gradients its own way
SCRIPT_BACKEND = "script"
_TARGET_KEYS = ("metric", "value", "max_steps", "eval_every")
# [target] keys that become hpcdl train flags (metric and value make --target METRIC:VALUE)
_TARGET_FLAGS: Dict[str, Tuple[type, str]] = {"target": (str, "--target"),
                                              "eval_every": (int, "--eval-every")}
_MODEL_KEYS = ("fit", "calibrate", "forecast")
_STUDY_KEYS = ("name", "description", "scaling", "repeats")
_LAYOUT_KEYS = ("ranks", "nodes", "ranks_per_node")
_AXES_KEYS = ("backend", "compression", "exchange", "network", "lr_scaling", "tuning")
TUNINGS = ("default", "tuned")
LR_RULES = ("linear", "none")
_RUN_KEYS = ("timeout", "threads_per_rank", "env", "mpirun_args", "tag", "timeline", "tuning")
# [slurm]: the batch settings, whichever scheduler runs the jobs (scheduler: slurm, gridengine
# or auto; pe: Grid Engine's parallel environment; partition is Grid Engine's queue there)
SLURM_KEYS = ("partition", "account", "qos", "constraint", "time", "cpus_per_task",
              "gpus_per_node", "ntasks_per_node", "mem", "signal_lead", "mpi", "modules",
              "setup", "extra", "scheduler", "pe")
_SLURM_TYPES = {"partition": str, "account": str, "qos": str, "constraint": str, "time": str,
                "cpus_per_task": int, "gpus_per_node": int, "ntasks_per_node": int, "mem": str,
                "signal_lead": int, "mpi": str, "modules": list, "setup": list, "extra": list,
                "scheduler": str, "pe": str}
_SLURM_DEFAULTS = {"partition": None, "account": None, "qos": None, "constraint": None,
                   "time": "00:30:00", "cpus_per_task": 1, "gpus_per_node": 0,
                   "ntasks_per_node": None, "mem": None, "signal_lead": 120, "mpi": "pmix",
                   "modules": [], "setup": [], "extra": [], "scheduler": "auto", "pe": None}
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_SCHEDULER_VALUE = re.compile(r"^[A-Za-z0-9_.,:=+@%/&|!*\[\]()-]+$")
_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def parse_time(text: str) -> int:
    """Seconds in a Slurm time limit: M, M:S, H:M:S, D-H, D-H:M or D-H:M:S."""
    m = _TIME.match(str(text).strip())
    if not m:
        raise UserError(f"time limit '{text}' is not a Slurm time (e.g. 30, 02:00:00, 1-12:00:00)")
    days, a, b, c = m.groups()
    a, b, c = int(a), int(b) if b else None, int(c) if c else None
    if days is not None:                       # D-H, D-H:M, D-H:M:S
        secs = int(days) * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    elif c is not None:                        # H:M:S
        secs = a * 3600 + b * 60 + c
    elif b is not None:                        # M:S
        secs = a * 60 + b
    else:                                      # M
        secs = a * 60
    if secs <= 0:
        raise UserError(f"time limit '{text}' must be positive")
    return secs



class StudyError(UserError):
    """A study file that cannot be run as written: the message names the file, key and fix."""


@dataclass(frozen=True)
class Point:
    """One run of a study: a layout, a backend/compression pair and a repeat index."""

    study: str
    nodes: int
    ranks_per_node: int
    repeat: int
    backend: str
    compression: str
    batch_size: int            # per rank
    workload: str
    params: Tuple[Tuple[str, Any], ...] = ()
    declared: str = ""         # the study's declarations (JSON), carried into every record
    network: str = ""          # the cluster box's link rate this point needs ("": any machine)
    lr_rule: str = ""          # [axes] lr_scaling: this point's learning-rate rule ("": no axis)
    script: Tuple[str, ...] = ()   # [workload] command, placeholders unexpanded (else hpcdl train)
    timeline: bool = False         # [run] timeline: Horovod's timeline, summarised in the record
    variant: str = ""              # [variants]: this point's variant ("": no variants)
    variant_args: Tuple[str, ...] = ()   # its hpcdl train options beyond backend and compression
    tuning: str = ""               # [axes] tuning: "default" or "tuned" ("": no such axis)
    tuning_file: str = ""          # [run] tuning: the tuning file, {nodes} {ranks} filled in

    @property
    def ranks(self) -> int:
        return self.nodes * self.ranks_per_node

    @property
    def global_batch(self) -> int:
        return self.batch_size * self.ranks

    @property
    def id(self) -> str:
        """Stable across runs and machines: what ``runs.jsonl`` is matched against."""
        return (f"n{self.nodes}-r{self.ranks_per_node}-{self.backend}-{self.compression}"
                + (f"-{self.network}" if self.network else "")
                + (f"-lr{self.lr_rule}" if self.lr_rule else "")
                + (f"-v{self.variant}" if self.variant else "")
                + (f"-t{self.tuning}" if self.tuning else "") + f"-rep{self.repeat}")

    @property
    def group(self) -> str:
        """The id without the repeat: repeats of one configuration share it."""
        return self.id.rsplit("-rep", 1)[0]

    def as_dict(self) -> dict:
        return {"id": self.id, "study": self.study, "nodes": self.nodes,
                "ranks_per_node": self.ranks_per_node, "ranks": self.ranks,
                "repeat": self.repeat, "backend": self.backend, "compression": self.compression,
                "batch_size": self.batch_size, "global_batch": self.global_batch,
                **({"network": self.network} if self.network else {}),
                **({"lr_scaling": self.lr_rule} if self.lr_rule else {}),
                **({"variant": self.variant} if self.variant else {}),
                **({"tuning": self.tuning} if self.tuning else {})}

    def train_args(self, results_path) -> List[str]:
        """The arguments that follow ``hpcdl train`` for this point (no leading 'train')."""
        args = ["--workload", self.workload, "--batch-size", str(self.batch_size),
                "--backend", self.backend, "--compression", self.compression,
                *self.variant_args]
        for key, value in self.params:
            args += [(_WORKLOAD_KEYS.get(key) or _TARGET_FLAGS[key])[1], str(value)]
        if self.lr_rule:
            args += ["--lr-scaling", self.lr_rule]
        if self.tuning == "default" or self.tuning_file:
            args += ["--tuning", self.tuning_path if self.tuned else "default"]
        if self.timeline:
            args += ["--timeline", str(Path(results_path).parent / "timelines" / f"{self.id}.json")]
        args += ["--study", self.study,
                 "--point", json.dumps(self.as_dict(), sort_keys=True, separators=(",", ":"))]
        if self.declared:
            args += ["--declared", self.declared]
        args += ["--results", str(results_path)]
        return args

    @property
    def tuned(self) -> bool:
        """Whether this point runs with a tuning file: [run] tuning is set, the point is not the
        tuning axis's "default", and it has ranks to exchange between (one rank has nothing to
        tune, and 'hpcdl tune' needs two)."""
        return bool(self.tuning_file) and self.tuning != "default" and self.ranks > 1

    @property
    def tuning_path(self) -> str:
        """[run] tuning with this point's {nodes}, {ranks}, {ranks_per_node} and {network}."""
        return self.placeholders_filled(self.tuning_file)

    def placeholders_filled(self, path: str) -> str:
        """A tuning file's ``path`` with this point's {nodes}, {ranks}, {ranks_per_node} and
        {network}."""
        values = {"nodes": self.nodes, "ranks": self.ranks, "ranks_per_node": self.ranks_per_node,
                  "network": self.network}
        return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), path)

    def command(self, results_path) -> List[str]:
        """``["train", *train_args]``: the full hpcdl argument list."""
        return ["train", *self.train_args(results_path)]

    def script_argv(self, results_path) -> List[str]:
        """The [workload] command of this point, its placeholders filled in; ``results_path`` is
        where the script's own recorder (hpcdl.train.keras.ScalingRecorder) writes."""
        values = {"batch_size": self.batch_size, "global_batch": self.global_batch,
                  "ranks": self.ranks, "nodes": self.nodes, "repeat": self.repeat,
                  "results": results_path}
        return [_PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), word) for word in self.script]


@dataclass
class Study:
    name: str
    path: Path
    scaling: str
    workload: str
    params: Dict[str, Any]
    batch: int                       # global batch (strong) or per-rank batch (weak)
    layouts: List[Tuple[int, int]]   # (nodes, ranks_per_node) in the file's order
    repeats: int
    backends: List[str]
    compressions: List[str]
    slurm: Dict[str, Any]
    networks: List[str] = field(default_factory=lambda: [""])   # [axes] network: box link rates
    lr_rules: List[str] = field(default_factory=lambda: [""])   # [axes] lr_scaling
    exchanges: List[Tuple[str, str]] = field(default_factory=list)  # [axes] exchange, else the product
    # [variants]: (name, backend, compression, other options) of each; they replace the exchanges
    variants: List[Tuple[str, str, str, Tuple[str, ...]]] = field(default_factory=list)
    timeout: float = DEFAULT_TIMEOUT
    env: Dict[str, str] = field(default_factory=dict)
    mpirun_args: List[str] = field(default_factory=list)
    description: str = ""
    results_dir: Path = Path("results")
    fit: str = ""                    # [model] fit: the bench fit that calibrates the report's model
    calibrate_nodes_max: int = 0     # [model] calibrate = {nodes_max = N}: the report's model
                                     # is fitted to these points only and predicts the others
    calibrate_exchange: str = ""     # [model] calibrate.exchange: tuning files ({nodes}, ...)
                                     # whose exchange the predicted points take
    calibrate_loop: str = ""         # [model] calibrate.loop: a loop file (hpcdl bench allocation)
                                     # whose shares the predicted points' compute follows
    calibrate_spread: str = ""       # [model] calibrate.spread: a spread file (hpcdl bench
                                     # allocation) their slowest rank is drawn from
    forecast: List[int] = field(default_factory=list)   # [model] forecast: node counts planned
    target: str = ""                 # [target]: "accuracy:0.91"; each repeat is then a seed
    command: List[str] = field(default_factory=list)   # [workload] command: the user's script
    scrape: Dict[str, str] = field(default_factory=dict)  # [scrape]: figure name -> pattern
    timeline: bool = False           # [run] timeline = true: Horovod's timeline per point
    tunings: List[str] = field(default_factory=lambda: [""])   # [axes] tuning
    tuning_file: str = ""            # [run] tuning: the tuning file ({nodes}, {ranks} filled in)
    sha256: str = ""                 # of the study file's bytes
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def declared(self) -> Dict[str, str]:
        """What every record of this study carries, so that the report guesses nothing."""
        spread, loop = self.allocation_files
        out = {"scaling": self.scaling, "study_file": str(self.path), "study_sha256": self.sha256,
               "calibration": ";".join(
                   ([f"runs:nodes<={self.calibrate_nodes_max}"] if self.calibrate_nodes_max else [])
                   + ([f"fit:{self.fit}"] if self.fit else [])
                   + ([f"bench:{self.exchange_files}"] if self.exchange_files else [])
                   + ([f"loop:{loop}"] if loop else [])
                   + ([f"spread:{spread}"] if spread else [])
                   + ([f"forecast:{','.join(map(str, self.forecast))}"] if self.forecast else []))
               or "runs"}
        if self.target:
            out["target"] = self.target
        return out

    @property
    def runs_path(self) -> Path:
        return self.results_dir / "runs.jsonl"

    @property
    def is_local(self) -> bool:
        return all(n == 1 for n, _ in self.layouts)

    def points(self) -> List[Point]:
        """Every run, repeats outermost so that slow drift of the machine spreads over all layouts.
        With a target, repeat k trains with seed + k: a time to target is a seed's."""
        out = []
        declared = json.dumps(self.declared, sort_keys=True, separators=(",", ":"))
        for rep in range(self.repeats):
            params = dict(self.params)
            if self.target:
                params["seed"] = int(self.params.get("seed", 0)) + rep
            variants = self.variants or [("", b, c, ()) for b, c in self.exchange_pairs]
            for net, rule, tun in ((n, r, t) for n in self.networks for r in self.lr_rules
                                   for t in self.tunings):
                for variant, backend, comp, extra in variants:
                    for nodes, rpn in self.layouts:
                        ranks = nodes * rpn
                        per_rank = self.batch // ranks if self.scaling == "strong" else self.batch
                        out.append(Point(self.name, nodes, rpn, rep, backend, comp, per_rank,
                                         self.workload, tuple(sorted(params.items())),
                                         declared, net, rule, tuple(self.command),
                                         self.timeline, variant, extra, tun,
                                         self.tuning_file if tun != "default" else ""))
        return out

    @property
    def exchange_pairs(self) -> List[Tuple[str, str]]:
        """(backend, compression) of every point: [axes] exchange, else backend x compression."""
        return self.exchanges or [(b, c) for b in self.backends for c in self.compressions]

    def done_ids(self, runs_path=None) -> set:
        """Point ids already recorded for this study (see :func:`recorded_point`)."""
        ids = (recorded_point(rec, self.name) for rec in records.iter_records(runs_path or self.runs_path))
        return {pid for pid in ids if pid is not None}

    def pending(self, runs_path=None) -> List[Point]:
        done = self.done_ids(runs_path)
        return [p for p in self.points() if p.id not in done]

    def lacking_tuning(self, points: Iterable[Point], calibration: bool = False
                       ) -> List[Tuple[str, int, int, List[str], List[str]]]:
        """The tuning files these points need that do not exist (relative to where the study is
        run from) or hold no pick for a point's compression: (path, nodes, ranks per node, every
        compression its points need, those the file has no pick for). ``calibration``: also the
        [model] calibrate.exchange files the report reads for the Horovod points beyond
        nodes_max (the points run without them; the report's model stands in where one lacks)."""
        need: Dict[Tuple[str, int, int], set] = {}
        points = list(points)
        benched = {p.id for p in self.exchange_benched(points)} if calibration else set()
        for p in points:
            if p.tuned:
                need.setdefault((p.tuning_path, p.nodes, p.ranks_per_node), set()).add(p.compression)
            if calibration and p.id in benched:
                path = p.placeholders_filled(self.exchange_files)
                need.setdefault((path, p.nodes, p.ranks_per_node), set()).add(p.compression)
        out = []
        for (path, n, rpn), comps in sorted(need.items()):
            try:
                picks = set(json.loads(Path(path).read_text()).get("picks") or {})
            except (OSError, ValueError, AttributeError):
                picks = set()
            if comps - picks:
                out.append((path, n, rpn, sorted(comps), sorted(comps - picks)))
        return out

    def missing_tuning(self, points: Iterable[Point]) -> List[str]:
        """:meth:`lacking_tuning` in words, each with the command that makes the file."""
        out = []
        for path, n, rpn, comps, lacking in self.lacking_tuning(points):
            what = "no pick for " + ", ".join(lacking) if Path(path).is_file() else "missing"
            out.append(f"{path} ({what}; make it on {n} node(s) with 'hpcdl tune --study {self.path} "
                       f"--compression {','.join(comps)} --out {path}' in a job of "
                       f"{n} node(s) x {rpn} task(s), or submit with --tune)")
        return out

    # what makes the forecast's exchange files: ``hpcdl tune`` timing every allreduce algorithm
    # beside the library's own choice in one launch, nothing else searched
    EXCHANGE_TUNE = ("--knobs", "algorithm", "--rounds", "1")

    @property
    def exchange_files(self) -> str:
        """The path pattern of the tuning files whose exchange the model takes at the node counts
        it predicts ([model] calibrate.exchange); where the study asks for a forecast of several
        nodes, the ones ``hpcdl tune --knobs algorithm`` makes in its results folder (a tuned
        study's [run] tuning files, whose search times every algorithm as well): the
        allocation's exchange per algorithm at the node counts it reaches. "" otherwise."""
        if self.calibrate_exchange or not self.forecast or self.is_local:
            return self.calibrate_exchange
        if self.tuning_file:      # a tuned study's own files time every algorithm too
            return self.tuning_file
        net = "-{network}" if any(self.networks) else ""
        return str(Path(self.results_dir) / "allocation" / f"exchange-{{nodes}}n{net}.json")

    def exchange_benched(self, points: Iterable[Point]) -> List[Point]:
        """The Horovod points over several nodes whose exchange the model takes from
        :attr:`exchange_files`: those beyond [model] calibrate's nodes_max, or without one (the
        model calibrated on every point) those of the largest node count, which the forecast
        beyond it starts from."""
        if not self.exchange_files:
            return []
        horovod = [p for p in points if p.backend == "horovod" and p.nodes > 1
                   and p.ranks_per_node == 1 and p.compression in ("none", "fp16")]
        top = self.calibrate_nodes_max or max((p.nodes for p in horovod), default=1) - 1
        return [p for p in horovod if p.nodes > top]

    def lacking_exchange(self, points: Iterable[Point]) -> List[Tuple[str, int, int, List[str], List[str]]]:
        """:meth:`lacking_tuning`'s entries for the :attr:`exchange_files` only, where the study
        asks for a forecast (whose jobs make them; else ``--tune`` does)."""
        if not self.forecast:
            return []
        benched = {(p.placeholders_filled(self.exchange_files), p.nodes)
                   for p in self.exchange_benched(points)}
        return [t for t in self.lacking_tuning(points, calibration=True) if t[:2] in benched]

    @property
    def allocation_files(self) -> Tuple[str, str]:
        """(spread file, loop file) the forecast reads: [model] calibrate's, else, where the
        study asks for a forecast, the ones ``hpcdl bench allocation`` makes in its results
        folder; ("", "") otherwise."""
        base = Path(self.results_dir) / "allocation"
        auto = bool(self.forecast)
        return (self.calibrate_spread or (str(base / "spread.json") if auto else ""),
                self.calibrate_loop or (str(base / "loop-cpu.json") if auto else ""))

    def allocation_missing(self, points: Iterable[Point]) -> List[Tuple[int, int]]:
        """(nodes, ranks per node) of each layout of ``points`` beyond one rank, one rank per
        node or every rank on one node, whose measurement the forecast's files lack (both files
        must hold it); [] where the study asks for no forecast."""
        spread, loop = self.allocation_files
        if not self.forecast or not spread or not loop:
            return []

        def held(path: str, key: str) -> set:
            try:
                doc = json.loads(Path(path).read_text())
            except (OSError, ValueError):
                return set()
            table = doc.get(key) or {}
            if key == "shares":          # by cycle time, then count
                return {int(n) for by in table.values() for n in by}
            return {int(n) for n in table}
        have = held(spread, "spread") & held(loop, "shares")
        out = set()
        for p in points:
            if p.ranks > 1 and (p.ranks_per_node == 1 or p.nodes == 1) and p.ranks not in have:
                out.add((p.nodes, p.ranks_per_node))
        return sorted(out, key=lambda x: x[0] * x[1])

    def summary(self) -> str:
        pts = self.points()
        ranks = sorted({p.ranks for p in pts})
        return (f"study {self.name}: {self.workload} {self.scaling} scaling, "
                f"{'global' if self.scaling == 'strong' else 'per-rank'} batch {self.batch}, "
                f"ranks {ranks}, backends {self.backends}, compressions {self.compressions}, "
                f"{self.repeats} repeat(s): {len(pts)} runs")


def recorded_point(rec: dict, study_name: str):
    """The id of the point ``rec`` records for study ``study_name``, or None.

    The one rule of what counts as recorded: a record of this study, with a point id, whose run
    ended well (status ok). ``hpcdl study run``, ``submit`` and ``status`` all ask here.
    """
    point = rec.get("point")
    if rec.get("study") != study_name or not isinstance(point, dict) or "id" not in point:
        return None
    return str(point["id"]) if rec.get("status", "ok") == "ok" else None


# --- loading --------------------------------------------------------------------------------------

def load(path, results_root=None) -> Study:
    """Read and validate a study file; results go to ``<results_root or results>/<name>``."""
    path = Path(path)
    if path.is_dir():
        raise StudyError(f"{path}: a directory, not a study file")
    if not path.is_file():
        raise StudyError(f"{path}: no such study file")
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise StudyError(f"{path}: cannot be read ({exc.strerror or exc})") from None
    try:
        raw = _toml.loads(data.decode("utf-8"))
    except (_toml.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise StudyError(f"{path}: not valid TOML: {exc}") from None
    study = from_dict(raw, path, results_root=results_root)
    study.sha256 = hashlib.sha256(data).hexdigest()
    return study


def from_dict(raw: dict, path, results_root=None) -> Study:
    """Validate a parsed study file section by section; StudyError names the first fault."""
    from ..comm import BACKENDS, COMPRESSIONS
    path = Path(path)
    v = _Validator(path)
    v.only(raw, "", _SECTIONS)
    name, scaling, repeats, description = _study_section(v, raw, path)
    workload, params, batch, command = _workload_section(v, raw, scaling)
    target = _target_section(v, raw, params)
    scrape = _scrape_section(v, raw, command)
    layouts, by_nodes = _layout_section(v, raw, scaling, batch)
    ax = v.table(raw, "axes")
    v.only(ax, "axes", _AXES_KEYS)
    backends = v.str_list(ax, "axes.backend", BACKENDS, default=["horovod"])
    compressions = v.str_list(ax, "axes.compression", COMPRESSIONS, default=["none"])
    exchanges = _exchange_axis(v, ax, BACKENDS, COMPRESSIONS)
    if exchanges:
        backends = list(dict.fromkeys(b for b, _ in exchanges))
        compressions = list(dict.fromkeys(c for _, c in exchanges))
    if command:
        _command_limits(v, raw, ax)
        backends, compressions = [SCRIPT_BACKEND], ["none"]
    networks = _network_axis(v, ax)
    lr_rules = (v.str_list(ax, "axes.lr_scaling", LR_RULES, default=None)
                if "lr_scaling" in ax else [""])
    if "lr_scaling" in ax and "lr_scaling" in params:
        v.fail("axes.lr_scaling", "and workload.lr_scaling both set the learning-rate rule: keep "
                                  "one")
    variants = _variants_section(v, raw, ax, command)
    if variants:
        backends = list(dict.fromkeys(b for _, b, _, _ in variants))
        compressions = list(dict.fromkeys(c for _, _, c, _ in variants))
    timeout, env, mpirun_args = _run_section(v, raw)
    tunings, tuning_file = _tuning_axis(v, ax, v.table(raw, "run"), command)
    if tuning_file and set(tunings) - {"default"} and "int8" in compressions:
        v.fail("run.tuning", "hpcdl tune tunes the none and fp16 exchanges, and int8 is among "
                             "this study's: its tuned points would have no settings (study int8 "
                             "in a study without run.tuning)")
    timeline = bool(v.get(v.table(raw, "run"), "run.timeline", bool, default=False))
    if timeline and command:
        v.fail("run.timeline", "records hpcdl train's Horovod timeline; workload.command runs "
                               "your script (set HOROVOD_TIMELINE in run.env for it)")
    slurm = _slurm_section(v, raw, layouts, by_nodes)
    model = v.table(raw, "model")
    v.only(model, "model", _MODEL_KEYS)
    fit = _fit_key(v, model)
    calibrate = _calibrate_key(v, model)
    # points are keyed by rank count where every rank shares one machine, else by node count
    one_node = all(n == 1 for n, _ in layouts)
    top = max(n * r if one_node else n for n, r in layouts)
    if calibrate[0] and calibrate[0] >= top:
        v.fail("model.calibrate", f"nodes_max = {calibrate[0]} holds every point (the largest "
                                  f"has {top} {'rank' if one_node else 'node'}(s)): none is left "
                                  f"to predict; set it below {top}, or leave it out (the model "
                                  "is then calibrated on every point and forecasts)")
    forecast = _forecast_key(v, model)
    root = Path(results_root) if results_root is not None else Path(
        cluster.setting("HPCDL_RESULTS_ROOT") or "results")
    return Study(name=name, path=path, scaling=scaling, workload=workload, params=params,
                 batch=batch, layouts=layouts, repeats=repeats, backends=backends,
                 compressions=compressions, networks=networks, lr_rules=lr_rules,
                 exchanges=exchanges, slurm=slurm, timeout=timeout, env=env,
                 mpirun_args=mpirun_args, description=description, results_dir=root / name,
                 fit=fit, calibrate_nodes_max=calibrate[0], calibrate_exchange=calibrate[1],
                 calibrate_loop=calibrate[2], calibrate_spread=calibrate[3],
                 forecast=forecast, target=target, command=command,
                 scrape=scrape, timeline=timeline, variants=variants, tunings=tunings,
                 tuning_file=tuning_file, raw=raw)


def _fit_key(v, model) -> str:
    """[model] fit: a 'hpcdl bench fit' file, checked now rather than when the report needs it."""
    fit = v.get(model, "model.fit", str, default="")
    if fit:
        try:
            checks.fit_file(fit, prefix="")
        except UserError as exc:
            v.fail("model.fit", str(exc))
    return fit


def _calibrate_key(v, model) -> Tuple[int, str, str, str]:
    """[model] calibrate = {nodes_max = N, exchange = PATH, loop = FILE, spread = FILE}: N (0
    without it), the 'hpcdl tune' files (one per node count and link rate, placeholders as
    run.tuning's) whose exchange the points beyond N take, the loop file
    (hpcdl bench allocation --loop) whose shares their compute follows, and the spread file
    (hpcdl bench allocation --spread) their slowest rank is drawn from ("" without them)."""
    cal = v.get(model, "model.calibrate", dict, default={})
    v.only(cal, "model.calibrate", ("nodes_max", "exchange", "loop", "spread"))
    if not cal:
        return 0, "", "", ""
    n = v.get(cal, "model.calibrate.nodes_max", int, required=True, minimum=1)
    path = _tuning_path(v, cal, "model.calibrate.exchange")
    if path and "{nodes}" not in path and "{ranks}" not in path:
        v.fail("model.calibrate.exchange", "needs {nodes} or {ranks}: one tuning file per node "
                                           "count, made by 'hpcdl tune' on that allocation")
    return (n, path, v.get(cal, "model.calibrate.loop", str, default=""),
            v.get(cal, "model.calibrate.spread", str, default=""))


def _forecast_key(v, model) -> List[int]:
    """[model] forecast = [16, 64, 256]: the node counts the report forecasts ([] for its
    default)."""
    counts = v.get(model, "model.forecast", list, default=[])
    if any(not isinstance(n, int) or isinstance(n, bool) or n < 2 for n in counts):
        v.fail("model.forecast", f"node counts of 2 or more, such as [16, 64, 256]; got {counts}")
    return sorted(set(counts))


def _tuning_path(v, table, key: str) -> str:
    """A tuning file's path at ``key`` (the last part of it in ``table``), whose placeholders
    are those of an allocation and link rate; "" when not given."""
    path = v.get(table, key, str, default="")
    for name in _PLACEHOLDER.findall(path):
        if name not in ("nodes", "ranks", "ranks_per_node", "network"):
            v.fail(key, f"{{{name}}} is not a placeholder of a tuning file's path "
                        "(use {nodes}, {ranks}, {ranks_per_node}, {network})")
    if path and not _PLACEHOLDER.search(path) and Path(path).exists() and not _is_tuning(path):
        v.fail(key, f"{path} exists and is not a tuning file (hpcdl.tuning/1): 'hpcdl tune' "
                    "would write over it; name another path")
    return path


def _is_tuning(path: str) -> bool:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("schema") == "hpcdl.tuning/1"


def _exchange_axis(v, ax, backends, compressions) -> List[Tuple[str, str]]:
    """[axes] exchange = ["horovod", "ps", "horovod+fp16"]: the backend[+compression] pairs to
    run, when not every backend x compression is wanted (then backend and compression stay out)."""
    if "exchange" not in ax:
        return []
    if "backend" in ax or "compression" in ax:
        v.fail("axes.exchange", "replaces axes.backend and axes.compression: give one or the other")
    allowed = [b for b in backends] + [f"{b}+{c}" for b in backends for c in compressions]
    items = v.str_list(ax, "axes.exchange", allowed, default=None)
    return [tuple((x + "+none").split("+")[:2]) for x in items]


def _variants_section(v, raw, ax, command) -> List[Tuple[str, str, str, Tuple[str, ...]]]:
    """[variants] name = "hpcdl train options": named configurations compared on the same
    workload and layouts (say ``downpour = "--backend ps-async"``, ``pipe = "--parallel
    pipeline --micro-batches 4"``); each is an axis of the report. They replace axes.backend,
    compression and exchange; only the options in VARIANT_OPTIONS may be given."""
    from ..train.modes import TRAIN_BACKENDS
    from ..comm import COMPRESSIONS
    import shlex
    table = v.table(raw, "variants")
    if not table:
        return []
    if command:
        v.fail("[variants]", "sets hpcdl train options, and workload.command runs your own script")
    for key in ("backend", "compression", "exchange"):
        if key in ax:
            v.fail(f"axes.{key}", "and [variants] both say how the points train: give the "
                                  "backend and compression inside each variant")
    choices = {"--backend": TRAIN_BACKENDS, "--compression": COMPRESSIONS}
    out = []
    for name in table:
        if not _NAME_RE.match(name):
            v.fail(f"variants.{name}", "a variant's name must be letters, digits, '.', '_' or "
                                       "'-' (it names its points)")
        words = shlex.split(v.get(table, f"variants.{name}", str))
        opts, rest, i = {"--backend": "horovod", "--compression": "none"}, [], 0
        while i < len(words):
            flag = words[i]
            if flag not in VARIANT_OPTIONS:
                v.fail(f"variants.{name}", f"'{flag}' is not an option a variant may set: "
                                           f"{', '.join(VARIANT_OPTIONS)}")
            if flag in _VARIANT_FLAGS:
                rest.append(flag)
                i += 1
                continue
            if i + 1 >= len(words):
                v.fail(f"variants.{name}", f"{flag} needs a value")
            value, kind = words[i + 1], choices.get(flag, VARIANT_OPTIONS[flag])
            if isinstance(kind, tuple) and value not in kind:
                v.fail(f"variants.{name}", f"{flag} {value}: choose one of {', '.join(kind)}")
            if kind is int and not (value.isdigit() and int(value) > 0):
                v.fail(f"variants.{name}", f"{flag} needs a positive integer, got '{value}'")
            if flag in opts:
                opts[flag] = value
            else:
                rest += [flag, value]
            i += 2
        out.append((name, opts["--backend"], opts["--compression"], tuple(rest)))
    return out


def _network_axis(v, ax) -> List[str]:
    """[axes] network: link rates of the cluster box ("200mbit", "1gbit"); each point runs on a
    box whose links have its rate (scripts/cluster-box.sh up N --link RATE)."""
    from ..costmodel import rate_bits
    nets = v.get(ax, "axes.network", (list, str), default=None)
    if nets is None:
        return [""]
    nets = [nets] if isinstance(nets, str) else nets
    for x in nets:
        try:
            rate_bits(str(x))
        except ValueError:
            v.fail("axes.network", f"'{x}' is not a link rate such as '200mbit' or '1gbit'")
    if not nets or len(set(nets)) != len(nets):
        v.fail("axes.network", f"must list distinct link rates, not {nets!r}")
    return [str(x) for x in nets]


def _tuning_axis(v, ax, run, command) -> Tuple[List[str], str]:
    """[axes] tuning = ["default", "tuned"] and [run] tuning, the tuning file of the tuned points
    (placeholders {nodes}, {ranks}, {ranks_per_node}, {network}: one per allocation and link
    rate, as 'hpcdl tune' makes them)."""
    path = _tuning_path(v, run, "run.tuning")
    tunings = v.str_list(ax, "axes.tuning", TUNINGS, default=None) if "tuning" in ax else [""]
    if "tuned" in tunings and not path:
        v.fail("axes.tuning", "'tuned' needs run.tuning, the tuning file ('hpcdl tune' makes it)")
    if command and (path or "tuning" in ax):
        v.fail("run.tuning", "tunes hpcdl train's exchange; workload.command runs your script "
                             "(export the tuning file's settings in run.env for it)")
    return tunings, path


def _study_section(v, raw, path):
    st = v.table(raw, "study")
    v.only(st, "study", _STUDY_KEYS)
    name = v.get(st, "study.name", str, default=path.stem)
    if not _NAME_RE.match(name):
        v.fail("study.name", f"'{name}' must be letters, digits, '.', '_' or '-' (it names a folder)")
    return (name, v.choice(st, "study.scaling", records.SCALINGS),
            v.get(st, "study.repeats", int, default=1, minimum=1),
            v.get(st, "study.description", str, default=""))


def _workload_section(v, raw, scaling):
    from ..workloads import BUILTIN
    wl = v.table(raw, "workload", required=True)
    v.only(wl, "workload", ("name", "command", "batch_size", "global_batch") + tuple(_WORKLOAD_KEYS))
    command = _command_key(v, wl)
    if command:
        workload = v.get(wl, "workload.name", str, default=_script_name(command))
        for key in _WORKLOAD_KEYS:
            if key in wl:
                v.fail(f"workload.{key}", "is an option of hpcdl's own training loop, and "
                                          "workload.command runs your script: give the script's "
                                          "own options in workload.command")
    else:
        workload = v.get(wl, "workload.name", str, required=True)
    if not command and workload not in BUILTIN and not re.match(r"^[\w.]+:[\w]+$", workload):
        v.fail("workload.name", f"'{workload}' is unknown: use one of {', '.join(BUILTIN)} "
                                f"or package.module:factory (or run your script: workload.command)")
    params = {}
    for key, (typ, _flag) in _WORKLOAD_KEYS.items():
        if key in wl:
            params[key] = v.get(wl, f"workload.{key}", typ, minimum=_WORKLOAD_MIN.get(key, 1))
    if params.get("lr", 1.0) <= 0:
        v.fail("workload.lr", f"must be positive, got {params['lr']}")
    if "lr_scaling" in params and params["lr_scaling"] not in ("linear", "none"):
        v.fail("workload.lr_scaling", f"'{params['lr_scaling']}' is not allowed: use linear or none")
    key, other, why = (("global_batch", "batch_size", "strong scaling fixes the global batch: give "
                        "workload.global_batch instead (per-rank = global / ranks)")
                       if scaling == "strong" else
                       ("batch_size", "global_batch", "weak scaling fixes the per-rank batch: give "
                        "workload.batch_size instead (global = per-rank x ranks)"))
    if other in wl:
        v.fail(f"workload.{other}", why)
    return (workload, params, v.get(wl, f"workload.{key}", int, required=True, minimum=1),
            command)


def _command_key(v, wl) -> List[str]:
    """[workload] command: the words that run one rank of the user's script."""
    if "command" not in wl:
        return []
    words = v.get(wl, "workload.command", list)
    if not words or any(not isinstance(w, str) or not w for w in words):
        v.fail("workload.command", f"must be a non-empty list of non-empty strings (the words "
                                   f"of one rank's command), got {words!r}")
    for word in words:
        for name in _PLACEHOLDER.findall(word):
            if name not in PLACEHOLDERS:
                v.fail("workload.command", f"'{{{name}}}' in {word!r} is not a placeholder: use "
                                           f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
    return list(words)


def _script_name(command: Sequence[str]) -> str:
    """A workload's default name: the script the command runs (train.py -> train)."""
    for word in command:
        if word.endswith(".py"):
            return Path(word).stem
    return Path(command[0]).name


def _command_limits(v, raw, ax) -> None:
    """What a study of a command cannot ask: the script owns its exchange and its stopping."""
    for key in ("backend", "compression", "exchange", "lr_scaling"):
        if key in ax:
            v.fail(f"axes.{key}", "sets hpcdl train options, and workload.command runs your own "
                                  "script: its exchange and learning rate are the script's")
    if "target" in raw:
        v.fail("[target]", "needs hpcdl's own evaluations; workload.command runs your script, "
                           "which decides itself when to stop")


def _scrape_section(v, raw, command) -> Dict[str, str]:
    """[scrape] name = 'regex': figures read from a command's output, the number in the
    pattern's first group (or its group named 'value'); throughput and throughput_per_rank, in
    samples per second, also give the point its throughput."""
    sc = v.table(raw, "scrape")
    if sc and not command:
        v.fail("[scrape]", "reads figures a workload.command prints; hpcdl train records its "
                           "own figures")
    out = {}
    for name, pattern in sc.items():
        if not _NAME_RE.match(name):
            v.fail(f"scrape.{name}", "a figure's name must be letters, digits, '.', '_' or '-'")
        pattern = v.get(sc, f"scrape.{name}", str)
        try:
            rx = re.compile(pattern)
        except re.error as exc:
            v.fail(f"scrape.{name}", f"{pattern!r} is not a regular expression: {exc}")
        if rx.groups < 1:
            v.fail(f"scrape.{name}", f"{pattern!r} has no group: put the number in one, as in "
                                     "'img/sec: ([0-9.]+)'")
        out[name] = pattern
    return out


def _target_section(v, raw, params) -> str:
    """[target]: the held-out metric to reach and the steps allowed; sets the train flags in
    ``params`` and returns "metric:value" ("" without the section)."""
    tg = v.table(raw, "target")
    if not tg:
        return ""
    v.only(tg, "target", _TARGET_KEYS)
    metric = v.choice(tg, "target.metric", ("accuracy", "loss"))
    value = float(v.get(tg, "target.value", (int, float), required=True))
    if not math.isfinite(value):
        v.fail("target.value", f"must be a finite number, got {value}")
    if "steps" in params:
        v.fail("workload.steps", "and target.max_steps both say how long to train: keep "
                                 "target.max_steps (training ends earlier at the target)")
    params["steps"] = v.get(tg, "target.max_steps", int, required=True, minimum=1)
    params["target"] = f"{metric}:{value!r}"
    if "eval_every" in tg:
        params["eval_every"] = v.get(tg, "target.eval_every", int, minimum=1)
    return params["target"]


def _layout_section(v, raw, scaling, batch):
    lay = v.table(raw, "layout", required=True)
    v.only(lay, "layout", _LAYOUT_KEYS)
    if "ranks" in lay and ("nodes" in lay or "ranks_per_node" in lay):
        v.fail("layout.ranks", "give either layout.ranks (one machine) or layout.nodes with "
                               "layout.ranks_per_node (a cluster), not both")
    if "ranks" in lay:
        layouts = [(1, r) for r in v.int_list(lay, "layout.ranks")]
    elif "nodes" in lay:
        rpn = v.get(lay, "layout.ranks_per_node", int, default=1, minimum=1)
        layouts = [(n, rpn) for n in v.int_list(lay, "layout.nodes")]
    else:
        v.fail("layout", "missing: give layout.ranks = [1, 2, ...] (one machine) or "
                         "layout.nodes = [1, 2, ...] with layout.ranks_per_node")
    for nodes, rpn in layouts if scaling == "strong" else ():
        if batch % (nodes * rpn):
            v.fail("layout.ranks" if "ranks" in lay else "layout.nodes",
                   f"{nodes * rpn} ranks do not divide workload.global_batch = {batch} "
                   f"(strong scaling needs per-rank batch = global / ranks to be whole): "
                   f"use rank counts that divide {batch}")
    return layouts, "nodes" in lay


def _run_section(v, raw):
    run = v.table(raw, "run")
    v.only(run, "run", _RUN_KEYS)
    timeout = float(v.get(run, "run.timeout", (int, float), default=DEFAULT_TIMEOUT))
    if not timeout > 0:
        v.fail("run.timeout", f"must be a positive number of seconds, got {timeout}")
    env = {}
    for k, val in v.get(run, "run.env", dict, default={}).items():
        if not isinstance(val, (str, int, float)) or isinstance(val, bool):
            v.fail(f"run.env.{k}", f"must be a string or number, got {type(val).__name__}")
        env[str(k)] = str(val)
    if "threads_per_rank" in run:
        env.setdefault("HPCDL_THREADS", str(v.get(run, "run.threads_per_rank", int, minimum=1)))
    return timeout, env, [str(a) for a in v.get(run, "run.mpirun_args", list, default=[])]


def _slurm_section(v, raw, layouts, by_nodes):
    sl = v.table(raw, "slurm")
    v.only(sl, "slurm", SLURM_KEYS)
    slurm = dict(_SLURM_DEFAULTS)
    for key, typ in _SLURM_TYPES.items():
        if key in sl:
            slurm[key] = v.get(sl, f"slurm.{key}", typ,
                               minimum=(0 if key in ("gpus_per_node", "signal_lead") else
                                        (1 if typ is int else None)))
    if slurm["time"]:
        try:
            parse_time(slurm["time"])
        except UserError as exc:
            v.fail("slurm.time", str(exc))
    rpn = max(r for _, r in layouts)
    if slurm["ntasks_per_node"] is None:
        slurm["ntasks_per_node"] = rpn
    elif by_nodes and slurm["ntasks_per_node"] != rpn:
        v.fail("slurm.ntasks_per_node", f"{slurm['ntasks_per_node']} differs from "
                                        f"layout.ranks_per_node = {rpn}: drop one or make them equal")
    for key in ("modules", "setup", "extra"):
        if any(not isinstance(x, str) for x in slurm[key]):
            v.fail(f"slurm.{key}", "must be a list of strings")
    # values that go into the job script's #SBATCH and #$ lines: a newline or a shell
    # metacharacter there would start a line of its own, a command of the job
    for key in ("partition", "account", "qos", "constraint", "mem", "mpi", "pe"):
        if slurm[key] is not None and not _SCHEDULER_VALUE.match(str(slurm[key])):
            v.fail(f"slurm.{key}", f"{slurm[key]!r}: letters, digits and _ . , : = + @ % / & | ! "
                                   "* [ ] ( ) - only (no space, quote, $, ;, < or > and no newline)")
    for key in ("extra", "modules"):
        for x in slurm[key]:
            if "\n" in x or "\r" in x or (key == "extra" and not x.startswith("-")):
                v.fail(f"slurm.{key}", f"{x!r}: {'an option (-...) ' if key == 'extra' else ''}"
                                       "on one line")
    if slurm["scheduler"] not in ("auto", "slurm", "gridengine"):
        v.fail("slurm.scheduler", f"{slurm['scheduler']!r}: choose auto, slurm or gridengine")
    return slurm


def scheduler_value_ok(value: str) -> bool:
    """Whether a scheduler value (a partition, an account) may go into a job script's lines."""
    return bool(_SCHEDULER_VALUE.match(str(value)))


class _Validator:
    """Typed look-ups that fail with the file, the dotted key and what is allowed."""

    def __init__(self, path: Path):
        self.path = path

    def fail(self, key: str, what: str):
        raise StudyError(f"{self.path}: {key}: {what}")

    def table(self, raw: dict, key: str, required: bool = False) -> dict:
        if key not in raw:
            if required:
                self.fail(f"[{key}]", "missing section")
            return {}
        if not isinstance(raw[key], dict):
            self.fail(key, f"must be a table [{key}], got {type(raw[key]).__name__}")
        return raw[key]

    def only(self, table: dict, where: str, allowed: Iterable[str]) -> None:
        allowed = tuple(allowed)
        for key in table:
            if key not in allowed:
                dotted = f"{where}.{key}" if where else key
                self.fail(dotted, f"unknown key: allowed {'sections' if not where else 'keys'} "
                                  f"are {', '.join(allowed)}")

    def get(self, table: dict, dotted: str, typ, default=None, required=False, minimum=None):
        key = dotted.rsplit(".", 1)[-1]
        if key not in table:
            if required:
                self.fail(dotted, "missing")
            return default
        val = table[key]
        types = typ if isinstance(typ, tuple) else (typ,)
        if float in types and int not in types and isinstance(val, int) and not isinstance(val, bool):
            val = float(val)
        if (isinstance(val, bool) and bool not in types) or not isinstance(val, types):
            names = " or ".join({int: "an integer", float: "a number", str: "a string",
                                 list: "a list", dict: "a table",
                                 bool: "true or false"}.get(t, t.__name__) for t in types)
            self.fail(dotted, f"must be {names}, got {val!r}")
        if minimum is not None and val < minimum:
            self.fail(dotted, f"must be >= {minimum}, got {val}")
        return val

    def choice(self, table: dict, dotted: str, allowed: Sequence[str]) -> str:
        val = self.get(table, dotted, str, required=True)
        if val not in allowed:
            self.fail(dotted, f"'{val}' is not allowed: use one of {', '.join(allowed)}")
        return val

    def int_list(self, table: dict, dotted: str) -> List[int]:
        val = self.get(table, dotted, list, required=True)
        if not val or any(isinstance(x, bool) or not isinstance(x, int) or x < 1 for x in val):
            self.fail(dotted, f"must be a non-empty list of positive integers, got {val!r}")
        if len(set(val)) != len(val):
            self.fail(dotted, f"lists a count twice: {val!r}")
        return list(val)

    def str_list(self, table: dict, dotted: str, allowed: Sequence[str], default) -> List[str]:
        val = self.get(table, dotted, (list, str), default=default)
        if isinstance(val, str):
            val = [val]
        if not val:
            self.fail(dotted, f"must not be empty: use some of {', '.join(allowed)}")
        for x in val:
            if x not in allowed:
                self.fail(dotted, f"'{x}' is not allowed: use one of {', '.join(allowed)}")
        if len(set(val)) != len(val):
            self.fail(dotted, f"lists a value twice: {val!r}")
        return list(val)
