"""Reading a study file: :func:`load` parses the TOML and :func:`from_dict` checks each
section against :mod:`.schema` and builds the :class:`.model.Study`. Standard library only."""
from __future__ import annotations

import hashlib
import json
import math
import re
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from .. import checks, cluster, records
from ..errors import UserError

try:
    import tomllib as _toml
except ModuleNotFoundError:  # pragma: no cover - Python < 3.11
    import tomli as _toml  # type: ignore

from .model import Study
from .schema import (DEFAULT_TIMEOUT, LR_RULES, PLACEHOLDERS, SCRIPT_BACKEND, SLURM_KEYS,
                     StudyError, TUNINGS, VARIANT_OPTIONS, _AXES_KEYS, _LAYOUT_KEYS, _MODEL_KEYS,
                     _NAME_RE, _PLACEHOLDER, _RUN_KEYS, _SCHEDULER_VALUE, _SECTIONS,
                     _SLURM_DEFAULTS, _SLURM_TYPES, _STUDY_KEYS, _TARGET_KEYS, _VARIANT_FLAGS,
                     _Validator, _WORKLOAD_KEYS, _WORKLOAD_MIN, parse_time)


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
    v = _Reader(path)
    v.only(raw, "", _SECTIONS)
    name, scaling, repeats, description = v._study_section(raw, path)
    workload, params, batch, command = v._workload_section(raw, scaling)
    target = v._target_section(raw, params)
    scrape = v._scrape_section(raw, command)
    layouts, by_nodes = v._layout_section(raw, scaling, batch)
    ax = v.table(raw, "axes")
    v.only(ax, "axes", _AXES_KEYS)
    backends = v.str_list(ax, "axes.backend", BACKENDS, default=["horovod"])
    compressions = v.str_list(ax, "axes.compression", COMPRESSIONS, default=["none"])
    exchanges = v._exchange_axis(ax, BACKENDS, COMPRESSIONS)
    if exchanges:
        backends = list(dict.fromkeys(b for b, _ in exchanges))
        compressions = list(dict.fromkeys(c for _, c in exchanges))
    if command:
        v._command_limits(raw, ax)
        backends, compressions = [SCRIPT_BACKEND], ["none"]
    networks = v._network_axis(ax)
    lr_rules = (v.str_list(ax, "axes.lr_scaling", LR_RULES, default=None)
                if "lr_scaling" in ax else [""])
    if "lr_scaling" in ax and "lr_scaling" in params:
        v.fail("axes.lr_scaling", "and workload.lr_scaling both set the learning-rate rule: keep "
                                  "one")
    variants = v._variants_section(raw, ax, command)
    if variants:
        backends = list(dict.fromkeys(b for _, b, _, _ in variants))
        compressions = list(dict.fromkeys(c for _, _, c, _ in variants))
    timeout, env, mpirun_args = v._run_section(raw)
    measures = bool(v.table(raw, "model").get("forecast")) and not command
    tunings, tuning_file, library = v._tuning_axis(ax, v.table(raw, "run"), command, measures)
    if tuning_file and set(tunings) - {"default"} and "int8" in compressions:
        v.fail("run.tuning", "hpcdl tune tunes the none and fp16 exchanges, and int8 is among "
                             "this study's: its tuned points would have no settings (study int8 "
                             "in a study without run.tuning)")
    timeline = bool(v.get(v.table(raw, "run"), "run.timeline", bool, default=False))
    if timeline and command:
        v.fail("run.timeline", "records hpcdl train's Horovod timeline; workload.command runs "
                               "your script (set HOROVOD_TIMELINE in run.env for it)")
    slurm = v._slurm_section(raw, layouts, by_nodes)
    model = v.table(raw, "model")
    v.only(model, "model", _MODEL_KEYS)
    fit = v._fit_key(model)
    calibrate = v._calibrate_key(model)
    # points are keyed by rank count where every rank shares one machine, else by node count
    one_node = all(n == 1 for n, _ in layouts)
    top = max(n * r if one_node else n for n, r in layouts)
    if calibrate[0] and calibrate[0] >= top:
        v.fail("model.calibrate", f"nodes_max = {calibrate[0]} holds every point (the largest "
                                  f"has {top} {'rank' if one_node else 'node'}(s)): none is left "
                                  f"to predict; set it below {top}, or leave it out (the model "
                                  "is then calibrated on every point and forecasts)")
    forecast = v._forecast_key(model)
    from ..costmodel import PRESETS       # numpy, so not at a login node's import
    named = (v.str_list(model, "model.networks", list(PRESETS), default=None)
             if "networks" in model else [])
    root = Path(results_root) if results_root is not None else Path(
        cluster.setting("HPCDL_RESULTS_ROOT") or "results")
    return Study(name=name, path=path, scaling=scaling, workload=workload, params=params,
                 batch=batch, layouts=layouts, repeats=repeats, backends=backends,
                 compressions=compressions, networks=networks, lr_rules=lr_rules,
                 exchanges=exchanges, slurm=slurm, timeout=timeout, env=env,
                 mpirun_args=mpirun_args, description=description, results_dir=root / name,
                 fit=fit, calibrate_nodes_max=calibrate[0], calibrate_exchange=calibrate[1],
                 calibrate_loop=calibrate[2], calibrate_spread=calibrate[3],
                 forecast=forecast, forecast_networks=named, target=target, command=command,
                 scrape=scrape, timeline=timeline, variants=variants, tunings=tunings,
                 library_exchange=library,
                 tuning_file=tuning_file, raw=raw)


