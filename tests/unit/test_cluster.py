"""Rank discovery and thread placement from launcher environments (no MPI needed)."""
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from hpcdl import cgroup, cluster
from hpcdl.errors import UserError
from hpcdl_testing import ROOT

OMPI = {"OMPI_COMM_WORLD_RANK": "5", "OMPI_COMM_WORLD_SIZE": "8",
        "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_COMM_WORLD_LOCAL_SIZE": "4"}
SRUN = {"SLURM_PROCID": "6", "SLURM_NTASKS": "8", "SLURM_STEP_NUM_TASKS": "8", "SLURM_LOCALID": "2",
        "SLURM_NODEID": "1", "SLURM_STEP_NUM_NODES": "2", "SLURM_STEP_TASKS_PER_NODE": "4(x2)",
        "SLURM_STEP_ID": "0", "SLURM_JOB_ID": "42"}


def test_mpirun_environment_gives_rank_size_local_and_node():
    lay = cluster.discover(OMPI, host="h1")
    assert (lay.rank, lay.size, lay.local_rank, lay.local_size) == (5, 8, 1, 4)
    assert (lay.node, lay.num_nodes, lay.host, lay.launcher) == (1, 2, "h1", "mpirun")


def test_srun_environment_gives_rank_size_local_and_node():
    lay = cluster.discover(SRUN, host="n2")
    assert (lay.rank, lay.size, lay.local_rank, lay.local_size) == (6, 8, 2, 4)
    assert (lay.node, lay.num_nodes, lay.launcher) == (1, 2, "srun")


def test_srun_uneven_tasks_per_node_uses_this_nodes_count():
    env = dict(SRUN, SLURM_STEP_TASKS_PER_NODE="3,2(x2)", SLURM_NODEID="2", SLURM_STEP_NUM_NODES="3",
               SLURM_STEP_NUM_TASKS="7", SLURM_PROCID="6", SLURM_LOCALID="1")
    lay = cluster.discover(env, host="n3")
    assert (lay.local_size, lay.node, lay.num_nodes, lay.size) == (2, 2, 3, 7)


def test_slurm_batch_shell_without_step_is_not_a_rank():
    # Inside the sbatch script but outside srun there is no step: one process, not rank 0 of N.
    env = {"SLURM_PROCID": "0", "SLURM_NTASKS": "8", "SLURM_JOB_ID": "42"}
    assert cluster.discover(env, host="n1").size == 1


def test_mpirun_inside_a_slurm_job_is_mpirun_with_slurms_node_index():
    # The ranks inherit the SLURM_* of the step that runs Open MPI's daemons (one per node).
    env = dict(OMPI, SLURM_PROCID="1", SLURM_STEP_ID="0", SLURM_NODEID="1", SLURM_STEP_NUM_NODES="2")
    lay = cluster.discover(env, host="n2")
    assert (lay.rank, lay.launcher, lay.node, lay.num_nodes) == (5, "mpirun", 1, 2)


@pytest.mark.parametrize("env,expect", [
    ({"PMI_RANK": "3", "PMI_SIZE": "4", "MPI_LOCALRANKID": "1", "MPI_LOCALNRANKS": "2"}, (3, 4, 1, 2, 1, 2, "pmi")),
    ({"PMIX_RANK": "2", "PMIX_SIZE": "4", "PMIX_LOCAL_RANK": "0", "PMIX_LOCAL_SIZE": "2"}, (2, 4, 0, 2, 1, 2, "pmix")),
    ({}, (0, 1, 0, 1, 0, 1, "none")),
])
def test_other_launchers(env, expect):
    lay = cluster.discover(env, host="h")
    assert (lay.rank, lay.size, lay.local_rank, lay.local_size, lay.node, lay.num_nodes, lay.launcher) == expect


