"""Either scheduler: which one a study's jobs go to, each behind one interface (:class:`Slurm`,
:class:`GridEngine`, registered once in :data:`BY_NAME`: what its scripts ask for, submit after
a job, submit after them all, release, the words of a dry run, its jobs' states, waiting for
them, cancelling them, the time the enclosing job has left); with mpirun, the third way a study's
points run (:data:`hpcdl.launch.local.MPIRUN`, for ``study run``), in :data:`LAUNCHERS`. A job
is a (scheduler, job id) pair, as a study's submission log records it. Standard library only.
"""
from __future__ import annotations

import shutil
import time
from typing import Iterable, List, Optional, Sequence, Tuple

from . import gridengine, local, scheduler
from .. import cluster
from ..errors import UserError

__all__ = ["SCHEDULERS", "BY_NAME", "LAUNCHERS", "Slurm", "GridEngine", "choose",
           "gridengine_request", "job_states", "wait_for_jobs"]

SCHEDULERS = ("slurm", "gridengine")


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


class Slurm:
    """sbatch and its dependencies; a machine's licence keeps a study's jobs apart."""

    name, suffix, output = "slurm", "sbatch", "%x-%j.out"
    tools = "squeue and sacct -c"        # where its jobs' states come from

    def states(self, ids: Sequence[str]) -> dict:
        return scheduler.job_states(ids)

    def wait(self, ids: Sequence[str], timeout: float, poll: float, cancel: bool) -> dict:
        return scheduler.wait_for_jobs(ids, timeout, poll=poll, cancel=cancel)

    def cancel(self, ids: Sequence[str]) -> None:
        if ids:
            scheduler.run_command([scheduler.need_command("scancel"), *ids])

    time_left = staticmethod(local.time_left)

    def request(self, study, settings: dict, where) -> Optional[dict]:
        """What a study's scripts ask for beyond their Job: nothing more on Slurm."""
        return None

    def licence(self, where) -> Optional[str]:
        return where.licence

    def submit(self, script, cwd, after: Optional[str] = None, needs: bool = False,
               held: bool = False, group: Sequence[str] = ()) -> str:
        """After the job ``after`` ends (``needs``: only if it succeeded; else never started)."""
        kind, extra = _dependency(after, needs)
        return scheduler.sbatch(script, cwd=cwd, dependency=f"{kind}:{after}" if after else None,
                                extra=extra)

    def would_submit(self, rel: str, after: Optional[str], needs: bool, held: bool,
                     group: Sequence[str]) -> str:
        kind, extra = _dependency(after, needs)
        dep = (f"--dependency={kind}:<{after}> " + "".join(x + " " for x in extra)) if after else ""
        return f"sbatch {dep}{rel}"

    def submit_after_all(self, script, cwd, ids: List[str],
                         group: Sequence[str] = ()) -> Tuple[str, Optional[str]]:
        """(job id, the dependency it waits on) of a job that starts once ``ids`` have ended."""
        dep = "afterany:" + ":".join(ids) if ids else None
        return scheduler.sbatch(script, cwd=cwd, dependency=dep), dep

    def would_submit_after_all(self, name: str, any_steps: bool) -> str:
        return "sbatch " + ("--dependency=afterany:<step ids> " if any_steps else "") + name

    def holds_tunes(self) -> bool:
        """Whether a tune job is submitted held until the jobs waiting for it are known: Slurm's
        afterok cancels them itself when the tune job fails."""
        return False

    def release(self, jid: str, waiting: Sequence[str]) -> None:
        """Nothing is held on Slurm."""

    def group_args(self, group: Optional[str]) -> List[str]:
        return []

    def one_at_a_time(self, where) -> str:
        """How the machine keeps a study's jobs apart, in words ("" where it need not)."""
        return where.one_at_a_time(gridengine=False)


