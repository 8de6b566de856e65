"""The Slurm and Grid Engine job scripts, rendered from typed parameters, against golden files.

Regenerate the golden files after an intended change with HPCDL_UPDATE_GOLDEN=1 and review the
diff. The behaviour of the scripts on a real cluster is tested in tests/slurm/.
"""
from __future__ import annotations

import io
import os
import shutil
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest

from hpcdl import study as study_mod
from hpcdl.errors import UserError
from hpcdl.launch import jobscript, submit

GOLDEN = Path(__file__).parent / "golden"
SOFTWARE = jobscript.Software(workdir="/opt/hpcdl", activate="source /opt/hpcdl/.venv/bin/activate",
                          exports=(("OMPI_MCA_btl", "self,tcp"), ("OMPI_MCA_btl_tcp_if_include", "lo")))
TRAIN_ARGS = ["--workload", "expmlp", "--steps", "300", "--results", "/opt/hpcdl/results/runs.jsonl"]

STUDY_4NODE = textwrap.dedent("""\
    [study]
    name = "golden-4node"
    scaling = "weak"

    [workload]
    name = "cnn"
    model = "resnet50"
    batch_size = 64
    num_iters = 10

    [layout]
    nodes = [4]
    ranks_per_node = 4

    [slurm]
    partition = "gpu"
    account = "hpcdl-lab"
    time = "01:00:00"
    cpus_per_task = 8
    gpus_per_node = 4
    signal_lead = 120
    """)


def _golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("HPCDL_UPDATE_GOLDEN") == "1":
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text)
    assert path.is_file(), f"no golden file {path}: run with HPCDL_UPDATE_GOLDEN=1 and review it"
    assert text == path.read_text(), f"{name} differs from its golden file (HPCDL_UPDATE_GOLDEN=1 to accept)"


def _bash_syntax_ok(text: str, tmp_path: Path) -> None:
    script = tmp_path / "job.sh"
    script.write_text(text)
    res = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, timeout=10)
    assert res.returncode == 0, res.stderr


def _study(tmp_path=None):
    raw = study_mod._toml.loads(STUDY_4NODE)
    return study_mod.from_dict(raw, "/opt/hpcdl/jobs/golden-4node.toml", results_root="/opt/hpcdl/results")


def test_train_sbatch_matches_golden_and_is_valid_bash(tmp_path):
    job = jobscript.Job(name="hpcdl-train", nodes=2, ntasks_per_node=1, cpus_per_task=1,
                    time="10:00", partition="debug", signal_lead=60)
    text = jobscript.render_train(job, SOFTWARE, TRAIN_ARGS, "/opt/hpcdl/ckpt/run1")
    _golden("train-2x1.sbatch", text)
    _bash_syntax_ok(text, tmp_path)
    assert "srun --mpi=\"$HPCDL_SRUN_MPI\"" in text and 'HPCDL_SRUN_MPI:-pmix' in text
    assert 'scontrol requeue "$SLURM_JOB_ID"' in text and "trap on_usr1 USR1" in text


def test_study_step_for_a_4_node_study_matches_golden(tmp_path):
    # A production cluster: the settings' defaults, no loopback transport.
    software = jobscript.Software(workdir="/opt/hpcdl", activate="source /opt/hpcdl/.venv/bin/activate")
    plan = submit.plan_study(_study(), software)
    assert [s.point_id for s in plan.steps] == ["n4-r4-horovod-none-rep0"]
    step = plan.steps[0]
    _golden("study-step-4node.sbatch", step.text)
    _bash_syntax_ok(step.text, tmp_path)
    lines = [ln for ln in step.text.splitlines() if ln.startswith("#SBATCH")]
    assert lines == sorted(lines), "#SBATCH lines are sorted"
    for want in ("#SBATCH --nodes=4", "#SBATCH --ntasks-per-node=4", "#SBATCH --cpus-per-task=8",
                 "#SBATCH --gpus-per-node=4", "#SBATCH --time=01:00:00", "#SBATCH --partition=gpu",
                 "#SBATCH --account=hpcdl-lab", "#SBATCH --output=%x-%j.out",
                 "#SBATCH --signal=B:USR1@120", "#SBATCH --requeue"):
        assert want in lines
    assert "set -euo pipefail" in step.text
    assert "--results /opt/hpcdl/results/golden-4node/runs.jsonl" in step.text
    assert "CKPT_DIR=/opt/hpcdl/results/golden-4node/checkpoints/n4-r4-horovod-none-rep0" in step.text


def test_report_sbatch_matches_golden(tmp_path):
    plan = submit.plan_study(_study(), SOFTWARE)
    _golden("report.sbatch", plan.report.text)
    _bash_syntax_ok(plan.report.text, tmp_path)
    assert "python -m hpcdl study report /opt/hpcdl/results/golden-4node" in plan.report.text
    # The report is not preemptible: no requeue, no signal.
    assert "--requeue" not in plan.report.text and "--signal" not in plan.report.text


