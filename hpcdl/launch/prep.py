"""The jobs that prepare a study's files before its points or its report need them: ``hpcdl
tune`` for the tuning files its tuned points (and its calibration) lack (``study submit --tune``)
and for the exchange files a forecast reads, and ``hpcdl bench allocation`` for each layout the
forecast's spread and loop files lack (a study with ``[model] forecast``). Standard library
only."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence, Tuple

from . import command
from .jobscript import Job, Software, render_study_allocation, render_study_tune
from ..errors import UserError

TUNE_PREFIX = "tune-"     # a tuning job's id in submitted.jsonl (a point's id starts with n<nodes>)
ALLOCATION_PREFIX = "allocation-"   # ... and a forecast's allocation measurement's
# seconds of launches a study's tune job searches for after each candidate's first, where
# --tune gives no --budget; the job's limit is a point's plus this
TUNE_BUDGET = 300


@dataclass
class Step:
    point_id: str
    point: dict
    script: Path
    text: str
    job: Job
    spec: Optional[command.Spec] = None     # a command's point: what its record needs
    tuning: str = ""                        # the tuning file it reads (a tuned point) or makes (a tune)


def slurm_settings(study, overrides: Optional[Mapping] = None) -> dict:
    s = dict(getattr(study, "slurm", None) or {})
    s.update({k: v for k, v in dict(overrides or {}).items() if v is not None})
    return s


def job_for(study, name: str, nodes: int, ntasks_per_node: int, overrides: Mapping,
             licence: Optional[str] = None) -> Job:
    """The job of one point; ``licence``: a Slurm licence every point's job takes one of (a
    machine whose nodes share cores defines one, so that no two jobs of a study run at once)."""
    s = slurm_settings(study, overrides)
    extra = list(s.get("extra") or ())
    if licence:
        extra.append(f"--licenses={licence}:1")
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


def steps(study, study_path: str, points, jobs_dir: Path, software: Software, overrides: Mapping,
          where, tune: Optional[Sequence[str]], allocation: Sequence[str],
          gridengine: Optional[Mapping], in_flight: Dict[str, str], measured=None) -> List[Step]:
    """The tuning jobs (where ``tune`` is not None) that ``points`` need, and the allocation
    jobs the layouts of ``measured`` (default ``points``: a forecast's measurement serves the
    recorded points too) need; refused while one of them is still queued or running.
    ``gridengine``: the Grid Engine request (:func:`hpcdl.launch.batch.gridengine_request`) that
    makes them qsub scripts, None for Slurm's."""
    out = _tune_steps(study, study_path, points, jobs_dir, software, overrides, where, tune,
                      measured, gridengine)
    out += _allocation_steps(study, study_path, points if measured is None else measured,
                             jobs_dir, software, overrides, where, allocation, gridengine)
    busy = [f"{t.point_id} ({in_flight[t.point_id]})" for t in out if t.point_id in in_flight]
    if busy:
        raise UserError(f"{study.name}: a tuning or allocation job is still queued or running: "
                        f"{', '.join(busy)}; submit again once it has ended")
    return out


def _tune_steps(study, study_path: str, points, jobs_dir: Path, software: Software,
                overrides: Mapping, where, tune: Optional[Sequence[str]],
                measured=None, gridengine: Optional[Mapping] = None) -> List[Step]:
    """A ``hpcdl tune`` job for each tuning file that ``points`` lack (those they run with, and
    those the report's model takes its exchange from), on their layout, under the points' own
    settings, taking the machine's licence like them, with a limit that fits the search
    (:func:`_budget`). Without ``tune`` (no ``--tune``), the
    exchange files a forecast reads (of ``measured``, recorded points too) still are made:
    the algorithms timed, nothing searched (``Study.EXCHANGE_TUNE``)."""
    searched = tune is not None          # --tune: a search; else the algorithms' one launch
    if tune is None:
        lacking = study.lacking_exchange(points if measured is None else measured)
        tune = study.EXCHANGE_TUNE
    else:
        lacking = study.lacking_tuning(points, calibration=True)
    steps = []
    for path, nodes, rpn, comps, _lacking in lacking:
        # none first: tune's search follows the first (a study refuses int8 with a tuning file)
        comps = [c for c in ("none", "fp16") if c in comps]
        stem = Path(path).stem
        job = job_for(study, f"hpcdl-{study.name}-tune-{stem}", nodes, rpn, overrides,
                       licence=_licence(where, gridengine))
        tune_args, extra = _budget(tune) if searched else (list(tune), 0)
        job = job.longer(extra)
        args = ["--study", study_path, "--compression", ",".join(comps), *tune_args, "--out", path]
        name = f"tune-{stem}.{_suffix(gridengine)}"
        text = render_study_tune(job, software, study.name, study_path, path, args,
                                 script_name=name, gridengine=gridengine)
        steps.append(Step(f"{TUNE_PREFIX}{stem}", {"tuning": path, "nodes": nodes,
                                           "ranks_per_node": rpn, "compressions": comps},
                          jobs_dir / name, text, job, tuning=path))
    return steps


def _allocation_steps(study, study_path: str, points, jobs_dir: Path, software: Software,
                      overrides: Mapping, where, extra: Sequence[str],
                      gridengine: Optional[Mapping]) -> List[Step]:
    """A ``hpcdl bench allocation`` job for each layout of ``points`` the forecast's files lack
    (:meth:`hpcdl.study.Study.allocation_missing`), taking the machine's licence like the points;
    each after the one before (:func:`submit_study`), as they rewrite the same files."""
    missing = study.allocation_missing(points)
    spread, loop = study.allocation_files
    steps = []
    for nodes, rpn in missing:
        stem = f"{nodes}n{rpn}r"
        job = job_for(study, f"hpcdl-{study.name}-allocation-{stem}", nodes, rpn, overrides,
                       licence=_licence(where, gridengine))
        args = ["--study", study_path, "--spread", spread, "--loop", loop, *extra]
        name = f"allocation-{stem}.{_suffix(gridengine)}"
        text = render_study_allocation(job, software, study.name, study_path, args,
                                       script_name=name, gridengine=gridengine)
        steps.append(Step(f"{ALLOCATION_PREFIX}{stem}", {"nodes": nodes, "ranks_per_node": rpn},
                          jobs_dir / name, text, job, tuning=f"allocation:{spread}"))
    return steps


def _suffix(gridengine: Optional[Mapping]) -> str:
    return "qsub" if gridengine is not None else "sbatch"


def _licence(where, gridengine: Optional[Mapping]) -> Optional[str]:
    """The machine's Slurm licence each job takes (on Grid Engine its consumable, among the
    request's resources, does the same)."""
    return None if gridengine is not None else where.licence


def _budget(tune: Sequence[str]) -> Tuple[List[str], int]:
    """A tune job's options with its search budget (``--budget`` as given, else
    :data:`TUNE_BUDGET`) and the seconds it adds to a point's limit for the job's own: every
    candidate's first launch fits in a point's limit on a cluster where one launch does, the
    budget's launches after it. Within the job tune stops before the limit and leaves its best."""
    args = list(tune)
    for k, a in enumerate(args):
        value = a.split("=", 1)[1] if a.startswith("--budget=") else \
            args[k + 1] if a == "--budget" and k + 1 < len(args) else None
        if value is not None:
            try:
                return args, max(0, int(float(value)))
            except ValueError:
                raise UserError(f"--tune: --budget {value}: give seconds") from None
    return args + ["--budget", str(TUNE_BUDGET)], TUNE_BUDGET
