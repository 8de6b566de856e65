"""Training on the cluster box: ranks on nodes with their own hostname, link and CPU share,
launched by sbatch + srun --mpi=pmix, and a node lost in the middle of a study.

The box is the session's (tests/conftest.py: scripts/cluster-box.sh up 4 --link 1gbit
--cpus-per-node 1). Every job runs under a deadline (submit_and_wait, status --wait).
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "slurm"))

from hpcdl_testing import deliberate  # noqa: E402
from slurm_testing import (JOB_EXPORTS, ROOT, failed_tune, hpcdl as _hpcdl,  # noqa: E402
                           job_output, submit_and_wait, tuned_forecast)

from hpcdl import box  # noqa: E402
from hpcdl.launch import jobscript, scheduler  # noqa: E402

pytestmark = pytest.mark.slow

BOX = ROOT / "scripts" / "cluster-box.sh"
# 0.41 M parameters (1.6 MB of gradients per step): what crosses the link dwarfs the few
# hundred bytes of the loss and stop agreements
TRAIN = ["--workload", "cnn", "--model", "small", "--image-size", "32", "--num-classes", "1000",
         "--batch-size", "16", "--num-warmup-batches", "2", "--num-batches-per-iter", "5",
         "--num-iters", "2", "--backend", "ring"]


@pytest.fixture(scope="module")
def software(slurm_cluster):
    return jobscript.Software.here(workdir=ROOT, exports=JOB_EXPORTS)


def _records(path: Path):
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def test_a_run_on_two_box_nodes_records_hostnames_link_bytes_and_the_box(software, tmp_path):
    job = jobscript.Job(name="hpcdl-box-train", nodes=2, ntasks_per_node=1, cpus_per_task=1,
                        time="00:10:00", signal_lead=60)
    script = tmp_path / "train.sbatch"
    script.write_text(jobscript.render_train(job, software, TRAIN + ["--results", str(tmp_path / "runs.jsonl")],
                                             str(tmp_path / "ckpt")))
    state = submit_and_wait(script, timeout=300)
    out = job_output(tmp_path, state.job_id)
    assert (state.state, state.exit_code) == ("COMPLETED", "0:0"), out[-3000:]
    (rec,) = _records(tmp_path / "runs.jsonl")
    box = rec["machine"]
    assert box["kind"] == "box"
    # each rank saw its own node's kernel hostname (UTS namespace), not just Slurm's node name
    assert sorted(r["hostname"] for r in box["net"]) == ["n1", "n2"]
    assert box["nodes"] == ["n1", "n2"] and box["link_rate"] == "1gbit"
    assert box["cpus_per_node"] == 1 and box["algorithm"] == "ring"
    # each node's quota at a 5 ms period (1 ms periods lose half a one-core quota), and each
    # rank saw that quota and how often it ran out while timed
    assert box["cpu_period_us"] == 5000
    for r in rec["metrics"]["ranks"]:
        q = r["cgroup"]
        assert (q["cores"], q["period_us"]) == (1.0, 5000), q
        assert q["periods"] > 0 and 0.0 <= q["throttled_share"] <= 1.0, q
    # the ring sends 2(p-1)/p n per rank and step: n at 2 ranks; the counters moved that much
    n = box["payload_bytes"]
    assert n == rec["gradient_bytes"]
    for row in box["net"]:
        assert row["expected_tx"] == pytest.approx(n)
        assert 0.9 <= row["tx_bytes_per_step"] / n <= 1.1, box["net"]
        assert 0.9 <= row["rx_bytes_per_step"] / n <= 1.1, box["net"]


STUDY = textwrap.dedent("""\
    [study]
    name = "box-node-loss"
    scaling = "weak"

    [workload]
    name = "expmlp"
    batch_size = 100
    steps = 2500
    warmup = 20
    num_batches_per_iter = 20

    [layout]
    nodes = [1, 2]
    ranks_per_node = 1

    [slurm]
    time = "00:10:00"
    cpus_per_task = 1
    signal_lead = 60
    """)


def _running_with_steps(job_id: str, jobs_dir: Path, timeout: float) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        out = job_output(jobs_dir, job_id)
        if "Step " in out:
            return
        time.sleep(1)
    pytest.fail(f"job {job_id} did not start training within {timeout:.0f} s:\n"
                + job_output(jobs_dir, job_id)[-2000:])


def _first_attempt(job_id: str, timeout: float) -> scheduler.JobState:
    """The job's state once its first run has ended (Slurm may have requeued it since)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        st = scheduler.job_states([job_id]).get(job_id)
        if st and st.history and st.history[0].split()[0] not in scheduler.ACTIVE_STATES:
            return st
        time.sleep(1)
    pytest.fail(f"job {job_id}'s first run had not ended {timeout:.0f} s after its node was lost")


