"""Talk to Grid Engine: submit with ``qsub -terse``, read states from ``qstat`` and ``qacct``.

The twin of :mod:`hpcdl.launch.scheduler` (Slurm), answering in its terms (:class:`JobState`,
Slurm's state names) so that a study's status reads the same on both. ``qstat`` lists queued and
running jobs; the accounting file that ``qacct`` reads the attempts that ended, one line each (a
job that exited 99 and ran again has two), ``qacct -j`` where this host cannot read the file.
Every command runs under a time limit. Standard library only.
"""
from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

from .. import cluster
from ..errors import UserError
from ..machine import rehearse
from . import scheduler
from .scheduler import JobState

__all__ = ["qsub", "release", "job_states", "wait_for_jobs", "qdel", "available"]

# qstat's state letters, in Slurm's words (the first letter that matches decides)
# (Rr: running again after a restart; Rq: queued again)
_QSTAT_STATES = (("E", "PENDING"), ("d", "COMPLETING"), ("s", "SUSPENDED"), ("S", "SUSPENDED"),
                 ("T", "SUSPENDED"), ("r", "RUNNING"), ("t", "RUNNING"), ("R", "REQUEUED"),
                 ("h", "PENDING"), ("q", "PENDING"))


def available() -> bool:
    """Whether Grid Engine's client commands are on PATH."""
    return all(shutil.which(c) for c in ("qsub", "qstat", "qacct"))


_WHERE = ("run this on a Grid Engine login node (with its settings.sh sourced), or rehearse "
          f"one on this machine: {rehearse('gridengine')}")


def _need(cmd: str) -> str:
    return scheduler.need_command(cmd, _WHERE)


def _run(argv: Sequence[str], cwd=None) -> subprocess.CompletedProcess:
    return scheduler.run_command(argv, cwd=cwd, daemon="sge_qmaster up? (qstat -f)")


def _must(argv: Sequence[str], what: str, cwd=None) -> str:
    """``argv``'s output, or UserError naming ``what`` failed and why (its own words)."""
    res = _run(argv, cwd=cwd)
    if res.returncode != 0:
        raise UserError(f"{what} failed: {res.stderr.strip() or res.stdout.strip()}")
    return res.stdout


def qsub(script, *, hold: Sequence[str] = (), cwd=None, extra: Sequence[str] = (),
         held: bool = False) -> str:
    """Submit ``script`` with ``qsub -terse`` (after the jobs ``hold``, ``-hold_jid``; with a
    user hold, ``-h``, when ``held``: :func:`release` lets it run); return the job id."""
    argv = [_need("qsub"), "-terse", *extra] + (["-h"] if held else [])
    if hold:
        argv += ["-hold_jid", ",".join(str(h) for h in hold)]
    argv.append(str(script))
    return _must(argv, f"qsub {script}", cwd=cwd).strip().split(".")[0]


def release(jid: str, waiting: Sequence[str]) -> None:
    """Let a job submitted ``held`` run, telling it the jobs that wait for the file it makes
    (its context ``hpcdl_waiting``, ids joined by ':'): Grid Engine starts a job held with
    -hold_jid whether the job before it succeeded or not, so that job deletes them itself where
    it ends without its file (templates/study-tune.qsub)."""
    if waiting:
        _must([_need("qalter"), "-ac", "hpcdl_waiting=" + ":".join(map(str, waiting)), str(jid)],
              f"qalter -ac on job {jid}")
    _must([_need("qrls"), str(jid)], f"qrls {jid}")


def qdel(ids: Iterable[str]) -> None:
    ids = [str(i) for i in ids]
    if ids:
        _run([_need("qdel"), *ids])


def _qstat_state(letters: str) -> str:
    for letter, state in _QSTAT_STATES:
        if letter in letters:
            return state
    return "UNKNOWN"


def parse_qstat(text: str) -> Dict[str, tuple]:
    """``qstat -u '*'``'s rows: job id -> (state letters, queue or None)."""
    out = {}
    for line in (text or "").splitlines():
        parts = line.split()
        if len(parts) < 5 or not parts[0].isdigit():
            continue
        queue = parts[7] if len(parts) > 8 and "@" in parts[7] else None
        out[parts[0]] = (parts[4], queue)
    return out


