"""The benchmark scripts whose tables results/bench/README.md quotes still run and print them."""
import os
import sys

import pytest

from hpcdl_testing import ROOT, check, read_records
from hpcdl.launch import local


def test_horovod_overhead_prints_every_variant_for_both_barriers():
    argv = local.mpirun_command(2, [sys.executable, str(ROOT / "benchmarks" / "horovod_overhead.py"),
                                    "--sizes", "4K,1M", "--iters", "3", "--rounds", "1"])
    res = local.run(argv, timeout=180, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if res.timed_out:
        pytest.fail(f"horovod_overhead timed out\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    check(res)
    rows = [line.split() for line in res.stdout.splitlines() if line and not line.startswith("#")]
    assert [(r[0], r[1]) for r in rows] == [("4096", "horovod"), ("4096", "mpi"),
                                            ("1048576", "horovod"), ("1048576", "mpi")]
    for size, _barrier, avg, pre, plain, ratio in rows:
        assert float(avg) > 0 and float(pre) > 0 and float(plain) > 0
        pre, avg = float(pre), float(avg)
        # the table prints whole microseconds and a 2-decimal ratio of the unrounded times
        printing = 0.005 + pre / avg * (0.5 / pre + 0.5 / avg) + 1e-9
        assert float(ratio) == pytest.approx(pre / avg, abs=printing)
    assert "ranks=2" in res.stdout and "HOROVOD_CYCLE_TIME=" in res.stdout


def test_horovod_timeline_splits_each_size_into_its_phases():
    argv = local.mpirun_command(2, [sys.executable, str(ROOT / "benchmarks" / "horovod_timeline.py"),
                                    "--sizes", "4K,1M", "--iters", "4"])
    res = local.run(argv, timeout=180, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if res.timed_out:
        pytest.fail(f"horovod_timeline timed out\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    check(res)
    rows = [line.split() for line in res.stdout.splitlines() if line and not line.startswith("#")]
    assert [r[0] for r in rows] == ["4096", "1048576"]
    for size, wall, first, last, skew, start, mpi, op, faults, n in rows:
        assert int(n) == 4                      # the timed iterations, warm-up left out
        assert float(first) <= float(last) and float(skew) >= 0 and float(start) >= 0
        assert 0 < float(mpi) <= float(op) < float(wall) + 1   # the work lies within the wall time
    assert "ranks=2" in res.stdout


def test_horovod_settings_runs_each_value_and_the_value_reaches_horovod(tmp_path):
    out = tmp_path / "settings.jsonl"
    argv = [sys.executable, str(ROOT / "benchmarks" / "horovod_settings.py"),
            "--var", "HPCDL_HOROVOD_NICE", "--values", "0,19", "--rounds", "2", "-b", "4K",
            "-e", "16K", "-n", "2", "--ratio-sizes", "16K", "--results", str(out)]
    res = local.run(argv, timeout=300, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    if res.timed_out:
        pytest.fail(f"horovod_settings timed out\n{res.stdout[-2000:]}\n{res.stderr[-2000:]}")
    check(res)
    rows = [line.split() for line in res.stdout.splitlines() if line and not line.startswith("#")]
    head, runs, meds = rows[0], rows[1:5], rows[5:]
    assert head[:2] == ["value", "round"] and "ratio" in head
    # the second round runs the values in reverse order
    assert [(r[0], r[1]) for r in runs] == [("0", "1"), ("19", "1"), ("19", "2"), ("0", "2")]
    assert [(r[0], r[1]) for r in meds] == [("0", "med"), ("19", "med")]
    for r in runs:                 # value round hvd4K hvd16K mpi16K | ratio16K
        hvd16, mpi16, ratio = float(r[3]), float(r[4]), float(r[6])
        assert r[5] == "|" and ratio == pytest.approx(mpi16 / hvd16, abs=0.01)
    # each run's Horovod thread got the value asked for, read back from the thread
    recs = read_records(out)
    assert [r["manifest"]["horovod_thread"]["asked"] for r in recs] == [0, 19, 19, 0]
    assert all(r["manifest"]["horovod_thread"]["nice"] == [19] for r in recs[1:3])
