"""Render, submit and follow hpcdl's Slurm jobs (and a Grid Engine example).

Rendering is a pure function from typed parameters (``Job``, ``Software``, the training command)
to script text: the templates in ``slurm/`` with ``{{name}}`` placeholders and ``{{> part}}``
includes of ``slurm/_part.sh``. The ``#SBATCH`` lines are sorted ``--key=value`` lines, so a
rendered script can be compared with a golden file. Submission goes through ``sbatch --parsable``;
a study's report job is chained with ``--dependency=afterany:<every step>``; states come from
``squeue`` (queued and running jobs) and ``sacct -c`` (the job-completion log: ended jobs and
their exit codes), falling back to plain ``sacct`` where the site keeps no completion log.

Standard library only: this module runs on a login node without TensorFlow.
"""
from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

from ..errors import UserError

__all__ = ["Job", "Software", "Export", "DEFAULT_EXPORTS", "sbatch_options", "render_train",
           "render_study_step", "render_report", "render_qsub", "train_command", "plan_study",
           "submit_study", "sbatch", "job_states", "study_status", "parse_time",
           "add_submit_arguments", "submit_main", "add_status_arguments", "status_main"]

_ROOT = Path(__file__).resolve().parents[2]
_PLACEHOLDER = re.compile(r"\{\{\s*([a-z_]+)\s*\}\}")
_PARTIAL = re.compile(r"^\{\{>\s*([a-z_]+)\s*\}\}$", re.M)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")
_SIGNAL_LEAD_MAX = 65535  # Slurm keeps --signal's lead time in 16 bits

# Commands a user may wait on; nothing here may hang the caller.
_CMD_TIMEOUT = 60


# --- parameters -------------------------------------------------------------------------------------

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


