"""Helpers of the Slurm tests (import as slurm_testing)."""
from __future__ import annotations

import json
import subprocess
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


def hpcdl(*args, timeout=120) -> str:
    """``python -m hpcdl ARGS``'s output; the test fails where it exits non-zero."""
    res = subprocess.run([sys.executable, "-m", "hpcdl", *args], capture_output=True, text=True,
                         timeout=timeout, cwd=ROOT)
    assert res.returncode == 0, f"hpcdl {' '.join(args)}: exit {res.returncode}\n{res.stdout}\n{res.stderr}"
    return res.stdout


def failed_tune(tmp_path: Path, name: str, stem: str, scheduler: str):
    """:func:`tuned_forecast` without its model, submitted with --tune options tune refuses
    (--iters 0), so its tune job ends without the file, and ``status --wait``ed on: (the tuning
    file the points would read, that status run, the status rows by point). ``stem``: the
    tuning file's name before ``-{nodes}n.json``."""
    study = tmp_path / "tuned.toml"
    study.write_text(tuned_forecast(name, str(tmp_path / "tuning" / f"{stem}-{{nodes}}n.json"),
                                    scheduler).split("[model]")[0])
    root = tmp_path / "results"
    exports = [f"--export={k}={v}" for k, v in JOB_EXPORTS.items()]
    hpcdl("study", "submit", str(study), "--results-root", str(root), "--unchecked-box",
          *exports, "--tune", "--knobs algorithm --iters 0")
    res = subprocess.run([sys.executable, "-m", "hpcdl", "study", "status", str(study),
                          "--results-root", str(root), "--wait", "200"],
                         capture_output=True, text=True, timeout=230, cwd=ROOT)
    rows = {r["point"]: r for r in json.loads(hpcdl("study", "status", str(study),
                                                    "--results-root", str(root), "--json"))}
    return tmp_path / "tuning" / f"{stem}-2n.json", res, rows
