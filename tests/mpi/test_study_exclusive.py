"""One `study run` of a results root at a time, and an interrupted one leaves no rank behind: a
second run of the same study refuses while the first holds the root, and Ctrl-C or SIGTERM to
`study run` ends the point's mpirun and every rank of it before the command exits."""
import os
import signal
import subprocess
import sys
import time

import pytest

from hpcdl_testing import ROOT, read_records

STUDY = """
[study]
name = "excl"
scaling = "strong"
repeats = 1

[workload]
name = "expmlp"
global_batch = 200
steps = 40000
warmup = 5
num_batches_per_iter = 5

[layout]
ranks = [2]

[run]
timeout = 150
threads_per_rank = 1
"""


def _env():
    return dict(os.environ, PYTHONPATH=str(ROOT))


def _sigint_as_at_a_terminal():
    # a shell's background job inherits SIGINT ignored, and Python then installs no
    # KeyboardInterrupt handler: give the run the disposition a terminal's Ctrl-C meets
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(path, root):
    return subprocess.Popen([sys.executable, "-m", "hpcdl", "study", "run", str(path),
                             "--results-root", str(root)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=ROOT, env=_env(),
                            preexec_fn=_sigint_as_at_a_terminal)


def _processes():
    """{pid: (parent, session)} of every live (not zombie) process, from /proc."""
    table = {}
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if fields[0] != "Z":
                table[int(name)] = (int(fields[1]), int(fields[3]))
    return table


def _descendants(pid: int):
    """Every live process below ``pid`` (by parent links), and their sessions."""
    parents = _processes()
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        for child, (ppid, _) in parents.items():
            if ppid == p and child not in out:
                out.add(child)
                todo.append(child)
    return out, {parents[c][1] for c in out}


def _alive_in(sessions):
    return [pid for pid, (_, sid) in _processes().items() if sid in sessions]


def _wait_for_ranks(proc, n=2, limit=120.0):
    """The sessions of the point's job once ``n`` ranks (hpcdl train) run below ``proc``."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        kids, sessions = _descendants(proc.pid)
        ranks = [k for k in kids if b"train" in _cmdline(k)]
        if len(ranks) >= n:
            return sessions - {os.getsid(proc.pid)}
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    raise AssertionError("the point's ranks did not start")


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read()
    except OSError:
        return b""


@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_a_second_run_refuses_and_a_signal_ends_every_rank_of_the_point(tmp_path, sig, code):
    path = tmp_path / "excl.toml"
    path.write_text(STUDY)
    root = tmp_path / "results"
    first = _start(path, root)
    try:
        sessions = _wait_for_ranks(first)
        assert sessions, "the point's job runs in a session of its own"
        second = subprocess.run([sys.executable, "-m", "hpcdl", "study", "run", str(path),
                                 "--results-root", str(root)], capture_output=True, text=True,
                                cwd=ROOT, env=_env(), timeout=120)
        assert second.returncode == 2, second.stderr
        line = second.stderr.strip().splitlines()[-1]
        assert f"is in use by 'hpcdl study run {path}' (PID {first.pid} on " in line, line
        first.send_signal(sig)
        out, err = first.communicate(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == code, err[-2000:]
    assert _alive_in(sessions) == [], "a process of the point outlived its study run"
    runs = root / "excl" / "runs.jsonl"
    assert not runs.exists() or read_records(runs) == []
    # the root is free again: the lock names no one
    assert (root / ".hpcdl-lock").read_text() == ""
