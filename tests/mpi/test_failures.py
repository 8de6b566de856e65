"""A failing rank ends the whole job quickly, names itself, and costs no recorded result.

The failure is injected with ``HPCDL_FAULT=rank=R,step=S,kind=...`` (read by ``hpcdl train``):
``kill`` is a SIGKILL (a node lost, the OOM killer), ``raise`` an exception in the training loop.
"""
import os
import random
import re
import time
from pathlib import Path

from hpcdl import records
from hpcdl_testing import mpirun


STEPS = 200
EXIT_WITHIN_S = 60.0


def _stray_processes(marker: str):
    """Processes still alive whose command line mentions ``marker`` (this test's own paths)."""
    found = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in cmdline:
            found.append((int(pid), cmdline))
    return found


def _seed_results(path):
    """A results file that already holds two records of earlier runs."""
    for i in range(2):
        records.append(path, {"schema": records.SCHEMA, "kind": "train", "earlier": i, "status": "ok"})
    return path.read_bytes()


def _fault_trial(tmp_path, np_, kind):
    rnd = random.Random()
    rank, step = rnd.randrange(np_), rnd.randrange(1, STEPS - 1)
    results = tmp_path / "runs.jsonl"
    before = _seed_results(results)
    res = mpirun(np_, ["train", "--workload", "expmlp", "--steps", str(STEPS), "--batch-size", "50",
                       "--log-every", "50", "--probes", "0", "--results", str(results)],
                 timeout=240, env={"HPCDL_FAULT": f"rank={rank},step={step},kind={kind}"})
    ended = time.time()
    where = f"(rank {rank}, step {step})\nstdout:\n{res.stdout[-2000:]}\nstderr:\n{res.stderr[-3000:]}"
    m = re.search(r"\[(\d+)@(\S+)\] HPCDL_FAULT: injecting '\w+' at step (\d+) \(t=([\d.]+)\)", res.stderr)
    assert m and int(m.group(1)) == rank and int(m.group(3)) == step, where
    host = m.group(2)
    assert res.returncode != 0, where
    assert ended - float(m.group(4)) < EXIT_WITHIN_S, where
    assert results.read_bytes() == before, "a failed job changed the results file"
    assert not _stray_processes(str(results)), "ranks left running after the job ended"
    return res, rank, host


# Each kind once: a rank killed among four (the others blocked in the exchange with it), a rank
# that raises among two (its own handler ends the job, whatever the job's size).
def test_a_rank_killed_at_a_random_step_ends_the_job_and_is_named(tmp_path):
    res, rank, host = _fault_trial(tmp_path, 4, "kill")
    # mpirun's own report names the rank that died and its node.
    assert re.search(rf"process rank {rank} with PID \d+ on node {re.escape(host)} exited on signal 9",
                     res.stderr), res.stderr[-3000:]


def test_a_rank_that_raises_at_a_random_step_ends_the_job_and_is_named(tmp_path):
    np_ = 2
    res, rank, host = _fault_trial(tmp_path, np_, "raise")
    assert res.returncode == 1, res.stderr[-3000:]
    assert "Traceback (most recent call last)" in res.stderr
    assert re.search(rf"\[{rank}@{re.escape(host)}\] hpcdl train: RuntimeError: HPCDL_FAULT: injected "
                     rf"failure at step \d+; ending the job \(rank {rank} of {np_} on {re.escape(host)}\)",
                     res.stderr), res.stderr[-3000:]
