"""What a job script is rendered from, as typed parameters checked when made: the job's
resources and schedule (:class:`Job`), where it finds hpcdl's Python (:class:`Software`), and
the settings every script documents with their defaults (:data:`DEFAULT_EXPORTS`). Standard
library only: a login node renders scripts without TensorFlow."""
from __future__ import annotations

import os
import re
import shlex
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Mapping, Optional, Tuple

from ..cluster import RANK_DEFAULTS, parse_time
from ..errors import UserError

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SIGNAL_LEAD_MAX = 65535  # Slurm keeps --signal's lead time in 16 bits


def _hms(secs: int) -> str:
    d, rest = divmod(int(secs), 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return (f"{d}-" if d else "") + f"{h:02d}:{m:02d}:{s:02d}"


@dataclass(frozen=True)
class Job:
    """Resources and scheduling of one batch job."""

    name: str
    nodes: int = 1
    ntasks_per_node: int = 1
    cpus_per_task: Optional[int] = None
    gpus_per_node: Optional[int] = None
    time: str = "00:30:00"
    partition: Optional[str] = None
    account: Optional[str] = None
    output: str = "%x-%j.out"
    signal_lead: Optional[int] = 120   # seconds of warning before the limit; None: not preemptible
    extra: Tuple[str, ...] = ()        # more sbatch options, "--key=value"

    def __post_init__(self):
        if not re.match(r"^[A-Za-z0-9_.+-]+$", self.name or ""):
            raise UserError(f"job name '{self.name}' may hold only letters, digits and _.+-")
        for key in ("nodes", "ntasks_per_node"):
            if not isinstance(getattr(self, key), int) or getattr(self, key) < 1:
                raise UserError(f"slurm {key} must be a positive integer, got {getattr(self, key)!r}")
        for key in ("cpus_per_task", "gpus_per_node"):
            v = getattr(self, key)
            if v is not None and (not isinstance(v, int) or v < (1 if key == "cpus_per_task" else 0)):
                raise UserError(f"slurm {key} must be a positive integer, got {v!r}")
        secs = parse_time(self.time)
        if self.signal_lead is not None:
            if not isinstance(self.signal_lead, int) or not 0 < self.signal_lead <= _SIGNAL_LEAD_MAX:
                raise UserError(f"slurm signal_lead must be 1..{_SIGNAL_LEAD_MAX} seconds, got "
                                f"{self.signal_lead!r}")
            if self.signal_lead >= secs:
                raise UserError(f"slurm signal_lead ({self.signal_lead} s) must be shorter than the "
                                f"time limit {self.time} ({secs} s)")
        for opt in self.extra:
            if not str(opt).startswith("--"):
                raise UserError(f"extra sbatch option '{opt}' must look like --key=value")

    @property
    def seconds(self) -> int:
        return parse_time(self.time)

    def longer(self, secs: int) -> "Job":
        """This job with ``secs`` more of time limit."""
        return replace(self, time=_hms(self.seconds + int(secs)))

    @property
    def ranks(self) -> int:
        return self.nodes * self.ntasks_per_node


@dataclass(frozen=True)
class Export:
    """One documented setting of the job scripts; ``value`` None renders a commented example."""

    name: str
    value: Optional[str]
    example: str
    doc: str


# The settings every script documents. Each is overridable by exporting it before sbatch; the
# values here are the defaults that suit a production cluster.
DEFAULT_EXPORTS: Tuple[Export, ...] = (
    Export("HPCDL_LAUNCHER", "srun", "srun",
           "How ranks start: srun (the default) or mpirun (Open MPI's own launcher in the allocation)."),
    Export("HPCDL_SRUN_MPI", "pmix", "pmix",
           "srun's MPI plugin: Open MPI 4 and 5 speak PMIx (pmi2 only if built with Slurm's PMI)."),
    Export("HOROVOD_STALL_CHECK_TIME_SECONDS", RANK_DEFAULTS["HOROVOD_STALL_CHECK_TIME_SECONDS"],
           RANK_DEFAULTS["HOROVOD_STALL_CHECK_TIME_SECONDS"],
           "Horovod: warn when ranks have waited this long for each other..."),
    Export("HOROVOD_STALL_SHUTDOWN_TIME_SECONDS",
           RANK_DEFAULTS["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"],
           RANK_DEFAULTS["HOROVOD_STALL_SHUTDOWN_TIME_SECONDS"],
           "...and end the job rather than hold the allocation once they have waited this long."),
    Export("OMPI_MCA_mpi_yield_when_idle", RANK_DEFAULTS["OMPI_MCA_mpi_yield_when_idle"],
           RANK_DEFAULTS["OMPI_MCA_mpi_yield_when_idle"],
           "Open MPI: a waiting rank yields its core instead of spinning (ranks whose threads "
           "outnumber their cores lose the core to the spin otherwise)."),
    Export("HOROVOD_FUSION_THRESHOLD", "67108864", "67108864",
           "Horovod: bytes of gradients fused into one allreduce (64 MiB; Horovod 0.28's own "
           "default is 128 MiB)."),
    Export("HOROVOD_CYCLE_TIME", None, "5",
           "Horovod: milliseconds between fusion cycles; larger fuses more, smaller reacts faster."),
    Export("NCCL_DEBUG", "WARN", "WARN",
           "NCCL (GPU nodes): WARN reports problems; INFO also shows the rings and transports chosen."),
    Export("NCCL_SOCKET_IFNAME", None, "ib0",
           "NCCL: the interface for bootstrap and socket traffic (unset: NCCL picks one)."),
    Export("NCCL_IB_HCA", None, "mlx5_0",
           "NCCL: the InfiniBand adapters to use (unset: all)."),
    Export("OMPI_MCA_btl_base_warn_component_unused", "0", "0",
           "Open MPI: no warnings about transports that exist but are not used."),
    Export("OMPI_MCA_btl", None, "self,tcp",
           "Open MPI: byte transports. Several Slurm nodes on one host need self,tcp: shared memory "
           "between ranks of different 'nodes' crashes."),
    Export("OMPI_MCA_btl_tcp_if_include", None, "lo",
           "Open MPI: the interfaces TCP may use (lo when every node is this host)."),
)

@dataclass(frozen=True)
class Software:
    """Where a job runs and how it finds hpcdl's Python."""

    workdir: str
    activate: str                      # shell line(s): 'source VENV/bin/activate', 'module load ...'
    python: str = "python"
    exports: Tuple[Tuple[str, Optional[str]], ...] = ()   # overrides of DEFAULT_EXPORTS, and more

    def __post_init__(self):
        for name, _ in self.exports:
            if not ENV_NAME.match(name):
                raise UserError(f"'{name}' is not an environment variable name")

    @classmethod
    def here(cls, workdir=None, exports: Optional[Mapping[str, Optional[str]]] = None,
             activate: Optional[str] = None) -> "Software":
        """The Python running now (its venv when there is one), in ``workdir`` (default: cwd)."""
        if activate is None:
            if sys.prefix != getattr(sys, "base_prefix", sys.prefix):
                activate = f"source {shlex.quote(str(Path(sys.prefix) / 'bin' / 'activate'))}"
            else:
                activate = f'export PATH={shlex.quote(str(Path(sys.executable).parent))}:"$PATH"'
        return cls(workdir=str(Path(workdir or os.getcwd()).resolve()), activate=activate,
                   exports=tuple(sorted((exports or {}).items())))
