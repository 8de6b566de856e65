"""A real two-point local study: run through mpirun, interrupt, resume, and report."""
import csv
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcdl_testing import ROOT, check, mpirun, read_records

STUDY = """
[study]
name = "e2e"
scaling = "strong"
repeats = 1

[workload]
name = "expmlp"
global_batch = 200
steps = 40
warmup = 5
num_batches_per_iter = 5
probes = 3

[layout]
ranks = [1, 2]

[run]
timeout = 150
threads_per_rank = 1
"""


def hpcdl(*args, timeout=400):
    res = subprocess.run([sys.executable, "-m", "hpcdl", *args], capture_output=True, text=True,
                         timeout=timeout, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert res.returncode == 0, f"exit {res.returncode}\n{res.stdout[-3000:]}\n{res.stderr[-3000:]}"
    return res.stdout


def test_two_point_study_resumes_and_reports(tmp_path):
    path = tmp_path / "e2e.toml"
    path.write_text(STUDY)
    root = tmp_path / "results"
    runs = root / "e2e" / "runs.jsonl"

    # Stop after the first point, as an interrupted study would.
    out = hpcdl("study", "run", str(path), "--results-root", str(root), "--limit", "1")
    assert "[1/1] n1-r1-horovod-none-rep0" in out and "ETA" not in out.splitlines()[2]
    assert [r["point"]["id"] for r in read_records(runs)] == ["n1-r1-horovod-none-rep0"]

    # Running again continues with the missing point only, then writes the report.
    out = hpcdl("study", "run", str(path), "--results-root", str(root), "--report")
    assert "1 point(s) already recorded" in out and "[1/1] n1-r2-horovod-none-rep0" in out
    recs = read_records(runs)
    assert [r["point"]["id"] for r in recs] == ["n1-r1-horovod-none-rep0", "n1-r2-horovod-none-rep0"]
    assert [r["layout"]["size"] for r in recs] == [1, 2]
    assert [r["params"]["batch_size"] for r in recs] == [200, 100]
    assert all(r["study"] == "e2e" and r["replicas_identical"] for r in recs)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert all(r["declared"] == {"scaling": "strong", "study_file": str(path), "study_sha256": sha,
                                 "model": {}} for r in recs)

    # A finished study runs nothing.
    out = hpcdl("study", "run", str(path), "--results-root", str(root))
    assert "2 point(s) already recorded" in out and "0 to run" in out
    assert len(read_records(runs)) == 2

    # The report's table holds the recorded figures (to the 10 significant digits its files keep).
    d = root / "e2e"
    for name in ("report.md", "report.json", "scaling-horovod-none.csv", "prediction-vs-measured.csv",
                 "throughput-speedup.png", "efficiency.png"):
        assert (d / name).stat().st_size > 0, name
    with open(d / "scaling-horovod-none.csv") as fh:
        rows = list(csv.DictReader(ln for ln in fh if not ln.startswith("#")))
    assert [int(r["ranks"]) for r in rows] == [1, 2]
    for row, rec in zip(rows, recs):
        assert float(row["throughput_mean"]) == pytest.approx(rec["metrics"]["throughput"]["mean"],
                                                              rel=1e-9)
        assert float(row["step_time_s"]) == pytest.approx(rec["metrics"]["step_time"]["median"],
                                                          rel=1e-9)
    x1, x2 = (r["metrics"]["throughput"]["mean"] for r in recs)
    assert float(rows[1]["speedup"]) == pytest.approx(x2 / x1, rel=1e-9)
    md = (d / "report.md").read_text()
    assert f"{x2:.1f} ±" in md and "MODEL" in md
    doc = json.loads((d / "report.json").read_text())
    assert doc["study"] == "e2e" and doc["records"] == 2
    assert doc["scaling"] == "strong" and doc["scaling_source"] == "declared by the study"


def test_a_study_with_a_forecast_measures_its_allocation_first_and_the_report_draws_on_it(
        tmp_path):
    """[model] forecast: study run measures each rank count the spread and loop files lack with
    hpcdl bench allocation (real ranks under mpirun), before the points; the report's forecast
    takes its compute beyond the calibration from them; a second run measures nothing."""
    path = tmp_path / "fc.toml"
    path.write_text(STUDY.replace('name = "e2e"', 'name = "fc"') + "\n[model]\nforecast = [8, 32]\n")
    root = tmp_path / "results"
    out = hpcdl("study", "run", str(path), "--results-root", str(root), "--report",
                "--allocation", "--seconds 1 --rounds 2 --probes 3")
    assert out.index("[allocation] 2 rank(s)") < out.index("[1/2]"), out
    d = root / "fc"
    spread = json.loads((d / "allocation" / "spread.json").read_text())
    loop = json.loads((d / "allocation" / "loop-cpu.json").read_text())
    assert spread["schema"] == "hpcdl.host-spread/1" and len(spread["spread"]["2"]) == 2
    # each round also timed the first rank alone: how much longer it computed beside the other
    assert len(spread["crowd"]["2"]) == 2 and all(c > 0 for c in spread["crowd"]["2"])
    assert loop["schema"] == "hpcdl.loop-cpu/1" and loop["made_for"]["nodes"] == [2]
    assert 0 <= loop["shares"]["1"]["2"]["median"] < 1
    # the first rank's pass beside a live exchange of 2 over alone, each round's too
    grown = loop["growth"]["1"]["2"]
    assert grown["ratio"] > 0 and len(grown["rounds"]) == 2 and grown["alone_s"] > 0
    # its training steps beside their exchange alone: the share of the pass they hid it behind
    window = loop["window"]["1"]["2"]
    assert 0 <= window["share"] <= 1 and window["step_s"] > 0 and window["exchange_s"] > 0
    assert len(window["rounds"]) == 2
    pred = json.loads((d / "report.json").read_text())["prediction"]
    assert [r["nodes"] for r in pred["forecast"][0]["networks"][0]["rows"]] == [8, 32] \
        or pred["forecast"][0]["left_out"]
    assert str(d / "allocation" / "loop-cpu.json") in pred["loop_bench"]["source"]
    assert pred["spread_bench"]["misses"] == []
    again = hpcdl("study", "run", str(path), "--results-root", str(root))
    assert "[allocation]" not in again and "0 to run" in again


def test_the_allocation_of_a_users_own_model_is_measured_on_its_first_batch(tmp_path):
    """A user's factory gives an unbatched tf.data dataset, no synthetic batch: hpcdl bench
    allocation times its pass on the dataset's first per-rank batch (real ranks under mpirun),
    so a study of a user's own model has the spread, loop and growth its forecast draws on."""
    spread, loop = tmp_path / "spread.json", tmp_path / "loop-cpu.json"
    env = {"PYTHONPATH": f"{Path(__file__).parent}:{ROOT}"}
    check(mpirun(2, ["bench", "allocation", "--workload", "userwl:factory", "--rounds", "1",
                     "--probes", "2", "--seconds", "0.5", "--spread", str(spread),
                     "--loop", str(loop)], timeout=240, env=env))
    assert len(json.loads(spread.read_text())["spread"]["2"]) == 1
    assert json.loads(loop.read_text())["growth"]["1"]["2"]["ratio"] > 0
