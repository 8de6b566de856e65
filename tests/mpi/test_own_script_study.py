"""A study of the user's own script (examples/keras_fit_horovod.py) through `hpcdl study run`:
real mpirun, real Horovod, the record the report reads, a rank that crashes, a pattern that
matches nothing."""
import json
import os
import subprocess
import sys
import textwrap

import pytest

from hpcdl import analysis
from hpcdl_testing import ROOT, read_records

SCRIPT_RATE = "Script img/sec per rank: ([0-9.]+)"
SCRIPT_BATCHES = r"Script img/sec per rank: [0-9.]+ over (\d+) batches"


def hpcdl(*args, timeout=420, expect=0):
    res = subprocess.run([sys.executable, "-m", "hpcdl", *args], capture_output=True, text=True,
                         timeout=timeout, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert res.returncode == expect, f"exit {res.returncode}\n{res.stdout[-4000:]}\n{res.stderr[-3000:]}"
    return res.stdout


def write_study(tmp_path, name, ranks, extra_args, scrape):
    words = ", ".join(json.dumps(w) for w in ["python", "examples/keras_fit_horovod.py",
                                              "--batch-size", "{batch_size}", *extra_args])
    path = tmp_path / f"{name}.toml"
    path.write_text(textwrap.dedent(f"""\
        [study]
        name = "{name}"
        scaling = "weak"

        [workload]
        command = [{words}]
        batch_size = 32

        [layout]
        ranks = {ranks}

        [run]
        timeout = 180

        [scrape]
        """) + "".join(f"{k} = '{v}'\n" for k, v in scrape.items()))
    return path


def test_the_example_under_study_run_records_the_throughput_its_own_timing_says(tmp_path):
    """The study's points are the example as users run it, on one process and on two ranks: the
    record hpcdl's Keras callback (ScalingRecorder) writes is checked here, point by point."""
    path = write_study(tmp_path, "own-script", [1, 2], ["--epochs", "2"],
                       {"script_rate": SCRIPT_RATE, "script_batches": SCRIPT_BATCHES})
    out = hpcdl("study", "run", str(path), "--results-root", str(tmp_path / "r"), "--report")
    assert "record from hpcdl's callback" in out
    recs = read_records(tmp_path / "r" / "own-script" / "runs.jsonl")      # rank 0 only, once
    assert [r["point"]["id"] for r in recs] == ["n1-r1-script-none-rep0", "n1-r2-script-none-rep0"]
    for rec in recs:
        cmd, np_ = rec["command"], rec["point"]["ranks"]
        assert rec["status"] == "ok" and cmd["recorder"] and cmd["exit_status"] == 0
        assert rec["source"] == "keras-callback" and rec["layout"]["size"] == np_
        assert rec["params"]["backend"] == "horovod"      # the script always calls hvd.init()
        assert rec["params"]["global_batch"] == 32 * np_
        m = rec["metrics"]
        own = cmd["scraped"]["script_rate"]["value"]            # the script's own figure
        rate = m["throughput_per_rank"]["overall"]              # all samples over all time
        assert abs(rate / own - 1) <= 0.05, (rec["point"]["id"], rate, own)
        assert m["step_time"]["n"] == cmd["scraped"]["script_batches"]["value"]  # batches timed
        assert m["throughput"]["mean"] == pytest.approx(m["throughput_per_rank"]["mean"] * np_)
        assert [e["epoch"] for e in m["epochs"]] == [1, 2]
        assert m["final_loss"] == m["epochs"][-1]["loss"]
        assert m["split"]["method"] == "probe" and m["split"]["probes"] == 10
        assert ("exchange_alone_s" in m["split"]) == (np_ > 1)
        rows = analysis.group_records([rec])
        assert rows[0].ranks == np_ and rows[0].throughput == pytest.approx(m["throughput"]["mean"])
    two = recs[1]["metrics"]["split"]
    assert two["exchange_alone_s"] > 0
    report = (tmp_path / "r" / "own-script" / "report.md").read_text()
    assert "## Your command" in report and "| n1-r2-script-none-rep0 | 2 | ok | 0 |" in report
    res = json.loads((tmp_path / "r" / "own-script" / "report.json").read_text())
    assert [r["ranks"] for r in res["rows"]] == [1, 2]
    assert res["rows"][1]["speedup"] == pytest.approx(
        recs[1]["metrics"]["throughput"]["mean"] / recs[0]["metrics"]["throughput"]["mean"])


def test_a_crash_on_one_rank_ends_that_point_and_the_study_goes_on(tmp_path):
    # Without hpcdl's callback; the 2-rank point fails on rank 1, the 1-rank point runs.
    path = write_study(tmp_path, "crashing", [2, 1],
                       ["--epochs", "1", "--data", "synthetic", "--no-recorder",
                        "--fail-on-rank", "1"],
                       {"throughput_per_rank": SCRIPT_RATE, "accuracy": "never printed ([0-9.]+)"})
    out = hpcdl("study", "run", str(path), "--results-root", str(tmp_path / "r"), expect=1)
    assert "[1/2] n1-r2-script-none-rep0" in out and "FAILED: exit" in out
    assert "[2/2] n1-r1-script-none-rep0" in out
    assert "scraped accuracy: NO MATCH" in out
    recs = read_records(tmp_path / "r" / "crashing" / "runs.jsonl")
    failed, ok = recs
    assert failed["status"] == "failed" and failed["command"]["exit_status"] != 0
    assert "throughput" not in failed["metrics"]
    log = open(failed["command"]["log"]).read()
    assert "failing on purpose" in log
    assert ok["status"] == "ok" and ok["source"] == "command"
    assert ok["machine"]["kind"] == "mpirun" and ok["machine"]["nodes"] == ok["layout"]["hosts"]
    assert ok["metrics"]["throughput"]["mean"] == ok["command"]["scraped"]["throughput_per_rank"]["value"]
    assert ok["command"]["scraped"]["accuracy"]["value"] is None

    # The report reads the point that ran; the failed one and the silent pattern are said.
    hpcdl("study", "report", str(tmp_path / "r" / "crashing"), "--no-plots", timeout=120)
    report = (tmp_path / "r" / "crashing" / "report.md").read_text()
    assert "| n1-r2-script-none-rep0 | 2 | failed |" in report
    assert "NO MATCH" in report and "None: no record times a step" in report

    # Run again: the recorded point is skipped, the failed one is tried again.
    out = hpcdl("study", "run", str(path), "--results-root", str(tmp_path / "r"), expect=1)
    assert "1 point(s) already recorded" in out and "[1/1] n1-r2-script-none-rep0" in out


def test_each_rank_of_a_command_gets_the_threads_hpcdl_train_would_take(tmp_path):
    """[run] threads_per_rank reaches OpenMP's and TensorFlow's thread counts in every rank of
    the user's command, as it does hpcdl train's (hpcdl.launch.with_threads); a count the user
    exported stays. (2 threads: a count past the CPUs the ranks may run on, 2 on the machines
    the tests run on, is capped there; the default here would be 1.)"""
    seen = tmp_path / "threads.txt"
    path = tmp_path / "threads.toml"
    path.write_text(textwrap.dedent(f"""\
        [study]
        name = "threads"
        scaling = "weak"

        [workload]
        command = ["sh", "-c", "echo $OMP_NUM_THREADS $TF_NUM_INTRAOP_THREADS $TF_NUM_INTEROP_THREADS >> {seen}"]
        batch_size = 32

        [layout]
        ranks = [2]

        [run]
        timeout = 60
        threads_per_rank = 2
        env = {{TF_NUM_INTEROP_THREADS = "1"}}
        """))
    hpcdl("study", "run", str(path), "--results-root", str(tmp_path / "r"), timeout=120)
    assert seen.read_text().splitlines() == ["2 2 1", "2 2 1"]
