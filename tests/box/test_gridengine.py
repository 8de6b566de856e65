"""Training through Grid Engine on the cluster box: qsub of the rendered job script, ranks started
by mpirun through Grid Engine's tight integration (qrsh -inherit) on the granted nodes, the job's
facts in the record, -notify preemption (USR1 before a suspend, checkpoint, exit 99, the job run
again by Grid Engine, resumed to the uninterrupted run's weights), and a study through qsub that
loses a node and is resumed.

The box is the session's (tests/conftest.py: scripts/cluster-box.sh up 4 ... --sge). Every job
runs under a deadline (gridengine.wait_for_jobs deletes it when the deadline passes).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slurm"))

from slurm_testing import (JOB_EXPORTS, ROOT, failed_tune, hpcdl as _hpcdl,  # noqa: E402
                           tuned_forecast)

from hpcdl import box  # noqa: E402
from hpcdl.launch import gridengine, jobscript  # noqa: E402

BOX = ROOT / "scripts" / "cluster-box.sh"

pytestmark = pytest.mark.slow

STEPS = 1000            # long enough (several seconds) to interrupt mid-run without racing
TRAIN = ["--workload", "expmlp", "--steps", str(STEPS), "--log-every", "50"]


@pytest.fixture(scope="module")
def sge(slurm_cluster):
    """The box's Grid Engine: its settings in this process's environment for qsub and friends."""
    facts = (box.load() or {}).get("sge")
    if not facts:
        pytest.skip("the session's cluster box has no Grid Engine (scripts/cluster-box.sh up --sge)")
    env = {"SGE_ROOT": facts["root"], "SGE_CELL": facts["cell"]}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    yield facts
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def _records(path: Path):
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def _script(tmp_path: Path, name: str, sge: dict) -> Path:
    job = jobscript.Job(name=name, nodes=2, time="00:10:00", partition=sge["queue"],
                        signal_lead=60)
    software = jobscript.Software.here(workdir=ROOT, exports=JOB_EXPORTS)
    script = tmp_path / "train.qsub"
    script.write_text(jobscript.render_qsub(job, software, TRAIN + ["--results", str(tmp_path / "runs.jsonl")],
                                            str(tmp_path / "ckpt"), pe=sge["pe"],
                                            resources=[f"{sge['consumable']}=1"]))
    return script


def _output(tmp_path: Path, name: str, jid: str) -> str:
    out = tmp_path / f"{name}.o{jid}"
    return out.read_text() if out.exists() else ""


@pytest.fixture(scope="module")
def reference(sge, tmp_path_factory):
    """One uninterrupted 2-node x 1-rank run through qsub."""
    d = tmp_path_factory.mktemp("sge-train")
    jid = gridengine.qsub(_script(d, "hpcdl-sge-train", sge), cwd=d)
    try:
        state = gridengine.wait_for_jobs([jid], timeout=240)[jid]
    except TimeoutError as exc:
        pytest.fail(f"{exc}\n{_output(d, 'hpcdl-sge-train', jid)[-3000:]}")
    return d, jid, state


def test_a_two_node_run_through_qsub_records_grid_engines_job_and_nodes(reference):
    d, jid, state = reference
    out = _output(d, "hpcdl-sge-train", jid)
    assert (state.state, state.exit_code) == ("COMPLETED", "0:0"), out[-3000:]
    (rec,) = _records(d / "runs.jsonl")
    facts = rec["manifest"]["slurm"]            # the batch job's facts, whichever scheduler ran it
    assert facts["scheduler"] == "gridengine" and facts["job_id"] == jid
    granted = sorted(facts["nodelist"].split(","))       # from $PE_HOSTFILE: two of the box's nodes
    assert len(set(granted)) == 2 and set(granted) <= {"n1", "n2", "n3", "n4"}, facts
    assert facts["pe"] == "mpi" and facts["slots"] == "2"
    # mpirun started the ranks on the granted nodes, each inside its node (name, cgroup)
    assert rec["manifest"]["layout"]["launcher"] == "mpirun"
    assert sorted(rec["manifest"]["hosts"]) == granted
    assert sorted(r["host"] for r in rec["metrics"]["ranks"]) == granted
    assert all(r["cgroup"]["cores"] == 1.0 for r in rec["metrics"]["ranks"])
    assert rec["replicas_identical"] is True and rec["resumed_from"] is None
    assert "Total samples/sec on 2 rank(s)" in out
    # tight integration: the remote node's daemon ran as a task of the job, which Grid Engine
    # accounted (qacct lists it beside the job script's own line); no ssh was involved
    acct = subprocess.run(["qacct", "-j", jid], capture_output=True, text=True, timeout=30).stdout
    hosts = [ln.split()[1] for ln in acct.splitlines() if ln.startswith("hostname")]
    assert sorted(set(hosts)) == granted, acct


def test_notify_before_a_suspend_checkpoints_exits_99_and_grid_engine_runs_it_again(sge, reference,
                                                                                    tmp_path):
    ref_dir, _, _ = reference
    (ref,) = _records(ref_dir / "runs.jsonl")
    name = "hpcdl-sge-preempt"
    jid = gridengine.qsub(_script(tmp_path, name, sge), cwd=tmp_path)
    deadline = time.monotonic() + 180
    while "Step 50/" not in _output(tmp_path, name, jid):
        if time.monotonic() > deadline:
            gridengine.qdel([jid])
            pytest.fail(f"training did not reach step 50 within 180 s:\n{_output(tmp_path, name, jid)}")
        time.sleep(0.2)
    # a suspend of a -notify job: USR1 now, the stop the queue's notify time (10 s) later
    subprocess.run(["qmod", "-sj", jid], check=True, capture_output=True, timeout=30)
    try:
        state = gridengine.wait_for_jobs([jid], timeout=300)[jid]
    except TimeoutError as exc:
        pytest.fail(f"{exc}\n{_output(tmp_path, name, jid)[-3000:]}")
    out = _output(tmp_path, name, jid)
    assert (state.state, state.exit_code) == ("COMPLETED", "0:0"), out[-3000:]
    assert "USR1: asking the ranks to checkpoint and stop" in out
    assert "Stopped at step" in out and "exit 99, so that Grid Engine queues it again" in out
    assert "Resumed from" in out
    assert state.attempts == 2 and state.history[0] == "REQUEUED 99:0", state.history
    (rec,) = _records(tmp_path / "runs.jsonl")        # one record, from the attempt that finished
    assert rec["manifest"]["slurm"]["restart_count"] == "1"
    assert 50 <= rec["resumed_from"]["step"] < STEPS
    assert rec["metrics"]["final_loss"] == pytest.approx(ref["metrics"]["final_loss"], rel=1e-5)
    assert rec["weights_digest"] == ref["weights_digest"]


STUDY = """\
[study]
name = "box-sge"
scaling = "weak"

