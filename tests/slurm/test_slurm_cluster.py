"""hpcdl's job scripts on a real Slurm cluster: sbatch + srun, a study with its chained report,
and USR1 preemption: checkpoint, requeue, resume, one record.

Every job runs under a deadline: ``submit_and_wait`` polls squeue / ``sacct -c`` and cancels the
job when the deadline passes.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from hpcdl.launch import jobscript, scheduler

from hpcdl_testing import deliberate
from slurm_testing import JOB_EXPORTS, ROOT, ROOT_ENV, job_output, submit_and_wait

pytestmark = pytest.mark.slow

STEPS = 1000            # long enough (several seconds) to interrupt mid-run without racing
TRAIN = ["--workload", "expmlp", "--steps", str(STEPS), "--log-every", "50"]


def _records(path: Path):
    return [json.loads(ln) for ln in path.read_text().splitlines() if ln.strip()]


def _train_job(name: str, lead: int = 60) -> jobscript.Job:
    return jobscript.Job(name=name, nodes=2, ntasks_per_node=1, cpus_per_task=1, time="00:10:00",
                     signal_lead=lead)


@pytest.fixture(scope="module")
def reference_run(software, tmp_path_factory):
    """One uninterrupted 2-node x 1-rank training run through sbatch and srun."""
    d = tmp_path_factory.mktemp("train")
    script = d / "train.sbatch"
    script.write_text(jobscript.render_train(_train_job("hpcdl-train"), software,
                                         TRAIN + ["--results", str(d / "runs.jsonl")], str(d / "ckpt")))
    state = submit_and_wait(script, timeout=240)
    return d, state


def test_two_node_run_through_sbatch_and_srun_records_nodes_n1_n2(reference_run):
    d, state = reference_run
    out = job_output(d, state.job_id)
    assert (state.state, state.exit_code) == ("COMPLETED", "0:0"), out[-3000:]
    assert state.nodelist == "n[1-2]"
    (rec,) = _records(d / "runs.jsonl")
    assert rec["layout"]["size"] == 2 and rec["layout"]["nodes"] == 2
    assert rec["layout"]["hosts"] == ["n1", "n2"]
    assert rec["manifest"]["slurm"]["nodelist"] == "n[1-2]"
    assert rec["manifest"]["slurm"]["job_id"] == state.job_id
    assert rec["manifest"]["layout"]["launcher"] == "srun"
    assert rec["replicas_identical"] is True and rec["resumed_from"] is None
    assert "launcher srun" in out and "Total samples/sec on 2 rank(s)" in out


def test_usr1_checkpoints_requeues_and_resumes_to_the_same_final_loss(software, reference_run,
                                                                       tmp_path):
    ref_dir, _ = reference_run
    (ref,) = _records(ref_dir / "runs.jsonl")
    results = tmp_path / "runs.jsonl"
    script = tmp_path / "train.sbatch"
    script.write_text(jobscript.render_train(_train_job("hpcdl-preempt", lead=120), software,
                                         TRAIN + ["--results", str(results)], str(tmp_path / "ckpt")))
    jid = scheduler.sbatch(script, cwd=tmp_path)
    deliberate(jid, "USR1 as before a time limit: checkpoint, requeue, resume")
    out_file = tmp_path / f"hpcdl-preempt-{jid}.out"
    # Signal the batch shell as soon as training is under way (Slurm's warning before the time
    # limit, or a preemption, arrives the same way).
    deadline = time.monotonic() + 180
    while "Step 50/" not in (out_file.read_text() if out_file.exists() else ""):
        if time.monotonic() > deadline:
            subprocess.run(["scancel", jid], timeout=30)
            pytest.fail(f"training did not reach step 50 within 180 s:\n"
                        f"{out_file.read_text() if out_file.exists() else ''}")
        time.sleep(0.2)
    subprocess.run(["scancel", "--batch", "--signal=USR1", jid], check=True, timeout=30)
    try:
        state = scheduler.wait_for_jobs([jid], timeout=300)[jid]
    except TimeoutError as exc:
        pytest.fail(f"{exc}\n{out_file.read_text()[-3000:]}")
    out = out_file.read_text()
    assert (state.state, state.exit_code) == ("COMPLETED", "0:0"), out[-3000:]

    # It checkpointed, requeued and ran again: two attempts in the completion log.
    assert "USR1: asking the ranks to checkpoint and stop" in out
    assert "Stopped at step" in out and "checkpoint" in out
    assert "exit 75): requeueing" in out
    assert "attempt 2" in out and "Resumed from" in out
    assert state.attempts == 2, state.history
    # One record, not two, and it says where it resumed from.
    (rec,) = _records(results)
    assert rec["resumed_from"] is not None
    assert 50 <= rec["resumed_from"]["step"] < STEPS
    assert Path(rec["resumed_from"]["path"]).name.startswith("ckpt-")
    assert rec["manifest"]["slurm"]["restart_count"] in ("1", 1)
    # Same data order, same state: the same training as the uninterrupted run.
    assert rec["metrics"]["final_loss"] == pytest.approx(ref["metrics"]["final_loss"], rel=1e-5)
    assert rec["weights_digest"] == ref["weights_digest"]


STUDY = textwrap.dedent("""\
    [study]
    name = "slurm-smoke"
    scaling = "weak"

    [workload]
    name = "expmlp"
    batch_size = 100
    steps = 200
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