def parse_qacct(text: str) -> Dict[str, List[dict]]:
    """``qacct -j``'s blocks: job id -> the attempts that ended, oldest first, each a dict of
    its fields (``exit_status``, ``failed``, ``hostname``, ``end_time``, ...). qacct does not
    print a block's ``pe_taskid``, so a parallel job's tasks on its other nodes are among them:
    :func:`parse_accounting` reads the file itself and leaves them out."""
    out: Dict[str, List[dict]] = {}
    for block in re.split(r"^=+\s*$", text or "", flags=re.M):
        fields = {}
        for line in block.splitlines():
            key, _, value = line.partition(" ")
            if key:
                fields[key] = value.strip()
        if fields.get("jobnumber"):
            out.setdefault(fields["jobnumber"], []).append(fields)
    return out


# accounting(5): the fields of a line that a job's state needs, by position
_ACCT_FIELDS = {"hostname": 1, "jobnumber": 5, "end_time": 10, "failed": 11, "exit_status": 12,
                "pe_taskid": 41}


def parse_accounting(text: str) -> Dict[str, List[dict]]:
    """Grid Engine's accounting file (``$SGE_ROOT/$SGE_CELL/common/accounting``, what qacct
    reads): job id -> the attempts that ended, in the order they were written. A parallel job's
    tasks on its other nodes (``qrsh -inherit``: a ``pe_taskid``) are left out."""
    out: Dict[str, List[dict]] = {}
    for line in (text or "").splitlines():
        parts = line.split(":")
        if line.startswith("#") or len(parts) <= max(_ACCT_FIELDS.values()):
            continue
        fields = {k: parts[i] for k, i in _ACCT_FIELDS.items()}
        if fields["pe_taskid"] == "NONE":
            out.setdefault(fields["jobnumber"], []).append(fields)
    return out


def _accounting_file() -> Optional[Path]:
    root, cell = cluster.gridengine_cell()
    path = Path(root) / cell / "common" / "accounting" if root else None
    return path if path is not None and path.is_file() else None


def _ended(jid: str, attempts: List[dict]) -> JobState:
    history, state, code = [], "UNKNOWN", None
    for a in attempts:
        rc = a.get("exit_status", "").split()[0] if a.get("exit_status") else "?"
        failed = (a.get("failed") or "0").split()[0]
        # exit 99: Grid Engine queues the job again; failed != 0: it did not end by itself
        state = ("REQUEUED" if rc == "99" else "COMPLETED" if rc == "0" and failed == "0"
                 else "FAILED")
        code = f"{rc}:0"
        history.append(f"{state} {code}")
    return JobState(jid, state, code, None, attempts[-1].get("hostname"), "qacct",
                    len(attempts), history)


def job_states(ids: Iterable[str]) -> Dict[str, JobState]:
    """The state of each job: ``qstat`` for jobs in the queue, ``qacct -j`` for attempts that
    ended (its accounting file is written a second or so after a job ends). Ids that neither
    knows are absent from the answer."""
    ids = [str(i) for i in ids if i]
    if not ids:
        return {}
    out: Dict[str, JobState] = {}
    acct = _accounting_file()
    if acct is not None:
        ended = parse_accounting(acct.read_text(errors="replace"))
    else:                          # a client host without the cell's files: ask qacct (one job each)
        ended = {}
        for jid in ids:
            res = _run([_need("qacct"), "-j", jid])
            ended.update(parse_qacct(res.stdout if res.returncode == 0 else ""))
    for jid, attempts in ended.items():
        if jid in ids:
            out[jid] = _ended(jid, attempts)
    queued = parse_qstat(_run([_need("qstat"), "-u", "*"]).stdout)
    for jid in ids:
        if jid in queued:
            letters, queue = queued[jid]
            prev = out.get(jid)
            state = _qstat_state(letters)
            if prev and state == "PENDING":       # queued again after exit 99
                state = "REQUEUED"
            out[jid] = JobState(jid, state, None, "error state (qstat -j)" if "E" in letters
                                else None, queue.split("@")[1] if queue else None, "qstat",
                                (prev.attempts + 1) if prev else 1,
                                (prev.history if prev else []) + [state])
    return out


def wait_for_jobs(ids: Sequence[str], timeout: float, poll: float = 1.0,
                  cancel: bool = True) -> Dict[str, JobState]:
    """Poll until every job has ended; on the time limit raise TimeoutError, having deleted the
    jobs when ``cancel``."""
    return scheduler.poll_until_ended(ids, timeout, poll, job_states,
                                      qdel if cancel else None, "deleted")