def test_threads_per_rank_prefers_explicit_then_slurm_then_the_cpus_granted(monkeypatch):
    monkeypatch.setattr(cluster, "cpus_granted", lambda local_size, quota: 16 // local_size)
    monkeypatch.setattr(cluster, "_affinity", lambda: 16)
    lay = cluster.discover(OMPI, host="h")                      # 4 ranks on the node
    assert cluster.threads_per_rank(lay, {}) == 4
    assert cluster.threads_per_rank(lay, {"SLURM_CPUS_PER_TASK": "3"}) == 3
    assert cluster.threads_per_rank(lay, {"SLURM_CPUS_PER_TASK": "3", "HPCDL_THREADS": "1"}) == 1


@pytest.mark.parametrize("value", ["0", "-1", "abc", "1.5"])
def test_a_thread_count_that_is_no_positive_whole_number_is_refused(value):
    with pytest.raises(UserError, match=f"HPCDL_THREADS='{re.escape(value)}': give a whole number"):
        cluster.threads_per_rank(cluster.discover({}, host="h"), {"HPCDL_THREADS": value})


def test_a_thread_count_past_the_cpus_is_capped_with_a_note(monkeypatch):
    monkeypatch.setattr(cluster, "_affinity", lambda: 2)
    with pytest.warns(cluster.SettingWarning, match="HPCDL_THREADS=99999 is more than the 2 CPU"):
        n = cluster.threads_per_rank(cluster.discover({}, host="h"), {"HPCDL_THREADS": "99999"})
    assert n == 2


@pytest.mark.parametrize("value", ["abc", "0"])
def test_a_slurm_cpu_count_that_is_no_count_is_noted_and_the_grant_taken(monkeypatch, value):
    monkeypatch.setattr(cluster, "cpus_granted", lambda local_size, quota: 1)
    with pytest.warns(cluster.SettingWarning, match=f"SLURM_CPUS_PER_TASK='{value}' is no CPU count"):
        n = cluster.threads_per_rank(cluster.discover({}, host="h"), {"SLURM_CPUS_PER_TASK": value})
    assert n == 1


@pytest.mark.parametrize("local, affinity, machine, quota, expect", [
    (4, 16, 16, None, 4),       # unbound: the node's cores shared by its ranks
    (4, 1, 16, None, 1),        # bound to one core by the launcher: that core is the rank's
    (2, 2, 2, None, 1),
    (4, 2, 2, None, 1),         # oversubscribed: never zero
    (1, 2, 2, 0.2, 1),          # a fifth of a core (a box node): one thread, not two
    (4, 16, 16, 8.0, 2),        # a container's 8 cores shared by 4 ranks
    (1, 16, 16, 2.5, 2),
])
def test_cpus_granted_from_affinity_and_quota(local, affinity, machine, quota, expect):
    assert cluster.cpus_granted(local, affinity=affinity, machine=machine, quota=quota) == expect


def _mountinfo(v1, v2):
    return (f"30 25 0:26 / {v1} rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
            f"31 25 0:27 / {v2} rw,relatime - cgroup2 cgroup2 rw\n")


def test_cgroup_v2_quota_is_read_with_the_tightest_ancestor(tmp_path):
    v2 = tmp_path / "unified"
    (v2 / "job" / "step").mkdir(parents=True)
    (v2 / "job" / "cpu.max").write_text("50000 100000\n")        # the job: half a core
    (v2 / "job" / "step" / "cpu.max").write_text("max 100000\n")
    limit = cluster.cgroup_cpu_limit("0::/job/step\n", _mountinfo(tmp_path / "v1", v2))
    assert limit == 0.5


def test_cgroup_v1_quota_is_read_and_no_quota_is_none(tmp_path):
    v1 = tmp_path / "cpu"
    (v1 / "box" / "n1").mkdir(parents=True)
    for d, q in ((v1 / "box", "-1"), (v1 / "box" / "n1", "20000")):
        (d / "cpu.cfs_quota_us").write_text(q + "\n")
        (d / "cpu.cfs_period_us").write_text("100000\n")
    info = _mountinfo(v1, tmp_path / "v2")
    assert cluster.cgroup_cpu_limit("3:cpu,cpuacct:/box/n1\n", info) == 0.2
    assert cluster.cgroup_cpu_limit("3:cpu,cpuacct:/box\n", info) is None
    assert cluster.cgroup_cpu_limit("3:memory:/box/n1\n", info) is None


def test_what_a_cpu_quota_held_back_is_read_from_its_cgroup_v2_and_v1(tmp_path):
    v2 = tmp_path / "unified"
    (v2 / "job").mkdir(parents=True)
    (v2 / "job" / "cpu.max").write_text("20000 100000\n")
    (v2 / "job" / "cpu.stat").write_text("usage_usec 3000000\nuser_usec 2500000\n"
                                         "nr_periods 50\nnr_throttled 40\n"
                                         "throttled_usec 1500000\n")
    found = cgroup._limiting_cgroup("0::/job\n", _mountinfo(tmp_path / "v1", v2))
    assert cgroup.cgroup_cpu_usage(found) == {"cores": 0.2, "period_us": 100000, "usage_s": 3.0,
                                               "throttled_s": 1.5, "periods": 50,
                                               "throttled_periods": 40}
    v1 = tmp_path / "cpu"
    (v1 / "n1").mkdir(parents=True)
    (v1 / "n1" / "cpu.cfs_quota_us").write_text("2000\n")
    (v1 / "n1" / "cpu.cfs_period_us").write_text("10000\n")
    (v1 / "n1" / "cpu.stat").write_text("nr_periods 16158\nnr_throttled 15938\n"
                                        "throttled_time 142161447440\nnr_bursts 0\n")
    found = cgroup._limiting_cgroup("3:cpu,cpuacct:/n1\n", _mountinfo(v1, v2))
    got = cgroup.cgroup_cpu_usage(found)
    assert got["cores"] == 0.2 and got["period_us"] == 10000
    assert got["usage_s"] is None                                # cpuacct not beside it
    assert got["throttled_s"] == pytest.approx(142.16144744) and got["throttled_periods"] == 15938
    assert cgroup.cgroup_cpu_usage(cgroup._limiting_cgroup("3:cpu:/\n", _mountinfo(v1, v2))) \
        is None                                                  # no quota, nothing to say


_PROBE = ("import os, sys; sys.path.insert(0, %r); from hpcdl import cluster; "
          "print(cluster.cgroup_cpu_limit(), cluster.threads_per_rank(cluster.discover({}), {}), "
          "end=' '); import time; a = cluster.cgroup_cpu_usage(); t = time.time(); "
          "exec('while time.time() - t < 1: pass'); b = cluster.cgroup_cpu_usage(); "
          "print((b['throttled_periods'] - a['throttled_periods']) / (b['periods'] - a['periods']) "
          "if a else '-')")


def test_a_process_bound_to_one_core_uses_one_thread():
    if (os.cpu_count() or 1) < 2:
        pytest.skip("one core: binding changes nothing")
    code = "import os; os.sched_setaffinity(0, {0}); " + _PROBE % str(ROOT)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.split()
    assert out[1] == "1", out


@pytest.mark.timed         # starved beside other work, it throttles in fewer periods
def test_a_process_in_a_cgroup_with_a_fifth_of_a_core_uses_one_thread():
    """A real cgroup v1 CPU quota, as the cluster box gives each node."""
    base = Path("/sys/fs/cgroup/cpu")
    if os.geteuid() != 0 or not (base / "cpu.cfs_quota_us").exists() or (os.cpu_count() or 1) < 2:
        pytest.skip("needs root, the cgroup v1 cpu controller and two cores")
    group = base / f"hpcdl-test-{os.getpid()}"
    try:
        group.mkdir()
        (group / "cpu.cfs_period_us").write_text("100000")
        (group / "cpu.cfs_quota_us").write_text("20000")
    except OSError as exc:
        pytest.skip(f"cannot make a cgroup here: {exc}")
    try:
        code = f"open({str(group / 'cgroup.procs')!r}, 'w').write(str(__import__('os').getpid())); " \
               + _PROBE % str(ROOT)
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=120, check=True).stdout.split()
        assert out[:2] == ["0.2", "1"], out
        # a busy second under a fifth of a core: the quota runs out in nearly every period
        share = float(out[2])
        assert share > 0.8, out
    finally:
        group.rmdir()