def _hpcdl(*args, timeout=120, env=None):
    res = subprocess.run([sys.executable, "-m", "hpcdl", *args], capture_output=True, text=True,
                         timeout=timeout, cwd=ROOT, env=dict(os.environ, **(env or {})))
    assert res.returncode == 0, f"hpcdl {' '.join(args)}: exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res.stdout


def _sacct_times(ids):
    out = subprocess.run(["sacct", "-c", "-n", "-P", "-o", "jobid,state,start,end"],
                         capture_output=True, text=True, timeout=30).stdout
    times = {}
    for line in out.splitlines():
        jid, state, start, end = line.split("|")
        if jid in ids:
            times[jid] = (state, start, end)       # ISO times compare as strings
    return times


def test_study_submit_runs_each_point_then_the_report(slurm_cluster, tmp_path):
    study = tmp_path / "slurm-smoke.toml"
    study.write_text(STUDY)
    results_root = tmp_path / "results"
    exports = [f"--export={k}={v}" for k, v in {**JOB_EXPORTS, **ROOT_ENV,
                                                  # the alternative launcher, inside the allocation
                                                  "HPCDL_LAUNCHER": "mpirun"}.items()]
    # the test box holds 4 nodes of a core each on 2 cores: not isolated, and not checked
    out = _hpcdl("study", "submit", str(study), "--results-root", str(results_root),
                 "--unchecked-box", *exports)
    step_ids = [ln.split(" as job ")[1].split()[0] for ln in out.splitlines() if ln.startswith("Submitted point")]
    report_id = [ln.split(" as job ")[1].split()[0] for ln in out.splitlines()
                 if ln.startswith("Submitted the report")][0]
    assert len(step_ids) == 2, out

    status = _hpcdl("study", "status", str(study), "--results-root", str(results_root),
                    "--wait", "300", "--json", timeout=330)
    rows = {r["point"]: r for r in json.loads(status)}
    jobs_dir = results_root / "slurm-smoke" / "jobs"
    logs = "\n".join(p.read_text()[-2000:] for p in jobs_dir.glob("*.out"))
    assert all(r["state"] == "COMPLETED" and r["exit_code"] == "0:0" for r in rows.values()), (rows, logs)
    assert rows["n2-r1-horovod-none-rep0"]["recorded"] and rows["n1-r1-horovod-none-rep0"]["recorded"]
    assert rows["report"]["job_id"] == report_id and rows["report"]["recorded"]

    # The report ran after every step had ended (afterany dependency), and wrote the report.
    times = _sacct_times(step_ids + [report_id])
    assert times[report_id][1] >= max(times[j][2] for j in step_ids), times
    report = results_root / "slurm-smoke" / "report.md"
    assert report.is_file() and "slurm-smoke" in report.read_text()
    recs = _records(results_root / "slurm-smoke" / "runs.jsonl")
    assert sorted(r["point"]["id"] for r in recs) == sorted(rows.keys() - {"report"})
    two = [r for r in recs if r["layout"]["size"] == 2][0]
    assert len(two["layout"]["hosts"]) == 2 and all(h.startswith("n") for h in two["layout"]["hosts"])
    assert all(r["manifest"]["env"].get("HPCDL_LAUNCHER") == "mpirun" for r in recs)
    assert "launcher mpirun" in logs
    # Resubmitting skips what is recorded.
    again = _hpcdl("study", "submit", str(study), "--results-root", str(results_root), "--dry-run",
                   "--unchecked-box")
    assert "nothing to submit" in again


