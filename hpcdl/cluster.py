"""Answer "who am I": rank, size, local rank, node, threads per rank, GPU pinning.

This is the only module that reads the launcher's environment (``OMPI_COMM_WORLD_*``, ``PMI_*``,
``PMIX_RANK``, ``SLURM_*``). It imports nothing but the standard library, so it can run before
TensorFlow starts and set the thread counts TensorFlow reads at start-up.
"""
from __future__ import annotations

import os
import socket
import sys
from dataclasses import asdict, dataclass, replace
from typing import Mapping, Optional

__all__ = ["Layout", "discover", "threads_per_rank", "configure_threads", "apply_tf_threads",
           "pin_gpu", "log", "is_root", "launcher_env"]


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
    host = (host or env.get("HPCDL_HOST") or env.get("SLURMD_NODENAME")
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


def _cores(env: Mapping[str, str]) -> int:
    # Cores of the node, not this process's affinity mask: mpirun binds each rank to one core
    # when np <= 2, which would otherwise make every rank think the node has one core.
    return os.cpu_count() or 1


def threads_per_rank(layout: Optional[Layout] = None, env: Optional[Mapping[str, str]] = None) -> int:
    """CPU threads one rank should use: HPCDL_THREADS, else SLURM_CPUS_PER_TASK, else
    cores / local size (at least 1)."""
    env = os.environ if env is None else env
    layout = layout or discover(env)
    explicit = _int(env, "HPCDL_THREADS")
    if explicit and explicit > 0:
        return explicit
    per_task = _int(env, "SLURM_CPUS_PER_TASK")
    if per_task and per_task > 0:
        return per_task
    return max(1, _cores(env) // max(1, layout.local_size))


def configure_threads(layout: Optional[Layout] = None, env=None) -> int:
    """Export OMP_NUM_THREADS and TensorFlow's intra/inter-op thread counts before TF starts."""
    env = os.environ if env is None else env
    n = threads_per_rank(layout, env)
    env["OMP_NUM_THREADS"] = str(n)
    env["TF_NUM_INTRAOP_THREADS"] = str(n)
    env["TF_NUM_INTEROP_THREADS"] = str(max(1, min(2, n)))
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return n


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
    keep = ("HOROVOD_", "NCCL_", "OMPI_MCA_", "SLURM_", "HPCDL_", "OMP_NUM_THREADS", "TF_NUM_")
    skip = ("SLURM_JOB_USER", "SLURM_JOB_UID", "SLURM_JOB_GID")
    return {k: v for k, v in sorted(env.items()) if k.startswith(keep) and k not in skip}