class GridEngine:
    """qsub and -hold_jid; a consumable keeps a study's jobs apart, and TSUBAME's group pays."""

    name, suffix, output = "gridengine", "qsub", "NAME.oJOBID"
    tools = "qstat and Grid Engine's accounting"

    def states(self, ids: Sequence[str]) -> dict:
        return gridengine.job_states(ids)

    def wait(self, ids: Sequence[str], timeout: float, poll: float, cancel: bool) -> dict:
        return gridengine.wait_for_jobs(ids, timeout, poll=poll, cancel=cancel)

    def cancel(self, ids: Sequence[str]) -> None:
        gridengine.qdel(ids)

    time_left = staticmethod(local.time_left)

    def request(self, study, settings: dict, where) -> Optional[dict]:
        """The parallel environment, queue, consumable and group (:func:`gridengine_request`);
        a study of the user's own command is refused (it runs through Slurm or mpirun)."""
        if any(p.script for p in study.points()):
            raise UserError(f"{study.name}: a study of your own command runs through Slurm (or "
                            "mpirun) so far; submit this one with --scheduler slurm")
        return gridengine_request(study.name, settings, where)

    def licence(self, where) -> Optional[str]:
        return None                       # the consumable in the request does it

    def submit(self, script, cwd, after: Optional[str] = None, needs: bool = False,
               held: bool = False, group: Sequence[str] = ()) -> str:
        return gridengine.qsub(script, cwd=cwd, extra=list(group), hold=[after] if after else (),
                               held=held)

    def would_submit(self, rel: str, after: Optional[str], needs: bool, held: bool,
                     group: Sequence[str]) -> str:
        dep = ("-h " if held else "") + (f"-hold_jid <{after}> " if after else "")
        return "qsub " + "".join(g + " " for g in group) + dep + rel

    def submit_after_all(self, script, cwd, ids: List[str],
                         group: Sequence[str] = ()) -> Tuple[str, Optional[str]]:
        dep = "hold_jid:" + ",".join(ids) if ids else None
        return gridengine.qsub(script, cwd=cwd, hold=ids, extra=list(group)), dep

    def would_submit_after_all(self, name: str, any_steps: bool) -> str:
        return "qsub " + ("-hold_jid <step ids> " if any_steps else "") + name

    def holds_tunes(self) -> bool:
        """-hold_jid starts a job whether the one before succeeded or not: a tune job is held
        until it is told who waits for its file (:func:`gridengine.release`), and deletes them
        itself where it ends without it."""
        return True

    def release(self, jid: str, waiting: Sequence[str]) -> None:
        gridengine.release(jid, waiting)

    def group_args(self, group: Optional[str]) -> List[str]:
        return ["-g", group] if group else []           # TSUBAME's qsub -g GROUP

    def one_at_a_time(self, where) -> str:
        return where.one_at_a_time(gridengine=True)


BY_NAME = {s.name: s for s in (Slurm(), GridEngine())}
# every way a study's points run: through a scheduler (study submit), or now (study run)
LAUNCHERS = {**BY_NAME, local.MPIRUN.name: local.MPIRUN}


def _dependency(after: Optional[str], needs: bool) -> Tuple[str, List[str]]:
    """Slurm's dependency kind, and the option that cancels a job whose dependency failed."""
    return ("afterok" if needs else "afterany",
            ["--kill-on-invalid-dep=yes"] if needs and after else [])


def job_states(jobs: Iterable[tuple]) -> dict:
    """The state of each job, a (scheduler, job id) pair, asked of its own scheduler; keyed by
    the pair. Jobs neither knows are absent."""
    jobs = list(jobs)
    out = {}
    for name, sched in BY_NAME.items():
        ids = [j for s, j in jobs if s == name]
        if ids:
            got = sched.states(ids)
            out.update({(name, j): got[j] for j in ids if j in got})
    return out


def wait_for_jobs(jobs: Iterable[tuple], timeout: float, poll: float = 1.0,
                  cancel: bool = True) -> dict:
    """Wait until every job, a (scheduler, job id) pair, has ended; TimeoutError at ``timeout``
    (the jobs cancelled when ``cancel``)."""
    jobs = list(jobs)
    deadline = time.monotonic() + timeout
    states = {}
    for name, sched in BY_NAME.items():
        ids = [j for s, j in jobs if s == name]
        if ids:
            got = sched.wait(ids, max(0.0, deadline - time.monotonic()), poll, cancel)
            states.update({(name, j): st for j, st in got.items()})
    return states