@pytest.mark.parametrize("kind", ["kill", "raise"])
def test_a_rank_that_dies_under_srun_ends_the_job_within_60_s(software, tmp_path, kind):
    # srun --kill-on-bad-exit=1 ends the step when one task fails, instead of leaving the other
    # rank blocked in an allreduce until Horovod's stall shutdown.
    results = tmp_path / "runs.jsonl"
    text = jobscript.render_train(_train_job(f"hpcdl-fault-{kind}"), software,
                              TRAIN + ["--steps", "100000", "--results", str(results)],
                              str(tmp_path / "ckpt"))
    text = text.replace("set -euo pipefail\n",
                        f"set -euo pipefail\nexport HPCDL_FAULT=rank=1,step=300,kind={kind}\n", 1)
    script = tmp_path / "fault.sbatch"
    script.write_text(text)
    t0 = time.monotonic()
    state = submit_and_wait(script, timeout=240)
    elapsed = time.monotonic() - t0
    deliberate(state.job_id, f"HPCDL_FAULT: rank 1 dies ({kind}) on purpose")
    out = job_output(tmp_path, state.job_id)
    assert state.state == "FAILED" and state.exit_code != "0:0", out[-3000:]
    assert f"HPCDL_FAULT: injecting '{kind}' at step 300" in out
    # 100000 steps would take minutes: the job ended because the rank died, and soon after.
    assert elapsed < 60 + 30, out[-3000:]            # 60 s target + submission and start-up
    assert "task 1" in out or "[1@n2]" in out        # the failed rank is named
    assert not results.exists()                      # no record for a failed run


def test_a_study_of_the_users_own_script_runs_through_sbatch_and_srun_on_two_nodes(slurm_cluster,
                                                                                  tmp_path):
    # examples/keras_fit_horovod.py, unchanged but for hpcdl's callback, at 1 and 2 nodes
    study = tmp_path / "own-script.toml"
    study.write_text(textwrap.dedent("""\
        [study]
        name = "own-script"
        scaling = "weak"

        [workload]
        command = ["python", "examples/keras_fit_horovod.py", "--epochs", "1",
                   "--data", "synthetic", "--batch-size", "{batch_size}"]
        batch_size = 32

        [layout]
        nodes = [1, 2]
        ranks_per_node = 1

        [scrape]
        script_rate = 'Script img/sec per rank: ([0-9.]+)'

        [slurm]
        time = "00:10:00"
        cpus_per_task = 1
        """))
    results_root = tmp_path / "results"
    exports = [f"--export={k}={v}" for k, v in JOB_EXPORTS.items()]
    out = _hpcdl("study", "submit", str(study), "--results-root", str(results_root),
                 "--unchecked-box", *exports)
    assert out.count("Submitted point") == 2, out
    status = _hpcdl("study", "status", str(study), "--results-root", str(results_root),
                    "--wait", "300", "--json", timeout=330)
    rows = {r["point"]: r for r in json.loads(status)}
    jobs_dir = results_root / "own-script" / "jobs"
    logs = "\n".join(p.read_text()[-2000:] for p in jobs_dir.glob("*.out"))
    assert all(r["state"] == "COMPLETED" for r in rows.values()), (rows, logs)
    assert all(r["recorded"] for r in rows.values()), (rows, logs)
    recs = _records(results_root / "own-script" / "runs.jsonl")
    assert sorted(r["point"]["id"] for r in recs) == ["n1-r1-script-none-rep0",
                                                      "n2-r1-script-none-rep0"]
    two = next(r for r in recs if r["point"]["nodes"] == 2)
    assert two["command"]["recorder"] and two["source"] == "keras-callback"
    hosts = two["layout"]["hosts"]
    assert two["layout"]["size"] == 2 and len(hosts) == 2 and all(h.startswith("n") for h in hosts)
    own = two["command"]["scraped"]["script_rate"]["value"]
    assert abs(two["metrics"]["throughput_per_rank"]["overall"] / own - 1) <= 0.05
    assert "record (ok) appended" in logs
    report = (results_root / "own-script" / "report.md").read_text()
    assert "## Your command" in report and "| n2-r1-script-none-rep0 | 2 | ok | 0 |" in report
