"""Answer "who am I": rank, size, local rank, node, threads per rank, GPU pinning, job facts.

This is the only module that reads the environment: the launcher's (``OMPI_COMM_WORLD_*``,
``PMI_*``, ``PMIX_RANK``, ``SLURM_*``, Grid Engine's ``JOB_ID``/``PE_HOSTFILE``) and hpcdl's own settings (:data:`SETTINGS`, read through
:func:`setting`). It also owns the settings every rank gets before MPI and Horovod start
(:data:`RANK_DEFAULTS`), and TensorFlow's ``TF_USE_LEGACY_KERAS`` (:func:`set_legacy_keras`,
set or taken away when hpcdl is imported). It imports nothing but the standard library, so it can run before
TensorFlow starts and set the thread counts TensorFlow reads at start-up.
"""
from __future__ import annotations

import os
import re
import socket
import sys
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Dict, Mapping, Optional, Tuple

from .errors import UserError
from .cgroup import cgroup_cpu_limit, cgroup_cpu_usage   # noqa: F401  (what a rank was granted)

__all__ = ["Layout", "discover", "threads_per_rank", "configure_threads", "apply_tf_threads",
           "pin_gpu", "log", "is_root", "launcher_env", "SETTINGS", "setting", "RANK_DEFAULTS",
           "apply_rank_defaults", "job_deadline", "scheduler_facts", "pe_hosts", "gridengine_cell"]

# Every HPCDL_* variable hpcdl reads, and what it does (later wins: study file < environment < flag).
SETTINGS = {
    "HPCDL_THREADS": "CPU threads per rank (default: SLURM_CPUS_PER_TASK, else the node's cores "
                     "divided by its ranks)",
    "HPCDL_HOST": "the node name to record (default: SLURMD_NODENAME, else the hostname)",
    "HPCDL_DATA": "dataset path for workloads that read one (mnist: mnist.npz, mnist-5k or sklearn-digits)",
    "HPCDL_RESULTS": "results file that 'hpcdl train' (and the Keras ScalingRecorder) appends "
                     "its record to",
    "HPCDL_SLOW": "a straggler on purpose: rank=R,phase=compute|input,delay_ms=D makes rank R "
                  "(rank=*: every rank) spend D ms more per step in that phase (tests, studies "
                  "of stragglers and slow input)",
    "HPCDL_STUDY": "study name that the Keras ScalingRecorder stores in its record",
    "HPCDL_POINT": "study point (JSON) that the Keras ScalingRecorder stores in its record",
    "HPCDL_DECLARED": "the study's declarations (JSON) that the Keras ScalingRecorder stores",
    "HPCDL_BENCH_RESULTS": "results file that 'hpcdl bench allreduce' appends its record to",
    "HPCDL_RESULTS_ROOT": "folder that holds results/<study> (default: results)",
    "HPCDL_STOP_FILE": "a file whose existence stops training at the next agreement, with a "
                       "checkpoint (default: STOP in --checkpoint-dir)",
    "HPCDL_FAULT": "tests only: rank=R,step=S,kind=raise|kill|exit|hang makes rank R fail at step S",
    "HPCDL_RING_PIECE_BYTES": "the ring backend's pipeline piece size in bytes",
    "HPCDL_NATIVE": "0 turns off the compiled fp16 kernels (numpy is used instead)",
    "HPCDL_SRUN_MPI": "srun's MPI plugin for the ranks the job scripts and 'hpcdl tune' start "
                      "(default pmix)",
    "HPCDL_TUNING": "the tuning file ('hpcdl tune') whose exchange settings a run takes when "
                    "--tuning is not given ('default': none)",
    "HPCDL_TAG_OUTPUT": "1 makes local mpirun prefix every output line with its rank",
    "HPCDL_BOX": "the cluster box's settings file (default /run/hpcdl-box/box.json, written by "
                 "scripts/cluster-box.sh up)",
    "HPCDL_JOB_STARTED": "when this attempt of a batch job began (UTC, ISO 8601; the job scripts "
                         "set it): records bound their run with it, else with their process's start",
    "HPCDL_JOB_END_TIME": "when a Grid Engine job's h_rt ends (Unix time; hpcdl's qsub scripts "
                          "set it, Slurm's jobs have SLURM_JOB_END_TIME): 'hpcdl tune' fits it",
}

