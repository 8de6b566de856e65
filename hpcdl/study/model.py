"""A study and its points: what each run is (:class:`Point`), the study as a whole and its
files (:class:`Study`: the points in the order they run, what is recorded, what is still
missing), and which point a record belongs to. Standard library only."""
from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Dict, Iterable, List, Tuple

from .. import records
from ..records import recorded_point

from .schema import DEFAULT_TIMEOUT, _PLACEHOLDER, _TARGET_FLAGS, _WORKLOAD_KEYS


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
    network: str = ""          # the link rate this point needs ("": any machine's)
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
    networks: List[str] = field(default_factory=lambda: [""])   # [axes] network: link rates
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
    forecast_networks: List[str] = field(default_factory=list)   # [model] networks: named ones
    target: str = ""                 # [target]: "accuracy:0.91"; each repeat is then a seed
    command: List[str] = field(default_factory=list)   # [workload] command: the user's script
    scrape: Dict[str, str] = field(default_factory=dict)  # [scrape]: figure name -> pattern
    timeline: bool = False           # [run] timeline = true: Horovod's timeline per point
    tunings: List[str] = field(default_factory=lambda: [""])   # [axes] tuning
    tuning_file: str = ""            # [run] tuning: the tuning file ({nodes}, {ranks} filled in)
    library_exchange: bool = False   # [run] tuning = "default": the MPI library's choice everywhere
    tuned_by_jobs: bool = False      # study submit --tune: its jobs tune the allocation's exchange
    sha256: str = ""                 # of the study file's bytes
    raw: Dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def declared(self) -> Dict[str, Any]:
        """What every record of this study carries, so that the report guesses nothing."""
        spread, loop = self.allocation_files
        # the model's inputs as hpcdl.model.inputs.Inputs reads them (given fields only)
        model = {"nodes_max": self.calibrate_nodes_max, "fit": self.fit,
                 "exchange": self.exchange_files, "loop": loop, "spread": spread,
                 "forecast": list(self.forecast), "networks": list(self.forecast_networks)}
        out = {"scaling": self.scaling, "study_file": str(self.path), "study_sha256": self.sha256,
               "model": {k: v for k, v in model.items() if v}}
        if self.target:
            out["target"] = self.target
        return out

    @property
    def runs_path(self) -> Path:
        return self.results_dir / "runs.jsonl"

    @property
    def is_local(self) -> bool:
        return all(n == 1 for n, _ in self.layouts)

    # from this many nodes a study whose jobs time the allocation's exchange runs their pick (at
    # two, every allreduce algorithm sends the same one exchange)
    AUTO_TUNED_FROM = 3

    @property
    def auto_tuned(self) -> bool:
        """Whether the points run the allocation's pick without a [run] tuning of their own: the
        study's jobs time the exchange (a forecast across nodes, :attr:`exchange_files`) and it
        does not ask for the library's choice."""
        return (not self.tuning_file and not self.library_exchange and not self.command
                and not self.is_local and (bool(self.forecast) or self.tuned_by_jobs))

    @property
    def allocation_exchange(self) -> str:
        """The path pattern of the exchange files the study's own jobs make in its results
        folder, one per node count (and link rate)."""
        net = "-{network}" if any(self.networks) else ""
        return str(Path(self.results_dir) / "allocation" / f"exchange-{{nodes}}n{net}.json")

    def _tuning_of(self, tun: str, backend: str, comp: str, nodes: int, rpn: int) -> str:
        """The tuning file pattern a point runs with ("": the library's choice)."""
        if tun == "default":
            return ""
        if self.tuning_file:
            return self.tuning_file
        if (self.auto_tuned and nodes >= self.AUTO_TUNED_FROM and rpn == 1
                and backend == "horovod" and comp in ("none", "fp16")):
            return self.exchange_files or self.allocation_exchange
        return ""

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
                                         self._tuning_of(tun, backend, comp, nodes, rpn)))
        return out

    @property
    def exchange_pairs(self) -> List[Tuple[str, str]]:
        """(backend, compression) of every point: [axes] exchange, else backend x compression."""
        return self.exchanges or [(b, c) for b in self.backends for c in self.compressions]

    def done_ids(self, runs_path=None) -> set:
        """Point ids already recorded for this study (see :func:`hpcdl.records.recorded_point`)."""
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
        exchange files the report's model reads (:meth:`lacking_exchange`'s)."""
        need: Dict[Tuple[str, int, int], set] = {}
        points = list(points)
        for p in points:
            if p.tuned:
                need.setdefault((p.tuning_path, p.nodes, p.ranks_per_node), set()).add(p.compression)
        if calibration:
            self._exchange_need(points, need)
        return _lacking(need)

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
        return self.allocation_exchange

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

    def lacking_exchange(self, points: Iterable[Point]
                         ) -> List[Tuple[str, int, int, List[str], List[str]]]:
        """:meth:`lacking_tuning`'s entries for the :attr:`exchange_files`, where the study asks
        for a forecast (whose jobs make them; else ``--tune`` does): at the node counts the
        model predicts, measured there to stand beside the prediction, and at the small node
        counts above the calibration, up to ``hpcdl.costmodel.SMALL`` nodes, that the
        prediction of the larger ones is priced from (:meth:`exchange_small`)."""
        if not self.forecast:
            return []
        need: Dict[Tuple[str, int, int], set] = {}
        self._exchange_need(list(points), need)
        return _lacking(need)

    def _exchange_need(self, points: List[Point], need: Dict[Tuple[str, int, int], set]) -> None:
        """Into ``need``, the exchange files the model reads and the auto-tuned points run."""
        tuned = [p for p in points if p.tuned and p.tuning_file == self.exchange_files
                 and self.auto_tuned]
        for p in self.exchange_benched(points) + self.exchange_small(points) + tuned:
            need.setdefault((p.placeholders_filled(self.exchange_files), p.nodes,
                             p.ranks_per_node), set()).add(p.compression)

    def exchange_small(self, points: Iterable[Point]) -> List[Point]:
        """The exchange-only measurements a small allocation makes for the model: the
        :meth:`exchange_benched` points' settings at each node count above the calibration (at
        least 2) up to ``hpcdl.costmodel.SMALL`` and below their own; none where no point is
        held out (the forecast then starts from the largest point's own runs)."""
        from ..costmodel import SMALL          # numpy: not at a login node's import
        if not self.calibrate_nodes_max:
            return []
        benched = self.exchange_benched(points)
        out, seen = [], set()
        for p in benched:
            for q in range(max(2, self.calibrate_nodes_max + 1), min(SMALL, p.nodes - 1) + 1):
                key = (q, p.network, p.compression, p.tuning)
                if key not in seen and not any(b.nodes == q and b.network == p.network
                                               for b in benched):
                    seen.add(key)
                    out.append(replace(p, nodes=q))
        return out

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
        must hold it); where the study holds points out, only its calibration's counts and those
        up to ``hpcdl.costmodel.SMALL`` nodes below its largest; [] where the study asks for no
        forecast."""
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
        from ..costmodel import SMALL          # numpy: not at a login node's import
        want = {(p.nodes, p.ranks_per_node) for p in points
                if p.ranks > 1 and (p.ranks_per_node == 1 or p.nodes == 1)}
        if self.calibrate_nodes_max:
            # a study holding points out measures what their prediction may draw on: the
            # calibration's counts and a small allocation's (up to SMALL nodes, below a held-out
            # point), not the held-out counts themselves
            top = max(SMALL, self.calibrate_nodes_max)
            above = max((n for n, rpn in want if rpn == 1), default=0)
            want = {(n, rpn) for n, rpn in want if n * rpn <= top} | {
                (q, 1) for q in range(2, min(SMALL, above - 1) + 1)}
        return sorted((w for w in want if w[0] * w[1] not in have), key=lambda x: x[0] * x[1])

    def summary(self) -> str:
        pts = self.points()
        ranks = sorted({p.ranks for p in pts})
        return (f"study {self.name}: {self.workload} {self.scaling} scaling, "
                f"{'global' if self.scaling == 'strong' else 'per-rank'} batch {self.batch}, "
                f"ranks {ranks}, backends {self.backends}, compressions {self.compressions}, "
                f"{self.repeats} repeat(s): {len(pts)} runs")


def _lacking(need: Dict[Tuple[str, int, int], set]) -> List[Tuple[str, int, int, List[str], List[str]]]:
    """Of the tuning files ``need`` names ((path, nodes, ranks per node) -> compressions), those
    that do not exist or hold no pick for a compression: (path, nodes, ranks per node, every
    compression, those lacking)."""
    out = []
    for (path, n, rpn), comps in sorted(need.items()):
        try:
            picks = set(json.loads(Path(path).read_text()).get("picks") or {})
        except (OSError, ValueError, AttributeError):
            picks = set()
        if comps - picks:
            out.append((path, n, rpn, sorted(comps), sorted(comps - picks)))
    return out