def _batch_node(job_id: str) -> str:
    nodelist = scheduler.job_states([job_id])[job_id].nodelist
    return subprocess.run(["scontrol", "show", "hostnames", nodelist], capture_output=True,
                          text=True, check=True, timeout=30).stdout.split()[0]


def test_losing_a_node_ends_the_job_and_a_resubmission_runs_only_the_missing_point(
        slurm_cluster, tmp_path):
    study = tmp_path / "loss.toml"
    study.write_text(STUDY)
    root = tmp_path / "results"
    exports = [f"--export={k}={v}" for k, v in JOB_EXPORTS.items()]
    out = _hpcdl("study", "submit", str(study), "--results-root", str(root), "--unchecked-box",
                 *exports)
    ids = {ln.split()[2]: ln.split(" as job ")[1].split()[0] for ln in out.splitlines()
           if ln.startswith("Submitted point")}
    jobs_dir = root / "box-node-loss" / "jobs"
    point = "n2-r1-horovod-none-rep0"
    two = ids[point]
    _running_with_steps(two, jobs_dir, 180)      # its first node is lost in the middle of training
    node = _batch_node(two)
    deliberate(two, f"its node {node} killed, then the job held and cancelled, on purpose")
    t0 = time.monotonic()
    subprocess.run(["bash", str(BOX), "kill-node", node], check=True, timeout=30)
    try:
        first = _first_attempt(two, 120)
        lost_after = time.monotonic() - t0
        # The job script asks Slurm to requeue it (preemption), so Slurm requeues it after the
        # node failure too; hold it there, as a user who wants to decide would.
        subprocess.run(["scontrol", "hold", two], capture_output=True, timeout=30)
        # A resubmission while the requeued job waits must not run the point twice.
        again = _hpcdl("study", "submit", str(study), "--results-root", str(root),
                       "--unchecked-box", *exports)
    finally:
        subprocess.run(["bash", str(BOX), "revive-node", node], check=True, timeout=120)
    assert first.history[0].split()[0] in ("NODE_FAIL", "FAILED", "CANCELLED"), first
    assert lost_after <= 60, f"the job outlived its lost node by {lost_after:.0f} s"
    assert not [ln for ln in again.splitlines() if ln.startswith("Submitted")], again
    assert f"Point {point}: job {two} " in again, again

    # The user gives up on the requeued job: the point is missing, and only it is submitted.
    subprocess.run(["scancel", two], check=True, timeout=30)
    scheduler.wait_for_jobs(list(ids.values()), 120)
    # status waits for the report job and says the study is incomplete (exit 1): the point's
    # job ended without a record
    res = subprocess.run([sys.executable, "-m", "hpcdl", "study", "status", str(study),
                          "--results-root", str(root), "--wait", "300", "--json"],
                         capture_output=True, text=True, timeout=330, cwd=ROOT)
    assert res.returncode == 1, res.stdout + res.stderr
    rows = {r["point"]: r for r in json.loads(res.stdout)}
    assert (rows[point]["job_id"], rows[point]["recorded"]) == (two, False), rows[point]
    assert rows[point]["state"] != "COMPLETED", rows[point]
    assert rows["report"]["state"] == "COMPLETED", rows["report"]
    runs = root / "box-node-loss" / "runs.jsonl"
    ok = [r["point"]["id"] for r in _records(runs) if r.get("status", "ok") == "ok"]
    assert ok == ["n1-r1-horovod-none-rep0"], ok
    again = _hpcdl("study", "submit", str(study), "--results-root", str(root), "--unchecked-box",
                   *exports)
    submitted = [ln.split()[2] for ln in again.splitlines() if ln.startswith("Submitted point")]
    assert submitted == [point], again
    _hpcdl("study", "status", str(study), "--results-root", str(root), "--wait", "300", timeout=330)
    ok = sorted(r["point"]["id"] for r in _records(runs) if r.get("status", "ok") == "ok")
    assert ok == ["n1-r1-horovod-none-rep0", point], ok      # one record per point, none lost