def test_tsubame_qsub_matches_golden(tmp_path):
    job = jobscript.Job(name="hpcdl-train", nodes=2, ntasks_per_node=4, time="02:00:00",
                    account="tga-hpcdl", signal_lead=300)
    text = jobscript.render_qsub(job, jobscript.Software(workdir="/gs/bs/tga-hpcdl/hpcdl",
                                                 activate="module load openmpi cuda\nsource .venv/bin/activate"),
                             ["--workload", "cnn", "--model", "resnet50"], "/gs/bs/tga-hpcdl/ckpt")
    _golden("tsubame-train.qsub", text)
    _bash_syntax_ok(text, tmp_path)
    for want in ("qsub -g tga-hpcdl train.qsub", "#$ -l node_f=2", "#$ -l h_rt=2:00:00",
                 "#$ -l s_rt=1:55:00", "#$ -notify", "#$ -r y", "mpirun -npernode 4 -np 8",
                 "trap 'on_stop USR2' USR2", "exit 99"):
        assert want in text
    assert "HPCDL_LAUNCHER" not in text       # Slurm-only settings stay out
    assert "--max-time" not in text           # the soft limit's USR1 stops it, not a guess


def test_a_grid_engine_script_asks_for_its_ranks_as_slots_of_a_parallel_environment(tmp_path):
    job = jobscript.Job(name="box-train", nodes=4, time="00:10:00", partition="box.q",
                        signal_lead=60)
    text = jobscript.render_qsub(job, jobscript.Software(workdir="/w", activate="true"),
                                 ["--workload", "expmlp"], "/w/ckpt", pe="mpi", resources=["box=1"])
    _bash_syntax_ok(text, tmp_path)
    assert jobscript.qsub_options(job, "mpi", ["box=1"]) == [
        "#$ -S /bin/bash", "#$ -N box-train", "#$ -cwd", "#$ -j y", "#$ -pe mpi 4",
        "#$ -l h_rt=0:10:00", "#$ -q box.q", "#$ -l box=1", "#$ -l s_rt=0:09:00", "#$ -notify",
        "#$ -r y"]
    assert "\n".join(jobscript.qsub_options(job, "mpi", ["box=1"])) in text
    assert "#   qsub train.qsub" in text and "node_f" not in text
    assert "overridden by qsub -v NAME=value" in text


def test_sbatch_options_are_sorted_and_omit_unset_resources():
    job = jobscript.Job(name="x", nodes=3, time="1-00:00:00", extra=("--qos=debug", "--exclusive"))
    opts = jobscript.sbatch_options(job)
    assert opts == sorted(opts)
    assert "--time=1-00:00:00" in opts and "--qos=debug" in opts and "--exclusive" in opts
    assert not any(o.startswith(("--partition", "--account", "--gpus-per-node", "--cpus-per-task"))
                   for o in opts)
    assert "--requeue" not in jobscript.sbatch_options(job, preemptible=False)


@pytest.mark.parametrize("text,secs", [("30", 1800), ("10:00", 600), ("01:00:00", 3600),
                                       ("1-12", 129600), ("2-00:30", 174600), ("0-00:00:59", 59)])
def test_parse_time_reads_every_slurm_format(text, secs):
    assert study_mod.parse_time(text) == secs


@pytest.mark.parametrize("kwargs,msg", [
    (dict(time="ten minutes"), "not a Slurm time"),
    (dict(time="00:01:00", signal_lead=60), "shorter than the time limit"),
    (dict(nodes=0), "nodes must be a positive integer"),
    (dict(signal_lead=70000), "signal_lead must be"),
    (dict(extra=("qos=x",)), "--key=value"),
])
def test_bad_job_parameters_are_user_errors(kwargs, msg):
    with pytest.raises(UserError, match=msg):
        jobscript.Job(name="x", **kwargs)


def test_exports_are_overridable_and_off_examples_are_comments():
    sw = jobscript.Software(workdir="/w", activate=":", exports=(("NCCL_DEBUG", "INFO"),
                                                             ("MY_FLAG", 'a "b" $c')))
    block, names = jobscript._render_exports(sw)
    assert 'export NCCL_DEBUG="${NCCL_DEBUG:-INFO}"' in block
    assert "# export NCCL_SOCKET_IFNAME=ib0" in block
    assert 'export MY_FLAG="${MY_FLAG:-a \\"b\\" \\$c}"' in block
    assert "NCCL_SOCKET_IFNAME" not in names and "MY_FLAG" in names
    # The value survives bash: the default applies when unset, the caller's value wins when set.
    script = block + '\necho "$MY_FLAG|$NCCL_DEBUG"\n'
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=10,
                         env={"PATH": os.environ["PATH"], "NCCL_DEBUG": "TRACE"}).stdout
    assert out.strip() == 'a "b" $c|TRACE'


