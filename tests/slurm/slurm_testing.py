"""Helpers of the Slurm tests (import as slurm_testing)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from hpcdl.launch import scheduler  # noqa: E402

# Settings every job on the cluster box needs: Open MPI over TCP on the nodes' links (the nodes
# share one machine, so shared memory would bypass them). hpcdl.box.job_exports, for its subnet.
JOB_EXPORTS = {"OMPI_MCA_btl": "self,tcp", "OMPI_MCA_btl_tcp_if_include": "10.77.0.0/24",
               "OMPI_MCA_oob_tcp_if_include": "10.77.0.0/24"}
# mpirun refuses root without these; the test cluster's jobs run as root.
ROOT_ENV = {"OMPI_ALLOW_RUN_AS_ROOT": "1", "OMPI_ALLOW_RUN_AS_ROOT_CONFIRM": "1"}


def submit_and_wait(script: Path, timeout: float, cwd=None) -> scheduler.JobState:
    """sbatch a script and poll until it has ended; cancel it and fail on the time limit."""
    jid = scheduler.sbatch(script, cwd=cwd or script.parent)
    try:
        return scheduler.wait_for_jobs([jid], timeout)[jid]
    except TimeoutError as exc:
        out = "\n".join(p.read_text()[-3000:] for p in Path(cwd or script.parent).glob(f"*-{jid}.out"))
        pytest.fail(f"{exc}\njob output:\n{out}")


def job_output(directory: Path, job_id: str) -> str:
    return "\n".join(p.read_text() for p in sorted(Path(directory).glob(f"*-{job_id}.out")))