def test_submit_tune_makes_the_tuning_file_in_a_job_and_the_tuned_points_run_its_picks(
        slurm_cluster, tmp_path):
    study = tmp_path / "tuned.toml"
    study.write_text(tuned_forecast("box-tuned", str(tmp_path / "tuning" / "box-{nodes}n.json"),
                                    "cpus_per_task = 1"))
    root = tmp_path / "results"
    exports = [f"--export={k}={v}" for k, v in JOB_EXPORTS.items()]
    out = _hpcdl("study", "submit", str(study), "--results-root", str(root), "--unchecked-box",
                 *exports, "--tune",
                 "--knobs algorithm,fusion --bound 100 --rounds 1 --worker-rounds 1 --iters 2",
                 "--allocation", "--seconds 2 --rounds 1 --probes 2")
    lines = out.splitlines()
    tune_job = next(ln for ln in lines if ln.startswith("Submitted the tuning job for "))
    jid = tune_job.split(" as job ")[1].split()[0]
    points = [ln for ln in lines if ln.startswith("Submitted point")]
    assert len(points) == 2 and all(ln.endswith(f", after job {jid}") for ln in points), out
    _hpcdl("study", "status", str(study), "--results-root", str(root), "--wait", "500",
           timeout=530)
    doc = json.loads((tmp_path / "tuning" / "box-2n.json").read_text())
    assert doc["made_for"]["nodes"] == 2 and set(doc["picks"]) == {"none", "fp16"}
    # the box's link rate gives the model's bound: within --bound of it, fusion is not searched
    assert any(s.startswith("fusion: the exchange") and "link's bound for a ring" in s
               for s in doc["skipped"]), doc["skipped"]
    recs = _records(root / "box-tuned" / "runs.jsonl")
    # the file names the box it was tuned on, as the records name the box they ran on
    assert {k: doc["made_for"]["machine"][k] for k in ("box", "cpu_period_us", "link_rate")} == \
        {k: recs[0]["machine"][k] for k in ("box", "cpu_period_us", "link_rate")}
    assert sorted(r["params"]["compression"] for r in recs) == ["fp16", "none"]
    for rec in recs:
        pick = doc["picks"][rec["params"]["compression"]]
        section = rec["tuning"]
        assert section["file"] == str(tmp_path / "tuning" / "box-2n.json")
        assert section["settings"] == pick["env"] and section["pick"] == pick["name"]
        # what the library ran in the training process on the nodes, read back from it
        assert section["in_force"]["algorithm"] == \
            int(pick["env"]["OMPI_MCA_coll_tuned_allreduce_algorithm"])
    rows = json.loads(_hpcdl("study", "status", str(study), "--results-root", str(root), "--json"))
    assert [r["point"] for r in rows[:2]] == ["allocation-2n1r", "tune-box-2n"]
    assert all(r["state"] == "COMPLETED" and r["recorded"] is None for r in rows[:2])
    # [model] forecast: the allocation's own job measured the box's 2 nodes for the forecast,
    # named the machine as the records do (so a report takes it), and the report names it
    from hpcdl.machine import setting as machine_setting
    loop = json.loads((root / "box-tuned" / "allocation" / "loop-cpu.json").read_text())
    assert loop["made_for"]["nodes"] == [2] and "box " in loop["made_for"]["machine"]
    assert {machine_setting(r) for r in recs} == {loop["made_for"]["machine"]}
    spread = json.loads((root / "box-tuned" / "allocation" / "spread.json").read_text())
    assert len(spread["spread"]["2"]) == 1 and len(spread["spread"]["2"][0]) == 2
    doc = json.loads((root / "box-tuned" / "report.json").read_text())
    assert "allocation/loop-cpu.json" in doc["calibration"]


