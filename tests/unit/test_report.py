"""The report: its files exist, its tables match the records, and it never imports TensorFlow."""
import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hpcdl import analysis, report
from hpcdl.errors import UserError

ROOT = Path(__file__).resolve().parents[2]


def _record(study, ranks, rep, tput, std, step, comp, compression="none", gb=1000):
    return {"schema": "hpcdl.run/1", "kind": "train", "study": study, "status": "ok",
            "declared": {"scaling": "strong", "study_sha256": "ab" * 32, "calibration": "runs"},
            "time": f"2024-05-0{rep + 1}T10:00:00+00:00",
            "point": {"id": f"n1-r{ranks}-horovod-{compression}-rep{rep}", "repeat": rep},
            "params": {"workload": "expmlp", "batch_size": gb // ranks, "global_batch": gb,
                       "backend": "horovod", "compression": compression, "threads_per_rank": 1},
            "layout": {"size": ranks, "nodes": 1, "ranks_per_node": ranks, "hosts": ["nodeA"]},
            "metrics": {"throughput": {"mean": tput, "std": std, "ci95": 1.96 * std, "n": 10,
                                       "unit": "samples/s"},
                        "step_time": {"median": step},
                        "split": {"method": "probe", "compute_s": comp, "exchange_s": step - comp}},
            "gradient_bytes": 2436,
            "manifest": {"hosts": ["nodeA"], "git_commit": "0123456789abcdef",
                         "versions": {"python": "3.11.7", "tensorflow": "2.15.1", "horovod": "0.28.1"},
                         "slurm": {"job_id": None}}}


@pytest.fixture
def results(tmp_path):
    d = tmp_path / "results" / "demo"
    d.mkdir(parents=True)
    recs = []
    for rep in range(3):
        recs.append(_record("demo", 1, rep, 1000.0 + rep, 10.0, 1.0e-3 * (1 + rep / 100), 0.8e-3))
        recs.append(_record("demo", 2, rep, 1600.0 + 2 * rep, 20.0, 1.25e-3 * (1 + rep / 100), 0.5e-3))
        recs.append(_record("demo", 4, rep, 2400.0 + 2 * rep, 30.0, 1.6e-3 * (1 + rep / 100), 0.3e-3))
        recs.append(_record("demo", 2, rep, 1700.0, 15.0, 1.18e-3, 0.5e-3, compression="fp16"))
        recs.append(_record("demo", 1, rep, 1000.0, 10.0, 1.0e-3, 0.8e-3, compression="fp16"))
    with open(d / "runs.jsonl", "w") as fh:
        for r in recs:
            fh.write(json.dumps(r) + "\n")
    return d, recs


def _csv_rows(path):
    with open(path) as fh:
        lines = [ln for ln in fh if not ln.startswith("#")]
    return list(csv.DictReader(lines))


def test_report_files_exist_and_tables_match_the_records(results):
    d, recs = results
    out = report.write_report(d)
    names = {p.name for p in out["files"]}
    assert {"report.md", "report.json", "scaling-horovod-none.csv", "scaling-horovod-fp16.csv",
            "prediction-vs-measured.csv", "forecast.csv", "model-vs-published.csv",
            "throughput-speedup.png", "efficiency.png", "step-split.png", "axes-compared.png",
            "model-forecast.png"} <= names
    assert not {"model-vs-measured.csv", "model-extrapolation.csv"} & names     # one model
    for p in out["files"]:
        assert p.exists() and p.stat().st_size > 0
        if p.suffix == ".png":
            assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = _csv_rows(d / "scaling-horovod-none.csv")
    assert [int(r["ranks"]) for r in rows] == [1, 2, 4]
    mine = [r for r in recs if r["params"]["compression"] == "none"]
    for row in rows:
        sel = [r["metrics"]["throughput"] for r in mine if r["layout"]["size"] == int(row["ranks"])]
        mean, std = analysis.pooled([s["mean"] for s in sel], [s["std"] for s in sel],
                                    [s["n"] for s in sel])
        assert float(row["throughput_mean"]) == pytest.approx(mean)
        assert float(row["throughput_ci95"]) == pytest.approx(1.96 * std)
        assert int(row["runs"]) == 3
    s2 = float(rows[1]["throughput_mean"]) / float(rows[0]["throughput_mean"])
    assert float(rows[1]["speedup"]) == pytest.approx(s2)
    assert float(rows[1]["efficiency"]) == pytest.approx(s2 / 2)
    assert float(rows[1]["karp_flatt"]) == pytest.approx((1 / s2 - 0.5) / 0.5)
    assert float(rows[1]["step_time_s"]) == pytest.approx(1.25e-3 * 1.01)   # median of repeats
    md = (d / "report.md").read_text()
    assert f"{float(rows[1]['throughput_mean']):.1f} ± {float(rows[1]['throughput_ci95']):.1f}" in md
    assert "BASELINE (not the model)" in md and "MODEL beside each" not in md
    published = (d / "model-vs-published.csv").read_text()
    assert "ResNet-101" in published and "VGG-16" in published and "25 GbE RoCE" in published
    assert "nodeA" in md and "tensorflow 2.15.1" in md
    doc = json.loads((d / "report.json").read_text())
    assert doc["records"] == len(recs) and doc["scaling"] == "strong"
    assert [r["ranks"] for r in doc["rows"] if r["axis"] == "horovod/none"] == [1, 2, 4]
    assert doc["schema"] == "hpcdl.report/4" and "models" not in doc
    assert {f["axis"] for f in doc["prediction"]["forecast"]} == {"horovod/none", "horovod/fp16"}


