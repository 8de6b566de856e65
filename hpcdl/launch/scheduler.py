"""Talk to Slurm: submit with ``sbatch --parsable``, read states from ``squeue`` and ``sacct -c``.

States come from ``squeue`` (queued and running jobs) and ``sacct -c`` (the job-completion log:
ended jobs and their exit codes), falling back to plain ``sacct`` where the site keeps no
completion log. :func:`wait_for_jobs` is the one wait loop. Nothing here may hang the caller:
every command runs under a time limit. Standard library only.
"""
from __future__ import annotations

import shutil
import subprocess
import time
from dataclasses import dataclass, field
from typing import Dict, Iterable, List, Optional, Sequence

from ..errors import UserError
from ..machine import rehearse

__all__ = ["sbatch", "job_states", "wait_for_jobs", "JobState", "ACTIVE_STATES",
           "poll_until_ended", "need_command", "run_command"]

_CMD_TIMEOUT = 60


_SLURM_WHERE = ("run this on a Slurm login node (or rehearse a cluster on this machine: "
                f"{rehearse('slurm')})")
_SLURM_DAEMON = "slurmctld up? (scontrol ping)"


def need_command(cmd: str, where: str = _SLURM_WHERE) -> str:
    """The path of a scheduler's command; UserError saying ``where`` to run where it is missing."""
    path = shutil.which(cmd)
    if not path:
        raise UserError(f"{cmd} not found on PATH: {where}")
    return path


def run_command(argv: Sequence[str], cwd=None, timeout: float = _CMD_TIMEOUT,
         daemon: str = _SLURM_DAEMON) -> subprocess.CompletedProcess:
    """Run a scheduler's command under a time limit; UserError asking whether ``daemon`` is up
    when it does not answer."""
    try:
        return subprocess.run(list(argv), cwd=cwd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        raise UserError(f"'{' '.join(argv[:2])} ...' did not answer within {timeout:g} s: is "
                        f"{daemon}") from None


def sbatch(script, *, dependency: Optional[str] = None, cwd=None,
           extra: Sequence[str] = ()) -> str:
    """Submit ``script`` with ``sbatch --parsable``; return the job id."""
    argv = [need_command("sbatch"), "--parsable", *extra]
    if dependency:
        argv.append(f"--dependency={dependency}")
    argv.append(str(script))
    res = run_command(argv, cwd=cwd)
    if res.returncode != 0:
        raise UserError(f"sbatch {script} failed: {res.stderr.strip() or res.stdout.strip()}")
    return res.stdout.strip().split(";")[0]


# States of a job that has not ended yet (squeue's long names).
ACTIVE_STATES = ("PENDING", "CONFIGURING", "RUNNING", "COMPLETING", "REQUEUED", "REQUEUE_FED",
                 "REQUEUE_HOLD", "RESIZING", "SUSPENDED", "STOPPED", "SIGNALING", "STAGE_OUT",
                 "UNKNOWN")


def wait_for_jobs(ids: Sequence[str], timeout: float, poll: float = 0.5,
                  cancel: bool = True) -> Dict[str, "JobState"]:
    """Poll until every job has ended; on the time limit raise TimeoutError, having cancelled
    the jobs when ``cancel``."""
    scancel = (lambda ids: run_command(["scancel", *ids])) if cancel else None
    return poll_until_ended(ids, timeout, poll, job_states, scancel, "cancelled")


def poll_until_ended(ids: Sequence[str], timeout: float, poll: float, states_of,
                     cancel=None, cancelled: str = "cancelled") -> Dict[str, "JobState"]:
    """The one wait loop, for either scheduler: ``states_of(ids)`` until every job has ended; on
    the time limit ``cancel(ids)`` (when given) and TimeoutError."""
    ids = [str(i) for i in ids]
    deadline = time.monotonic() + timeout
    while True:
        states = states_of(ids)
        # A job the queue no longer lists and the accounting does not know yet is still ending.
        if all(i in states and states[i].state not in ACTIVE_STATES for i in ids):
            return states
        if time.monotonic() >= deadline:
            if cancel is not None:
                cancel(ids)
            raise TimeoutError(f"jobs {', '.join(ids)} still running after {timeout:g} s"
                               f"{': ' + cancelled if cancel is not None else ''} "
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
    for line in _lines(_run_ok([need_command("sacct"), "-c", "-j", ",".join(ids), "-n", "-P",
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
    sq = _run_ok([need_command("squeue"), "-h", "-o", "%i|%T|%r|%N"])
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
    res = run_command(argv)
    return res.stdout if res.returncode == 0 else None


def _lines(text: Optional[str]) -> List[str]:
    return [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
