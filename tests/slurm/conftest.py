"""A real Slurm cluster for the tests in this folder: munge, slurmctld and four slurmd (n1..n4).

The session fixture starts it with scripts/slurm-cluster.sh (fresh state every time, whatever an
earlier session left running) and stops it when the session ends, passed or failed. Where Slurm
cannot run (not root, no packages and no apt) every test here skips and says why. Set
HPCDL_SLURM_TESTS=0 to skip them on purpose.

At the end the session prints the job-completion log (``sacct -c``) of the jobs it ran.
"""
from __future__ import annotations

import fcntl
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from slurm_testing import JOB_EXPORTS, ROOT  # noqa: E402

from hpcdl.launch import jobscript  # noqa: E402

SCRIPT = ROOT / "scripts" / "slurm-cluster.sh"
LOCK = Path("/tmp/hpcdl-slurm-tests.lock")        # one test session owns the cluster at a time
SACCT_LOG = Path(os.environ.get("HPCDL_SLURM_SACCT_LOG", "/tmp/hpcdl-slurm-tests/sacct.txt"))

_SUMMARY = {}


def _cluster(cmd: str, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), cmd], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def slurm_cluster():
    """Start the cluster (or skip with the reason); stop it at the end of the session."""
    if os.environ.get("HPCDL_SLURM_TESTS") == "0":
        pytest.skip("HPCDL_SLURM_TESTS=0")
    if not sys.platform.startswith("linux"):
        pytest.skip("the single-machine Slurm cluster needs Linux")
    if os.geteuid() != 0:
        pytest.skip("the Slurm tests run their own cluster, whose daemons and jobs run as root; "
                    f"this is uid {os.geteuid()}")
    LOCK.touch(exist_ok=True)
    lock = open(LOCK, "w")
    deadline = time.monotonic() + 900
    while True:                      # another test session may hold the cluster: wait for it
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if time.monotonic() > deadline:
                pytest.skip("another test session has held the Slurm test cluster for 15 minutes")
            time.sleep(1)
    t0 = time.monotonic()
    try:
        res = _cluster("start", timeout=600)      # may apt-get install the packages first
        if res.returncode == 3:
            pytest.skip(res.stderr.strip().splitlines()[-1] if res.stderr.strip() else
                        "Slurm cannot run here")
        if res.returncode != 0:
            pytest.fail(f"scripts/slurm-cluster.sh start failed ({res.returncode}):\n{res.stderr}")
        _SUMMARY["start_s"] = time.monotonic() - t0
        yield
    finally:
        try:
            out = subprocess.run(["sacct", "-c", "-n", "-P", "-o",
                                  "jobid,jobname,nnodes,nodelist,state,exitcode,start,end"],
                                 capture_output=True, text=True, timeout=30).stdout
            SACCT_LOG.parent.mkdir(parents=True, exist_ok=True)
            SACCT_LOG.write_text(out)
            _SUMMARY["sacct"] = out
        except (OSError, subprocess.SubprocessError):
            pass
        t1 = time.monotonic()
        res = _cluster("stop", timeout=120)
        _SUMMARY["stop_s"] = time.monotonic() - t1
        _SUMMARY["total_s"] = time.monotonic() - t0
        _SUMMARY["stop_rc"] = res.returncode
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


def pytest_terminal_summary(terminalreporter):
    if not _SUMMARY:
        return
    tr = terminalreporter
    tr.section("Slurm test cluster")
    tr.write_line(f"cluster start {_SUMMARY.get('start_s', 0):.1f} s, stop "
                  f"{_SUMMARY.get('stop_s', 0):.1f} s, start to stop {_SUMMARY.get('total_s', 0):.1f} s"
                  + ("" if _SUMMARY.get("stop_rc", 0) == 0 else f" (stop exited {_SUMMARY['stop_rc']})"))
    if _SUMMARY.get("sacct"):
        tr.write_line(f"sacct -c (also in {SACCT_LOG}):")
        for line in _SUMMARY["sacct"].splitlines():
            tr.write_line("  " + line)


@pytest.fixture(scope="session")
def software(slurm_cluster):
    """This venv, with the settings the four fake nodes need."""
    return jobscript.Software.here(workdir=ROOT, exports=JOB_EXPORTS)