# Set in every rank before MPI and Horovod start, unless the environment says otherwise. The job
# scripts export the same values (hpcdl.launch.jobscript reads them from here).
RANK_DEFAULTS = {
    # Open MPI busy-polls while a rank waits (in a collective, or Horovod's background thread
    # coordinating every cycle). When a rank's threads outnumber its cores (TensorFlow's thread
    # plus Horovod's, two ranks on two cores) the spinning thread takes the core from the thread
    # that has work; yielding while idle costs a few us of latency (docs/defaults.md).
    "OMPI_MCA_mpi_yield_when_idle": "1",
    # Horovod warns when ranks have waited this long for each other, and ends the job once they
    # have waited the second figure: a rank that hangs without exiting ends the job within
    # minutes instead of holding the allocation (docs/defaults.md).
    "HOROVOD_STALL_CHECK_TIME_SECONDS": "30",
    "HOROVOD_STALL_SHUTDOWN_TIME_SECONDS": "60",
}


def setting(name: str, env: Optional[Mapping[str, str]] = None) -> Optional[str]:
    """The value of hpcdl's setting ``name`` (one of SETTINGS), or None when unset or empty."""
    if name not in SETTINGS:
        raise KeyError(f"{name} is not one of hpcdl's settings ({', '.join(SETTINGS)})")
    value = (os.environ if env is None else env).get(name)
    return value if value not in (None, "") else None


def apply_rank_defaults(environ=None, timeline: bool = False) -> dict:
    """Put RANK_DEFAULTS into ``environ`` (os.environ) where unset; return what was set.

    Call before MPI_Init (hvd.init(), the first mpi4py import): Open MPI reads its OMPI_MCA_*
    parameters, and Horovod its HOROVOD_* settings, from the process environment then.
    ``timeline``: HOROVOD_TIMELINE=DYNAMIC too, so that hvd.start_timeline() may record it.
    """
    env = os.environ if environ is None else environ
    done = {}
    wanted = dict(RANK_DEFAULTS, **({"HOROVOD_TIMELINE": "DYNAMIC"} if timeline else {}))
    for key, value in wanted.items():
        if key not in env:
            env[key] = value
            done[key] = value
    return done


# TensorFlow's own switch: from TensorFlow 2.16 on, tf.keras is tf-keras (Keras 2) where it is set
# when TensorFlow is first imported, else Keras 3, which Horovod 0.28.1 cannot train (hpcdl.stack)
LEGACY_KERAS = "TF_USE_LEGACY_KERAS"


def set_legacy_keras(want: bool, environ=None) -> None:
    """Before TensorFlow is imported: ``want``, set TF_USE_LEGACY_KERAS=1 unless the user set
    it; else take away a TF_USE_LEGACY_KERAS that asks for tf-keras (which TensorFlow 2.15 then
    tries to import, and fails to without it: hpcdl.stack.prefer_legacy_keras decides)."""
    env = os.environ if environ is None else environ
    if want:
        env.setdefault(LEGACY_KERAS, "1")
    elif legacy_keras(env):
        del env[LEGACY_KERAS]


