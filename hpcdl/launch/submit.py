"""Submit a study to Slurm or Grid Engine (``slurm.scheduler``, :func:`hpcdl.launch.batch.choose`):
one job per point not yet recorded, the report chained after them.

:func:`plan_study` renders the script of every point neither recorded nor queued or running
(reading the study's records and asking the scheduler about the jobs submitted before),
:func:`submit_study` writes and submits them with the report job depending on all of them
(``--dependency=afterany``, Grid Engine's ``-hold_jid``); each submission is a line of the
study's ``jobs/submitted.jsonl``, which :mod:`hpcdl.launch.status` reads. Standard library only.
"""
from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Dict, List, Mapping, Optional, Sequence

from . import batch, command, prep
from .status import latest_jobs as _latest_jobs
from .jobscript import (Job, parse_exports, render_report, render_study_command, render_study_step,
                        Software)
from .prep import (ALLOCATION_PREFIX, Step, job_for as _job_for,
                   slurm_settings as _slurm_settings)
from .scheduler import ACTIVE_STATES
from .. import checks, machine, records
from ..machine import Target
from ..errors import UserError

__all__ = ["plan_study", "submit_study", "study_software", "StudyPlan", "Step"]


@dataclass
class StudyPlan:
    study: str
    study_path: str
    results_dir: Path
    jobs_dir: Path
    steps: List[Step]
    report: Step
    skipped: List[str]
    waiting: List[str] = None       # points that need other links than the machine's
    machine: Target = None          # where the jobs go
    in_flight: Dict[str, str] = None  # point -> "job N STATE": its latest job is still queued or
    #                                   running (or requeued after a node failure)
    tunes: List[Step] = None        # --tune: hpcdl tune jobs for the tuning files the points lack
    scheduler: str = "slurm"        # or "gridengine"
    group: Optional[str] = None     # Grid Engine at TSUBAME: the group given to qsub -g


def study_software(study, extra_exports: Sequence[str] = (), setup: Optional[str] = None,
                   workdir=None) -> Software:
    """How the study's jobs find hpcdl: slurm.modules and slurm.setup (else the venv running
    now), with run.env, slurm.mpi and ``--export`` settings."""
    s = _slurm_settings(study)
    # what the machine's jobs need (the study's env may still override)
    exports: Dict[str, Optional[str]] = dict(machine.job_exports())
    exports.update(getattr(study, "env", None) or {})
    if s.get("mpi"):
        exports["HPCDL_SRUN_MPI"] = str(s["mpi"])
    exports = parse_exports(extra_exports, exports)
    lines = [f"module load {m}" for m in s.get("modules") or ()]
    if lines:    # site module scripts often read unset variables, which set -u would end the job on
        lines = ["set +u", *lines, "set -u"]
    lines += [setup] if setup else list(s.get("setup") or ())
    if not setup and not s.get("setup"):
        lines.append(Software.here().activate)
    return Software.here(workdir=workdir, exports=exports, activate="\n".join(lines))


