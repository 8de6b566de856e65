"""Rank discovery and thread placement from launcher environments (no MPI needed)."""
import pytest

from hpcdl import cluster

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


def test_threads_per_rank_prefers_explicit_then_slurm_then_cores(monkeypatch):
    monkeypatch.setattr(cluster.os, "cpu_count", lambda: 16)
    lay = cluster.discover(OMPI, host="h")                      # 4 ranks on the node
    assert cluster.threads_per_rank(lay, {}) == 4
    assert cluster.threads_per_rank(lay, {"SLURM_CPUS_PER_TASK": "3"}) == 3
    assert cluster.threads_per_rank(lay, {"SLURM_CPUS_PER_TASK": "3", "HPCDL_THREADS": "1"}) == 1
    monkeypatch.setattr(cluster.os, "cpu_count", lambda: 2)
    assert cluster.threads_per_rank(lay, {}) == 1               # never zero when oversubscribed


def test_configure_threads_exports_omp_and_tensorflow_settings():
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
    facts = cluster.scheduler_facts({"SLURM_JOB_ID": "7", "SLURM_NODELIST": "n[1-2]"})
    assert facts == {"job_id": "7", "array_task_id": None, "nodelist": "n[1-2]",
                     "restart_count": None}
