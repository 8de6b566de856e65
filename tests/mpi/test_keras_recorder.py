"""The Keras ScalingRecorder in a user's own model.fit script (examples/keras_fit_horovod.py),
on one process and on two real MPI ranks under Horovod."""
import os
import re
import sys

import pytest

from hpcdl_testing import ROOT, check, read_records
from hpcdl import analysis
from hpcdl.launch import local

EXAMPLE = ROOT / "examples" / "keras_fit_horovod.py"
SCRIPT_RATE = re.compile(r"^Script img/sec per rank: ([0-9.]+) over (\d+) batches$", re.M)


def _run(np_, tmp_path, *extra, timeout=240):
    argv = [sys.executable, str(EXAMPLE), "--epochs", "2", "--batch-size", "32",
            "--results", str(tmp_path / "runs.jsonl"), *extra]
    if np_ > 1:
        argv = local.mpirun_command(np_, argv)
    res = local.run(argv, timeout=timeout, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if res.timed_out:
        pytest.fail(f"the example timed out after {timeout} s\n{res.stdout[-3000:]}")
    return res


@pytest.mark.parametrize("np_", [1, 2])
def test_the_recorder_writes_a_record_the_report_reads_with_the_scripts_own_throughput(
        tmp_path, np_):
    res = check(_run(np_, tmp_path))
    own, batches = SCRIPT_RATE.search(res.stdout).groups()
    (rec,) = read_records(tmp_path / "runs.jsonl")             # rank 0 only, once
    assert rec["source"] == "keras-callback" and rec["layout"]["size"] == np_
    assert rec["params"]["backend"] == "horovod"          # the script always calls hvd.init()
    assert rec["params"]["global_batch"] == 32 * np_
    m = rec["metrics"]
    assert m["step_time"]["n"] == int(batches)                  # the same batches timed
    rate = m["throughput_per_rank"]["mean"]
    assert abs(rate / float(own) - 1) <= 0.05, (rate, own)
    assert m["throughput"]["mean"] == pytest.approx(rate * np_)
    assert [e["epoch"] for e in m["epochs"]] == [1, 2] and m["final_loss"] == m["epochs"][-1]["loss"]
    assert "cannot be timed apart" in m["split"]["why"]
    rows = analysis.group_records([rec])
    assert rows[0].ranks == np_ and rows[0].throughput == pytest.approx(m["throughput"]["mean"])


def test_a_script_that_fails_on_one_rank_ends_the_job_and_writes_no_record(tmp_path):
    res = _run(2, tmp_path, "--fail-on-rank", "1", timeout=120)
    assert res.returncode != 0
    assert "failing on purpose" in res.stdout + res.stderr
    assert not (tmp_path / "runs.jsonl").exists()