def plan_study(study, software: Software, force: bool = False,
               overrides: Optional[Mapping] = None, unchecked: bool = False,
               tune: Optional[Sequence[str]] = None,
               allocation: Sequence[str] = ()) -> StudyPlan:
    """The scripts of every point neither recorded nor in flight, and of the report (pure but
    for reading the study's records and asking the scheduler about the jobs it submitted).
    ``tune``: options of ``hpcdl tune`` for a job per tuning file the points to submit lack
    (None: such points are refused). ``allocation``: more options of ``hpcdl bench allocation``,
    whose job per layout the forecast's files lack runs where the study asks for a forecast."""
    overrides = dict(overrides or {})
    if tune is not None and not study.tuning_file and hasattr(study, "tuned_by_jobs"):
        # --tune without a file of the study's own: its tune jobs make the allocation's, whose
        # pick the points from 3 nodes run (unless the study asks for the library's choice)
        study = replace(study, tuned_by_jobs=True)
    sched = batch.BY_NAME[batch.choose(_slurm_settings(study, overrides).get("scheduler"))]
    results_dir = Path(study.results_dir).resolve()
    jobs_dir = results_dir / "jobs"
    results = results_dir / "runs.jsonl"
    done = set() if force else study.done_ids()
    steps, skipped, waiting = [], [], []
    where = machine.target(study, unchecked)
    # what the scheduler's scripts ask for beyond their Job (Grid Engine's queue among it)
    request = sched.request(study, _slurm_settings(study, overrides), where)
    overrides["partition"] = (request or {}).get("queue") or overrides.get("partition")
    in_flight = _in_flight(jobs_dir)
    study_path = str(Path(study.path).resolve()) if getattr(study, "path", None) else study.name
    mine = [p for p in study.points() if where.runs(p.network)]
    here = [p for p in mine if p.id not in done and p.id not in in_flight]
    # the allocation is measured for every layout of the machine's points, recorded ones too
    tunes = prep.steps(study, study_path, here, jobs_dir, software, overrides, where, tune,
                       allocation, request, in_flight, mine)
    # only the points submitted now: those that need other links are tuned where they run
    _require_tuning(study, [p for p in here if not any(p.tuned and p.tuning_path == t.tuning
                                                       for t in tunes)])
    for point in study.points():
        pid = str(point.id)
        if pid in done:
            skipped.append(pid)
            continue
        if pid in in_flight:
            continue
        if not where.runs(point.network):
            waiting.append(pid)
            continue
        job = _job_for(study, f"hpcdl-{study.name}-{pid}", point.nodes, point.ranks_per_node,
                       overrides, licence=sched.licence(where))
        name = f"step-{pid}.{sched.suffix}"
        spec = None
        if point.script:
            spec = command.spec_for(study, point, results_dir, launcher="srun")
            text = render_study_command(job, software, study.name, study_path, pid,
                                        point.as_dict(), spec.argv, spec.env,
                                        str(jobs_dir / f"step-{pid}.json"), spec.log,
                                        script_name=name)
        else:
            args = list(point.train_args(str(results)))
            text = render_study_step(job, software, study.name, study_path, pid, point.as_dict(),
                                     args, str(results_dir / "checkpoints" / pid), script_name=name,
                                     gridengine=request)
        steps.append(Step(pid, point.as_dict(), jobs_dir / name, text, job, spec,
                          point.tuning_path if point.tuned else ""))
    s = _slurm_settings(study, overrides)
    # the report job takes the licence too: it runs on a node, and drawing plots there beside
    # another study's measurement on the same cores would slow that measurement
    licence = sched.licence(where)
    rjob = Job(name=f"hpcdl-{study.name}-report", nodes=1, ntasks_per_node=1, cpus_per_task=1,
               time=str(s.get("report_time") or "00:15:00"), partition=s.get("partition"),
               account=s.get("account"), signal_lead=None,
               extra=(f"--licenses={licence}:1",) if licence else ())
    rname = f"report.{sched.suffix}"
    # a one-slot report job on Grid Engine: the study's parallel environment gives it one node
    rtext = render_report(rjob, software, study.name, str(results_dir), script_name=rname,
                          gridengine=request)
    report = Step("report", {}, jobs_dir / rname, rtext, rjob)
    return StudyPlan(study.name, study_path, results_dir, jobs_dir, steps, report, skipped,
                     waiting, where, {p: j for p, j in in_flight.items() if p not in done}, tunes,
                     sched.name, (request or {}).get("group"))


def _in_flight(jobs_dir: Path) -> Dict[str, str]:
    """Points whose latest submitted job has not ended (queued, running, or requeued by Slurm
    after a node failure or a preemption): submitting them again would run them twice."""
    latest, _report = _latest_jobs(jobs_dir)
    if not latest:
        return {}
    try:
        states = batch.job_states(latest.values())
    except UserError:          # no scheduler here (a dry run on a laptop): nothing can be in flight
        return {}
    return {pid: f"job {jid[1]} {states[jid].state}" for pid, jid in latest.items()
            if jid in states and states[jid].state in ACTIVE_STATES}


def _require_tuning(study, points) -> None:
    """Refuse, before anything is queued, points whose tuning file does not exist."""
    missing = study.missing_tuning(points) if hasattr(study, "missing_tuning") else []
    if missing:
        raise UserError(f"{study.name}: its tuned points need tuning files that do not exist: "
                        + "; ".join(missing))


def _submit_step(plan: StudyPlan, step: Step, what: str, after: Optional[str], dry_run: bool,
                 group: List[str], out, needs: bool = False, held: bool = False) -> Optional[str]:
    """Submit one job (after the job ``after``, which makes the file it reads), or say how a dry
    run would; its job id. ``needs``: the job cannot run without that file, so on Slurm it
    starts only if ``after`` succeeded and is cancelled, never started, if it did not. Grid
    Engine's -hold_jid starts it either way, so there a tune job is submitted ``held`` and
    released knowing who waits for it (:meth:`batch.GridEngine.release`): it deletes them itself."""
    sched = batch.BY_NAME[plan.scheduler]
    rel = os.path.relpath(step.script, plan.jobs_dir)
    if dry_run:
        print(f"Would submit {what}: (cd {plan.jobs_dir} && "
              f"{sched.would_submit(rel, after, needs, held, group)})", file=out)
        return None
    jid = sched.submit(step.script, plan.jobs_dir, after, needs=needs, held=held, group=group)
    print(f"Submitted {what} ({step.job.nodes} node(s) x {step.job.ntasks_per_node} "
          f"rank(s)) as job {jid}" + (f", after job {after}" if after else ""), file=out)
    return jid


