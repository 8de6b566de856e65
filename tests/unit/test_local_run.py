"""hpcdl.launch.local.run returns only once the job's processes are gone."""
import os
import signal
import time

from hpcdl.launch import local


def test_run_waits_for_processes_the_launcher_left_behind(tmp_path):
    # the launched command exits at once and leaves a child in its session, as mpirun can leave a
    # rank that is still exiting after a failure
    pidfile = tmp_path / "child.pid"
    script = f"sleep 1 >/dev/null 2>&1 & echo $! > {pidfile}; exit 3"
    res = local.run(["sh", "-c", script], timeout=20)
    assert res.returncode == 3 and not res.timed_out
    assert res.elapsed >= 0.9
    pid = int(pidfile.read_text())
    gone = not os.path.exists(f"/proc/{pid}")
    assert gone or open(f"/proc/{pid}/stat").read().rsplit(") ", 1)[1][0] == "Z"    # exited


def test_run_does_not_wait_longer_than_its_limit_and_kills_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(local, "DRAIN_S", 0.5)
    pidfile = tmp_path / "child.pid"
    t0 = time.monotonic()
    script = f"sleep 30 >/dev/null 2>&1 & echo $! > {pidfile}; exit 0"
    res = local.run(["sh", "-c", script], timeout=20)
    took = time.monotonic() - t0
    pid = int(pidfile.read_text())
    try:
        assert res.returncode == 0 and 0.4 < took < 5
        assert pid in local._session_members(pid_session := os.getsid(pid))
        assert pid_session != os.getsid(0)      # the job's own session, not the test's
    finally:
        os.kill(pid, signal.SIGKILL)