[workload]
name = "expmlp"
batch_size = 100
steps = 800
warmup = 20
num_batches_per_iter = 20

[layout]
nodes = [1, 4]
ranks_per_node = 1

[slurm]
scheduler = "gridengine"
time = "00:10:00"
signal_lead = 60
"""


def _running(jobs: Path, name: str, jid: str, timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while "Step " not in _output(jobs, name, jid):
        if time.monotonic() > deadline:
            pytest.fail(f"job {jid} did not start training within {timeout:.0f} s:\n"
                        + _output(jobs, name, jid))
        time.sleep(0.5)
    return _output(jobs, name, jid)


def test_a_study_through_qsub_survives_a_lost_node_and_records_every_point_once(sge, tmp_path):
    """1 and 4 nodes through qsub, the report chained with -hold_jid; a node of the 4-node
    point lost in the middle of training ends that job within seconds; the study says it is
    incomplete, a second submit runs only that point, and every point ends with one record."""
    study = tmp_path / "box-sge.toml"
    study.write_text(STUDY)
    root = tmp_path / "results"
    exports = [f"--export={k}={v}" for k, v in JOB_EXPORTS.items()]
    out = _hpcdl("study", "submit", str(study), "--results-root", str(root), "--unchecked-box",
                 *exports)
    assert "each asks for Grid Engine's consumable 'box=1'" in out, out
    assert out.count("Submitted point") == 2 and "Submitted the report" in out, out
    ids = {ln.split()[2]: ln.split(" as job ")[1].split()[0] for ln in out.splitlines()
           if ln.startswith("Submitted point")}
    jobs = root / "box-sge" / "jobs"
    point = "n4-r1-horovod-none-rep0"
    four, name = ids[point], f"hpcdl-box-sge-{point}"
    # the job's second node (its first runs the job script and mpirun) lost mid-training
    nodes = _running(jobs, name, four, 300).split(": start on ")[1].split()[0].split(",")
    t0 = time.monotonic()
    subprocess.run(["bash", str(BOX), "kill-node", nodes[1]], check=True, timeout=30)
    try:
        lost = gridengine.wait_for_jobs([four], timeout=120)[four]
        lost_after = time.monotonic() - t0
    finally:
        subprocess.run(["bash", str(BOX), "revive-node", nodes[1]], check=True, timeout=120)
    assert lost.state == "FAILED", (lost, _output(jobs, name, four)[-2000:])
    assert lost_after <= 60, f"the job outlived its lost node by {lost_after:.0f} s"
    res = subprocess.run([sys.executable, "-m", "hpcdl", "study", "status", str(study),
                          "--results-root", str(root), "--wait", "300"],
                         capture_output=True, text=True, timeout=330, cwd=ROOT)
    assert res.returncode == 1, res.stdout + res.stderr      # a point ended without its record
    assert "qstat and Grid Engine's accounting" in res.stdout
    runs = root / "box-sge" / "runs.jsonl"
    assert [r["point"]["nodes"] for r in _records(runs)] == [1]
    again = _hpcdl("study", "submit", str(study), "--results-root", str(root), "--unchecked-box",
                   *exports)
    assert [ln.split()[2] for ln in again.splitlines() if ln.startswith("Submitted point")] == \
        [point], again
    res = subprocess.run([sys.executable, "-m", "hpcdl", "study", "status", str(study),
                          "--results-root", str(root), "--wait", "400"],
                         capture_output=True, text=True, timeout=430, cwd=ROOT)
    logs = "\n".join(p.read_text()[-1500:] for p in sorted(jobs.glob("*.o*")))
    assert res.returncode == 0, res.stdout + res.stderr + logs
    rows = json.loads(_hpcdl("study", "status", str(study), "--results-root", str(root), "--json"))
    assert [(r["point"], r["scheduler"], r["state"], r["recorded"]) for r in rows] == [
        ("n1-r1-horovod-none-rep0", "gridengine", "COMPLETED", True),
        (point, "gridengine", "COMPLETED", True),
        ("report", "gridengine", "COMPLETED", True)]
    recs = _records(runs)
    assert sorted(r["point"]["nodes"] for r in recs) == [1, 4]        # one record per point
    for rec in recs:
        facts = rec["manifest"]["slurm"]
        assert facts["scheduler"] == "gridengine"
        assert len(facts["nodelist"].split(",")) == rec["point"]["nodes"]
        assert sorted(rec["manifest"]["hosts"]) == sorted(facts["nodelist"].split(","))
        assert rec["machine"]["link_rate"] == "1gbit"
    # the jobs of the study never ran at once (the box's consumable)
    spans = sorted((r["manifest"]["started"], r["manifest"]["time"]) for r in recs)
    assert all(x[1] <= y[0] for x, y in zip(spans, spans[1:])), spans
    assert (root / "box-sge" / "report.md").is_file()
    again = _hpcdl("study", "submit", str(study), "--results-root", str(root), "--unchecked-box")
    assert "Every point of box-sge is recorded; nothing to submit" in again


def test_a_forecast_study_through_qsub_tunes_and_measures_its_allocation_in_its_own_jobs(
        sge, tmp_path):
    """study submit --tune of a tuned study with [model] forecast through Grid Engine: hpcdl tune
    in a qsub job starts its ranks over the job's slots, the tuned points are held until it ends
    and run its picks, the allocation's own job measures the forecast's spread and loop files,
    and the report takes them."""
    study = tmp_path / "forecast.toml"
    study.write_text(tuned_forecast("box-sge-forecast",
                                    str(tmp_path / "tuning" / "sge-{nodes}n.json"),
                                    'scheduler = "gridengine"'))
    root = tmp_path / "results"
    exports = [f"--export={k}={v}" for k, v in JOB_EXPORTS.items()]
    out = _hpcdl("study", "submit", str(study), "--results-root", str(root), "--unchecked-box",
                 *exports, "--tune", "--knobs algorithm --rounds 1 --worker-rounds 1 --iters 2",
                 "--allocation", "--seconds 2 --rounds 1 --probes 2")
    tune = next(ln for ln in out.splitlines() if ln.startswith("Submitted the tuning job for "))
    jid = tune.split(" as job ")[1].split()[0]
    points = [ln for ln in out.splitlines() if ln.startswith("Submitted point")]
    assert len(points) == 2 and all(ln.endswith(f", after job {jid}") for ln in points), out
    res = subprocess.run([sys.executable, "-m", "hpcdl", "study", "status", str(study),
                          "--results-root", str(root), "--wait", "500"],
                         capture_output=True, text=True, timeout=530, cwd=ROOT)
    jobs = root / "box-sge-forecast" / "jobs"
    logs = "\n".join(p.read_text()[-1500:] for p in sorted(jobs.glob("*.o*")))
    assert res.returncode == 0, res.stdout + res.stderr + logs
    doc = json.loads((tmp_path / "tuning" / "sge-2n.json").read_text())
    assert doc["made_for"]["nodes"] == 2 and set(doc["picks"]) == {"none", "fp16"}
    assert not doc.get("partial"), doc
    # the search was sized to the job's h_rt, which Grid Engine does not tell the job
    assert "# the job ends in" in (jobs / f"hpcdl-box-sge-forecast-tune-sge-2n.o{jid}").read_text()
    recs = _records(root / "box-sge-forecast" / "runs.jsonl")
    assert sorted(r["params"]["compression"] for r in recs) == ["fp16", "none"]
    for rec in recs:
        assert rec["manifest"]["slurm"]["scheduler"] == "gridengine"
        assert rec["tuning"]["settings"] == doc["picks"][rec["params"]["compression"]]["env"]
    rows = json.loads(_hpcdl("study", "status", str(study), "--results-root", str(root), "--json"))
    assert [(r["point"], r["scheduler"], r["state"]) for r in rows[:2]] == [
        ("allocation-2n1r", "gridengine", "COMPLETED"), ("tune-sge-2n", "gridengine", "COMPLETED")]
    spread = json.loads((root / "box-sge-forecast" / "allocation" / "spread.json").read_text())
    assert len(spread["spread"]["2"]) == 1 and len(spread["spread"]["2"][0]) == 2
    report = json.loads((root / "box-sge-forecast" / "report.json").read_text())
    assert "allocation/loop-cpu.json" in report["calibration"]


def test_tuned_points_whose_qsub_tune_job_failed_are_deleted_before_they_start(sge, tmp_path):
    """-hold_jid starts a job whether the one before it succeeded or not: a tune job that ends
    without its file (tune refuses --iters 0) deletes the tuned points waiting for it, which
    never start, and status says which file is missing and which job failed, in one line."""
    tuning, res, rows = failed_tune(tmp_path, "box-sge-tuned", "sge", 'scheduler = "gridengine"')
    assert res.returncode == 1, res.stdout + res.stderr
    tune = rows["tune-sge-2n"]
    assert tune["state"] == "FAILED" and not tuning.exists(), tune
    points = [r for p, r in rows.items() if p.startswith("n2-")]
    assert len(points) == 2
    jobs = tmp_path / "results" / "box-sge-tuned" / "jobs"
    for r in points:
        assert r["state"] == "DELETED" and r["attempts"] == 0, r
        assert not list(jobs.glob(f"*.o{r['job_id']}")), r          # never started: no output
        assert r["reason"].startswith(f"not run: its tuning file {tuning} is missing (its job "
                                      f"{tune['job_id']} (tune-sge-2n) ended FAILED without it)")
    assert "not run: its tuning file" in res.stdout