def legacy_keras(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether TensorFlow >= 2.16 makes tf.keras tf-keras in this environment."""
    value = (os.environ if environ is None else environ).get(LEGACY_KERAS, "")
    return value.strip().lower() in ("1", "true", "yes")


def job_deadline(env: Optional[Mapping[str, str]] = None) -> Optional[int]:
    """The job's end as a Unix time, or None: Slurm's SLURM_JOB_END_TIME, else
    HPCDL_JOB_END_TIME, which hpcdl's Grid Engine scripts set from their h_rt at their start
    (Grid Engine tells a job no end time)."""
    env = os.environ if env is None else env
    end = env.get("SLURM_JOB_END_TIME") or setting("HPCDL_JOB_END_TIME", env)
    return int(end) if end and end.isdigit() else None


# what a Grid Engine job's mpirun passes on to ranks on other nodes (their daemons start under
# qrsh -inherit, with the execution daemon's environment, not the job's)
FORWARD_NAMES = ("PATH", "LD_LIBRARY_PATH", "VIRTUAL_ENV", "PYTHONPATH")
FORWARD_PREFIXES = ("HPCDL_", "HOROVOD_", "TF_", "OMP_", "NCCL_", "OMPI_MCA_")


def gridengine_mpirun(env: Optional[Mapping[str, str]] = None) -> list:
    """``mpirun`` and its options for ranks over a Grid Engine job's slots, as the job scripts
    start them: Open MPI reads the granted hosts from ``$PE_HOSTFILE``, ``-np`` the job's
    ``NSLOTS``, and ``-x`` passes on the settings the ranks need."""
    env = os.environ if env is None else env
    slots = env.get("NSLOTS") or ""
    forward = [k for k in sorted(env) if k in FORWARD_NAMES or k.startswith(FORWARD_PREFIXES)]
    # without NSLOTS, mpirun starts one rank per granted slot itself
    return (["mpirun", *(["-np", slots] if slots.isdigit() else []), "--bind-to", "none"]
            + [a for k in forward for a in ("-x", k)])


def scheduler_facts(env: Optional[Mapping[str, str]] = None) -> dict:
    """The batch job this process runs in, for a record's manifest: Slurm's (``SLURM_*``) or Grid
    Engine's (``JOB_ID`` with ``SGE_ROOT`` or ``PE_HOSTFILE``; the nodes from ``$PE_HOSTFILE``
    where this node can read it). ``scheduler`` is None, and every fact too, outside a job."""
    env = os.environ if env is None else env
    if env.get("SLURM_JOB_ID") or not _in_gridengine(env):
        return {"scheduler": "slurm" if env.get("SLURM_JOB_ID") else None,
                "job_id": env.get("SLURM_JOB_ID"), "array_task_id": env.get("SLURM_ARRAY_TASK_ID"),
                "nodelist": env.get("SLURM_JOB_NODELIST") or env.get("SLURM_NODELIST"),
                "restart_count": env.get("SLURM_RESTART_COUNT"),
                "cluster": env.get("SLURM_CLUSTER_NAME")}
    task = env.get("SGE_TASK_ID")
    hosts = pe_hosts(env.get("PE_HOSTFILE"))
    return {"scheduler": "gridengine", "job_id": env.get("JOB_ID"),
            "array_task_id": task if task not in (None, "", "undefined") else None,
            "nodelist": ",".join(h for h, _ in hosts) if hosts else None,
            # RESTARTED is 1 in a job that Grid Engine started again (-r y, exit status 99)
            "restart_count": env.get("RESTARTED"),
            "cluster": env.get("SGE_CLUSTER_NAME") or env.get("SGE_CELL"),
            "slots": env.get("NSLOTS"), "pe": env.get("PE"), "queue": env.get("QUEUE")}


def gridengine_cell(env: Optional[Mapping[str, str]] = None) -> Tuple[Optional[str], str]:
    """Grid Engine's ``SGE_ROOT`` (None where unset) and cell (``SGE_CELL``, default
    ``default``): which cluster its commands talk to."""
    env = os.environ if env is None else env
    return env.get("SGE_ROOT") or None, env.get("SGE_CELL") or "default"


def _in_gridengine(env: Mapping[str, str]) -> bool:
    return bool(env.get("JOB_ID")) and bool(env.get("SGE_ROOT") or env.get("PE_HOSTFILE"))


def pe_hosts(path: Optional[str]) -> list:
    """Grid Engine's ``$PE_HOSTFILE``: (host, slots) per line (``host slots queue processors``),
    host names without their domain; [] where there is none or this node cannot read it."""
    try:
        lines = Path(path).read_text().splitlines() if path else []
    except OSError:
        return []
    out = []
    for line in lines:
        parts = line.split()
        if len(parts) >= 2 and parts[1].isdigit():
            out.append((parts[0].split(".")[0], int(parts[1])))
    return out


def srun_step(env: Optional[Mapping[str, str]] = None) -> list:
    """``srun`` and its options for a job step over the job's tasks, as the job scripts start
    ranks: the MPI plugin (``HPCDL_SRUN_MPI``, default pmix), the job ended when a rank fails,
    the job's CPUs per task."""
    env = os.environ if env is None else env
    cpus = env.get("SLURM_CPUS_PER_TASK")
    return (["srun", "--kill-on-bad-exit=1", f"--mpi={setting('HPCDL_SRUN_MPI', env) or 'pmix'}"]
            + ([f"--cpus-per-task={cpus}"] if cpus else []))