def _submit_steps(plan: StudyPlan, tunes: List[Step], submission: dict, ids: List[str],
                  made_by: Dict[str, str], waiting: Dict[str, List[str]], dry_run: bool,
                  group: List[str], out) -> None:
    """The tune and allocation jobs, then the points, each after the job making its file;
    into ``waiting`` each held Grid Engine tune job and the points submitted after it."""
    holds = batch.BY_NAME[plan.scheduler].holds_tunes()
    for k, step in enumerate(tunes + plan.steps):
        is_tune = k < len(tunes)
        measures = step.point_id.startswith(ALLOCATION_PREFIX)
        after = made_by.get(step.tuning) if step.tuning else None
        what = (f"the allocation's measurement {step.point_id}" if measures else
                f"the tuning job for {step.tuning}" if is_tune else f"point {step.point_id}")
        held = holds and is_tune and not measures
        jid = _submit_step(plan, step, what, after, dry_run, group, out,
                           needs=not is_tune, held=held)
        if jid:
            ids.append(jid)
            if held:
                waiting[jid] = []
            elif after in waiting:
                waiting[after].append(jid)
        if is_tune:       # the next job of the same file (a point, or the next measurement)
            made_by[step.tuning] = jid or (f"the allocation job {step.point_id}" if measures
                                           else f"the tuning job for {step.tuning}")
        submission["steps"].append({"point": step.point_id, "job_id": jid, "script": str(step.script),
                                    **({"tuning": step.tuning} if step.tuning else {})})


def submit_study(plan: StudyPlan, dry_run: bool = False, out=None) -> dict:
    """Write the scripts, submit the steps and the report after them; return what was submitted."""
    out = out or sys.stdout
    if any(step.spec for step in plan.steps):   # the job scripts append the records themselves
        records.check_clean(plan.results_dir / "runs.jsonl")
    # what the jobs will write, checked before any is queued
    checks.check_writable(plan.results_dir / "runs.jsonl", "the study's results file")
    checks.check_writable_dir(plan.jobs_dir, "the study's job folder")
    if plan.steps:
        checks.check_writable_dir(plan.results_dir / "checkpoints", "the study's checkpoints")
    for step in (plan.tunes or []) + plan.steps + [plan.report]:
        step.script.write_text(step.text)
        step.script.chmod(0o755)
        if step.spec is not None:
            step.spec.save(step.script.with_suffix(".json"))
    for pid in plan.skipped:
        print(f"Point {pid}: already recorded, not submitted (--force submits it again)", file=out)
    for pid, job in (plan.in_flight or {}).items():
        print(f"Point {pid}: {job}, not submitted again", file=out)
    sched = batch.BY_NAME[plan.scheduler]
    apart = sched.one_at_a_time(plan.machine)
    if apart and plan.steps:
        print(apart, file=out)
    for line in plan.machine.waiting(plan.waiting or ()):
        print(line, file=out)
    submission = {"study": plan.study, "study_path": plan.study_path, "scheduler": plan.scheduler,
                  "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  "dry_run": dry_run, "steps": [], "report": None}
    ids, made_by = [], {}           # tuning file -> the job that makes it
    group = sched.group_args(plan.group)
    tunes = plan.tunes or []
    waiting: Dict[str, List[str]] = {}       # Grid Engine: a held tune job -> the jobs it makes for
    try:
        _submit_steps(plan, tunes, submission, ids, made_by, waiting, dry_run, group, out)
    finally:
        for jid, theirs in waiting.items():
            sched.release(jid, theirs)

    if dry_run:
        print(f"Would submit the report: (cd {plan.jobs_dir} && "
              f"{sched.would_submit_after_all(plan.report.script.name, bool(plan.steps))})",
              file=out)
        rid = dep = None
    else:
        rid, dep = sched.submit_after_all(plan.report.script, plan.jobs_dir, ids, group)
        print(f"Submitted the report as job {rid}" + (f" (after {', '.join(ids)})" if ids else ""),
              file=out)
    submission["report"] = {"job_id": rid, "script": str(plan.report.script), "dependency": dep}
    if not dry_run:
        log = plan.jobs_dir / "submitted.jsonl"
        with open(log, "a") as f:
            f.write(json.dumps(submission, sort_keys=True) + "\n")
    print(f"Scripts in {plan.jobs_dir}" + ("" if dry_run else "; job output there as " +
                                           sched.output), file=out)
    return submission
