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


# A tuned 2-node study asking for a forecast: a tune job's file, then its two points (fp32 and
# fp16), and the allocation's own measurement; its name and tuning file are the test's
# (NAME, TUNING), and the scheduler's settings go after [slurm] (SCHEDULER).
TUNED_FORECAST = """\
[study]
name = "NAME"
scaling = "weak"

[workload]
name = "cnn"
model = "small"
image_size = 32
num_classes = 10
batch_size = 8
num_warmup_batches = 1
num_batches_per_iter = 2
num_iters = 1

[layout]
nodes = [2]
ranks_per_node = 1

[axes]
exchange = ["horovod", "horovod+fp16"]
tuning = ["tuned"]

[run]
tuning = "TUNING"

[slurm]
SCHEDULER
time = "00:10:00"
signal_lead = 60

[model]
forecast = [16]
"""


def tuned_forecast(name: str, tuning: str, scheduler: str) -> str:
    """:data:`TUNED_FORECAST` for the study ``name`` whose points read ``tuning``, its
    ``[slurm]`` section opened by ``scheduler``'s lines."""
    return (TUNED_FORECAST.replace("NAME", name).replace("TUNING", tuning)
            .replace("SCHEDULER", scheduler))