def test_configure_threads_exports_omp_and_tensorflow_settings(monkeypatch):
    monkeypatch.setattr(cluster, "_affinity", lambda: 16)
    env = {"HPCDL_THREADS": "3"}
    n = cluster.configure_threads(cluster.discover({}, host="h"), env)
    assert n == 3
    assert env["OMP_NUM_THREADS"] == "3" and env["TF_NUM_INTRAOP_THREADS"] == "3"
    assert env["TF_NUM_INTEROP_THREADS"] == "2"


def test_launcher_env_keeps_library_settings_only():
    env = {"HOROVOD_CYCLE_TIME": "1", "NCCL_DEBUG": "INFO", "OMPI_MCA_btl": "self,tcp",
           "SLURM_JOB_ID": "7", "HOME": "/root", "SLURM_JOB_USER": "alice"}
    assert cluster.launcher_env(env) == {"HOROVOD_CYCLE_TIME": "1", "NCCL_DEBUG": "INFO",
                                         "OMPI_MCA_btl": "self,tcp", "SLURM_JOB_ID": "7"}


def test_rank_defaults_fill_only_what_the_user_left_unset():
    env = {}
    assert cluster.apply_rank_defaults(env) == cluster.RANK_DEFAULTS == env
    assert env["OMPI_MCA_mpi_yield_when_idle"] == "1"
    mine = {"OMPI_MCA_mpi_yield_when_idle": "0", "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "600"}
    done = cluster.apply_rank_defaults(mine)
    assert "OMPI_MCA_mpi_yield_when_idle" not in done and mine["OMPI_MCA_mpi_yield_when_idle"] == "0"
    assert mine["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"] == "600"


def test_settings_are_read_by_name_and_unknown_names_are_refused():
    assert cluster.setting("HPCDL_DATA", {"HPCDL_DATA": "/d/mnist.npz"}) == "/d/mnist.npz"
    assert cluster.setting("HPCDL_DATA", {"HPCDL_DATA": ""}) is None
    with pytest.raises(KeyError, match="HPCDL_DTA is not one of hpcdl's settings"):
        cluster.setting("HPCDL_DTA", {})


def test_only_cluster_reads_hpcdl_and_scheduler_variables():
    """Every HPCDL_* and SLURM_* variable is read in hpcdl/cluster.py (one place answers)."""
    import re
    from pathlib import Path
    root = Path(cluster.__file__).parent
    read = re.compile(r"""environ(?:\.get)?\s*[\[(]\s*["'](HPCDL_|SLURM_)""")
    offenders = [p.relative_to(root).as_posix() for p in root.rglob("*.py")
                 if p.name != "cluster.py" and read.search(p.read_text())]
    assert offenders == []
    for name in re.findall(r"""setting\(\s*["'](HPCDL_\w+)""",
                           "".join(p.read_text() for p in root.rglob("*.py"))):
        assert name in cluster.SETTINGS, name


def test_job_deadline_and_scheduler_facts():
    assert cluster.job_deadline({"SLURM_JOB_END_TIME": "1700000000"}) == 1700000000
    assert cluster.job_deadline({}) is None and cluster.job_deadline({"SLURM_JOB_END_TIME": "x"}) is None
    facts = cluster.scheduler_facts({"SLURM_JOB_ID": "7", "SLURM_NODELIST": "n[1-2]",
                                     "SLURM_CLUSTER_NAME": "tsubame"})
    assert facts == {"scheduler": "slurm", "job_id": "7", "array_task_id": None, "nodelist": "n[1-2]",
                     "restart_count": None, "cluster": "tsubame"}


def test_a_job_step_starts_as_the_job_scripts_start_ranks():
    assert cluster.srun_step({}) == ["srun", "--kill-on-bad-exit=1", "--mpi=pmix"]
    assert cluster.srun_step({"HPCDL_SRUN_MPI": "pmi2", "SLURM_CPUS_PER_TASK": "4"}) == [
        "srun", "--kill-on-bad-exit=1", "--mpi=pmi2", "--cpus-per-task=4"]


def test_the_ranks_agree_on_why_they_stop_and_name_another_ranks_reason(tmp_path, monkeypatch):
    from hpcdl.train.control import StopWatch
    monkeypatch.delenv("SLURM_JOB_END_TIME", raising=False)
    watch = StopWatch(max_time=1.5, stop_file=tmp_path / "STOP")
    assert watch.code() == 0
    # another rank reached its --max-time first: this one names that reason, not a vague one
    assert watch.agreed(2) == "--max-time 1.5 s reached (on another rank first)"
    assert watch.agreed(1.0).startswith("Slurm time limit (SLURM_JOB_END_TIME) near")
    (tmp_path / "STOP").write_text("")
    assert watch.code() == 3 and watch.agreed(2) == f"stop file {tmp_path / 'STOP'}"
    watch.signalled = "SIGUSR1"
    assert watch.code() == 4 and watch.agreed(4) == "signal SIGUSR1"


def test_grid_engine_job_facts_come_from_its_environment_and_pe_hostfile(tmp_path):
    hostfile = tmp_path / "pe_hostfile"
    hostfile.write_text("n3.cluster 1 box.q@n3 UNDEFINED\nn4 1 box.q@n4 UNDEFINED\n")
    env = {"JOB_ID": "42", "SGE_ROOT": "/var/lib/gridengine", "SGE_CELL": "hpcdl-box",
           "PE_HOSTFILE": str(hostfile), "NSLOTS": "2", "PE": "mpi", "QUEUE": "box.q",
           "SGE_TASK_ID": "undefined", "RESTARTED": "1"}
    facts = cluster.scheduler_facts(env)
    assert facts == {"scheduler": "gridengine", "job_id": "42", "array_task_id": None,
                     "nodelist": "n3,n4", "restart_count": "1", "cluster": "hpcdl-box",
                     "slots": "2", "pe": "mpi", "queue": "box.q"}
    # an array task, and a node that cannot read the master node's hostfile
    facts = cluster.scheduler_facts({**env, "SGE_TASK_ID": "3", "PE_HOSTFILE": str(tmp_path / "no")})
    assert facts["array_task_id"] == "3" and facts["nodelist"] is None
    # Slurm's, where its job id is set; nothing outside a job
    assert cluster.scheduler_facts({"SLURM_JOB_ID": "7", "SLURM_JOB_NODELIST": "n[1-2]"})[
        "scheduler"] == "slurm"
    assert cluster.scheduler_facts({"JOB_ID": "5"}) == {
        "scheduler": None, "job_id": None, "array_task_id": None, "nodelist": None,
        "restart_count": None, "cluster": None}
    assert "JOB_ID" in cluster.launcher_env(env) and "PE_HOSTFILE" in cluster.launcher_env(env)