def test_report_model_is_calibrated_on_every_point_when_none_is_held_out(results):
    d, _ = results
    report.write_report(d, plots=False)
    rows = _csv_rows(d / "prediction-vs-measured.csv")
    assert len(rows) == 5 and all(r["fitted"] == "True" for r in rows)
    md = (d / "report.md").read_text()
    assert "## The model, calibrated on every point (MODEL; no point held out)" in md
    # one node: ranks sharing its memory say nothing of a network, so no row for this machine
    fc = _csv_rows(d / "forecast.csv")
    assert fc and "this allocation" not in {r["network"] for r in fc}
    pub = _csv_rows(d / "model-vs-published.csv")
    assert {r["model"] for r in pub} == {"ResNet-101", "VGG-16"}


def test_report_uses_a_bench_fit_when_given(results, tmp_path):
    d, _ = results
    fit = tmp_path / "fit.json"
    fit.write_text(json.dumps({"schema": "hpcdl.fit/1", "ranks": 2, "backends": {
        "horovod": {"alpha_s": 7e-6, "beta_s_per_byte": 3e-10, "gamma_s_per_byte": 1e-10}}}))
    report.write_report(d, given=report.Inputs(fit=str(fit)), plots=False)
    axes = json.loads((d / "report.json").read_text())["prediction"]["axes"]
    assert {a["axis"]: a["model"]["exchange_source"] for a in axes}["horovod/none"].startswith(
        "bench fit (horovod, 2 ranks)")
    assert json.loads((d / "report.json").read_text())["calibration"] == f"fit:{fit}"


def test_report_errors_are_user_errors(tmp_path, results):
    with pytest.raises(UserError, match="no such results file"):
        report.write_report(tmp_path / "nothing")
    d, recs = results
    with open(d / "runs.jsonl", "a") as fh:
        fh.write(json.dumps(dict(recs[0], study="other")) + "\n")
    with pytest.raises(UserError, match="several studies"):
        report.write_report(d)
    out = report.write_report(d, how=report.Reading(study="other"), plots=False)
    assert json.loads(out["json"].read_text())["records"] == 1


def test_report_path_never_imports_tensorflow_or_horovod():
    code = ("import sys\n"
            "from hpcdl import cli, report, analysis, study\n"
            "from hpcdl.study import cli as study_cli\n"
            "try:\n    cli.main(['study', 'report', '--help'])\n"
            "except SystemExit as e:\n    assert e.code == 0\n"
            "bad = [m for m in ('tensorflow', 'horovod', 'mpi4py', 'matplotlib') if m in sys.modules]\n"
            "assert not bad, bad\n")
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                         cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)))
    assert res.returncode == 0, res.stderr
    assert "--fit" in res.stdout and "RESULTS" in res.stdout


