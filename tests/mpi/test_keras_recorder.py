"""The Keras ScalingRecorder in a user's own model.fit script: a rank of the example
(examples/keras_fit_horovod.py) that fails ends the job and leaves no record, and without Horovod
the recorder leaves the training unchanged. The example's records on one process and on two real
MPI ranks are checked in test_own_script_study.py, from the study that runs it."""
import os
import sys

import pytest

from hpcdl_testing import ROOT, check, read_records
from hpcdl.launch import local

EXAMPLE = ROOT / "examples" / "keras_fit_horovod.py"


def _run(np_, tmp_path, *extra, timeout=240):
    argv = [sys.executable, str(EXAMPLE), "--epochs", "2", "--batch-size", "32",
            "--results", str(tmp_path / "runs.jsonl"), *extra]
    if np_ > 1:
        argv = local.mpirun_command(np_, argv)
    res = local.run(argv, timeout=timeout, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if res.timed_out:
        pytest.fail(f"the example timed out after {timeout} s\n{res.stdout[-3000:]}")
    return res


def test_a_script_that_fails_on_one_rank_ends_the_job_and_writes_no_record(tmp_path):
    res = _run(2, tmp_path, "--fail-on-rank", "1", timeout=120)
    assert res.returncode != 0
    assert "failing on purpose" in res.stdout + res.stderr
    assert not (tmp_path / "runs.jsonl").exists()


def test_without_horovod_the_recorder_records_one_process_and_leaves_the_training_unchanged(
        tmp_path):
    import numpy as np
    script = ROOT / "tests" / "mpi" / "keras_plain.py"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for name, extra in (("with", []), ("without", ["--no-recorder"])):
        check(local.run([sys.executable, str(script), str(tmp_path / "runs.jsonl"),
                         str(tmp_path / f"{name}.npz"), *extra], timeout=180, env=env))
    (rec,) = read_records(tmp_path / "runs.jsonl")
    assert rec["params"]["backend"] == "none" and rec["layout"]["size"] == 1
    assert rec["machine"] == {"kind": "mpirun", "nodes": rec["layout"]["hosts"]}
    m = rec["metrics"]
    assert m["step_time"]["n"] == 2 * 40 - 4                  # 40 batches per epoch, 4 warm-up
    assert m["split"]["method"] == "probe" and m["split"]["probes"] == 10
    assert "exchange_alone_s" not in m["split"]               # nothing to exchange alone
    assert [b for b, _ in m["loss_curve"]] == [10, 20, 30, 40, 50, 60, 70, 80]
    assert m["loss_curve"][-1][1] == pytest.approx(m["final_loss"])
    assert rec["gradient_bytes"] == 4 * (12 * 32 + 32 + 2 * 32 + 32 * 2 + 2)
    # The probes ran forward passes in training mode (batch-norm statistics move) and computed
    # gradients: the model that training left is the same, bit for bit.
    with_cb, without = np.load(tmp_path / "with.npz"), np.load(tmp_path / "without.npz")
    assert len(with_cb.files) == len(without.files) == 8     # BN: 2 trained, 2 statistics
    for k in with_cb.files:
        assert np.array_equal(with_cb[k], without[k]), k