def test_dry_run_writes_scripts_and_submits_nothing(tmp_path, monkeypatch):
    study_file = tmp_path / "s.toml"
    study_file.write_text(STUDY_4NODE.replace("nodes = [4]", "nodes = [1, 2]"))
    monkeypatch.setenv("PATH", "/nonexistent")     # sbatch cannot be reached even by mistake
    st = study_mod.load(study_file, results_root=tmp_path / "results")
    out = io.StringIO()
    plan = submit.plan_study(st, SOFTWARE)
    sub = submit.submit_study(plan, dry_run=True, out=out)
    jobs = tmp_path / "results" / "golden-4node" / "jobs"
    assert sorted(p.name for p in jobs.iterdir()) == [
        "report.sbatch", "step-n1-r4-horovod-none-rep0.sbatch", "step-n2-r4-horovod-none-rep0.sbatch"]
    assert all(s["job_id"] is None for s in sub["steps"])
    assert "Would submit the report" in out.getvalue() and "--dependency=afterany" in out.getvalue()
    assert not (jobs / "submitted.jsonl").exists()


def test_recorded_points_are_not_submitted_again(tmp_path):
    study_file = tmp_path / "s.toml"
    study_file.write_text(STUDY_4NODE.replace("nodes = [4]", "nodes = [1, 2]"))
    st = study_mod.load(study_file, results_root=tmp_path / "results")
    st.results_dir.mkdir(parents=True)
    done = st.points()[0]
    (st.results_dir / "runs.jsonl").write_text(
        '{"schema": "hpcdl.run/1", "study": "golden-4node", "status": "ok", "point": %s}\n'
        % __import__("json").dumps(done.as_dict()))
    plan = submit.plan_study(st, SOFTWARE)
    assert plan.skipped == [done.id]
    assert [s.point_id for s in plan.steps] == [st.points()[1].id]
    assert len(submit.plan_study(st, SOFTWARE, force=True).steps) == 2


