"""Put the repository and the test helpers (tests/hpcdl_testing.py) on sys.path for every test,
and mark every test with its tier, the folder it lives in: unit (no MPI), mpi (real mpirun
ranks), slurm (real Slurm on the cluster box), box (training on the box's emulated nodes); and
the quick tier's tests (every unit test, and those named in hpcdl_testing.QUICK) quick, and
the MPI tests the other stack runs (hpcdl_testing.OTHER_STACK) stacks.
``pytest -m "not mpi and not slurm and not box"`` therefore starts no mpirun and no Slurm."""
import fcntl
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hpcdl_testing import OTHER_STACK, QUICK, must_run

TESTS = Path(__file__).resolve().parent
TIERS = ("unit", "mpi", "slurm", "box")

sys.path.insert(0, str(TESTS))
sys.path.insert(0, str(TESTS.parent))
ROOT = TESTS.parent


def pytest_collection_modifyitems(config, items):
    for item in items:
        rel = Path(str(item.fspath)).resolve().relative_to(TESTS)
        tier = rel.parts[0] if len(rel.parts) > 1 else None
        if tier not in TIERS:
            raise pytest.UsageError(f"{rel}: a test lives in one of tests/{{{','.join(TIERS)}}}/")
        item.add_marker(getattr(pytest.mark, tier))
        path = f"tests/{rel.as_posix()}"
        quick = f"{path}::{item.name}" in QUICK
        if tier == "unit" or quick:
            item.add_marker(pytest.mark.quick)
        if tier == "mpi" and (quick or path in OTHER_STACK):
            item.add_marker(pytest.mark.stacks)


@pytest.fixture(autouse=True)
def _no_cluster_box_in_unit_tests(request, monkeypatch):
    """A unit test sees no cluster box, whatever this machine has up (its settings file would
    change what a study submits and what a job exports)."""
    if request.node.get_closest_marker("unit"):
        monkeypatch.setenv("HPCDL_BOX", str(TESTS / "no-such-box.json"))


# --- the cluster box that the slurm and box tiers share (scripts/cluster-box.sh) ---------------------
# Started once per session, whatever an earlier session left, and taken down at its end, passed or
# failed. Where it cannot be made (not root, no namespaces or cgroups, no packages and no apt)
# every test that needs it skips and says why. HPCDL_SLURM_TESTS=0 skips them on purpose. At the
# end the session prints the job-completion log (sacct -c) of the jobs it ran.

SCRIPT = Path(os.environ.get("HPCDL_TEST_BOX_SCRIPT") or ROOT / "scripts" / "cluster-box.sh")
# Four nodes of one core each (two cores hold them: the tests do not need isolation, which
# `check` proves on a box sized for it), links of 1 Gbit/s; Grid Engine beside Slurm on them.
BOX = ["up", "4", "--link", "1gbit", "--cpus-per-node", "1", "--sge"]
# one test session owns the cluster at a time
LOCK = Path(os.environ.get("HPCDL_TEST_BOX_LOCK") or "/tmp/hpcdl-slurm-tests.lock")
SACCT_LOG = Path(os.environ.get("HPCDL_SLURM_SACCT_LOG", "/tmp/hpcdl-slurm-tests/sacct.txt"))

_SUMMARY = {}


def _cluster(args, timeout: float) -> subprocess.CompletedProcess:
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="session")
def slurm_cluster():
    """Bring the cluster box up (or skip with the reason); take it down when the session ends."""
    if os.environ.get("HPCDL_SLURM_TESTS") == "0":
        pytest.skip("HPCDL_SLURM_TESTS=0")
    if not sys.platform.startswith("linux"):
        pytest.skip("the single-machine Slurm cluster needs Linux")
    if os.geteuid() != 0:
        pytest.skip("the Slurm and box tests run their own cluster box (namespaces, cgroups, "
                    f"daemons and jobs as root); this is uid {os.geteuid()}")
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
        res = _cluster(BOX, timeout=600)      # may apt-get install the packages first
        if res.returncode == 3:
            why = (res.stderr.strip().splitlines()[-1] if res.stderr.strip() else
                   "the cluster box cannot be made here")
            must = must_run(os.environ, os.geteuid(), sys.platform, shutil.which("apt-get"))
            if must:
                pytest.fail(f"the cluster box must be made here ({must}) and was not: {why}")
            pytest.skip(why)
        if res.returncode != 0:
            pytest.fail(f"scripts/cluster-box.sh up failed ({res.returncode}):\n{res.stderr}")
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
        res = _cluster(["down"], timeout=120)
        _SUMMARY["stop_s"] = time.monotonic() - t1
        _SUMMARY["total_s"] = time.monotonic() - t0
        _SUMMARY["stop_rc"] = res.returncode
        fcntl.flock(lock, fcntl.LOCK_UN)
        lock.close()


def pytest_terminal_summary(terminalreporter):
    tr = terminalreporter
    skipped = {}
    for rep in tr.stats.get("skipped", []):
        parts = Path(str(rep.nodeid).split("::")[0]).parts
        tier = parts[1] if len(parts) > 2 and parts[0] == "tests" else "other"
        skipped[tier] = skipped.get(tier, 0) + 1
    if skipped:
        tr.section("Skipped, by tier")
        tr.write_line(", ".join(f"{tier} {n}" for tier, n in sorted(skipped.items())))
    if not _SUMMARY:
        return
    tr.section("Cluster box of the tests")
    tr.write_line(f"box up {_SUMMARY.get('start_s', 0):.1f} s, down "
                  f"{_SUMMARY.get('stop_s', 0):.1f} s, start to stop {_SUMMARY.get('total_s', 0):.1f} s"
                  + ("" if _SUMMARY.get("stop_rc", 0) == 0 else f" (down exited {_SUMMARY['stop_rc']})"))
    if _SUMMARY.get("sacct"):
        from hpcdl_testing import DELIBERATE, annotate_sacct
        tr.write_line(f"sacct -c (also in {SACCT_LOG}; jobid|name|nodes|nodelist|state|exit|start|end):")
        for line in annotate_sacct(_SUMMARY["sacct"], DELIBERATE):
            tr.write_line("  " + line)