def test_check_fails_an_oversubscribed_box_and_a_study_there_is_refused(slurm_cluster, tmp_path):
    # the session's box asks for 4 nodes x 1 core on a 2-core machine: together, each node
    # computes at about half its speed alone, and check must say so
    verdict = box.check_file()
    before = verdict.read_bytes() if verdict.is_file() else None
    try:
        res = subprocess.run(["bash", str(BOX), "check", "--reps", "2", "--rounds", "2", "--mib", "16"],
                             capture_output=True, text=True, timeout=300)
        _refused_on_a_failed_check(res, tmp_path)
    finally:                     # the session's later tests find the box as they would have
        if before is None:
            verdict.unlink(missing_ok=True)
        else:
            verdict.write_bytes(before)


def _refused_on_a_failed_check(res, tmp_path):
    assert res.returncode == 1, res.stdout + res.stderr
    assert "check: FAILED" in res.stdout
    assert re.search(r"n\d: compute \d\.\d\dx one node alone", res.stdout), res.stdout
    assert "link tx" in res.stdout.splitlines()[1]           # the table has the links' columns
    study = tmp_path / "s.toml"
    study.write_text(STUDY)
    sub = subprocess.run([sys.executable, "-m", "hpcdl", "study", "submit", str(study),
                          "--results-root", str(tmp_path / "results")],
                         capture_output=True, text=True, timeout=120, cwd=ROOT)
    assert sub.returncode == 2, sub.stdout + sub.stderr
    assert "failed its isolation check" in sub.stderr and "compute" in sub.stderr
    assert not (tmp_path / "results" / "box-node-loss" / "jobs" / "submitted.jsonl").exists()


def test_tuned_points_whose_tune_job_failed_never_start_and_status_says_why(slurm_cluster,
                                                                             tmp_path):
    """A tune job that ends without its file (here: tune refuses --iters 0 in the job): Slurm
    cancels the tuned points it holds (afterok, --kill-on-invalid-dep) instead of starting them
    to fail, and status says in one line which file is missing, which job failed, what to do."""
    tuning, res, rows = failed_tune(tmp_path, "box-tuned", "box", "cpus_per_task = 1")
    assert res.returncode == 1, res.stdout + res.stderr
    for r in rows.values():
        deliberate(r["job_id"], "a tune job refused its options on purpose, its points and "
                                "report without a file or a record")
    assert rows["tune-box-2n"]["state"] == "FAILED" and not tuning.exists()
    points = [r for p, r in rows.items() if p.startswith("n2-")]
    assert len(points) == 2
    for r in points:
        assert r["state"] == "CANCELLED" and r["attempts"] <= 1, r     # never started
        assert r["reason"].startswith(f"not run: its tuning file {tuning} is missing (its job "
                                      f"{rows['tune-box-2n']['job_id']} (tune-box-2n) ended "
                                      "FAILED without it)"), r
        assert r["reason"].endswith("then 'hpcdl study submit' again")
    assert "not run: its tuning file" in res.stdout