def _is_tuning(path: str) -> bool:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return False
    return isinstance(doc, dict) and doc.get("schema") == "hpcdl.tuning/1"


def _script_name(command: Sequence[str]) -> str:
    """A workload's default name: the script the command runs (train.py -> train)."""
    for word in command:
        if word.endswith(".py"):
            return Path(word).stem
    return Path(command[0]).name


class _Reader(_Validator):
    """The study file read section by section: each section's reader is a method, so that
    the typed look-ups (:class:`_Validator`) and what reads each section are one object."""

    def _fit_key(self, model) -> str:
        """[model] fit: a 'hpcdl bench fit' file, checked now rather than when the report needs it."""
        fit = self.get(model, "model.fit", str, default="")
        if fit:
            try:
                checks.fit_file(fit, prefix="")
            except UserError as exc:
                self.fail("model.fit", str(exc))
        return fit

    def _calibrate_key(self, model) -> Tuple[int, str, str, str]:
        """[model] calibrate = {nodes_max = N, exchange = PATH, loop = FILE, spread = FILE}: N (0
        without it), the 'hpcdl tune' files (one per node count and link rate, placeholders as
        run.tuning's) whose exchange the points beyond N take, the loop file
        (hpcdl bench allocation --loop) whose shares their compute follows, and the spread file
        (hpcdl bench allocation --spread) their slowest rank is drawn from ("" without them)."""
        cal = self.get(model, "model.calibrate", dict, default={})
        self.only(cal, "model.calibrate", ("nodes_max", "exchange", "loop", "spread"))
        if not cal:
            return 0, "", "", ""
        n = self.get(cal, "model.calibrate.nodes_max", int, required=True, minimum=1)
        path = self._tuning_path(cal, "model.calibrate.exchange")
        if path and "{nodes}" not in path and "{ranks}" not in path:
            self.fail("model.calibrate.exchange", "needs {nodes} or {ranks}: one tuning file per node "
                                               "count, made by 'hpcdl tune' on that allocation")
        return (n, path, self.get(cal, "model.calibrate.loop", str, default=""),
                self.get(cal, "model.calibrate.spread", str, default=""))

    def _forecast_key(self, model) -> List[int]:
        """[model] forecast = [16, 64, 256]: the node counts the report forecasts ([] for its
        default)."""
        counts = self.get(model, "model.forecast", list, default=None)
        if counts is None:
            return []
        if any(not isinstance(n, int) or isinstance(n, bool) or n < 2 for n in counts) or not counts:
            self.fail("model.forecast", f"node counts of 2 or more, such as [16, 64, 256]; got {counts}"
                   + (" (leave the key out for the report's default)" if not counts else ""))
        if len(set(counts)) < len(counts):
            self.fail("model.forecast", f"each node count once; got {counts}")
        return sorted(counts)

    def _tuning_path(self, table, key: str) -> str:
        """A tuning file's path at ``key`` (the last part of it in ``table``), whose placeholders
        are those of an allocation and link rate; "" when not given."""
        path = self.get(table, key, str, default="")
        for name in _PLACEHOLDER.findall(path):
            if name not in ("nodes", "ranks", "ranks_per_node", "network"):
                self.fail(key, f"{{{name}}} is not a placeholder of a tuning file's path "
                            "(use {nodes}, {ranks}, {ranks_per_node}, {network})")
        if path and not _PLACEHOLDER.search(path) and Path(path).exists() and not _is_tuning(path):
            self.fail(key, f"{path} exists and is not a tuning file (hpcdl.tuning/1): 'hpcdl tune' "
                        "would write over it; name another path")
        return path

    def _exchange_axis(self, ax, backends, compressions) -> List[Tuple[str, str]]:
        """[axes] exchange = ["horovod", "ps", "horovod+fp16"]: the backend[+compression] pairs to
        run, when not every backend x compression is wanted (then backend and compression stay out)."""
        if "exchange" not in ax:
            return []
        if "backend" in ax or "compression" in ax:
            self.fail("axes.exchange", "replaces axes.backend and axes.compression: give one or the other")
        allowed = [b for b in backends] + [f"{b}+{c}" for b in backends for c in compressions]
        items = self.str_list(ax, "axes.exchange", allowed, default=None)
        return [tuple((x + "+none").split("+")[:2]) for x in items]

    def _variants_section(self, raw, ax, command) -> List[Tuple[str, str, str, Tuple[str, ...]]]:
        """[variants] name = "hpcdl train options": named configurations compared on the same
        workload and layouts (say ``downpour = "--backend ps-async"``, ``pipe = "--parallel
        pipeline --micro-batches 4"``); each is an axis of the report. They replace axes.backend,
        compression and exchange; only the options in VARIANT_OPTIONS may be given."""
        from ..train.modes import TRAIN_BACKENDS
        from ..comm import COMPRESSIONS
        import shlex
        table = self.table(raw, "variants")
        if not table:
            return []
        if command:
            self.fail("[variants]", "sets hpcdl train options, and workload.command runs your own script")
        for key in ("backend", "compression", "exchange"):
            if key in ax:
                self.fail(f"axes.{key}", "and [variants] both say how the points train: give the "
                                      "backend and compression inside each variant")
        choices = {"--backend": TRAIN_BACKENDS, "--compression": COMPRESSIONS}
        out = []
        for name in table:
            if not _NAME_RE.match(name):
                self.fail(f"variants.{name}", "a variant's name must be letters, digits, '.', '_' or "
                                           "'-' (it names its points)")
            words = shlex.split(self.get(table, f"variants.{name}", str))
            opts, rest, i = {"--backend": "horovod", "--compression": "none"}, [], 0
            while i < len(words):
                flag = words[i]
                if flag not in VARIANT_OPTIONS:
                    self.fail(f"variants.{name}", f"'{flag}' is not an option a variant may set: "
                                               f"{', '.join(VARIANT_OPTIONS)}")
                if flag in _VARIANT_FLAGS:
                    rest.append(flag)
                    i += 1
                    continue
                if i + 1 >= len(words):
                    self.fail(f"variants.{name}", f"{flag} needs a value")
                value, kind = words[i + 1], choices.get(flag, VARIANT_OPTIONS[flag])
                if isinstance(kind, tuple) and value not in kind:
                    self.fail(f"variants.{name}", f"{flag} {value}: choose one of {', '.join(kind)}")
                if kind is int and not (value.isdigit() and int(value) > 0):
                    self.fail(f"variants.{name}", f"{flag} needs a positive integer, got '{value}'")
                if flag in opts:
                    opts[flag] = value
                else:
                    rest += [flag, value]
                i += 2
            out.append((name, opts["--backend"], opts["--compression"], tuple(rest)))
        return out

    def _network_axis(self, ax) -> List[str]:
        """[axes] network: link rates ("200mbit", "1gbit"); each point runs on a machine whose links
        have its rate (one that sets it: :class:`hpcdl.machine.Target`)."""
        from ..costmodel import rate_bits
        nets = self.get(ax, "axes.network", (list, str), default=None)
        if nets is None:
            return [""]
        nets = [nets] if isinstance(nets, str) else nets
        for x in nets:
            try:
                rate_bits(str(x))
            except ValueError:
                self.fail("axes.network", f"'{x}' is not a link rate such as '200mbit' or '1gbit'")
        if not nets or len(set(nets)) != len(nets):
            self.fail("axes.network", f"must list distinct link rates, not {nets!r}")
        return [str(x) for x in nets]

    def _tuning_axis(self, ax, run, command, measures: bool) -> Tuple[List[str], str, bool]:
        """[axes] tuning = ["default", "tuned"] and [run] tuning, the tuning file of the tuned points
        (placeholders {nodes}, {ranks}, {ranks_per_node}, {network}: one per allocation and link
        rate, as 'hpcdl tune' makes them), or "default": the MPI library's choice everywhere.
        ``measures``: the study's own jobs time the allocation's exchange (a forecast), whose
        pick its points then run unless it says "default" (the last of the three returned)."""
        if run.get("tuning") == "default":
            if "tuning" in ax:
                self.fail("run.tuning", "'default' runs the library's choice at every point; "
                                        "axes.tuning = [\"default\", \"tuned\"] needs the tuned "
                                        "points' file (or leave run.tuning out in a study with "
                                        "[model] forecast, whose jobs make them)")
            return [""], "", True
        path = self._tuning_path(run, "run.tuning")
        tunings = self.str_list(ax, "axes.tuning", TUNINGS, default=None) if "tuning" in ax else [""]
        if "tuned" in tunings and not path and not measures:
            self.fail("axes.tuning", "'tuned' needs run.tuning, the tuning file ('hpcdl tune' makes "
                                     "it), or [model] forecast, whose jobs make one per node count")
        if command and (path or "tuning" in ax):
            self.fail("run.tuning", "tunes hpcdl train's exchange; workload.command runs your script "
                                 "(export the tuning file's settings in run.env for it)")
        return tunings, path, False

    def _study_section(self, raw, path):
        st = self.table(raw, "study")
        self.only(st, "study", _STUDY_KEYS)
        name = self.get(st, "study.name", str, default=path.stem)
        if not _NAME_RE.match(name):
            self.fail("study.name", f"'{name}' must be letters, digits, '.', '_' or '-' (it names a folder)")
        return (name, self.choice(st, "study.scaling", records.SCALINGS),
                self.get(st, "study.repeats", int, default=1, minimum=1),
                self.get(st, "study.description", str, default=""))

    def _workload_section(self, raw, scaling):
        from ..workloads import BUILTIN
        wl = self.table(raw, "workload", required=True)
        self.only(wl, "workload", ("name", "command", "batch_size", "global_batch") + tuple(_WORKLOAD_KEYS))
        command = self._command_key(wl)
        if command:
            workload = self.get(wl, "workload.name", str, default=_script_name(command))
            for key in _WORKLOAD_KEYS:
                if key in wl:
                    self.fail(f"workload.{key}", "is an option of hpcdl's own training loop, and "
                                              "workload.command runs your script: give the script's "
                                              "own options in workload.command")
        else:
            workload = self.get(wl, "workload.name", str, required=True)
        if not command and workload not in BUILTIN and not re.match(r"^[\w.]+:[\w]+$", workload):
            self.fail("workload.name", f"'{workload}' is unknown: use one of {', '.join(BUILTIN)} "
                                    f"or package.module:factory (or run your script: workload.command)")
        params = {}
        for key, (typ, _flag) in _WORKLOAD_KEYS.items():
            if key in wl:
                params[key] = self.get(wl, f"workload.{key}", typ, minimum=_WORKLOAD_MIN.get(key, 1))
        if params.get("lr", 1.0) <= 0:
            self.fail("workload.lr", f"must be positive, got {params['lr']}")
        if "lr_scaling" in params and params["lr_scaling"] not in ("linear", "none"):
            self.fail("workload.lr_scaling", f"'{params['lr_scaling']}' is not allowed: use linear or none")
        key, other, why = (("global_batch", "batch_size", "strong scaling fixes the global batch: give "
                            "workload.global_batch instead (per-rank = global / ranks)")
                           if scaling == "strong" else
                           ("batch_size", "global_batch", "weak scaling fixes the per-rank batch: give "
                            "workload.batch_size instead (global = per-rank x ranks)"))
        if other in wl:
            self.fail(f"workload.{other}", why)
        return (workload, params, self.get(wl, f"workload.{key}", int, required=True, minimum=1),
                command)

    def _command_key(self, wl) -> List[str]:
        """[workload] command: the words that run one rank of the user's script."""
        if "command" not in wl:
            return []
        words = self.get(wl, "workload.command", list)
        if not words or any(not isinstance(w, str) or not w for w in words):
            self.fail("workload.command", f"must be a non-empty list of non-empty strings (the words "
                                       f"of one rank's command), got {words!r}")
        for word in words:
            for name in _PLACEHOLDER.findall(word):
                if name not in PLACEHOLDERS:
                    self.fail("workload.command", f"'{{{name}}}' in {word!r} is not a placeholder: use "
                                               f"{', '.join('{' + p + '}' for p in PLACEHOLDERS)}")
        return list(words)

    def _command_limits(self, raw, ax) -> None:
        """What a study of a command cannot ask: the script owns its exchange and its stopping."""
        for key in ("backend", "compression", "exchange", "lr_scaling"):
            if key in ax:
                self.fail(f"axes.{key}", "sets hpcdl train options, and workload.command runs your own "
                                      "script: its exchange and learning rate are the script's")
        if "target" in raw:
            self.fail("[target]", "needs hpcdl's own evaluations; workload.command runs your script, "
                               "which decides itself when to stop")

    def _scrape_section(self, raw, command) -> Dict[str, str]:
        """[scrape] name = 'regex': figures read from a command's output, the number in the
        pattern's first group (or its group named 'value'); throughput and throughput_per_rank, in
        samples per second, also give the point its throughput."""
        sc = self.table(raw, "scrape")
        if sc and not command:
            self.fail("[scrape]", "reads figures a workload.command prints; hpcdl train records its "
                               "own figures")
        out = {}
        for name, pattern in sc.items():
            if not _NAME_RE.match(name):
                self.fail(f"scrape.{name}", "a figure's name must be letters, digits, '.', '_' or '-'")
            pattern = self.get(sc, f"scrape.{name}", str)
            try:
                rx = re.compile(pattern)
            except re.error as exc:
                self.fail(f"scrape.{name}", f"{pattern!r} is not a regular expression: {exc}")
            if rx.groups < 1:
                self.fail(f"scrape.{name}", f"{pattern!r} has no group: put the number in one, as in "
                                         "'img/sec: ([0-9.]+)'")
            out[name] = pattern
        return out

    def _target_section(self, raw, params) -> str:
        """[target]: the held-out metric to reach and the steps allowed; sets the train flags in
        ``params`` and returns "metric:value" ("" without the section)."""
        tg = self.table(raw, "target")
        if not tg:
            return ""
        self.only(tg, "target", _TARGET_KEYS)
        metric = self.choice(tg, "target.metric", ("accuracy", "loss"))
        value = float(self.get(tg, "target.value", (int, float), required=True))
        if not math.isfinite(value):
            self.fail("target.value", f"must be a finite number, got {value}")
        if "steps" in params:
            self.fail("workload.steps", "and target.max_steps both say how long to train: keep "
                                     "target.max_steps (training ends earlier at the target)")
        params["steps"] = self.get(tg, "target.max_steps", int, required=True, minimum=1)
        params["target"] = f"{metric}:{value!r}"
        if "eval_every" in tg:
            params["eval_every"] = self.get(tg, "target.eval_every", int, minimum=1)
        return params["target"]

    def _layout_section(self, raw, scaling, batch):
        lay = self.table(raw, "layout", required=True)
        self.only(lay, "layout", _LAYOUT_KEYS)
        if "ranks" in lay and ("nodes" in lay or "ranks_per_node" in lay):
            self.fail("layout.ranks", "give either layout.ranks (one machine) or layout.nodes with "
                                   "layout.ranks_per_node (a cluster), not both")
        if "ranks" in lay:
            layouts = [(1, r) for r in self.int_list(lay, "layout.ranks")]
        elif "nodes" in lay:
            rpn = self.get(lay, "layout.ranks_per_node", int, default=1, minimum=1)
            layouts = [(n, rpn) for n in self.int_list(lay, "layout.nodes")]
        else:
            self.fail("layout", "missing: give layout.ranks = [1, 2, ...] (one machine) or "
                             "layout.nodes = [1, 2, ...] with layout.ranks_per_node")
        for nodes, rpn in layouts if scaling == "strong" else ():
            if batch % (nodes * rpn):
                self.fail("layout.ranks" if "ranks" in lay else "layout.nodes",
                       f"{nodes * rpn} ranks do not divide workload.global_batch = {batch} "
                       f"(strong scaling needs per-rank batch = global / ranks to be whole): "
                       f"use rank counts that divide {batch}")
        return layouts, "nodes" in lay

    def _run_section(self, raw):
        run = self.table(raw, "run")
        self.only(run, "run", _RUN_KEYS)
        timeout = float(self.get(run, "run.timeout", (int, float), default=DEFAULT_TIMEOUT))
        if not timeout > 0:
            self.fail("run.timeout", f"must be a positive number of seconds, got {timeout}")
        env = {}
        for k, val in self.get(run, "run.env", dict, default={}).items():
            if not isinstance(val, (str, int, float)) or isinstance(val, bool):
                self.fail(f"run.env.{k}", f"must be a string or number, got {type(val).__name__}")
            env[str(k)] = str(val)
        if "threads_per_rank" in run:
            env.setdefault("HPCDL_THREADS", str(self.get(run, "run.threads_per_rank", int, minimum=1)))
        return timeout, env, [str(a) for a in self.get(run, "run.mpirun_args", list, default=[])]

    def _slurm_section(self, raw, layouts, by_nodes):
        sl = self.table(raw, "slurm")
        self.only(sl, "slurm", SLURM_KEYS)
        slurm = dict(_SLURM_DEFAULTS)
        for key, typ in _SLURM_TYPES.items():
            if key in sl:
                slurm[key] = self.get(sl, f"slurm.{key}", typ,
                                   minimum=(0 if key in ("gpus_per_node", "signal_lead") else
                                            (1 if typ is int else None)))
        if slurm["time"]:
            try:
                parse_time(slurm["time"])
            except UserError as exc:
                self.fail("slurm.time", str(exc))
        rpn = max(r for _, r in layouts)
        if slurm["ntasks_per_node"] is None:
            slurm["ntasks_per_node"] = rpn
        elif by_nodes and slurm["ntasks_per_node"] != rpn:
            self.fail("slurm.ntasks_per_node", f"{slurm['ntasks_per_node']} differs from "
                                            f"layout.ranks_per_node = {rpn}: drop one or make them equal")
        for key in ("modules", "setup", "extra"):
            if any(not isinstance(x, str) for x in slurm[key]):
                self.fail(f"slurm.{key}", "must be a list of strings")
        # values that go into the job script's #SBATCH and #$ lines: a newline or a shell
        # metacharacter there would start a line of its own, a command of the job
        for key in ("partition", "account", "qos", "constraint", "mem", "mpi", "pe"):
            if slurm[key] is not None and not _SCHEDULER_VALUE.match(str(slurm[key])):
                self.fail(f"slurm.{key}", f"{slurm[key]!r}: letters, digits and _ . , : = + @ % / & | ! "
                                       "* [ ] ( ) - only (no space, quote, $, ;, < or > and no newline)")
        for key in ("extra", "modules"):
            for x in slurm[key]:
                if "\n" in x or "\r" in x or (key == "extra" and not x.startswith("-")):
                    self.fail(f"slurm.{key}", f"{x!r}: {'an option (-...) ' if key == 'extra' else ''}"
                                           "on one line")
        if slurm["scheduler"] not in ("auto", "slurm", "gridengine"):
            self.fail("slurm.scheduler", f"{slurm['scheduler']!r}: choose auto, slurm or gridengine")
        return slurm
