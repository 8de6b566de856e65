"""Resume on real ranks: after a killed rank, --max-time or the Slurm time limit, training
continues from the last checkpoint and ends with the weights of an uninterrupted run."""
import re
import time

import numpy as np
import pytest

from hpcdl.train import checkpoint
from hpcdl.errors import EXIT_INTERRUPTED
from hpcdl_testing import check, mpirun, read_records


NP = 2
STEPS = 2000
# A resumed run restores the model, the optimizer (Adam's moments and step counter), the data
# position (a pure function of seed and step) and the RNG state, and replays the same sums in the
# same order on the same ranks: the final weights were measured bit-identical (max |diff| 0.0).
# The tolerance leaves room for a build whose kernels are not run-to-run deterministic.
WEIGHT_ATOL = 1e-6


def _args(tmp_path, *extra):
    return ["train", "--workload", "expmlp", "--steps", str(STEPS), "--batch-size", "50",
            "--log-every", "1000", "--probes", "0", "--results", str(tmp_path / "runs.jsonl"),
            "--checkpoint-dir", str(tmp_path / "ckpt"), *extra]


def _weights(path):
    with np.load(path) as f:
        return [f[k] for k in sorted(f.files, key=lambda k: int(k[1:]))]


def _max_diff(a, b):
    assert len(a) == len(b)
    return max(float(np.max(np.abs(x - y))) for x, y in zip(a, b))


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The uninterrupted run's final weights."""
    tmp = tmp_path_factory.mktemp("reference")
    check(mpirun(NP, _args(tmp, "--save-weights", str(tmp / "w.npz")), timeout=240))
    return _weights(tmp / "w.npz")


def _stopped_step(res):
    m = re.search(r"Stopped at step (\d+)/\d+ \((.*?)\); checkpoint (\S+)", res.stdout)
    assert m, f"no stop line\nstdout:\n{res.stdout[-2000:]}\nstderr:\n{res.stderr[-2000:]}"
    assert checkpoint.load(m.group(3))[0]["step"] == int(m.group(1))
    return int(m.group(1)), m.group(2)


def _resumed_at(res):
    m = re.search(r"Resumed from \S+ckpt-(\d{9})\.hpcdl at step (\d+)", res.stdout)
    assert m and int(m.group(1)) == int(m.group(2)), res.stdout[-2000:]
    return int(m.group(2))


def test_a_run_killed_then_stopped_by_max_time_and_the_slurm_limit_resumes_to_the_same_weights(
        tmp_path, reference):
    runs = tmp_path / "runs.jsonl"
    # 1. Rank 1 dies (SIGKILL) at step 1234: the job fails, no record, checkpoints 500 and 1000.
    res = mpirun(NP, _args(tmp_path, "--checkpoint-every", "500"), timeout=240,
                 env={"HPCDL_FAULT": "rank=1,step=1234,kind=kill"})
    assert res.returncode != 0
    assert not runs.exists()
    assert [p.name for p in checkpoint.list_checkpoints(tmp_path / "ckpt")] == [
        "ckpt-000000500.hpcdl", "ckpt-000001000.hpcdl"]

    # 2. Resumed at 1000 with --max-time: stops cleanly (exit 75) with a checkpoint, no record.
    #    A sleep of 2 ms a step (no effect on the weights) keeps the 1,000 steps left longer than
    #    1.5 s on any machine: on a fast one they once took less, and the run ended instead.
    res = mpirun(NP, _args(tmp_path, "--resume", "--max-time", "1.5"), timeout=240,
                 env={"HPCDL_SLOW": "rank=*,phase=compute,delay_ms=2"})
    assert res.returncode == EXIT_INTERRUPTED, res.stderr[-2000:]
    assert _resumed_at(res) == 1000
    step2, reason = _stopped_step(res)
    assert 1000 < step2 < STEPS and "--max-time 1.5 s reached" in reason
    assert not runs.exists()

    # 3. Resumed again under a Slurm time limit that is near (hpcdl keeps a 30 s margin before
    #    SLURM_JOB_END_TIME): stops before the limit with a checkpoint, no record.
    end = int(time.time()) + 31
    res = mpirun(NP, _args(tmp_path, "--resume"), timeout=240, env={"SLURM_JOB_END_TIME": str(end)})
    assert res.returncode == EXIT_INTERRUPTED, res.stderr[-2000:]
    assert time.time() < end, "the job ran into the time limit instead of stopping before it"
    assert _resumed_at(res) == step2
    step3, reason = _stopped_step(res)
    assert step2 < step3 < STEPS and "SLURM_JOB_END_TIME" in reason
    assert not runs.exists()

    # 4. The last resume finishes: one record, which says where it resumed from, and the
    #    weights of the uninterrupted run.
    res = check(mpirun(NP, _args(tmp_path, "--resume", "--save-weights", str(tmp_path / "w.npz")),
                       timeout=240))
    assert _resumed_at(res) == step3
    recs = read_records(runs)
    assert len(recs) == 1 and recs[0]["resumed_from"]["step"] == step3
    diff = _max_diff(_weights(tmp_path / "w.npz"), reference)
    print(f"resume chain 1000 -> {step2} -> {step3} -> {STEPS}: max |weight diff| = {diff:g}")
    assert diff <= WEIGHT_ATOL, f"resumed weights differ from the uninterrupted run by {diff}"
