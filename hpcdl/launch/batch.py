"""Either scheduler: which one a study's jobs go to, and their states asked of the one that runs
each (:mod:`hpcdl.launch.scheduler` for Slurm, :mod:`hpcdl.launch.gridengine`). A job is a
(scheduler, job id) pair, as a study's submission log records it. Standard library only.
"""
from __future__ import annotations

import shutil
import time
from typing import Iterable, Optional

from . import gridengine, scheduler
from .. import cluster
from ..errors import UserError

__all__ = ["SCHEDULERS", "choose", "gridengine_request", "job_states", "wait_for_jobs"]

SCHEDULERS = ("slurm", "gridengine")
_MODULES = (("slurm", scheduler), ("gridengine", gridengine))


def choose(want: Optional[str]) -> str:
    """``slurm`` or ``gridengine``: ``want`` itself, or for ``auto`` (and None) Slurm where
    ``sbatch`` is installed, else Grid Engine where ``qsub`` is."""
    want = want or "auto"
    if want in SCHEDULERS:
        return want
    if want != "auto":
        raise UserError(f"scheduler {want!r}: choose slurm, gridengine or auto")
    if shutil.which("sbatch") or not gridengine.available():
        return "slurm"
    return "gridengine"


def gridengine_request(study: str, settings: dict, where) -> dict:
    """What a study's Grid Engine jobs ask for beyond their time (``settings``: its [slurm]):
    the parallel environment (``pe``; none: TSUBAME's full nodes and its ``account`` the group
    given to ``qsub -g``), the queue (``partition``) and the consumable that runs them one at a
    time, each the machine's own where the study gives none (``where``: a
    :class:`hpcdl.machine.Target`)."""
    sge = where.gridengine(cluster.gridengine_cell())
    # no parallel environment: TSUBAME's full nodes (-l node_f=N), paid by the group (qsub -g)
    pe = settings.get("pe") or sge.get("pe")
    return {"pe": pe, "resources": [f"{sge['consumable']}=1"] if sge.get("consumable") else [],
            "queue": settings.get("partition") or sge.get("queue"),
            "group": None if pe else settings.get("account")}


def job_states(jobs: Iterable[tuple]) -> dict:
    """The state of each job, a (scheduler, job id) pair, asked of its own scheduler; keyed by
    the pair. Jobs neither knows are absent."""
    jobs = list(jobs)
    out = {}
    for sched, mod in _MODULES:
        ids = [j for s, j in jobs if s == sched]
        if ids:
            got = mod.job_states(ids)
            out.update({(sched, j): got[j] for j in ids if j in got})
    return out


def wait_for_jobs(jobs: Iterable[tuple], timeout: float, poll: float = 1.0,
                  cancel: bool = True) -> dict:
    """Wait until every job, a (scheduler, job id) pair, has ended; TimeoutError at ``timeout``
    (the jobs cancelled when ``cancel``)."""
    jobs = list(jobs)
    deadline = time.monotonic() + timeout
    states = {}
    for sched, mod in _MODULES:
        ids = [j for s, j in jobs if s == sched]
        if ids:
            got = mod.wait_for_jobs(ids, max(0.0, deadline - time.monotonic()), poll=poll,
                                    cancel=cancel)
            states.update({(sched, j): st for j, st in got.items()})
    return states