def _hms(secs: int) -> str:
    d, rest = divmod(int(secs), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


@dataclass(frozen=True)
class Job:
    """Resources and scheduling of one batch job."""

    name: str
    nodes: int = 1
    ntasks_per_node: int = 1
    cpus_per_task: Optional[int] = None
    gpus_per_node: Optional[int] = None
    time: str = "00:30:00"
    partition: Optional[str] = None
    account: Optional[str] = None
    output: str = "%x-%j.out"
    signal_lead: Optional[int] = 120   # seconds of warning before the limit; None: not preemptible
    extra: Tuple[str, ...] = ()        # more sbatch options, "--key=value"

    def __post_init__(self):
        if not re.match(r"^[A-Za-z0-9_.+-]+$", self.name or ""):
            raise UserError(f"job name '{self.name}' may hold only letters, digits and _.+-")
        for key in ("nodes", "ntasks_per_node"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 1:
                raise UserError(f"slurm {key} must be a positive integer, got {getattr(self, key)!r}")
        for key in ("cpus_per_task", "gpus_per_node"):
            v = getattr(self, key)
            if v is not None and (not isinstance(v, int) or v < (1 if key == "cpus_per_task" else 0)):
                raise UserError(f"slurm {key} must be a positive integer, got {v!r}")
        secs = parse_time(self.time)
        if self.signal_lead is not None:
            if not isinstance(self.signal_lead, int) or not 0 < self.signal_lead <= _SIGNAL_LEAD_MAX:
                raise UserError(f"slurm signal_lead must be 1..{_SIGNAL_LEAD_MAX} seconds, got "
                                f"{self.signal_lead!r}")
            if self.signal_lead >= secs:
                raise UserError(f"slurm signal_lead ({self.signal_lead} s) must be shorter than the "
                                f"time limit {self.time} ({secs} s)")
        for opt in self.extra:
            if not str(opt).startswith("--"):
                raise UserError(f"extra sbatch option '{opt}' must look like --key=value")

    @property
    def seconds(self) -> int:
        return parse_time(self.time)

    @property
    def ranks(self) -> int:
        return self.nodes * self.ntasks_per_node


@dataclass(frozen=True)
class Export:
    """One documented setting of the job scripts; ``value`` None renders a commented example."""

    name: str
    value: Optional[str]
    example: str
    doc: str


# The settings every script documents. Each is overridable by exporting it before sbatch; the
# values here are the defaults that suit a production cluster.
DEFAULT_EXPORTS: Tuple[Export, ...] = (
    Export("HPCDL_LAUNCHER", "srun", "srun",
           "How ranks start: srun (the default) or mpirun (Open MPI's own launcher in the allocation)."),
    Export("HPCDL_SRUN_MPI", "pmix", "pmix",
           "srun's MPI plugin: Open MPI 4 and 5 speak PMIx (pmi2 only if built with Slurm's PMI)."),
    Export("HOROVOD_STALL_CHECK_TIME_SECONDS", "60", "60",
           "Horovod: warn when ranks have waited this long for each other..."),
    Export("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS", "300", "300",
           "...and end the job rather than hold the allocation once they have waited this long."),
    Export("HOROVOD_FUSION_THRESHOLD", "67108864", "67108864",
           "Horovod: bytes of gradients fused into one allreduce (64 MiB, Horovod's default)."),
    Export("HOROVOD_CYCLE_TIME", None, "5",
           "Horovod: milliseconds between fusion cycles; larger fuses more, smaller reacts faster."),
    Export("NCCL_DEBUG", "WARN", "WARN",
           "NCCL (GPU nodes): WARN reports problems; INFO also shows the rings and transports chosen."),
    Export("NCCL_SOCKET_IFNAME", None, "ib0",
           "NCCL: the interface for bootstrap and socket traffic (unset: NCCL picks one)."),
    Export("NCCL_IB_HCA", None, "mlx5_0",
           "NCCL: the InfiniBand adapters to use (unset: all)."),
    Export("OMPI_MCA_btl_base_warn_component_unused", "0", "0",
           "Open MPI: no warnings about transports that exist but are not used."),
    Export("OMPI_MCA_btl", None, "self,tcp",
           "Open MPI: byte transports. Several Slurm nodes on one host need self,tcp: shared memory "
           "between ranks of different 'nodes' crashes."),
    Export("OMPI_MCA_btl_tcp_if_include", None, "lo",
           "Open MPI: the interfaces TCP may use (lo when every node is this host)."),
)

# Settings that mean nothing to a Grid Engine script (it always starts ranks with mpirun).
_SLURM_ONLY = ("HPCDL_LAUNCHER", "HPCDL_SRUN_MPI")


@dataclass(frozen=True)
class Software:
    """Where a job runs and how it finds hpcdl's Python."""

    workdir: str
    activate: str                      # shell line(s): 'source VENV/bin/activate', 'module load ...'
    python: str = "python"
    exports: Tuple[Tuple[str, Optional[str]], ...] = ()   # overrides of DEFAULT_EXPORTS, and more

    def __post_init__(self):
        for name, _ in self.exports:
            if not _ENV_NAME.match(name):
                raise UserError(f"'{name}' is not an environment variable name")

    @classmethod
    def here(cls, workdir=None, exports: Optional[Mapping[str, Optional[str]]] = None,
             activate: Optional[str] = None) -> "Software":
        """The Python running now (its venv when there is one), in ``workdir`` (default: cwd)."""
        if activate is None:
            if sys.prefix != getattr(sys, "base_prefix", sys.prefix):
                activate = f"source {shlex.quote(str(Path(sys.prefix) / 'bin' / 'activate'))}"
            else:
                activate = f'export PATH={shlex.quote(str(Path(sys.executable).parent))}:"$PATH"'
        return cls(workdir=str(Path(workdir or os.getcwd()).resolve()), activate=activate,
                   exports=tuple(sorted((exports or {}).items())))


def _dq(value: str) -> str:
    """``value`` inside double quotes, safe for bash."""
    return '"' + re.sub(r'(["\\$`])', r"\\\1", str(value)) + '"'


def _render_exports(software: Software, skip: Sequence[str] = ()) -> Tuple[str, List[str]]:
    """The settings block and the names it exports."""
    overrides = dict(software.exports)
    known = {e.name for e in DEFAULT_EXPORTS}
    items = [Export(e.name, overrides.get(e.name, e.value), e.example, e.doc) if e.name in overrides
             else e for e in DEFAULT_EXPORTS]
    items += [Export(name, value, value or "", "Set for this job.")
              for name, value in sorted(overrides.items()) if name not in known]
    lines, names = [], []
    for e in items:
        if e.name in skip:
            continue
        lines += textwrap.wrap(e.doc, 99, initial_indent="# ", subsequent_indent="# ")
        if e.value is None:
            lines.append(f"# export {e.name}={e.example}")
        else:
            lines.append(f'export {e.name}="${{{e.name}:-{_dq(e.value)[1:-1]}}}"')
            names.append(e.name)
    return "\n".join(lines), names


def sbatch_options(job: Job, preemptible: bool = True) -> List[str]:
    """The job's sbatch options, sorted by name."""
    opts = {
        "--job-name": job.name,
        "--nodes": str(job.nodes),
        "--ntasks-per-node": str(job.ntasks_per_node),
        "--time": _hms(job.seconds),
        "--output": job.output,
    }
    if job.cpus_per_task is not None:
        opts["--cpus-per-task"] = str(job.cpus_per_task)
    if job.gpus_per_node:
        opts["--gpus-per-node"] = str(job.gpus_per_node)
    if job.partition:
        opts["--partition"] = job.partition
    if job.account:
        opts["--account"] = job.account
    if preemptible and job.signal_lead is not None:
        opts["--signal"] = f"B:USR1@{job.signal_lead}"
        opts["--requeue"] = None
        opts["--open-mode"] = "append"     # a requeued attempt adds to the same output file
    for opt in job.extra:
        key, _, value = str(opt).partition("=")
        opts[key] = value if _ else None
    return [k if v is None else f"{k}={v}" for k, v in sorted(opts.items())]


def _sbatch_block(job: Job, preemptible: bool = True) -> str:
    return "\n".join(f"#SBATCH {o}" for o in sbatch_options(job, preemptible))


def train_command(train_args: Sequence[str], python: str = "python",
                  checkpoint_dir_var: Optional[str] = "$CKPT_DIR") -> str:
    """The words of ``python -m hpcdl train ARGS`` for a bash array, one option per line."""
    args = list(train_args)
    if checkpoint_dir_var and "--checkpoint-dir" not in args:
        args += ["--checkpoint-dir", checkpoint_dir_var]
    groups: List[List[str]] = [[shlex.quote(python), "-m", "hpcdl", "train"]]
    for a in args:
        word = f'"{a}"' if a == checkpoint_dir_var else shlex.quote(a)
        if a.startswith("-") or len(groups) == 1:
            groups.append([word])
        else:
            groups[-1].append(word)
    return "\n    ".join(" ".join(g) for g in groups)


# --- templates ---------------------------------------------------------------------------------------

def _template_dir() -> Path:
    d = Path(os.environ.get("HPCDL_SLURM_TEMPLATES") or _ROOT / "slurm")
    if not (d / "train.sbatch").is_file():
        raise UserError(f"Slurm templates not found in {d}: set HPCDL_SLURM_TEMPLATES to the "
                        "repository's slurm/ folder")
    return d


def _load(name: str, depth: int = 0) -> str:
    d = _template_dir()
    text = (d / name).read_text()
    if depth > 4:
        raise RuntimeError(f"template includes nest too deep at {name}")
    return _PARTIAL.sub(lambda m: _load(f"_{m.group(1)}.sh", depth + 1).rstrip("\n"), text)


def _fill(name: str, values: Mapping[str, object]) -> str:
    text = _load(name)
    missing = sorted({m.group(1) for m in _PLACEHOLDER.finditer(text)} - set(values))
    if missing:
        raise RuntimeError(f"template {name} needs values for {', '.join(missing)}")
    return _PLACEHOLDER.sub(lambda m: str(values[m.group(1)]), text)


def _common(job: Job, software: Software, script_name: str, skip_exports=()) -> dict:
    exports, _ = _render_exports(software, skip_exports)
    return {"nodes": job.nodes, "ranks_per_node": job.ntasks_per_node, "ranks": job.ranks,
            "job_name": job.name, "script_name": script_name,
            "signal_lead": job.signal_lead if job.signal_lead is not None else 0,
            "exports": exports, "workdir": shlex.quote(software.workdir),
            "activate": software.activate}


def render_train(job: Job, software: Software, train_args: Sequence[str], checkpoint_dir: str,
                 script_name: str = "train.sbatch") -> str:
    """``slurm/train.sbatch`` for one training run."""
    if job.signal_lead is None:
        raise UserError("a training job needs signal_lead: its checkpoint-and-requeue relies on USR1")
    values = _common(job, software, script_name)
    values.update(sbatch=_sbatch_block(job), checkpoint_dir=shlex.quote(str(checkpoint_dir)),
                  train=train_command(train_args, software.python))
    return _fill("train.sbatch", values)


def render_study_step(job: Job, software: Software, study: str, study_path: str, point_id: str,
                      point: Mapping, train_args: Sequence[str], checkpoint_dir: str,
                      script_name: str = "study-step.sbatch") -> str:
    """``slurm/study-step.sbatch`` for one point of a study."""
    if job.signal_lead is None:
        raise UserError("a study step needs signal_lead: its checkpoint-and-requeue relies on USR1")
    values = _common(job, software, script_name)
    values.update(sbatch=_sbatch_block(job), checkpoint_dir=shlex.quote(str(checkpoint_dir)),
                  train=train_command(train_args, software.python), study=study,
                  study_path=study_path, point_id=point_id,
                  point_json=json.dumps(dict(point), sort_keys=True))
    return _fill("study-step.sbatch", values)


def render_report(job: Job, software: Software, study: str, results_dir: str,
                  script_name: str = "report.sbatch") -> str:
    """``slurm/report.sbatch``: ``hpcdl study report`` once every step has ended."""
    values = _common(job, software, script_name)
    report = " ".join([shlex.quote(software.python), "-m", "hpcdl", "study", "report",
                       shlex.quote(str(results_dir))])
    values.update(sbatch=_sbatch_block(job, preemptible=False), study=study,
                  results_dir=shlex.quote(str(results_dir)), report=report)
    return _fill("report.sbatch", values)


def render_qsub(job: Job, software: Software, train_args: Sequence[str], checkpoint_dir: str,
                group: Optional[str] = None, script_name: str = "tsubame-train.qsub") -> str:
    """``slurm/tsubame-train.qsub``: the same run for a Grid Engine centre (TSUBAME-style).

    ``job.account`` (or ``group``) is the TSUBAME group given to ``qsub -g``; nodes are full
    nodes (``node_f``); training stops ``signal_lead`` seconds before ``h_rt`` by itself.
    """
    group = group or job.account or "GROUP"
    lead = job.signal_lead or 0
    if job.seconds - lead <= 0:
        raise UserError(f"time limit {job.time} leaves no time to train before the {lead} s lead")
    args = list(train_args)
    if "--max-time" not in args:
        args += ["--max-time", str(job.seconds - lead)]
    values = _common(job, software, script_name, skip_exports=_SLURM_ONLY)
    _, names = _render_exports(software, _SLURM_ONLY)
    fwd = ["PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "HPCDL_STOP_FILE", *names]
    h, rest = divmod(job.seconds, 3600)
    values.update(group=group, h_rt=f"{h}:{rest // 60:02d}:{rest % 60:02d}",
                  checkpoint_dir=shlex.quote(str(checkpoint_dir)),
                  train=train_command(args, software.python),
                  forward=" ".join(fwd))
    return _fill("tsubame-train.qsub", values)


# --- running Slurm's commands -------------------------------------------------------------------------

def _need(cmd: str) -> str:
    path = shutil.which(cmd)
    if not path:
        raise UserError(f"{cmd} not found on PATH: run this on a Slurm login node (or start the "
                        "single-machine test cluster: scripts/slurm-cluster.sh start)")
    return path


def _run(argv: Sequence[str], cwd=None, timeout: float = _CMD_TIMEOUT) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise UserError(f"'{' '.join(argv[:2])} ...' did not answer within {timeout:g} s: is "
                        "slurmctld up? (scontrol ping)") from None


def sbatch(script, *, dependency: Optional[str] = None, cwd=None,
           extra: Sequence[str] = ()) -> str:
    """Submit ``script`` with ``sbatch --parsable``; return the job id."""
    argv = [_need("sbatch"), "--parsable", *extra]
    if dependency:
        argv.append(f"--dependency={dependency}")
    argv.append(str(script))
    res = _run(argv, cwd=cwd)
    if res.returncode != 0:
        raise UserError(f"sbatch {script} failed: {res.stderr.strip() or res.stdout.strip()}")
    return res.stdout.strip().split(";")[0]


# States of a job that has not ended yet (squeue's long names).
ACTIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_FED",
                 "REQUEUE_HOLD", "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT",
                 "UNKNOWN")


def wait_for_jobs(ids: Sequence[str], timeout: float, poll: float = 0.5) -> Dict[str, "JobState"]:
    """Poll until every job has ended; on the time limit cancel them and raise TimeoutError."""
    ids = [str(i) for i in ids]
    deadline = time.monotonic() + timeout
    while True:
        states = job_states(ids)
        # A job squeue no longer lists and sacct -c does not know yet is still ending.
        if all(i in states and states[i].state not in ACTIVE_STATES for i in ids):
            return states
        if time.monotonic() >= deadline:
            _run(["scancel", *ids])
            raise TimeoutError(f"jobs {', '.join(ids)} still running after {timeout:g} s: cancelled "
                               f"({ {i: s.state for i, s in states.items()} })")
        time.sleep(poll)


@dataclass
class JobState:
    job_id: str
    state: str                         # PENDING, RUNNING, COMPLETED, FAILED, REQUEUED, ...
    exit_code: Optional[str] = None    # "rc:signal" once ended
    reason: Optional[str] = None       # why a queued job waits
    nodelist: Optional[str] = None
    source: str = "squeue"             # squeue, sacct -c, sacct
    attempts: int = 1                  # runs of the job that ended (a requeued job has several)
    history: List[str] = field(default_factory=list)


def job_states(ids: Iterable[str]) -> Dict[str, JobState]:
    """The state of each job: squeue for jobs in the queue, ``sacct -c`` (then ``sacct``) for
    jobs that ended. Ids that neither knows are absent from the answer."""
    ids = [str(i) for i in ids if i]
    if not ids:
        return {}
    out: Dict[str, JobState] = {}
    for line in _lines(_run_ok([_need("sacct"), "-c", "-j", ",".join(ids), "-n", "-P",
                                "-o", "jobid,state,exitcode,nodelist,end"])) or \
            _lines(_run_ok(["sacct", "-j", ",".join(ids), "-X", "-n", "-P",
                            "-o", "jobid,state,exitcode,nodelist,end"])):
        parts = line.split("|")
        if len(parts) < 5 or parts[0] not in ids:
            continue
        jid, state, code, nodes, _end = parts[:5]
        state = state.split()[0]           # "CANCELLED by 0" -> CANCELLED
        prev = out.get(jid)
        history = (prev.history if prev else []) + [f"{state} {code}"]
        # The completion log holds one line per ended attempt, oldest first: the last one counts.
        source = "sacct -c" if prev is None or prev.source == "sacct -c" else prev.source
        out[jid] = JobState(jid, state, code, None, nodes, source, len(history), history)
    sq = _run_ok([_need("squeue"), "-h", "-o", "%i|%T|%r|%N"])
    for line in _lines(sq):
        parts = line.split("|")
        if len(parts) < 4 or parts[0] not in ids:
            continue
        jid = parts[0]
        prev = out.get(jid)
        out[jid] = JobState(jid, parts[1], None, parts[2] if parts[2] != "None" else None,
                            parts[3] or None, "squeue", (prev.attempts + 1) if prev else 1,
                            (prev.history if prev else []) + [parts[1]])
    return out


def _run_ok(argv) -> Optional[str]:
    if not shutil.which(argv[0]):
        return None
    res = _run(argv)
    return res.stdout if res.returncode == 0 else None


def _lines(text: Optional[str]) -> List[str]:
    return [ln.strip() for ln in (text or "").splitlines() if ln.strip()]


# --- studies -------------------------------------------------------------------------------------------

@dataclass
class Step:
    point_id: str
    point: dict
    script: Path
    text: str
    job: Job


@dataclass
class StudyPlan:
    study: str
    study_path: str
    results_dir: Path
    jobs_dir: Path
    steps: List[Step]
    report: Step
    skipped: List[str]


def _slurm_settings(study, overrides: Optional[Mapping] = None) -> dict:
    s = dict(getattr(study, "slurm", None) or {})
    s.update({k: v for k, v in dict(overrides or {}).items() if v is not None})
    return s


def _job_for(study, name: str, nodes: int, ntasks_per_node: int, overrides: Mapping) -> Job:
    s = _slurm_settings(study, overrides)
    extra = list(s.get("extra") or ())
    for key in ("qos", "constraint", "mem"):
        if s.get(key):
            extra.append(f"--{key}={s[key]}")
    lead = s.get("signal_lead", 120)
    if not lead:
        raise UserError(f"{getattr(study, 'path', study.name)}: slurm.signal_lead must be > 0 for "
                        "'study submit': the job checkpoints and requeues on that warning")
    return Job(name=name, nodes=int(nodes), ntasks_per_node=int(ntasks_per_node),
               cpus_per_task=s.get("cpus_per_task"), gpus_per_node=s.get("gpus_per_node") or None,
               time=str(s.get("time") or "00:30:00"), partition=s.get("partition"),
               account=s.get("account"), signal_lead=int(lead), extra=tuple(extra))


def study_software(study, extra_exports: Sequence[str] = (), setup: Optional[str] = None,
                   workdir=None) -> Software:
    """How the study's jobs find hpcdl: slurm.modules and slurm.setup (else the venv running
    now), with run.env, slurm.mpi and ``--export`` settings."""
    s = _slurm_settings(study)
    exports: Dict[str, Optional[str]] = dict(getattr(study, "env", None) or {})
    if s.get("mpi"):
        exports["HPCDL_SRUN_MPI"] = str(s["mpi"])
    exports = _parse_exports(extra_exports, exports)
    lines = [f"module load {m}" for m in s.get("modules") or ()]
    if lines:    # site module scripts often read unset variables, which set -u would end the job on
        lines = ["set +u", *lines, "set -u"]
    lines += [setup] if setup else list(s.get("setup") or ())
    if not setup and not s.get("setup"):
        lines.append(Software.here().activate)
    return Software.here(workdir=workdir, exports=exports, activate="\n".join(lines))


def _recorded_points(study) -> set:
    """Ids of the points that already have a record (``hpcdl study run`` skips them too)."""
    if hasattr(study, "done_ids"):
        return set(study.done_ids())
    return set()


def plan_study(study, software: Software, force: bool = False,
               overrides: Optional[Mapping] = None) -> StudyPlan:
    """The scripts of every point not yet recorded, and of the report (pure but for reading the
    study's records)."""
    overrides = dict(overrides or {})
    results_dir = Path(study.results_dir).resolve()
    jobs_dir = results_dir / "jobs"
    results = results_dir / "runs.jsonl"
    done = set() if force else _recorded_points(study)
    steps, skipped = [], []
    study_path = str(Path(study.path).resolve()) if getattr(study, "path", None) else study.name
    for point in study.points():
        pid = str(point.id)
        if pid in done:
            skipped.append(pid)
            continue
        job = _job_for(study, f"hpcdl-{study.name}-{pid}", point.nodes, point.ranks_per_node,
                       overrides)
        name = f"step-{pid}.sbatch"
        args = list(point.train_args(str(results)))
        text = render_study_step(job, software, study.name, study_path, pid, point.as_dict(), args,
                                 str(results_dir / "checkpoints" / pid), script_name=name)
        steps.append(Step(pid, point.as_dict(), jobs_dir / name, text, job))
    s = _slurm_settings(study, overrides)
    rjob = Job(name=f"hpcdl-{study.name}-report", nodes=1, ntasks_per_node=1, cpus_per_task=1,
               time=str(s.get("report_time") or "00:15:00"), partition=s.get("partition"),
               account=s.get("account"), signal_lead=None)
    rtext = render_report(rjob, software, study.name, str(results_dir), script_name="report.sbatch")
    report = Step("report", {}, jobs_dir / "report.sbatch", rtext, rjob)
    return StudyPlan(study.name, study_path, results_dir, jobs_dir, steps, report, skipped)


def submit_study(plan: StudyPlan, dry_run: bool = False, out=None) -> dict:
    """Write the scripts, submit the steps and the report after them; return what was submitted."""
    out = out or sys.stdout
    plan.jobs_dir.mkdir(parents=True, exist_ok=True)
    for step in plan.steps + [plan.report]:
        step.script.write_text(step.text)
        step.script.chmod(0o755)
    for pid in plan.skipped:
        print(f"Point {pid}: already recorded, not submitted (--force submits it again)", file=out)
    submission = {"study": plan.study, "study_path": plan.study_path,
                  "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  "dry_run": dry_run, "steps": [], "report": None}
    ids = []
    for step in plan.steps:
        rel = os.path.relpath(step.script, plan.jobs_dir)
        if dry_run:
            print(f"Would submit point {step.point_id}: (cd {plan.jobs_dir} && sbatch {rel})", file=out)
            jid = None
        else:
            jid = sbatch(step.script, cwd=plan.jobs_dir)
            ids.append(jid)
            print(f"Submitted point {step.point_id} ({step.job.nodes} node(s) x "
                  f"{step.job.ntasks_per_node} rank(s)) as job {jid}", file=out)
        submission["steps"].append({"point": step.point_id, "job_id": jid, "script": str(step.script)})
    dep = ("afterany:" + ":".join(ids)) if ids else None
    if dry_run:
        dep_text = "--dependency=afterany:<step ids> " if plan.steps else ""
        print(f"Would submit the report: (cd {plan.jobs_dir} && sbatch {dep_text}report.sbatch)", file=out)
        rid = None
    else:
        rid = sbatch(plan.report.script, cwd=plan.jobs_dir, dependency=dep)
        print(f"Submitted the report as job {rid}" + (f" (after {', '.join(ids)})" if ids else ""),
              file=out)
    submission["report"] = {"job_id": rid, "script": str(plan.report.script), "dependency": dep}
    if not dry_run:
        log = plan.jobs_dir / "submitted.jsonl"
        with open(log, "a") as f:
            f.write(json.dumps(submission, sort_keys=True) + "\n")
    print(f"Scripts in {plan.jobs_dir}" + ("" if dry_run else "; job output there as %x-%j.out"),
          file=out)
    return submission


def _submissions(jobs_dir: Path) -> List[dict]:
    log = jobs_dir / "submitted.jsonl"
    if not log.is_file():
        return []
    subs = []
    for line in log.read_text().splitlines():
        try:
            subs.append(json.loads(line))
        except ValueError:
            continue
    return subs


def study_status(results_dir: Path, point_ids: Optional[Sequence[str]] = None,
                 study_name: Optional[str] = None) -> List[dict]:
    """One row per point (latest submission of each) and one for the report."""
    results_dir = Path(results_dir)
    subs = _submissions(results_dir / "jobs")
    latest: Dict[str, str] = {}
    report_id = None
    for sub in subs:
        for st in sub.get("steps", []):
            if st.get("job_id"):
                latest[str(st["point"])] = str(st["job_id"])
        if (sub.get("report") or {}).get("job_id"):
            report_id = str(sub["report"]["job_id"])
    recorded = set()
    runs = results_dir / "runs.jsonl"
    if runs.is_file():
        from .. import records
        for rec in records.iter_records(runs):
            if study_name and rec.get("study") not in (None, study_name):
                continue
            p = rec.get("point")
            pid = p.get("id") if isinstance(p, dict) else p
            if pid is not None:
                recorded.add(str(pid))
    order = list(point_ids) if point_ids is not None else sorted(latest)
    ids = [latest[p] for p in order if p in latest] + ([report_id] if report_id else [])
    states = job_states(ids) if ids else {}
    rows = []
    for pid in order + (["report"] if report_id else []):
        jid = report_id if pid == "report" else latest.get(pid)
        st = states.get(jid) if jid else None
        rows.append({"point": pid, "job_id": jid,
                     "state": st.state if st else ("NOT SUBMITTED" if not jid else "UNKNOWN"),
                     "exit_code": st.exit_code if st else None,
                     "reason": st.reason if st else None,
                     "attempts": st.attempts if st else 0,
                     "history": st.history if st else [],
                     "source": st.source if st else None,
                     "recorded": (pid in recorded) if pid != "report" else
                                 (results_dir / "report.md").is_file()})
    return rows


# --- the command line (hpcdl study submit / status) -------------------------------------------------

def add_submit_arguments(p) -> None:
    p.add_argument("study", help="the study file, e.g. jobs/cnn-weak-cluster.toml")
    p.add_argument("--dry-run", action="store_true",
                   help="write the job scripts and show the sbatch commands, submit nothing")
    p.add_argument("--force", action="store_true", help="submit points that are already recorded too")
    p.add_argument("--partition", default=None, help="override the study's slurm.partition")
    p.add_argument("--account", default=None, help="override the study's slurm.account")
    p.add_argument("--time", default=None, help="override the study's slurm.time (e.g. 02:00:00)")
    p.add_argument("--setup", default=None,
                   help="shell line that makes hpcdl's Python available in the job (default: "
                        "activate the venv running this command; e.g. 'module load hpcdl')")
    p.add_argument("--export", action="append", default=[], metavar="NAME=VALUE",
                   help="set an environment variable in the job scripts (repeatable)")
    p.add_argument("--results-root", default=None,
                   help="folder that holds results/<study> (default $HPCDL_RESULTS_ROOT or results)")


def _parse_exports(items: Sequence[str], base: Optional[Mapping] = None) -> dict:
    out = {str(k): (None if v is None else str(v)) for k, v in dict(base or {}).items()}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep or not _ENV_NAME.match(name):
            raise UserError(f"--export '{item}' must look like NAME=VALUE")
        out[name] = value
    return out


def _load_study(path, results_root=None):
    try:
        from .. import study as study_mod
    except ImportError:
        raise UserError("hpcdl.study is not available in this build") from None
    return study_mod.load(path, results_root=results_root)


def submit_main(opts) -> int:
    study = _load_study(opts.study, opts.results_root)
    software = study_software(study, opts.export, opts.setup)
    plan = plan_study(study, software, force=opts.force,
                      overrides={"partition": opts.partition, "account": opts.account,
                                 "time": opts.time})
    if not plan.steps and not opts.force:
        print(f"Every point of {study.name} is recorded; nothing to submit (--force submits again)")
        return 0
    submit_study(plan, dry_run=opts.dry_run)
    return 0


def add_status_arguments(p) -> None:
    p.add_argument("study", help="the study file (jobs/X.toml) or its results folder")
    p.add_argument("--json", action="store_true", help="print the rows as JSON")
    p.add_argument("--wait", type=float, default=None, metavar="SECONDS",
                   help="wait until every submitted job has ended (at most SECONDS); exit 1 if "
                        "one did not complete, 124 on the time limit")
    p.add_argument("--results-root", default=None,
                   help="folder that holds results/<study> (default $HPCDL_RESULTS_ROOT or results)")


def status_main(opts) -> int:
    target = Path(opts.study)
    if target.is_dir():
        results_dir, ids, name = target, None, None
    else:
        study = _load_study(opts.study, opts.results_root)
        results_dir, name = Path(study.results_dir), study.name
        ids = [str(p.id) for p in study.points()]
    if not (results_dir / "jobs" / "submitted.jsonl").is_file():
        raise UserError(f"nothing submitted for {opts.study}: no {results_dir / 'jobs' / 'submitted.jsonl'} "
                        "(run hpcdl study submit first)")
    rows = study_status(results_dir, ids, name)
    rc = 0
    if opts.wait is not None:
        deadline = time.monotonic() + opts.wait
        while any(r["state"] in ACTIVE_STATES for r in rows):
            if time.monotonic() >= deadline:
                rc = 124
                break
            time.sleep(1.0)
            rows = study_status(results_dir, ids, name)
        if rc == 0 and any(r["job_id"] and r["state"] != "COMPLETED" for r in rows):
            rc = 1
    if opts.json:
        print(json.dumps(rows, indent=1))
        return rc
    print(f"# {results_dir}: states from squeue and sacct -c")
    print(f"{'point':<24} {'job':>8}  {'state':<13} {'exit':>6} {'tries':>5}  recorded  reason")
    for r in rows:
        print(f"{r['point']:<24} {r['job_id'] or '-':>8}  {r['state']:<13} {r['exit_code'] or '-':>6} "
              f"{r['attempts']:>5}  {'yes' if r['recorded'] else 'no':<8}  {r['reason'] or ''}")
    return rc


# --- python -m hpcdl.launch.slurm: one training run -------------------------------------------------

def main(argv: Optional[Sequence[str]] = None) -> int:
    """Render train.sbatch (or the Grid Engine script) for one run; optionally submit it."""
    import argparse
    p = argparse.ArgumentParser(
        prog="python -m hpcdl.launch.slurm",
        description="Write the job script of one hpcdl training run, e.g. "
                    "'python -m hpcdl.launch.slurm --nodes 2 --time 01:00:00 -o train.sbatch -- "
                    "--workload cnn --model resnet50'. Arguments after -- go to 'hpcdl train'.")
    p.add_argument("--kind", choices=("sbatch", "qsub"), default="sbatch",
                   help="sbatch: slurm/train.sbatch; qsub: slurm/tsubame-train.qsub (Grid Engine)")
    p.add_argument("--name", default="hpcdl-train", help="job name")
    p.add_argument("--nodes", type=int, default=1)
    p.add_argument("--ntasks-per-node", type=int, default=1, help="ranks per node (GPUs per node on GPU nodes)")
    p.add_argument("--cpus-per-task", type=int, default=None)
    p.add_argument("--gpus-per-node", type=int, default=None)
    p.add_argument("--time", default="00:30:00")
    p.add_argument("--partition", default=None)
    p.add_argument("--account", default=None, help="Slurm account, or the TSUBAME group for qsub -g")
    p.add_argument("--signal-lead", type=int, default=120,
                   help="seconds before the time limit at which the run checkpoints (120)")
    p.add_argument("--checkpoint-dir", default="checkpoints/train",
                   help="where the run checkpoints (default checkpoints/train)")
    p.add_argument("--export", action="append", default=[], metavar="NAME=VALUE",
                   help="a setting in the script (repeatable), e.g. NCCL_SOCKET_IFNAME=ib0")
    p.add_argument("--setup", default=None, help="shell line that makes hpcdl's Python available "
                                                 "(default: activate the venv running this)")
    p.add_argument("-o", "--output", default=None, help="write the script here (default: stdout)")
    p.add_argument("--submit", action="store_true", help="sbatch the written script, print its job id")
    p.add_argument("train_args", nargs=argparse.REMAINDER)
    opts = p.parse_args(argv)
    args = opts.train_args[1:] if opts.train_args[:1] == ["--"] else opts.train_args
    try:
        job = Job(name=opts.name, nodes=opts.nodes, ntasks_per_node=opts.ntasks_per_node,
                  cpus_per_task=opts.cpus_per_task, gpus_per_node=opts.gpus_per_node,
                  time=opts.time, partition=opts.partition, account=opts.account,
                  signal_lead=opts.signal_lead)
        software = Software.here(exports=_parse_exports(opts.export), activate=opts.setup)
        ckpt = str(Path(opts.checkpoint_dir).resolve())
        name = Path(opts.output).name if opts.output else None
        if opts.kind == "qsub":
            text = render_qsub(job, software, args, ckpt, script_name=name or "tsubame-train.qsub")
        else:
            text = render_train(job, software, args, ckpt, script_name=name or "train.sbatch")
        if opts.submit and (opts.kind != "sbatch" or not opts.output):
            raise UserError("--submit needs --kind sbatch and -o FILE")
        if not opts.output:
            sys.stdout.write(text)
            return 0
        Path(opts.output).write_text(text)
        Path(opts.output).chmod(0o755)
        if opts.submit:
            print(sbatch(opts.output, cwd=Path(opts.output).resolve().parent))
    except UserError as exc:
        sys.stderr.write(f"{p.prog}: error: {exc}\n")
        return 2
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
