"""Launch ranks on this machine with Open MPI's mpirun, always under a timeout.

``mpirun_command`` is a pure function from what to run to the argument list; ``run`` executes it
with a wall-clock limit and kills the whole process group on expiry, so a hung rank can never
hang the caller. mpirun itself ends the job when any rank exits non-zero.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from typing import List, Mapping, Optional, Sequence

from .. import cluster
from ..errors import UserError

# Settings every local job gets (the caller's environment wins).
LOCAL_ENV = {
    # Open MPI refuses root without these; CI and containers run as root.
    "OMPI_ALLOW_RUN_AS_ROOT": "1",
    "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1",
    # No InfiniBand/UCX probing on a workstation: quieter and faster start-up.
    "OMPI_MCA_pml": "ob1",
    "OMPI_MCA_btl": "self,vader,tcp",
    "OMPI_MCA_btl_base_warn_component_unused": "0",
    "PMIX_MCA_gds": "hash",
    # Waiting ranks yield the core instead of spinning (hpcdl.cluster.RANK_DEFAULTS explains).
    "OMPI_MCA_mpi_yield_when_idle": "1",
    "TF_CPP_MIN_LOG_LEVEL": "2",
}


@dataclass
class Result:
    returncode: int
    stdout: str
    stderr: str
    elapsed: float
    timed_out: bool
    argv: List[str]


def find_mpirun() -> str:
    path = shutil.which("mpirun") or shutil.which("mpiexec")
    if not path:
        raise UserError("mpirun not found on PATH: install Open MPI (apt-get install openmpi-bin "
                        "libopenmpi-dev) or load your cluster's MPI module (module load openmpi)")
    return path


def mpirun_command(np: int, command: Sequence[str], *, mpirun: Optional[str] = None,
                   oversubscribe: Optional[bool] = None, bind: str = "none",
                   extra: Sequence[str] = ()) -> List[str]:
    """The argv of ``mpirun -np N ... command``.

    Oversubscription is allowed when more ranks than cores are asked for (tests on a laptop);
    binding is off by default because ranks of a local study share a few cores with TensorFlow's
    threads, and a rank pinned to one core would starve its own threads.
    """
    if np <= 0:
        raise UserError(f"rank count must be positive, got {np}")
    mpirun = mpirun or find_mpirun()
    argv = [mpirun, "-np", str(np)]
    if oversubscribe is None:
        oversubscribe = np > (os.cpu_count() or 1)
    if oversubscribe:
        argv.append("--oversubscribe")
    if bind:
        argv += ["--bind-to", bind]
    argv += ["--tag-output"] if cluster.setting("HPCDL_TAG_OUTPUT") else []
    argv += list(extra)
    return argv + list(command)


def hpcdl_command(args: Sequence[str], python: Optional[str] = None) -> List[str]:
    """``python -m hpcdl ARGS`` with the interpreter running now (the venv's)."""
    return [python or sys.executable, "-m", "hpcdl", *args]


def job_env(env: Optional[Mapping[str, str]] = None) -> dict:
    out = dict(LOCAL_ENV)
    out.update(os.environ if env is None else env)
    return out


def run(argv: Sequence[str], timeout: float, env: Optional[Mapping[str, str]] = None,
        cwd=None, stream: bool = False, log=None) -> Result:
    """Run ``argv`` in its own process group; on timeout kill the group and say so.

    With ``log`` (a path), stdout and stderr go to that file, and the Result's stdout is its text.
    """
    t0 = time.monotonic()
    fh = open(log, "w") if log is not None else None
    try:
        pipe = None if stream else subprocess.PIPE
        proc = subprocess.Popen(list(argv), stdout=fh or pipe,
                                stderr=subprocess.STDOUT if fh else pipe, text=True,
                                env=job_env(env), cwd=cwd, start_new_session=True)
        timed_out = False
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
            out, err = proc.communicate()
        except BaseException:
            # Ctrl-C or SIGTERM to the caller (a terminal's Ctrl-C does not reach the job's own
            # session): end the job's every process, mpirun and its ranks, before leaving
            end_session(proc)
            raise
        _wait_session_gone(proc.pid, DRAIN_S)
    finally:
        if fh is not None:
            fh.close()
    if log is not None:
        out = open(log, errors="replace").read()
    return Result(proc.returncode, out or "", err or "", time.monotonic() - t0, timed_out, list(argv))


# mpirun can return while the ranks it signalled after a failure are still exiting (a
# TensorFlow process takes a moment to die); the job has ended only when they are gone
DRAIN_S = 30.0


def _session_members(sid: int) -> List[int]:
    """Live (not zombie) processes of session ``sid``: mpirun's ranks keep its session, each in a
    process group of its own."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if fields[0] != "Z" and int(fields[3]) == sid:     # state, ppid, pgrp, session
            found.append(int(name))
    return found


def _wait_session_gone(sid: int, limit: float) -> None:
    """Wait up to ``limit`` seconds for every process of session ``sid`` to exit (no kill: a rank
    still there afterwards is left for the caller to see)."""
    end = time.monotonic() + limit
    while _session_members(sid) and time.monotonic() < end:
        time.sleep(0.05)


def _kill_group(proc: subprocess.Popen) -> None:
    for sig, wait in ((signal.SIGTERM, 5), (signal.SIGKILL, 5)):
        if not _signal_group(proc.pid, sig):
            return
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue


def end_session(proc: subprocess.Popen, grace: float = 5.0) -> None:
    """End the job started in ``proc``'s session: SIGTERM to mpirun's group (it forwards the end
    to its ranks), then, after ``grace`` seconds, SIGKILL to every process of the session still
    there. Returns once none is left (or after ``DRAIN_S``)."""
    _signal_group(proc.pid, signal.SIGTERM)
    end = time.monotonic() + grace
    while _session_members(proc.pid) and time.monotonic() < end:
        proc.poll()
        time.sleep(0.05)
    for pid in _session_members(proc.pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.poll()
    _wait_session_gone(proc.pid, DRAIN_S)


def _signal_group(pgid: int, sig) -> bool:
    """Send ``sig`` to process group ``pgid``; False where the group is gone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        return False
    return True


def time_left(env: Optional[Mapping[str, str]] = None) -> Optional[float]:
    """Seconds until the enclosing job's end (its scheduler's, :func:`hpcdl.cluster.job_deadline`),
    None outside a job that has one."""
    end = cluster.job_deadline(env)
    return None if end is None else max(0.0, end - time.time())


class Mpirun:
    """The third way a study's points run, beside Slurm and Grid Engine (:mod:`.batch`): now,
    on this machine's hosts, one after another (``study run``). Render is the mpirun command
    line; submit runs it under a timeout and waits for its end, its status the exit status;
    cancel ends its whole session, mpirun and every rank; the time left is the enclosing job's."""

    name = "mpirun"
    tools = "the exit status of each mpirun"

    def render(self, ranks: int, words: Sequence[str], extra: Sequence[str] = ()) -> List[str]:
        return mpirun_command(ranks, words, extra=extra)

    def submit(self, argv: Sequence[str], timeout: float, env: Optional[Mapping[str, str]] = None,
               stream: bool = False, log=None) -> Result:
        return run(argv, timeout=timeout, env=env, stream=stream, log=log)

    cancel = staticmethod(end_session)
    time_left = staticmethod(time_left)


MPIRUN = Mpirun()