@dataclass(frozen=True)
class Layout:
    """Where this process sits in the job."""

    rank: int = 0
    size: int = 1
    local_rank: int = 0
    local_size: int = 1
    node: int = 0
    num_nodes: int = 1
    host: str = ""
    launcher: str = "none"      # mpirun (Open MPI), srun, pmi (MPICH/Hydra), pmix, horovod, none

    def as_dict(self) -> dict:
        return asdict(self)

    @property
    def tag(self) -> str:
        return f"[{self.rank}@{self.host}]"


def _int(env: Mapping[str, str], *names: str) -> Optional[int]:
    for name in names:
        value = env.get(name)
        if value not in (None, ""):
            try:
                return int(value)
            except ValueError:
                continue
    return None


def _slurm_tasks_per_node(value: str, node: int) -> Optional[int]:
    """Parse SLURM_STEP_TASKS_PER_NODE / SLURM_TASKS_PER_NODE, e.g. '2(x3),1', for one node."""
    counts = []
    for part in value.split(","):
        part = part.strip()
        if not part:
            continue
        if "(x" in part:
            n, rep = part.rstrip(")").split("(x")
            counts += [int(n)] * int(rep)
        else:
            counts.append(int(part))
    return counts[node] if 0 <= node < len(counts) else None


def discover(env: Optional[Mapping[str, str]] = None, host: Optional[str] = None) -> Layout:
    """Read the rank layout from the launcher's environment, without initialising MPI.

    Precedence: Open MPI's mpirun (``OMPI_COMM_WORLD_*``), then a Slurm step (``SLURM_PROCID``
    with ``SLURM_STEP_ID``, i.e. inside srun), then MPICH/Hydra (``PMI_RANK``), then PMIx
    (``PMIX_RANK``); otherwise a single process.
    """
    env = os.environ if env is None else env
    # Inside a Slurm job the node is the name Slurm gave it (SLURMD_NODENAME): the same as the
    # hostname on most clusters, and the only way to tell nodes apart when several slurmd share a host.
    host = (host or setting("HPCDL_HOST", env) or env.get("SLURMD_NODENAME")
            or socket.gethostname().split(".")[0])

    if "OMPI_COMM_WORLD_RANK" in env:
        rank = _int(env, "OMPI_COMM_WORLD_RANK") or 0
        size = _int(env, "OMPI_COMM_WORLD_SIZE") or 1
        local_rank = _int(env, "OMPI_COMM_WORLD_LOCAL_RANK") or 0
        local_size = _int(env, "OMPI_COMM_WORLD_LOCAL_SIZE") or 1
        # Open MPI does not export the node index; with the default by-slot mapping and the same
        # number of ranks per node it is rank // local_size. Horovod's cross_rank refines it.
        num_nodes = max(1, -(-size // local_size))
        node = min(rank // local_size, num_nodes - 1)
        # Only mpirun's daemons export OMPI_COMM_WORLD_* before exec (srun direct launch does not),
        # so these ranks came from mpirun, even inside a Slurm job where they inherit the SLURM_*
        # of the step that runs Open MPI's daemons: one daemon per node, so SLURM_NODEID is the node.
        if "SLURM_STEP_ID" in env and _int(env, "SLURM_NODEID") is not None:
            node = _int(env, "SLURM_NODEID")
            num_nodes = _int(env, "SLURM_STEP_NUM_NODES", "SLURM_NNODES") or num_nodes
        return Layout(rank, size, local_rank, local_size, node, num_nodes, host, "mpirun")

    if "SLURM_PROCID" in env and "SLURM_STEP_ID" in env:
        rank = _int(env, "SLURM_PROCID") or 0
        size = _int(env, "SLURM_STEP_NUM_TASKS", "SLURM_NTASKS", "SLURM_NPROCS") or 1
        local_rank = _int(env, "SLURM_LOCALID") or 0
        node = _int(env, "SLURM_NODEID") or 0
        num_nodes = _int(env, "SLURM_STEP_NUM_NODES", "SLURM_NNODES", "SLURM_JOB_NUM_NODES") or 1
        tpn = env.get("SLURM_STEP_TASKS_PER_NODE") or env.get("SLURM_TASKS_PER_NODE") or ""
        local_size = None
        if tpn:
            try:
                local_size = _slurm_tasks_per_node(tpn, node)
            except ValueError:
                local_size = None
        if local_size is None:
            local_size = _int(env, "SLURM_NTASKS_PER_NODE") or max(1, size // num_nodes)
        return Layout(rank, size, local_rank, local_size, node, num_nodes, host, "srun")

    if "PMI_RANK" in env:
        rank = _int(env, "PMI_RANK") or 0
        size = _int(env, "PMI_SIZE") or 1
        local_rank = _int(env, "MPI_LOCALRANKID", "PMI_LOCAL_RANK") or 0
        local_size = _int(env, "MPI_LOCALNRANKS", "PMI_LOCAL_SIZE") or size
        num_nodes = max(1, -(-size // local_size))
        return Layout(rank, size, local_rank, local_size, min(rank // local_size, num_nodes - 1),
                      num_nodes, host, "pmi")

    if "PMIX_RANK" in env:
        rank = _int(env, "PMIX_RANK") or 0
        size = _int(env, "PMIX_SIZE", "OMPI_UNIVERSE_SIZE") or 1
        local_rank = _int(env, "PMIX_LOCAL_RANK") or 0
        local_size = _int(env, "PMIX_LOCAL_SIZE") or size
        num_nodes = max(1, -(-size // local_size))
        return Layout(rank, size, local_rank, local_size, min(rank // local_size, num_nodes - 1),
                      num_nodes, host, "pmix")

    return Layout(host=host)


def refine_with_horovod(layout: Layout, hvd) -> Layout:
    """Take rank/size/local/cross from an initialised Horovod (authoritative once it runs)."""
    return replace(layout, rank=hvd.rank(), size=hvd.size(), local_rank=hvd.local_rank(),
                   local_size=hvd.local_size(), node=hvd.cross_rank(), num_nodes=hvd.cross_size(),
                   launcher=layout.launcher if layout.launcher != "none" else "horovod")


def _affinity() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def cpus_granted(local_size: int, affinity: Optional[int] = None,
                 machine: Optional[int] = None, quota: Optional[float] = None) -> int:
    """The threads one of ``local_size`` ranks on this node may use when no scheduler says.

    An affinity mask narrower than the machine is this rank's own (mpirun binds each rank to a
    core at 2 ranks or fewer, srun --cpu-bind per task): its CPUs are the rank's. Otherwise the
    node's CPUs are shared by its ranks. A cgroup quota (a container's, a job's, a rehearsal node's)
    caps what the node's ranks share together: 0.2 of a core gives one thread, not two.
    ``affinity`` and ``machine`` default to this process's; ``quota`` (cores, as
    :func:`cgroup_cpu_limit` reads it) to none.
    """
    machine = machine or os.cpu_count() or 1
    affinity = affinity or _affinity()
    local_size = max(1, local_size)
    mine = affinity if affinity < machine else machine // local_size
    if quota is not None:
        mine = min(mine, int(quota // local_size))
    return max(1, mine)


def threads_per_rank(layout: Optional[Layout] = None, env: Optional[Mapping[str, str]] = None) -> int:
    """CPU threads one rank should use: HPCDL_THREADS, else SLURM_CPUS_PER_TASK, else the CPUs
    this rank was granted (:func:`cpus_granted`: its affinity mask and the cgroup's quota)."""
    env = os.environ if env is None else env
    layout = layout or discover(env)
    explicit = env.get("HPCDL_THREADS")
    if explicit not in (None, ""):
        n = _count(explicit)
        if n is None:
            raise UserError(f"HPCDL_THREADS={explicit!r}: give a whole number of threads per rank, "
                            "1 or more (or unset it for the CPUs this rank was granted)")
        return _capped(n, "HPCDL_THREADS")
    per_task = env.get("SLURM_CPUS_PER_TASK")
    if per_task not in (None, ""):
        n = _count(per_task)
        if n is not None:
            return _capped(n, "SLURM_CPUS_PER_TASK")
        _note(f"SLURM_CPUS_PER_TASK={per_task!r} is no CPU count; taking the CPUs this rank was "
              "granted instead")
    return cpus_granted(layout.local_size, quota=cgroup_cpu_limit())


class SettingWarning(UserWarning):
    """A setting in the environment that hpcdl did not take as given (shown as one line)."""


def _note(message: str) -> None:
    import warnings
    warnings.warn(message, SettingWarning, stacklevel=3)


def _count(text: str) -> Optional[int]:
    """A positive whole number, else None."""
    try:
        n = int(str(text).strip())
    except ValueError:
        return None
    return n if n > 0 else None


def _capped(n: int, name: str) -> int:
    """``n`` threads, at most the CPUs this process may run on: more start threads that only
    wait for a core (99,999 of them hang TensorFlow's start)."""
    cpus = _affinity()
    if n > cpus:
        _note(f"{name}={n} is more than the {cpus} CPU(s) this rank may run on; using {cpus}")
        return cpus
    return n


def thread_env(layout: Optional[Layout] = None, env=None) -> Dict[str, str]:
    """The thread counts OpenMP and TensorFlow read at start-up, for :func:`threads_per_rank`:
    what hpcdl train sets, and what a study's own command gets (:mod:`hpcdl.launch.with_threads`)."""
    n = threads_per_rank(layout, env)
    return {"OMP_NUM_THREADS": str(n), "TF_NUM_INTRAOP_THREADS": str(n),
            "TF_NUM_INTEROP_THREADS": str(max(1, min(2, n)))}


def configure_threads(layout: Optional[Layout] = None, env=None) -> int:
    """Export :func:`thread_env` before TF starts; the thread count."""
    env = os.environ if env is None else env
    counts = thread_env(layout, env)
    env.update(counts)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return int(counts["OMP_NUM_THREADS"])


def apply_tf_threads(tf, n: int) -> None:
    """Apply the thread counts through TensorFlow's API (must run before any op executes)."""
    try:
        tf.config.threading.set_intra_op_parallelism_threads(n)
        tf.config.threading.set_inter_op_parallelism_threads(max(1, min(2, n)))
    except RuntimeError:
        pass  # TensorFlow already initialised its thread pools: the environment variables held


def pin_gpu(tf, layout: Layout) -> Optional[int]:
    """Make only the GPU of this local rank visible to TensorFlow; return its index or None."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus:
        return None
    index = layout.local_rank % len(gpus)
    for gpu in gpus:
        try:
            tf.config.experimental.set_memory_growth(gpu, True)
        except (RuntimeError, ValueError):
            pass
    tf.config.set_visible_devices(gpus[index], "GPU")
    return index


def is_root(layout: Optional[Layout] = None) -> bool:
    return (layout or discover()).rank == 0


_TAG: Optional[str] = None


def log(msg: str, layout: Optional[Layout] = None) -> None:
    """Write one line to stderr with a ``[rank@host]`` prefix."""
    global _TAG
    if layout is not None:
        _TAG = layout.tag
    elif _TAG is None:
        _TAG = discover().tag
    sys.stderr.write(f"{_TAG} {msg}\n")
    sys.stderr.flush()


def launcher_env(env: Optional[Mapping[str, str]] = None) -> dict:
    """The launcher and library settings worth recording in a manifest."""
    env = os.environ if env is None else env
    keep = ("HOROVOD_", "NCCL_", "OMPI_MCA_", "SLURM_", "HPCDL_", "OMP_NUM_THREADS", "TF_NUM_",
            "TF_ENABLE_ONEDNN_OPTS", "SGE_", "PE_HOSTFILE", "NSLOTS", "NHOSTS", "JOB_ID", "RESTARTED")
    skip = ("SLURM_JOB_USER", "SLURM_JOB_UID", "SLURM_JOB_GID", "SGE_O_HOME", "SGE_O_MAIL",
            "SGE_O_LOGNAME")
    return {k: v for k, v in sorted(env.items()) if k.startswith(keep) and k not in skip}


# --- a Slurm time limit (the study's [slurm] time, a job's --time) -------------------------------

_SLURM_TIME = re.compile(r"^(?:(\d+)-)?(\d+)(?::(\d+))?(?::(\d+))?$")


def parse_time(text: str) -> int:
    """Seconds in a Slurm time limit: M, M:S, H:M:S, D-H, D-H:M or D-H:M:S."""
    m = _SLURM_TIME.match(str(text).strip())
    if not m:
        raise UserError(f"time limit '{text}' is not a Slurm time (e.g. 30, 02:00:00, 1-12:00:00)")
    days, a, b, c = m.groups()
    a, b, c = int(a), int(b) if b else None, int(c) if c else None
    if days is not None:                       # D-H, D-H:M, D-H:M:S
        secs = int(days) * 86400 + a * 3600 + (b or 0) * 60 + (c or 0)
    elif c is not None:                        # H:M:S
        secs = a * 3600 + b * 60 + c
    elif b is not None:                        # M:S
        secs = a * 60 + b
    else:                                      # M
        secs = a * 60
    if secs <= 0:
        raise UserError(f"time limit '{text}' must be positive")
    return secs