def test_the_command_of_a_box_study_brings_the_box_up_at_each_rate_it_recorded(tmp_path):
    recs = []
    for rate, ranks in (("500mbit", 1), ("200mbit", 2), ("500mbit", 2)):
        r = _record("box", ranks, 0, 1000.0, 10.0, 1e-3, 0.8e-3)
        r["declared"]["study_file"] = "jobs/box.toml"
        r["manifest"]["slurm"] = {"job_id": "7"}
        r["box"] = {"link_rate": rate, "nodes_in_box": 8, "cpus_per_node": 0.2}
        recs.append(r)
    root = tmp_path / "results"                # named: re-running never writes elsewhere
    runs = root / "box" / "runs.jsonl"
    cmd = report._command(analysis.Digest.of(recs).about, runs)
    assert cmd.startswith("for rate in 200mbit 500mbit; do scripts/cluster-box.sh up 8 --link $rate "
                          "--cpus-per-node 0.2 && scripts/cluster-box.sh check && "
                          f"hpcdl study submit jobs/box.toml --results-root {root} && "
                          f"hpcdl study status jobs/box.toml --results-root {root} --wait 14400; ")
    assert cmd.endswith(f"done; hpcdl study report {runs.parent}")
    for r in recs:                           # the same study through Slurm on a real cluster
        del r["box"]
    assert report._command(analysis.Digest.of(recs).about, runs).startswith(
        f"hpcdl study submit jobs/box.toml --results-root {root} && ")
    for r in recs:                           # the same study through mpirun on this machine
        del r["manifest"]["slurm"]
    assert report._command(analysis.Digest.of(recs).about, runs) == (f"hpcdl study run jobs/box.toml --results-root {root}"
                                           f" && hpcdl study report {runs.parent}")


def test_every_report_file_starts_with_the_command_that_regenerates_it(results):
    d, _ = results
    out = report.write_report(d, plots=False)
    first = out["report"].read_text().splitlines()[0]
    assert first == f"<!-- command: hpcdl study report {d} -->"
    for p in out["files"]:
        if p.suffix == ".csv":
            assert p.read_text().splitlines()[0] == f"# command: hpcdl study report {d}"


def test_tuned_and_default_runs_are_configurations_apart_and_their_settings_are_named(tmp_path):
    d = tmp_path / "results" / "tun"
    d.mkdir(parents=True)
    ring = {"source": "--tuning", "file": "t/1n.json", "pick": "ring, cycle 0.2 ms, fusion 128 MiB",
            "settings": {}, "in_force": {"algorithm": 4, "dynamic_rules": 1, "segment_bytes": 0}}
    plain = {"source": "default", "settings": {"HOROVOD_FUSION_THRESHOLD": "67108864"},
             "in_force": {"algorithm": 0, "dynamic_rules": 0, "segment_bytes": 0}}
    with open(d / "runs.jsonl", "w") as fh:
        for rep in range(2):
            for ranks in (1, 2):
                for tun, section, step in (("default", plain, 1.2e-3), ("tuned", ring, 1.0e-3)):
                    r = _record("tun", ranks, rep, 1000.0 * ranks / step / 1000, 10.0, step, 0.8e-3)
                    r["point"].update(id=r["point"]["id"].replace("-rep", f"-t{tun}-rep"), tuning=tun)
                    r["tuning"] = section
                    fh.write(json.dumps(r) + "\n")
    report.write_report(d)
    text = (d / "report.md").read_text()
    rows = {(r["axis"], r["ranks"]): r for r in json.loads((d / "report.json").read_text())["rows"]}
    assert rows[("horovod/none settings:tuned", 2)]["runs"] == 2
    assert rows[("horovod/none settings:default", 2)]["runs"] == 2
    assert ("- horovod/none settings:tuned: ring, cycle 0.2 ms, fusion 128 MiB (tuning file "
            "t/1n.json, from --tuning); MPI allreduce ran ring (4 record(s))") in text
    assert ("- horovod/none settings:default: defaults with HOROVOD_FUSION_THRESHOLD=67108864; "
            "MPI allreduce ran the library's choice (4 record(s))") in text


def test_the_command_of_a_grid_engine_box_study_brings_grid_engine_up_and_points_the_shell_at_it():
    recs = []
    for ranks in (1, 2):
        r = _record("box", ranks, 0, 1000.0, 10.0, 1e-3, 0.8e-3)
        r["declared"]["study_file"] = "jobs/box.toml"
        r["manifest"]["slurm"] = {"job_id": str(ranks), "scheduler": "gridengine"}
        r["box"] = {"link_rate": "200mbit", "nodes_in_box": 8, "cpus_per_node": 0.2}
        recs.append(r)
    runs = Path("results") / "box" / "runs.jsonl"
    cmd = report._command(analysis.Digest.of(recs).about, runs)
    assert cmd.startswith("for rate in 200mbit; do scripts/cluster-box.sh up 8 --link $rate "
                          "--cpus-per-node 0.2 --sge && scripts/cluster-box.sh check && "
                          "eval \"$(scripts/cluster-box.sh env | sed 's/^/export /')\" && "
                          "hpcdl study submit jobs/box.toml"), cmd
