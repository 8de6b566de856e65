"""The study file's format: its sections and keys with their types, defaults and limits, a
Slurm time limit, and the typed look-ups that fail naming the file, the key and what is
allowed (:class:`StudyError`). Standard library only."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Dict, Iterable, List, Sequence, Tuple

from ..cluster import parse_time   # noqa: F401  (a Slurm time limit: the study's and the jobs')
from ..errors import UserError
from ..records import SCRIPT_BACKEND   # noqa: F401  (what a record of the user's own command names)

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
_TARGET_KEYS = ("metric", "value", "max_steps", "eval_every")
# [target] keys that become hpcdl train flags (metric and value make --target METRIC:VALUE)
_TARGET_FLAGS: Dict[str, Tuple[type, str]] = {"target": (str, "--target"),
                                              "eval_every": (int, "--eval-every")}
_MODEL_KEYS = ("fit", "calibrate", "forecast", "networks")
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

class StudyError(UserError):
    """A study file that cannot be run as written: the message names the file, key and fix."""



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