def test_points_whose_job_is_queued_or_requeued_are_not_submitted_again(tmp_path, monkeypatch):
    """Stand-ins for sacct and squeue (the real case, a job Slurm requeued after its node was
    lost, is in tests/box/test_on_the_box.py): a point whose latest job is pending again after a
    NODE_FAIL is in flight; one whose job failed for good is submitted again."""
    study_file = tmp_path / "s.toml"
    study_file.write_text(STUDY_4NODE.replace("nodes = [4]", "nodes = [1, 2]"))
    st = study_mod.load(study_file, results_root=tmp_path / "results")
    one, two = (p.id for p in st.points())
    jobs = st.results_dir / "jobs"
    jobs.mkdir(parents=True)
    (jobs / "submitted.jsonl").write_text(__import__("json").dumps(
        {"steps": [{"point": one, "job_id": "7"}, {"point": two, "job_id": "8"}]}) + "\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _fake_tool(bin_dir, "sacct", 'printf "7|NODE_FAIL|0:0|n[2-3]|x\\n8|FAILED|1:0|n1|x\\n"\n')
    _fake_tool(bin_dir, "squeue", 'printf "7|PENDING|BeginTime|\\n"\n')
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    plan = submit.plan_study(st, SOFTWARE)
    assert plan.in_flight == {one: "job 7 PENDING"}
    assert [s.point_id for s in plan.steps] == [two]
    out = io.StringIO()
    submit.submit_study(plan, dry_run=True, out=out)
    assert f"Point {one}: job 7 PENDING, not submitted again" in out.getvalue()


def _fake_tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(0o755)


def _usr1_to_trap_script(tmp_path: Path, srun_body: str, env_extra=None, tools=None):
    """Render train.sbatch with stand-ins for srun (``srun_body``), scontrol and ``tools`` (name:
    body), run it, send the batch shell USR1 once srun has started; return (script, env, exit
    status, output, calls)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (tools or {}).items():
        _fake_tool(bin_dir, name, body)
    log = tmp_path / "calls.log"
    _fake_tool(bin_dir, "srun", f'echo "srun $*" >> {log}\n' + srun_body)
    _fake_tool(bin_dir, "scontrol", f'echo "scontrol $*" >> {log}\n')
    job = jobscript.Job(name="t", nodes=1, time="10:00", signal_lead=60)
    sw = jobscript.Software(workdir=str(tmp_path), activate=":")
    script = tmp_path / "train.sbatch"
    script.write_text(jobscript.render_train(job, sw, ["--steps", "5"], str(tmp_path / "ckpt")))
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "SLURM_JOB_ID": "42", **(env_extra or {})}
    proc = subprocess.Popen(["bash", str(script)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 10
    while not (log.exists() and "srun" in log.read_text()):
        assert time.monotonic() < deadline, "fake srun never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGUSR1)
    out, _ = proc.communicate(timeout=20)
    return script, env, proc.returncode, out, log.read_text().splitlines()


def test_usr1_trap_checkpoints_and_requeues_without_slurm(tmp_path):
    """The trap logic alone, with stand-ins for srun and scontrol (the real thing is in
    tests/slurm/test_slurm_cluster.py): USR1 creates the STOP file, the launcher's exit 75
    leads to 'scontrol requeue', a restarted job gets --resume."""
    # "srun" behaves like training: exit 75 once the STOP file appears.
    script, env, rc, out, calls = _usr1_to_trap_script(
        tmp_path, 'case "$*" in *--resume) exit 0 ;; esac\n'
        'for i in $(seq 1 100); do [ -e "$HPCDL_STOP_FILE" ] && exit 75; sleep 0.1; done\nexit 0\n',
        {"SLURM_CPUS_PER_TASK": "2"})
    log = tmp_path / "calls.log"
    assert rc == 0, out
    assert calls[0].startswith("srun --mpi=pmix --kill-on-bad-exit=1 --cpus-per-task=2 python -m hpcdl train --steps 5")
    assert "--resume" not in calls[0]
    assert calls[-1] == "scontrol requeue 42"
    assert "USR1: asking the ranks to checkpoint and stop" in out
    assert not (tmp_path / "ckpt" / "STOP").exists()
    # The requeued attempt resumes.
    env["SLURM_RESTART_COUNT"] = "1"
    (tmp_path / "ckpt" / "ckpt-000000003.hpcdl").write_text("x")
    res = subprocess.run(["bash", str(script)], env=env, capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    last_srun = [c for c in log.read_text().splitlines() if c.startswith("srun")][-1]
    assert last_srun.endswith("--resume")
    assert (tmp_path / "ckpt" / "ckpt-000000003.hpcdl").exists(), "a resumed run keeps its checkpoints"


def test_module_command_writes_the_same_script_as_the_renderer(tmp_path, capsys):
    out = tmp_path / "job.sbatch"
    rc = jobscript.main(["--nodes", "2", "--time", "10:00", "--signal-lead", "60", "--setup", ":",
                     "--checkpoint-dir", str(tmp_path / "ck"), "-o", str(out), "--",
                     "--workload", "expmlp", "--steps", "300"])
    assert rc == 0
    job = jobscript.Job(name="hpcdl-train", nodes=2, time="10:00", signal_lead=60)
    sw = jobscript.Software.here(activate=":")
    assert out.read_text() == jobscript.render_train(job, sw, ["--workload", "expmlp", "--steps", "300"],
                                                 str(tmp_path / "ck"), script_name="job.sbatch")
    assert jobscript.main(["--time", "1", "--signal-lead", "60"]) == 2
    assert "must be shorter than the time limit" in capsys.readouterr().err


def test_study_software_takes_modules_setup_env_and_mpi_from_the_study():
    text = STUDY_4NODE + textwrap.dedent("""\
        mpi = "pmi2"
        modules = ["openmpi/4.1", "cuda/12.1"]
        setup = ["source /apps/hpcdl/bin/activate"]

        [run]
        threads_per_rank = 4
        """)
    st = study_mod.from_dict(study_mod._toml.loads(text), "/opt/hpcdl/jobs/s.toml",
                             results_root="/opt/hpcdl/results")
    sw = submit.study_software(st, ["NCCL_DEBUG=INFO"], workdir="/opt/hpcdl")
    assert sw.activate.splitlines() == ["set +u", "module load openmpi/4.1", "module load cuda/12.1",
                                        "set -u", "source /apps/hpcdl/bin/activate"]
    assert dict(sw.exports) == {"HPCDL_SRUN_MPI": "pmi2", "HPCDL_THREADS": "4", "NCCL_DEBUG": "INFO"}
    step = submit.plan_study(st, sw).steps[0].text
    assert 'export HPCDL_SRUN_MPI="${HPCDL_SRUN_MPI:-pmi2}"' in step
    assert 'export HPCDL_THREADS="${HPCDL_THREADS:-4}"' in step


@pytest.mark.parametrize("marker", [True, False])
def test_clean_stop_is_requeued_even_when_srun_reports_the_killed_ranks_status(tmp_path, marker):
    """srun --kill-on-bad-exit terminates the other ranks when the first exits 75, and srun then
    reports 143. Rank 0's INTERRUPTED marker (written after its checkpoint) still means requeue;
    without the marker, 143 is a failure and the job is not requeued."""
    ckpt = tmp_path / "ckpt"
    write = f'echo "3 stop file" > {ckpt}/INTERRUPTED\n' if marker else ""
    _, _, rc, out, calls = _usr1_to_trap_script(
        tmp_path, 'for i in $(seq 1 100); do [ -e "$HPCDL_STOP_FILE" ] && break; sleep 0.1; done\n'
        f'{write}exit 143\n')
    if marker:
        assert rc == 0, out
        assert calls[-1] == "scontrol requeue 42"
        assert not (ckpt / "INTERRUPTED").exists()
    else:
        assert rc == 143, out
        assert not any(c.startswith("scontrol") for c in calls)


@pytest.mark.parametrize("status", [0, 75])
def test_the_launchers_own_status_survives_when_it_ends_while_the_usr1_trap_runs(tmp_path, status):
    """USR1 ends the batch shell's ``wait`` early (status 138). If the launcher ends while the trap
    still runs (here ``touch`` lingers after making the STOP file), the job must report the
    launcher's own status, not 138: a run that finished is not a failure, and one that
    checkpointed (75) is requeued."""
    lingering_touch = f'{shutil.which("touch")} "$@"; sleep 1\n'
    _, _, rc, out, calls = _usr1_to_trap_script(
        tmp_path, 'for i in $(seq 1 100); do [ -e "$HPCDL_STOP_FILE" ] && break; sleep 0.05; done\n'
        f'exit {status}\n', tools={"touch": lingering_touch})
    assert "USR1: asking the ranks to checkpoint and stop" in out
    assert rc == 0, out
    assert (calls[-1] == "scontrol requeue 42") == (status == 75), calls


def test_a_grid_engine_study_renders_qsub_scripts_and_chains_the_report_with_hold_jid(tmp_path):
    text = STUDY_4NODE.replace("nodes = [4]", "nodes = [1, 2]").replace(
        "[slurm]", '[slurm]\nscheduler = "gridengine"\npe = "mpi_4"')
    golden = study_mod.from_dict(study_mod._toml.loads(text), "/opt/hpcdl/jobs/golden-4node.toml",
                                 results_root="/opt/hpcdl/results")
    step = submit.plan_study(golden, SOFTWARE).steps[0]
    assert step.point_id == "n1-r4-horovod-none-rep0"
    _golden("study-step-1node.qsub", step.text)
    study_file = tmp_path / "s.toml"
    study_file.write_text(text)
    st = study_mod.load(study_file, results_root=tmp_path / "results")
    plan = submit.plan_study(st, SOFTWARE)
    assert plan.scheduler == "gridengine"
    _bash_syntax_ok(step.text, tmp_path)
    for want in ("#$ -pe mpi_4 4", "#$ -q gpu", "#$ -A hpcdl-lab", "#$ -l h_rt=1:00:00",
                 "#$ -l s_rt=0:58:00", "#$ -notify", "#$ -r y", "mpirun -npernode 4 -np 4"):
        assert want in step.text
    assert "#SBATCH" not in step.text and "srun" not in step.text
    _bash_syntax_ok(plan.report.text, tmp_path)
    assert "-r y" not in plan.report.text and "s_rt" not in plan.report.text   # not preemptible
    out = io.StringIO()
    sub = submit.submit_study(plan, dry_run=True, out=out)
    jobs = tmp_path / "results" / "golden-4node" / "jobs"
    assert sorted(p.name for p in jobs.iterdir()) == [
        "report.qsub", "step-n1-r4-horovod-none-rep0.qsub", "step-n2-r4-horovod-none-rep0.qsub"]
    assert sub["scheduler"] == "gridengine"
    assert "qsub -hold_jid <step ids> report.qsub" in out.getvalue()
    assert "&& qsub step-n1-r4-horovod-none-rep0.qsub)" in out.getvalue()
    assert not (jobs / "submitted.jsonl").exists()
    # a study file names a scheduler hpcdl knows, and a Grid Engine study its parallel environment
    study_file.write_text(STUDY_4NODE.replace("[slurm]", '[slurm]\nscheduler = "pbs"'))
    with pytest.raises(UserError, match="slurm.scheduler"):
        study_mod.load(study_file, results_root=tmp_path / "results")
    # without a parallel environment, TSUBAME's way: full nodes, the account the group of qsub -g
    study_file.write_text(STUDY_4NODE.replace("[slurm]", '[slurm]\nscheduler = "gridengine"'))
    plan = submit.plan_study(study_mod.load(study_file, results_root=tmp_path / "results"), SOFTWARE)
    assert "#$ -l node_f=4" in plan.steps[0].text and "-pe" not in plan.steps[0].text
    assert plan.group == "hpcdl-lab"
    out = io.StringIO()
    submit.submit_study(plan, dry_run=True, out=out)
    assert "&& qsub -g hpcdl-lab step-n4-r4-horovod-none-rep0.qsub)" in out.getvalue()


def test_a_study_with_a_forecast_measures_each_layout_its_files_lack_in_chained_jobs(tmp_path):
    """[model] forecast: one 'hpcdl bench allocation' job per layout beyond one rank whose
    measurement the spread and loop files lack, each after the one before (they rewrite the
    same files), and a 'hpcdl tune' job timing the algorithms at the largest node count; the
    points do not wait for them; a layout the files hold is not measured."""
    study_file = tmp_path / "s.toml"
    study_file.write_text(STUDY_4NODE.replace("nodes = [4]", "nodes = [1, 2, 4]")
                          .replace("ranks_per_node = 4", "ranks_per_node = 1")
                          + "\n[model]\nforecast = [16, 64]\n")
    st = study_mod.load(study_file, results_root=tmp_path / "results")
    spread, loop = st.allocation_files
    assert spread.endswith("golden-4node/allocation/spread.json") and loop.endswith("loop-cpu.json")
    exchange = st.exchange_files
    assert exchange.endswith("golden-4node/allocation/exchange-{nodes}n.json")
    assert st.declared["model"] == {"exchange": exchange, "loop": loop, "spread": spread,
                                    "forecast": [16, 64]}
    assert st.allocation_missing(st.points()) == [(2, 1), (4, 1)]
    plan = submit.plan_study(st, SOFTWARE, allocation=["--seconds", "5"])
    assert [t.point_id for t in plan.tunes] == ["tune-exchange-4n", "allocation-2n1r",
                                                "allocation-4n1r"]
    four = exchange.replace("{nodes}", "4")
    assert (f"-m hpcdl tune --study {study_file} --compression none --knobs algorithm "
            f"--rounds 1 --out {four}") in plan.tunes[0].text
    assert "#SBATCH --nodes=4" in plan.tunes[0].text
    plan.tunes = plan.tunes[1:]       # the allocation jobs' chain, as before
    text = plan.tunes[1].text
    assert "#SBATCH --nodes=4" in text and "#SBATCH --ntasks-per-node=1" in text
    assert f"-m hpcdl bench allocation --study {study_file} --spread {spread} --loop {loop} " \
           "--seconds 5" in text
    out = io.StringIO()
    submit.submit_study(plan, dry_run=True, out=out)
    lines = out.getvalue().splitlines()
    assert "sbatch allocation-2n1r.sbatch" in lines[0]
    assert "sbatch --dependency=afterany:<" in lines[1] and "allocation-4n1r.sbatch" in lines[1]
    assert all("--dependency" not in ln for ln in lines if "Would submit point" in ln)
    # the files hold 2 nodes: only 4 is measured
    Path(spread).parent.mkdir(parents=True)
    Path(spread).write_text('{"schema": "hpcdl.host-spread/1", "spread": {"2": [[1.0, 1.0]]}}')
    Path(loop).write_text('{"schema": "hpcdl.loop-cpu/1", "shares": {"1": {"2": {"median": 0.1}}}}')
    assert st.allocation_missing(st.points()) == [(4, 1)]
    # the exchange file with a pick for the compression: not made again
    Path(four).write_text('{"picks": {"none": {}}}')
    assert [t.point_id for t in submit.plan_study(st, SOFTWARE).tunes] == ["allocation-4n1r"]


def test_a_study_holding_points_out_measures_its_allocation_only_where_a_small_one_can(tmp_path):
    """Calibrated on 2 nodes, 5 and 7 held out: the allocation is measured at the calibration's
    count and a small allocation's (3 and 4 nodes), never at the held-out counts."""
    study_file = tmp_path / "s.toml"
    study_file.write_text(STUDY_4NODE.replace("nodes = [4]", "nodes = [1, 2, 5, 7]")
                          .replace("ranks_per_node = 4", "ranks_per_node = 1")
                          + "\n[model]\ncalibrate = { nodes_max = 2 }\nforecast = [16]\n")
    st = study_mod.load(study_file, results_root=tmp_path / "results")
    assert st.allocation_missing(st.points()) == [(2, 1), (3, 1), (4, 1)]


def test_a_forecast_studys_points_run_the_allocations_pick_after_its_tune_job(tmp_path):
    """The jobs of a study with a forecast time the allocation's exchange; its points from 3
    nodes run the pick of the file at their count and wait for the job that makes it (afterok:
    never without it). At 2 nodes every algorithm sends one exchange: the library's choice.
    [run] tuning = "default" keeps the library's choice everywhere, with the same point ids;
    [axes] tuning = ["default", "tuned"] runs both without a file of its own."""
    study_file = tmp_path / "s.toml"
    base = (STUDY_4NODE.replace("nodes = [4]", "nodes = [1, 2, 4]")
            .replace("ranks_per_node = 4", "ranks_per_node = 1"))
    study_file.write_text(base + "\n[model]\nforecast = [16]\n")
    st = study_mod.load(study_file, results_root=tmp_path / "results")
    four = st.exchange_files.replace("{nodes}", "4")
    assert st.auto_tuned
    assert {p.nodes: p.tuned for p in st.points()} == {1: False, 2: False, 4: True}
    plan = submit.plan_study(st, SOFTWARE)
    step4 = next(s for s in plan.steps if s.point["nodes"] == 4)
    assert step4.tuning == four and f"--tuning {four}" in step4.text
    assert not any("--tuning" in s.text for s in plan.steps if s.point["nodes"] < 4)
    out = io.StringIO()
    submit.submit_study(plan, dry_run=True, out=out)
    lines = out.getvalue().splitlines()
    waits = [ln for ln in lines if "Would submit point n4-" in ln]
    assert waits and all(f"--dependency=afterok:<the tuning job for {four}>" in ln for ln in waits)
    assert all("--dependency" not in ln for ln in lines
               if "Would submit point n1-" in ln or "Would submit point n2-" in ln)
    ids = [p.id for p in st.points()]
    # the library's choice, asked for: no point tuned, the same ids, the model's file still made
    study_file.write_text(base + '\n[run]\ntuning = "default"\n[model]\nforecast = [16]\n')
    lib = study_mod.load(study_file, results_root=tmp_path / "results")
    assert not lib.auto_tuned and not any(p.tuned for p in lib.points())
    assert [p.id for p in lib.points()] == ids
    assert not any("--tuning" in s.text for s in submit.plan_study(lib, SOFTWARE).steps)
    assert [t.point_id for t in submit.plan_study(lib, SOFTWARE).tunes][0] == "tune-exchange-4n"
    # both, side by side: the tuned axis takes the allocation's file
    study_file.write_text(base + '\n[axes]\ntuning = ["default", "tuned"]\n'
                          '[model]\nforecast = [16]\n')
    both = study_mod.load(study_file, results_root=tmp_path / "results")
    assert {(p.tuning, p.nodes): p.tuned for p in both.points()} == {
        ("default", 1): False, ("default", 2): False, ("default", 4): False,
        ("tuned", 1): False, ("tuned", 2): False, ("tuned", 4): True}
    # without a forecast nothing times the exchange: the library's choice, as before; with
    # --tune the study's jobs tune it, and the points run their pick
    study_file.write_text(base)
    plain = study_mod.load(study_file, results_root=tmp_path / "results")
    assert not any(p.tuned for p in plain.points())
    tuned = submit.plan_study(plain, SOFTWARE, tune=["--rounds", "1"])
    assert [t.tuning for t in tuned.tunes] == [four]
    assert "--budget 300" in tuned.tunes[0].text
    assert [s.tuning for s in tuned.steps] == ["", "", four]
    study_file.write_text(base + '\n[axes]\ntuning = ["default", "tuned"]\n')
    with pytest.raises(study_mod.StudyError, match="'tuned' needs run.tuning"):
        study_mod.load(study_file)


def test_a_grid_engine_study_with_a_forecast_measures_its_allocation_in_qsub_jobs(tmp_path):
    """The same jobs through Grid Engine: qsub scripts asking for the study's parallel
    environment, ranks over the slots with the settings passed on (-x), tune sized to h_rt, each
    allocation job held after the one before (-hold_jid), and with --tune the tuned points held
    after the job that makes their file."""
    study_file = tmp_path / "s.toml"
    study_file.write_text(STUDY_4NODE.replace("nodes = [4]", "nodes = [1, 2, 4]")
                          .replace("ranks_per_node = 4", "ranks_per_node = 1")
                          .replace("[slurm]", '[slurm]\nscheduler = "gridengine"\npe = "mpi"')
                          + "\n[model]\nforecast = [16, 64]\n")
    st = study_mod.load(study_file, results_root=tmp_path / "results")
    plan = submit.plan_study(st, SOFTWARE, allocation=["--seconds", "5"])
    assert [t.script.name for t in plan.tunes] == ["tune-exchange-4n.qsub", "allocation-2n1r.qsub",
                                                   "allocation-4n1r.qsub"]
    tune, _, four = plan.tunes
    for step in plan.tunes:
        _bash_syntax_ok(step.text, tmp_path)
        assert "#SBATCH" not in step.text and "srun" not in step.text
        assert "#$ -pe mpi " in step.text and "#$ -r y" not in step.text   # not preemptible
    assert "#$ -pe mpi 4" in tune.text and "#$ -l h_rt=1:00:00" in tune.text
    assert 'export HPCDL_JOB_END_TIME="$(( $(date +%s) + 3600 ))"' in tune.text
    assert "-m hpcdl tune --study" in tune.text
    assert 'LAUNCH=(mpirun -npernode 1 -np 4 --bind-to none "${FORWARD[@]}")' in four.text
    assert '"${LAUNCH[@]}" ' in four.text and "-x \"$name\"" in four.text
    assert "-m hpcdl bench allocation --study" in four.text
    out = io.StringIO()
    submit.submit_study(plan, dry_run=True, out=out)
    lines = out.getvalue().splitlines()
    assert "&& qsub allocation-2n1r.qsub)" in lines[1]
    assert "&& qsub -hold_jid <the allocation job allocation-2n1r> allocation-4n1r.qsub)" \
        in lines[2]
    # --tune: the tuned points wait for the file their job makes
    tuned = tmp_path / "tuned.toml"
    tuned.write_text(study_file.read_text() + '\n[axes]\ntuning = ["tuned"]\n\n[run]\n'
                     f'tuning = "{tmp_path}/t-{{nodes}}n.json"\n')
    plan = submit.plan_study(study_mod.load(tuned, results_root=tmp_path / "r2"), SOFTWARE,
                             tune=["--knobs", "algorithm"])
    out = io.StringIO()
    submit.submit_study(plan, dry_run=True, out=out)
    tune_line = next(ln for ln in out.getvalue().splitlines() if "t-4n.json:" in ln)
    assert "&& qsub -h tune-t-4n.qsub)" in tune_line, tune_line    # released knowing its points
    tune_text = next(t.text for t in plan.tunes if t.script.name == "tune-t-4n.qsub")
    _bash_syntax_ok(tune_text, tmp_path)
    assert "hpcdl_waiting=" in tune_text and "qdel $waiting" in tune_text
    held = [ln for ln in out.getvalue().splitlines() if "Would submit point n4" in ln]
    assert held and all(f"qsub -hold_jid <the tuning job for {tmp_path}/t-4n.json> " in ln
                        for ln in held), out.getvalue()
    tune = next(t for t in plan.tunes if t.tuning.endswith("t-4n.json"))
    assert "#$ -l h_rt=1:05:00" in tune.text and "--budget 300" in tune.text   # limit + budget
    plan = submit.plan_study(study_mod.load(tuned, results_root=tmp_path / "r2"), SOFTWARE,
                             tune=["--knobs", "algorithm", "--budget=120"])
    tune = next(t for t in plan.tunes if t.tuning.endswith("t-4n.json"))
    assert "#$ -l h_rt=1:02:00" in tune.text and "--budget" not in tune.text.replace(
        "--budget=120", "")


def test_cluster_passes_a_grid_engine_jobs_settings_on_to_its_ranks():
    from hpcdl import cluster
    env = {"NSLOTS": "4", "PATH": "/v/bin", "HOROVOD_CYCLE_TIME": "5", "HPCDL_X": "1",
           "HOME": "/root", "SLURM_JOB_ID": ""}
    assert cluster.gridengine_mpirun(env) == [
        "mpirun", "-np", "4", "--bind-to", "none", "-x", "HOROVOD_CYCLE_TIME", "-x", "HPCDL_X",
        "-x", "PATH"]
    assert cluster.job_deadline({"HPCDL_JOB_END_TIME": "1700000000"}) == 1700000000
    assert cluster.job_deadline({"SLURM_JOB_END_TIME": "5", "HPCDL_JOB_END_TIME": "9"}) == 5


def test_study_run_makes_the_forecasts_exchange_file_before_the_points(tmp_path):
    """'hpcdl study run' of a study over several nodes with [model] forecast: the allocation's
    measurement, then 'hpcdl tune --knobs algorithm' at the largest node count (it starts its
    own ranks), before any point; none where the file holds a pick."""
    from hpcdl.launch import study_local
    study_file = tmp_path / "s.toml"
    study_file.write_text(STUDY_4NODE.replace("nodes = [4]", "nodes = [1, 4]")
                          .replace("ranks_per_node = 4", "ranks_per_node = 1")
                          + "\n[model]\nforecast = [16]\n")
    st = study_mod.load(study_file, results_root=tmp_path / "results")
    lines: list = []
    assert study_local.run_study(st, dry_run=True, out=lines.append) == 0
    four = st.exchange_files.replace("{nodes}", "4")
    at = next(k for k, x in enumerate(lines) if "the exchange of each allreduce algorithm" in x)
    assert lines[at].startswith("[allocation] 4 rank(s)")
    assert (f"tune --study {study_file} --np 4 --compression none --knobs algorithm --rounds 1 "
            f"--out {four}") in lines[at + 1]
    assert at < next(k for k, x in enumerate(lines) if "to run" in x)
    Path(four).parent.mkdir(parents=True)
    Path(four).write_text('{"picks": {"none": {}}}')
    lines.clear()
    study_local.run_study(st, dry_run=True, out=lines.append)
    assert not any("allreduce algorithm" in x for x in lines)


def test_study_allocation_sbatch_matches_golden(tmp_path):
    raw = study_mod._toml.loads(STUDY_4NODE.replace("ranks_per_node = 4", "ranks_per_node = 1")
                                + "\n[model]\nforecast = [16, 64]\n")
    st = study_mod.from_dict(raw, "/opt/hpcdl/jobs/golden-4node.toml",
                             results_root="/opt/hpcdl/results")
    _, step = submit.plan_study(st, SOFTWARE).tunes      # the exchange's tune, the allocation
    _golden("study-allocation-4node.sbatch", step.text)
    _bash_syntax_ok(step.text, tmp_path)
    assert "--spread /opt/hpcdl/results/golden-4node/allocation/spread.json" in step.text
